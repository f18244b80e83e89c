"""A sweep through Hydra's submitit launcher: each job a separate submitit job, every summary written."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import read_summaries, run_train
from tests.tasks.tsf.test_data import write_ett_csv


def test_two_job_sweep_runs_through_submitit_local(tmp_path: Path) -> None:
    csv = tmp_path / "own.csv"
    write_ett_csv(csv, 240)
    out = tmp_path / "out"
    run_train(
        [
            "-m",
            "hydra/launcher=submitit_local",
            "seed=1,2",
            "preset=smoke",
            "task.layout=custom",
            "task.n_channels=7",
            f"task.datamodule.path={csv}",
            "task.seq_len=16",
            "task.pred_len=8",
        ],
        out,
    )
    assert sorted(s["seed"] for s in read_summaries(out)) == [1, 2]
    job_logs = sorted(p.name for p in (out / ".submitit").rglob("*_log.out"))
    assert len(job_logs) == 2, f"expected one submitit job per seed, found {job_logs}"
