"""What data a run reads, as part of its identity: registry checksums, or fingerprints of own files.

A run on the registry's files is pinned by the registry's checksums (a file's own sha256, or the
sha256 of the archive it is unpacked from), so the same config always means the same data. A run
on anything else (``task.datamodule.path``, ``task.files``, ``train_path``/``test_path``) is "own
data": its files are fingerprinted from their contents, so editing a CSV and running the same
command starts a new run instead of answering "already finished" with the old result, and the
tables record it as its own dataset, named by the file, never beside a paper's number.

A fingerprint is the full sha256 of a file up to ``FULL_HASH_BYTES`` (cheap); above that, the
size, the modification time and the sha256 of the first and last MiB. A folder is fingerprinted
file by file in the same way (name and fingerprint) while it is small (``FOLDER_CONTENT_FILES``
files, ``FOLDER_CONTENT_BYTES`` in all: a few event-forecasting pickles, a Minari dataset); a
larger one (a release of video clips) by the name, size and modification time of every file
below it: reading thousands of clips to name a run would cost more than the run's start.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from recurrent_attention.data.download import MIRROR_ENV, sha256sum
from recurrent_attention.data.sources import get_source, registry
from recurrent_attention.errors import DataError

FULL_HASH_BYTES = 64 << 20
EDGE_BYTES = 1 << 20
FOLDER_CONTENT_FILES = 1000
FOLDER_CONTENT_BYTES = 256 << 20
DATAMODULE = "task.datamodule"
# Keys of the datamodule node that name files read instead of the registry's (the convention of
# every family, CONTRIBUTING.md): ``path``, ``files`` (split -> path) and ``<split>_path``.
OWN_DATA_KEYS = ("path", "files")
OWN_DATA_SUFFIX = "_path"


@lru_cache(maxsize=256)
def _file_fingerprint(path: str, size: int, mtime_ns: int) -> dict[str, Any]:
    """Cached by (path, size, mtime): Hydra resolves a run's folder name more than once."""
    if size <= FULL_HASH_BYTES:
        return {"bytes": size, "sha256": sha256sum(Path(path))}
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        digest.update(fh.read(EDGE_BYTES))
        fh.seek(size - EDGE_BYTES)
        digest.update(fh.read(EDGE_BYTES))
    return {"bytes": size, "mtime_ns": mtime_ns, "edges_sha256": digest.hexdigest()}


def _folder_fingerprint(folder: Path) -> dict[str, Any]:
    files = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        files += [Path(root) / name for name in sorted(names)]
    stats = [path.stat() for path in files]
    n_bytes = sum(stat.st_size for stat in stats)
    by_content = len(files) <= FOLDER_CONTENT_FILES and n_bytes <= FOLDER_CONTENT_BYTES
    digest = hashlib.sha256()
    for path, stat in zip(files, stats, strict=True):
        relative = path.relative_to(folder).as_posix()
        if by_content:
            described = _file_fingerprint(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
        else:
            described = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        digest.update(f"{relative}\0{sorted(described.items())}\n".encode())
    kind = "contents_sha256" if by_content else "listing_sha256"
    return {"files": len(files), "bytes": n_bytes, kind: digest.hexdigest()}


def fingerprint(path: str | Path) -> dict[str, Any]:
    """The fingerprint of a file or folder; ``{"missing": true}`` when there is none (the datamodule
    then stops with its own one-line error, after the run's folder is named)."""
    path = Path(path)
    if path.is_dir():
        return _folder_fingerprint(path)
    if not path.is_file():
        return {"missing": True}
    stat = path.stat()
    return dict(_file_fingerprint(str(path.resolve()), stat.st_size, stat.st_mtime_ns))


def own_data_paths(cfg: DictConfig) -> dict[str, str]:
    """``{config key: path}`` of the own files a config names (none: the run reads the registry)."""
    node = OmegaConf.select(cfg, DATAMODULE, default=None)
    if not isinstance(node, DictConfig):
        return {}
    found: dict[str, str] = {}
    for key in node:
        if key not in OWN_DATA_KEYS and not str(key).endswith(OWN_DATA_SUFFIX):
            continue
        value = OmegaConf.select(node, str(key), default=None)
        dotted = f"{DATAMODULE}.{key}"
        if isinstance(value, DictConfig | ListConfig):
            items = value.items() if isinstance(value, DictConfig) else enumerate(value)
            found.update({f"{dotted}.{k}": str(v) for k, v in items if v is not None})
        elif value is not None:
            found[dotted] = str(value)
    return found


def require_own_data(cfg: DictConfig) -> None:
    """Every own file a config names exists: checked before the run is named, so a mistyped path is
    one line (the key and the path) and no failed run is recorded for data that was never there."""
    for key, path in own_data_paths(cfg).items():
        if not Path(path).exists():
            raise DataError(f"{key}={path}: no such file or folder; check the path (own data)")


def own_data_name(paths: Mapping[str, str]) -> str:
    """The dataset name of own data: the file's (or folder's) name; for several, their common folder's."""
    resolved = [Path(p).resolve() for p in paths.values()]
    if len(resolved) == 1:
        return resolved[0].name
    return Path(os.path.commonpath([str(p) for p in resolved])).name or "own data"


def _local_copy(relpath: str, data_dir: str | Path, mirror: str | Path | None) -> Path | None:
    """Where ``resolve_file`` finds a registry file without downloading: the mirror, then data_dir."""
    mirror = mirror or os.environ.get(MIRROR_ENV) or None
    for folder in (mirror, data_dir):
        if folder is not None and (Path(folder) / relpath).is_file():
            return Path(folder) / relpath
    return None


def _registry_identity(cfg: DictConfig, source_name: str, with_paths: bool) -> dict[str, Any]:
    """Per file: the registry's sha256, its archive's, or (a file the registry cannot check) the
    fingerprint of the local copy; with ``with_paths``, also where the copy was read."""
    data_dir = OmegaConf.select(cfg, f"{DATAMODULE}.data_dir", default="data")
    mirror = OmegaConf.select(cfg, f"{DATAMODULE}.mirror", default=None)
    source = get_source(source_name)
    files: dict[str, Any] = {}
    for key, entry in sorted(source.files.items()):
        local = _local_copy(entry.path, data_dir, mirror)
        if entry.sha256:
            record: dict[str, Any] = {"sha256": entry.sha256, "verified": "sha256"}
        elif entry.archive is not None and source.archives[entry.archive].sha256:
            record = {"archive_sha256": source.archives[entry.archive].sha256, "verified": "archive"}
        else:
            record = {**(fingerprint(local) if local else {"missing": True}), "verified": False}
        if with_paths:
            record["path"] = str(local) if local else None
        files[f"{source_name}/{key}"] = record
    return files


def data_identity(cfg: DictConfig, with_paths: bool = False) -> dict[str, Any]:
    """What data a config reads: ``{"own": bool, "name": str | None, "files": {name: record}}``.

    Part of the run identity (``runs.identity``) without paths (the path strings are config values
    already); in ``summary.json`` with them. A config that names no datamodule source and no own
    file reads no files (``files`` is empty).
    """
    own = own_data_paths(cfg)
    if own:
        files = {
            key: {**fingerprint(path), **({"path": str(Path(path).resolve())} if with_paths else {})}
            for key, path in own.items()
        }
        return {"own": True, "name": own_data_name(own), "files": files}
    source_name = OmegaConf.select(cfg, f"{DATAMODULE}.source", default=None)
    if not source_name or source_name not in registry():
        return {"own": False, "name": None, "files": {}}
    return {"own": False, "name": None, "files": _registry_identity(cfg, source_name, with_paths)}
