"""``make device-import``: a GPU window's archive into results/, read back as the queue's progress."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from recurrent_attention.device.chunks import VERIFY_REPORT, chunk_named, next_chunk, pending_jobs
from recurrent_attention.device.importer import ArchiveError, import_archive

H100 = "NVIDIA H100 80GB HBM3"


def archive(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def verify_window(tmp_path: Path) -> Path:
    job = chunk_named("verify").jobs[0]
    run = "runs/tsf/etth1/transformer/paper/seed1-0123456789ab"
    summary = {"overrides": [*job.overrides, "paths.output_dir=/tmp/w/runs"], "device": f"{H100} x1"}
    window = {"chunk": "verify", "commit": "c" * 40, "smoke": False, "gpu": H100, "jobs": [], "problems": []}
    window["steps"] = [{"name": "bench-gpu", "returncode": 0, "seconds": 80.0}]
    return archive(
        tmp_path / "device-verify-cccc-20261127T000000Z.tar.gz",
        {
            "runner.json": json.dumps(window),
            "steps/bench-gpu/bench_gpu.md": f"# GPU benchmark on {H100}\n",
            f"{run}/summary.json": json.dumps(summary),
            f"{run}/logs/version_0/metrics.csv": "epoch,val/mse\n0,0.7\n",
        },
    )


def test_a_verify_window_marks_verify_done_and_its_run_done(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    counts = import_archive(verify_window(tmp_path), repo)
    assert counts == {"runs added": 1, "runs already there": 0, "files": 2}
    run = repo / "results/runs/tsf/etth1/transformer/paper/seed1-0123456789ab"
    assert (run / "summary.json").is_file() and (run / "logs/version_0/metrics.csv").is_file()
    assert json.loads((repo / VERIFY_REPORT).read_text())["gpu"] == H100
    assert (repo / "results/bench/gpu/bench_gpu.md").read_text().startswith(f"# GPU benchmark on {H100}")
    assert (
        repo / "results/device/verify/device-verify-cccc-20261127T000000Z/bench-gpu/bench_gpu.md"
    ).is_file()
    assert next_chunk(repo).name == "ef_wiki"
    assert len(pending_jobs(chunk_named("tsf"), repo)) == len(chunk_named("tsf").jobs) - 1  # ETTh1@96 seed 1


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"summary.json": "{}"}, "no runner.json"),
        ({"runner.json": "{}", "../escape/summary.json": "{}"}, "points outside its folder"),
        ({"runner.json": json.dumps({"chunk": "tsf", "smoke": True})}, "smoke"),
    ],
)
def test_bad_archives_are_refused_with_one_line(tmp_path: Path, files: dict, message: str) -> None:
    with pytest.raises(ArchiveError, match=message):
        import_archive(archive(tmp_path / "a.tar.gz", files), tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_not_an_archive(tmp_path: Path) -> None:
    (tmp_path / "x.tar.gz").write_text("not gzip")
    with pytest.raises(ArchiveError, match="not a device archive"):
        import_archive(tmp_path / "x.tar.gz", tmp_path)
