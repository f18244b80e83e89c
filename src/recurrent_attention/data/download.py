"""Turn a registry entry into verified local files: data folder, then mirror, then the network.

Every failure is a :class:`DataError` whose message is one line naming the file, the expected
checksum and the command that fixes it, so that ``train.py`` can print it instead of a traceback.
Downloads go to a temporary name and are renamed only once complete and verified.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from pathlib import Path

from tqdm import tqdm

from recurrent_attention.data.sources import Source, SourceFile, get_source

MIRROR_ENV = "RA_DATA_MIRROR"


class DataError(ValueError):
    """Missing, corrupt or malformed data: the one-line message names the file, the problem and the fix.

    A ``ValueError``, since a bad file is a bad input value; callers that catch ``ValueError`` from a
    reader keep working.
    """


def first_line(err: BaseException) -> str:
    """An exception as one line: parsers' messages can span several (tarfile lists every method)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def sha256sum(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fetch_command(source: Source) -> str:
    return f"python scripts/download_data.py {source.name}"


def _check(path: Path, expected: str | None, source: Source, relpath: str) -> Path:
    if expected is None:
        return path
    actual = sha256sum(path)
    if actual != expected:
        raise DataError(
            f"{path}: sha256 mismatch for {source.name}/{relpath} (expected {expected}, got {actual}); "
            f"delete it and run `{fetch_command(source)}`, or point {MIRROR_ENV} at a good copy"
        )
    return path


def _download(url: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", delete=False) as tmp:
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                total = int(response.headers.get("Content-Length") or 0) or None
                with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
                    while block := response.read(1 << 16):
                        tmp.write(block)
                        bar.update(len(block))
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, dest)


def _unpack(archive: Path, strip: str, dest: Path) -> None:
    """Extract an archive into ``dest``, dropping the ``strip`` prefix from member names.

    A truncated or foreign file is one :class:`DataError` line (most archives have no checksum to
    catch it earlier).
    """
    dest.mkdir(parents=True, exist_ok=True)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as zf:
                members = [(m.filename, zf.open(m)) for m in zf.infolist() if not m.is_dir()]
                _write_members(members, strip, dest)
        else:
            with tarfile.open(archive) as tf:
                members = [(m.name, tf.extractfile(m)) for m in tf.getmembers() if m.isfile()]
                _write_members(members, strip, dest)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error) as err:
        raise DataError(
            f"{archive}: not a complete zip or tar archive ({first_line(err)}); delete it and download again"
        ) from None


def _write_members(members: list, strip: str, dest: Path) -> None:
    for name, fh in members:
        if strip and not name.startswith(strip):
            continue
        rel = Path(name[len(strip) :].lstrip("/"))
        if ".." in rel.parts:
            raise DataError(f"archive member {name!r} escapes the data folder")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with fh, open(target, "wb") as out:
            shutil.copyfileobj(fh, out)


def _fetch(source: Source, f: SourceFile, data_dir: Path) -> None:
    target = data_dir / f.path
    if f.archive is not None:
        archive = source.archives[f.archive]
        cached = data_dir / ".archives" / Path(archive.url).name
        if not cached.exists():
            _download(archive.url, cached)
        _check(cached, archive.sha256, source, cached.name)
        _unpack(cached, archive.strip, data_dir / archive.into)
    elif f.url is not None:
        _download(f.url, target)
    else:
        hint = source.manual or f"see {source.homepage}"
        raise DataError(f"{target}: not found and {source.name} has no direct download ({hint})")


def resolve_file(
    source_name: str,
    key: str,
    data_dir: str | Path = "data",
    mirror: str | Path | None = None,
    download: bool = True,
) -> Path:
    """Local, checksum-verified path of one file of a registered source.

    Order: ``mirror`` (or ``$RA_DATA_MIRROR``) if it holds the file, then ``data_dir``, then a
    download into ``data_dir`` when ``download`` is true.
    """
    source = get_source(source_name)
    f = source.file(key)
    mirror = mirror or os.environ.get(MIRROR_ENV) or None
    if mirror is not None and (Path(mirror) / f.path).is_file():
        return _check(Path(mirror) / f.path, f.sha256, source, f.path)
    local = Path(data_dir) / f.path
    if not local.is_file():
        where = f"{data_dir}" + (f" or the mirror {mirror}" if mirror else "")
        if not download:
            raise DataError(
                f"{f.path}: not found in {where} (expected sha256 {f.sha256 or 'unknown'}); "
                f"run `{fetch_command(source)}` or set {MIRROR_ENV} to a folder holding it"
            )
        try:
            _fetch(source, f, Path(data_dir))
        except OSError as err:
            raise DataError(
                f"{f.path}: not found in {where} and the download failed ({err}); "
                f"run `{fetch_command(source)}` where the network is reachable, or set {MIRROR_ENV}"
            ) from None
        if not local.is_file():
            raise DataError(f"{local}: the download of {source.name} did not contain {f.path}")
    return _check(local, f.sha256, source, f.path)


def resolve_source(
    source_name: str, data_dir: str | Path = "data", mirror: str | Path | None = None, download: bool = True
) -> dict[str, Path]:
    """All files of a source, by key."""
    return {
        key: resolve_file(source_name, key, data_dir, mirror, download)
        for key in get_source(source_name).files
    }
