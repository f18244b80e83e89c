"""Registry resolution: mirror, checksum, one-line errors, and a real download + unpack via file:// URLs."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from recurrent_attention.data import DataError, registry, resolve_file, sha256sum
from recurrent_attention.data import sources as sources_module
from recurrent_attention.data.sources import Archive, Source, SourceFile

CONTENT = b"date,OT\n2020-01-01,1\n"
SHA = hashlib.sha256(CONTENT).hexdigest()


@pytest.fixture
def fake_registry(monkeypatch, tmp_path: Path):
    """Two sources served from file:// URLs: one plain file, one inside a zip archive."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "plain.csv").write_bytes(CONTENT)
    with zipfile.ZipFile(served / "bundle.zip", "w") as zf:
        zf.writestr("bundle/inner/a.txt", CONTENT)
    zip_sha = hashlib.sha256((served / "bundle.zip").read_bytes()).hexdigest()
    fake = {
        "plain": Source(
            "plain", "tsf", {"csv": SourceFile("plain/plain.csv", SHA, url=(served / "plain.csv").as_uri())}
        ),
        "zipped": Source(
            "zipped",
            "lm",
            {"a": SourceFile("zipped/inner/a.txt", SHA, archive="z")},
            archives={
                "z": Archive((served / "bundle.zip").as_uri(), zip_sha, strip="bundle/", into="zipped")
            },
        ),
    }
    monkeypatch.setattr(sources_module, "registry", lambda: fake)
    monkeypatch.delenv("RA_DATA_MIRROR", raising=False)
    return fake


def test_missing_file_without_download_is_one_line_naming_file_checksum_and_fix(
    fake_registry, tmp_path: Path
) -> None:
    with pytest.raises(DataError) as info:
        resolve_file("plain", "csv", tmp_path / "data", download=False)
    message = str(info.value)
    assert "\n" not in message
    assert "plain/plain.csv" in message and SHA in message and "scripts/download_data.py plain" in message


def test_checksum_mismatch_names_both_checksums(fake_registry, tmp_path: Path) -> None:
    corrupt = tmp_path / "data" / "plain" / "plain.csv"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"truncated")
    with pytest.raises(DataError) as info:
        resolve_file("plain", "csv", tmp_path / "data", download=False)
    message = str(info.value)
    assert "\n" not in message and "sha256 mismatch" in message
    assert SHA in message and hashlib.sha256(b"truncated").hexdigest() in message
    assert corrupt.read_bytes() == b"truncated"  # nothing deleted behind the user's back


def test_mirror_is_read_in_place(fake_registry, tmp_path: Path, monkeypatch) -> None:
    mirror = tmp_path / "mirror"
    (mirror / "plain").mkdir(parents=True)
    (mirror / "plain" / "plain.csv").write_bytes(CONTENT)
    monkeypatch.setenv("RA_DATA_MIRROR", str(mirror))
    assert resolve_file("plain", "csv", tmp_path / "data", download=False) == mirror / "plain" / "plain.csv"
    assert not (tmp_path / "data").exists()


def test_download_and_archive_unpacking(fake_registry, tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert resolve_file("plain", "csv", data).read_bytes() == CONTENT
    path = resolve_file("zipped", "a", data)
    assert path == data / "zipped" / "inner" / "a.txt" and path.read_bytes() == CONTENT
    assert not list(data.rglob(".*.csv.*")), "no temporary download left behind"


def test_unreachable_url_is_a_data_error(fake_registry, tmp_path: Path, monkeypatch) -> None:
    bad = Source(
        "plain", "tsf", {"csv": SourceFile("plain/plain.csv", SHA, url=(tmp_path / "gone.csv").as_uri())}
    )
    monkeypatch.setattr(sources_module, "registry", lambda: {"plain": bad})
    with pytest.raises(DataError, match="download failed"):
        resolve_file("plain", "csv", tmp_path / "data")


def test_every_registered_source_is_well_formed() -> None:
    for name, source in registry().items():
        assert source.files, name
        for f in source.files.values():
            assert f.url or f.archive or source.manual, f"{name}: no way to obtain {f.path}"
            assert f.sha256 is None or len(f.sha256) == 64, name


MIRROR = Path(os.environ.get("RA_DATA_MIRROR") or Path(__file__).resolve().parents[3] / "shared" / "data")


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no data mirror (RA_DATA_MIRROR, or ../shared/data)")
def test_every_mirrored_registry_file_has_and_matches_its_sha256() -> None:
    """Bytes known here must be pinned: a registry file present in the mirror needs a sha256, and it
    must be the sha256 of the mirror's bytes (hashed here, not read from a sums file)."""
    checked = []
    for name, source in registry().items():
        for key, f in source.files.items():
            if (MIRROR / f.path).is_file():
                assert f.sha256 is not None, (
                    f"{name}.files.{key}: {f.path} is in the mirror but has no sha256"
                )
                assert sha256sum(MIRROR / f.path) == f.sha256, f"{name}.files.{key}: {f.path}"
                checked.append(f.path)
    assert checked, f"no registry file found in the mirror {MIRROR}"


def test_truncated_archive_is_one_line_naming_it(fake_registry, tmp_path: Path, monkeypatch) -> None:
    """An archive without a registry checksum (most UEA zips) is only caught when it fails to unpack."""
    served = tmp_path / "served" / "bundle.zip"
    served.write_bytes(served.read_bytes()[:40])
    archive = Archive(served.as_uri(), None, strip="bundle/", into="zipped")
    source = Source("zipped", "lm", {"a": SourceFile("zipped/inner/a.txt", SHA, archive="z")}, {"z": archive})
    monkeypatch.setattr(sources_module, "registry", lambda: {"zipped": source})
    with pytest.raises(DataError) as info:
        resolve_file("zipped", "a", tmp_path / "data")
    message = str(info.value)
    assert "\n" not in message and "bundle.zip: not a complete zip or tar archive" in message
    assert "delete it and download again" in message
