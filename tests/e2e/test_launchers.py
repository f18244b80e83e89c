"""A sweep through Hydra's submitit launcher: each job a separate submitit job, every summary written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import read_summaries, run_train
from tests.tasks.tsf.test_data import own_csv_run

pytestmark = pytest.mark.slow


def test_two_job_sweep_runs_through_submitit_local(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_train(
        ["-m", "hydra/launcher=submitit_local", "seed=1,2", "preset=smoke", *own_csv_run(tmp_path)], out
    )
    assert sorted(s["seed"] for s in read_summaries(out)) == [1, 2]
    job_logs = sorted(p.name for p in (out / ".submitit").rglob("*_log.out"))
    assert len(job_logs) == 2, f"expected one submitit job per seed, found {job_logs}"
