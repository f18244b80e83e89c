"""Turn a registry entry into verified local files: mirror, then data folder, then the network.

The network has up to two routes: the source's URL or archive, then, when that is unreachable and
the source names one, its Hugging Face ``datasets`` copy (:mod:`recurrent_attention.data.hf`).
Every failure is a :class:`DataError` whose message is one line naming the file, the expected
checksum and the command that fixes it, so that ``train.py`` can print it instead of a traceback.
Downloads go to a temporary name and are renamed only once complete and verified. Each folder
written keeps ``.origins.json`` (file name -> where it came from), so readers can say what they read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from recurrent_attention.data import hf
from recurrent_attention.data.sources import Archive, Source, SourceFile, get_source
from recurrent_attention.errors import DataError, DataMissingError

MIRROR_ENV = "RA_DATA_MIRROR"
# Some hosts (wikitext.smerity.com) refuse urllib's default "Python-urllib/3.x" agent.
USER_AGENT = "recurrent-attention-data/0.1 (research dataset download)"
ORIGINS_FILE = ".origins.json"


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


def _check_archive(path: Path, archive: Archive, source: Source) -> Path:
    size = path.stat().st_size
    if archive.size is not None and size != archive.size:
        raise DataError(
            f"{path}: {size} bytes where {source.name}'s archive has {archive.size} (an incomplete or "
            f"different download); delete it and run `{fetch_command(source)}`"
        )
    return _check(path, archive.sha256, source, path.name)


def record_origin(files: list[Path], origin: str) -> None:
    """Note in each file's folder (``.origins.json``) where the file came from."""
    for folder in {f.parent for f in files}:
        record = folder / ORIGINS_FILE
        origins = json.loads(record.read_text()) if record.is_file() else {}
        origins.update({f.name: origin for f in files if f.parent == folder})
        record.write_text(json.dumps(origins, indent=1, sort_keys=True) + "\n")


def describe_origin(path: str | Path) -> str:
    """Where a resolved file came from, as recorded when it was fetched (or that nothing was recorded)."""
    path = Path(path)
    record = path.parent / ORIGINS_FILE
    origins = json.loads(record.read_text()) if record.is_file() else {}
    return origins.get(path.name, "a local copy with no recorded origin")


def _download(url: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", delete=False) as tmp:
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
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
        _check_archive(cached, archive, source)
        _unpack(cached, archive.strip, data_dir / archive.into)
        members = [data_dir / g.path for g in source.files.values() if g.archive == f.archive]
        record_origin([m for m in members if m.is_file()], archive.url)
    elif f.url is not None:
        _download(f.url, target)
        record_origin([target], f.url)
    else:
        hint = source.manual or f"see {source.homepage}"
        raise DataMissingError(f"{target}: not found and {source.name} has no direct download ({hint})")


def _fetch_hf(source: Source, data_dir: Path) -> None:
    """Every file of ``source`` from its Hugging Face copy (the route after the archive)."""
    assert source.hf is not None
    targets = {key: data_dir / f.path for key, f in source.files.items()}
    try:
        hf.fetch(source.hf, targets, cache_dir=data_dir / ".hf_cache")
    except OSError as err:
        raise hf.HFRouteError(str(err)) from None
    record_origin(list(targets.values()), hf.describe(source.hf))


def _network_route(source: Source, f: SourceFile) -> str:
    return source.archives[f.archive].url if f.archive is not None else f.url or source.name


@dataclass(frozen=True)
class DataLocation:
    """Where a datamodule finds a registered ``source``'s files: ``task.datamodule``'s ``data_dir``,
    ``mirror`` and ``download`` (from ``${paths.*}``), held together so that every datamodule
    resolves its files by the one rule of :func:`resolve_file`."""

    source: str | None
    data_dir: str | Path = "data"
    mirror: str | Path | None = None
    download: bool = True

    def registered(self, key: str) -> Path:
        """The source's file ``key``, local and checksum-verified (:func:`resolve_file`)."""
        return resolve_file(self.source, key, self.data_dir, self.mirror, self.download)

    def own_or_registered(self, own: str | Path | None, key: str) -> Path:
        """The user's own file or folder (``task.datamodule.path``, read as given, no checksum) when
        set; otherwise the registered file ``key``."""
        if own is not None:
            if not Path(own).exists():
                raise DataError(f"{own}: no such file or folder (given as own data, task.datamodule.path)")
            return Path(own)
        return self.registered(key)


def resolve_file(
    source_name: str,
    key: str,
    data_dir: str | Path = "data",
    mirror: str | Path | None = None,
    download: bool = True,
) -> Path:
    """Local, checksum-verified path of one file of a registered source.

    Order: ``mirror`` (or ``$RA_DATA_MIRROR``) if it holds the file, then ``data_dir``, then a
    download into ``data_dir`` when ``download`` is true (the URL or archive, then the source's
    Hugging Face copy if the first is unreachable).
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
            raise DataMissingError(
                f"{f.path}: not found in {where} (expected sha256 {f.sha256 or 'unknown'}); "
                f"run `{fetch_command(source)}` or set {MIRROR_ENV} to a folder holding it"
            )
        try:
            _fetch(source, f, Path(data_dir))
        except OSError as err:
            if source.hf is None:
                raise DataMissingError(
                    f"{f.path}: not found in {where} and the download failed ({err}); "
                    f"run `{fetch_command(source)}` where the network is reachable, or set {MIRROR_ENV}"
                ) from None
            try:
                _fetch_hf(source, Path(data_dir))
            except hf.HFRouteError as hf_err:
                raise DataMissingError(
                    f"{f.path}: not found in {where}, and both routes failed: "
                    f"{_network_route(source, f)} ({err}); {hf.describe(source.hf)} ({hf_err}); "
                    f"run `{fetch_command(source)}` where either is reachable, "
                    f"or set {MIRROR_ENV} to a folder holding {f.path}"
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
