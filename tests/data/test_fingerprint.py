"""The data a run reads is part of its identity: registry checksums, or own files' fingerprints."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from recurrent_attention.data import fingerprint as fp
from recurrent_attention.data import get_source, sha256sum


def config(**datamodule: object) -> OmegaConf:
    return OmegaConf.create({"task": {"datamodule": {"data_dir": "nowhere", "mirror": None, **datamodule}}})


def test_every_own_data_key_is_found_and_named_by_its_file(tmp_path: Path) -> None:
    cfg = config(source="ptb", path=None, train_path="a/x_TRAIN.ts", files={"train": "c/t.txt", "test": None})
    assert fp.own_data_paths(cfg) == {
        "task.datamodule.train_path": "a/x_TRAIN.ts",
        "task.datamodule.files.train": "c/t.txt",
    }
    assert fp.own_data_name({"path": str(tmp_path / "my.csv")}) == "my.csv"
    corpus = {k: str(tmp_path / "corpus" / f"{k}.txt") for k in ("train", "valid", "test")}
    assert fp.own_data_name(corpus) == "corpus"


def test_a_small_file_is_hashed_whole_and_an_edit_changes_it(tmp_path: Path) -> None:
    csv = tmp_path / "my.csv"
    csv.write_text("date,OT\n2020-01-01,1.0\n")
    before = fp.fingerprint(csv)
    assert before == {"bytes": csv.stat().st_size, "sha256": sha256sum(csv)}
    csv.write_text("date,OT\n2020-01-01,2.0\n")  # same size, other contents
    assert fp.fingerprint(csv)["sha256"] != before["sha256"]
    assert fp.fingerprint(tmp_path / "absent.csv") == {"missing": True}


def test_a_large_file_is_known_by_size_time_and_its_first_and_last_mib(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fp, "FULL_HASH_BYTES", 3 << 20)
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(4 << 20))
    first = fp.fingerprint(big)
    assert set(first) == {"bytes", "mtime_ns", "edges_sha256"}
    with open(big, "r+b") as fh:  # the last byte: inside the last MiB
        fh.seek((4 << 20) - 1)
        fh.write(b"\1")
    os.utime(big, ns=(first["mtime_ns"], first["mtime_ns"]))
    fp._file_fingerprint.cache_clear()  # a new process: the cache is by (path, size, mtime)
    assert fp.fingerprint(big)["edges_sha256"] != first["edges_sha256"]


def test_a_small_folder_is_known_by_its_contents(tmp_path: Path) -> None:
    train = tmp_path / "train.pkl"
    train.write_bytes(b"x" * 10)
    first = fp.fingerprint(tmp_path)
    assert first["files"] == 1 and first["bytes"] == 10
    stat = train.stat()
    train.write_bytes(b"y" * 10)  # the same size and time, other contents
    os.utime(train, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    fp._file_fingerprint.cache_clear()
    assert fp.fingerprint(tmp_path)["contents_sha256"] != first["contents_sha256"]


def test_a_large_folder_is_known_by_its_listing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(fp, "FOLDER_CONTENT_FILES", 1)
    clips = tmp_path / "mp4"
    clips.mkdir()
    for name in ("Walk_p02_r00_v00_c01.mp4", "Walk_p02_r01_v00_c01.mp4"):
        (clips / name).write_bytes(b"x" * 10)
    first = fp.fingerprint(tmp_path)
    assert first["files"] == 2 and first["bytes"] == 20 and "listing_sha256" in first
    (clips / "Walk_p02_r02_v00_c01.mp4").write_bytes(b"y")
    assert fp.fingerprint(tmp_path)["listing_sha256"] != first["listing_sha256"]


def test_registry_data_is_pinned_by_the_registry_checksum() -> None:
    identity = fp.data_identity(config(source="ETTh1", path=None))
    expected = get_source("ETTh1").file("csv").sha256
    files = {"ETTh1/csv": {"sha256": expected, "verified": "sha256"}}
    assert identity == {"own": False, "name": None, "files": files}


def test_own_data_identity_has_the_fingerprint_and_the_summary_the_path(tmp_path: Path) -> None:
    csv = tmp_path / "ETTh1.csv"
    csv.write_text("date,OT\n2020-01-01,1.0\n")
    cfg = config(source="ETTh1", path=str(csv))
    assert fp.data_identity(cfg) == {
        "own": True,
        "name": "ETTh1.csv",
        "files": {"task.datamodule.path": {"bytes": csv.stat().st_size, "sha256": sha256sum(csv)}},
    }
    assert fp.data_identity(cfg, with_paths=True)["files"]["task.datamodule.path"]["path"] == str(csv)
