"""What a window's archive holds: the records of jobs that ended on their own, every job's log."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from recurrent_attention.device.runner import JobRecord, Runner


def test_a_stopped_jobs_leftovers_stay_out_of_the_archive(tmp_path: Path) -> None:
    kit = tmp_path / "kit"
    kit.mkdir()
    manifest = {"chunk": "tsf", "commit": "c" * 40, "parallel": 2, "jobs": [], "steps": []}
    (kit / "kit.json").write_text(json.dumps(manifest))
    runner = Runner(tmp_path, kit, tmp_path / "out", budget_s=60, smoke=True, parallel=None)
    runner.window.jobs = [JobRecord(["seed=1"], 1.0, "finished"), JobRecord(["seed=2"], 1.0, "killed")]
    runner.window.jobs += [JobRecord(["seed=3"], 1.0, "failed")]
    for index, name in enumerate(("summary.json", "failed.json", "failed.json")):
        run = runner.job_folder(index) / "tsf" / "etth1" / "aaren" / "paper" / f"seed{index + 1}-abc"
        run.mkdir(parents=True)
        (run / name).write_text("{}")
        (run / "last.ckpt").write_text("weights")  # checkpoints never travel back
    with tarfile.open(runner.archive()) as tar:
        runs = sorted(m.name for m in tar.getmembers() if m.name.startswith("runs/"))
    assert runs == [
        "runs/tsf/etth1/aaren/paper/seed1-abc/summary.json",
        "runs/tsf/etth1/aaren/paper/seed3-abc/failed.json",
    ]
