"""The registry of dataset sources: canonical URLs, file names, sha256, licence notes.

One YAML manifest per task family lives in ``manifests/``; each top-level key is a source name
(``ETTh1``, ``ptb``, ...). A source lists its files by their path relative to the data folder;
the same relative path is looked up in a mirror folder. Files come from ``url`` directly, or from
an ``archive`` (zip/tar) that is fetched, checked and unpacked; a source may name a Hugging Face
dataset (``hf``) as the second route, tried when its archive cannot be downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class Archive:
    """A downloadable archive holding some of a source's files.

    Members whose names start with ``strip`` are unpacked, without that prefix, into the folder
    ``into`` (relative to the data folder); others are skipped.
    """

    url: str
    sha256: str | None = None
    size: int | None = None  # bytes; a download of another size is reported as incomplete
    strip: str = ""
    into: str = ""


@dataclass(frozen=True)
class HFDataset:
    """A Hugging Face ``datasets`` copy of a source: one split per file, one row per line.

    ``splits`` maps a file key (``train``) to the dataset's split name (``train``, ``validation``);
    ``revision`` pins a commit of the dataset repository where set.
    """

    path: str
    name: str | None = None
    splits: dict[str, str] = field(default_factory=dict)
    revision: str | None = None


@dataclass(frozen=True)
class SourceFile:
    """One file of a source: where it lives under the data folder and how to check it."""

    path: str
    sha256: str | None = None
    url: str | None = None
    archive: str | None = None  # key into Source.archives


@dataclass(frozen=True)
class Source:
    name: str
    family: str
    files: dict[str, SourceFile]
    archives: dict[str, Archive] = field(default_factory=dict)
    hf: HFDataset | None = None  # second route, tried when the archive is unreachable
    homepage: str = ""
    licence: str = ""
    manual: str = ""  # how to obtain the files by hand where no direct URL exists

    def file(self, key: str) -> SourceFile:
        if key not in self.files:
            raise KeyError(f"source {self.name!r} has no file {key!r}; it has {sorted(self.files)}")
        return self.files[key]


def _parse(name: str, entry: dict) -> Source:
    archives = {key: Archive(**spec) for key, spec in (entry.get("archives") or {}).items()}
    files = {key: SourceFile(**spec) for key, spec in entry["files"].items()}
    for key, f in files.items():
        if f.archive is not None and f.archive not in archives:
            raise ValueError(f"manifest {name}.files.{key}: unknown archive {f.archive!r}")
    hf = HFDataset(**entry["hf"]) if entry.get("hf") else None
    if hf is not None and set(hf.splits) != set(files):
        raise ValueError(f"manifest {name}.hf.splits must name every file key: {sorted(files)}")
    extra = {k: entry[k] for k in ("homepage", "licence", "manual") if k in entry}
    return Source(name=name, family=entry["family"], files=files, archives=archives, hf=hf, **extra)


@cache
def registry() -> dict[str, Source]:
    """Every source of every manifest, by name (names are unique across families)."""
    sources: dict[str, Source] = {}
    for manifest in sorted(resources.files(__package__).joinpath("manifests").iterdir(), key=str):
        if not manifest.name.endswith(".yaml"):
            continue
        for name, entry in (yaml.safe_load(manifest.read_text()) or {}).items():
            if name in sources:
                raise ValueError(f"source {name!r} is defined twice (second time in {manifest.name})")
            sources[name] = _parse(name, entry)
    return sources


def get_source(name: str) -> Source:
    sources = registry()
    if name not in sources:
        raise KeyError(f"unknown data source {name!r}; known: {', '.join(sorted(sources))}")
    return sources[name]
