"""``model.compile=true`` end to end (issue 64): train.py compiles the backbone and trains, validates
and tests a TSF smoke run to the eager run's metrics; the summary says which it was, and the
compiled run is a run of its own (its id differs; the eager one keeps the id it had before the
switch existed: tests/runs/test_identity.py).

The backend is ``aot_eager`` (``model.compile_backend``): the same dynamo graphs and AOTAutograd
backward as inductor's, without generating and building C++ kernels, which cost ~40 CPU-seconds
per run here from an empty cache; inductor's numbers are the training benchmark's (bench/training.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import read_summaries, run_train
from tests.tasks.tsf.test_data import write_ett_csv

pytestmark = pytest.mark.slow


def test_a_compiled_run_trains_and_tests_to_the_eager_runs_metrics(tmp_path: Path) -> None:
    ett_csv = tmp_path / "ETTh1.csv"
    write_ett_csv(ett_csv, 14400)
    settings = ["model=transformer", f"task.datamodule.path={ett_csv}", "preset=smoke", "task.pred_len=8"]
    settings += ["task.seq_len=16"]
    run_train(settings, tmp_path / "eager")
    run_train([*settings, "model.compile=true", "model.compile_backend=aot_eager"], tmp_path / "compiled")
    (eager,) = read_summaries(tmp_path / "eager")
    (compiled,) = read_summaries(tmp_path / "compiled")
    assert (eager["compiled"], compiled["compiled"]) == (False, True)
    assert eager["run_id"] != compiled["run_id"]
    assert eager["metrics"].keys() == compiled["metrics"].keys() == {"mse", "mae"}
    for name, value in eager["metrics"].items():
        assert compiled["metrics"][name] == pytest.approx(value, rel=1e-4), name
