"""End-to-end: train.py as users run it, on a generated ETT-format file, with the smoke preset."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from recurrent_attention.finished_run import run_ids_of_folder
from recurrent_attention.ops import native
from tests.conftest import read_summaries, run_train
from tests.tasks.tsf.test_data import write_ett_csv

pytestmark = pytest.mark.slow

SMOKE = ["preset=smoke", "task.pred_len=8", "task.seq_len=16"]


@pytest.fixture(scope="module")
def ett_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ett") / "ETTh1.csv"
    write_ett_csv(path, 14400)
    return path


@pytest.mark.parametrize("model", ["transformer", "aaren"])
def test_smoke_run_writes_summary(model: str, ett_csv: Path, tmp_path: Path) -> None:
    run_train([f"model={model}", "task=tsf/etth1", f"task.datamodule.path={ett_csv}", *SMOKE], tmp_path)
    (summary,) = read_summaries(tmp_path)
    assert summary["model"] == model and summary["seed"] == 1
    # an own file, even one named like the benchmark's, is its own dataset (issue 25)
    assert summary["dataset"] == "ETTh1.csv" and summary["own_data"] and summary["task_dataset"] == "ETTh1"
    assert summary["setting"] == {"horizon": 8} and summary["preset"] == "smoke"
    assert set(summary["metrics"]) == {"mse", "mae"} and 0 < summary["metrics"]["mse"] < 10
    assert summary["params"] > 0 and summary["wall_time_s"] > 0 and summary["device"]
    assert summary["native_kernels"] == (model == "aaren" and native.extension() is not None)
    run_dir = Path(next(tmp_path.rglob("summary.json"))).parent
    assert run_dir.name == f"seed1-{summary['run_id']}" and run_dir.parent.name == "smoke"
    ids = {"run_id": summary["run_id"], "config_id": summary["config_id"]}
    assert run_ids_of_folder(run_dir) == ids, "the saved config hashes as the live one did"
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert list(run_dir.rglob("metrics.csv")), "CSV logger writes metrics"
    again = run_train(
        [f"model={model}", "task=tsf/etth1", f"task.datamodule.path={ett_csv}", *SMOKE], tmp_path
    )
    assert "already finished" in again.stderr


def test_multirun_sweep_over_models_and_seeds(ett_csv: Path, tmp_path: Path) -> None:
    run_train(
        [
            "-m",
            "model=transformer,aaren",
            "seed=1,2",
            "task=tsf/etth1",
            f"task.datamodule.path={ett_csv}",
            *SMOKE,
        ],
        tmp_path,
    )
    summaries = read_summaries(tmp_path)
    assert sorted((s["model"], s["seed"]) for s in summaries) == [
        ("aaren", 1),
        ("aaren", 2),
        ("transformer", 1),
        ("transformer", 2),
    ]


def test_failing_job_does_not_stop_the_sweep(ett_csv: Path, tmp_path: Path) -> None:
    proc = run_train(
        ["-m", "model=aaren", f"task.datamodule.path={tmp_path}/missing.csv,{ett_csv}", *SMOKE],
        tmp_path,
        check=False,
    )
    assert [s["model"] for s in read_summaries(tmp_path)] == ["aaren"]
    # a path that is not there is a bad command, caught before the job runs: one line, no failed.json
    assert f"error: task.datamodule.path={tmp_path}/missing.csv: no such file or folder" in proc.stderr
    assert not list(tmp_path.rglob("failed.json"))
    assert proc.returncode == 1
    report = proc.stderr[proc.stderr.index("1 job(s) of this sweep failed:") :].splitlines()
    # the bug: the report sent the user to a failed.json in a folder the refusal had removed
    (line,) = report[1:]
    folder = Path(line.split(" (refused, no folder): ")[0].strip())
    assert folder.is_relative_to(tmp_path) and not folder.exists()
    assert line.endswith(
        f"(refused, no folder): task.datamodule.path={tmp_path}/missing.csv: no such file or folder; "
        "check the path (own data)"
    )


def test_missing_data_is_one_clear_line(tmp_path: Path) -> None:
    proc = run_train(
        ["task=tsf/etth1", "preset=smoke", "paths.download=false", f"paths.data_dir={tmp_path}/none"],
        tmp_path,
        env={"RA_DATA_MIRROR": ""},
        check=False,
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert (
        "ETT-small/ETTh1.csv" in lines[0] and "f18de3ad" in lines[0] and "download_data.py ETTh1" in lines[0]
    )


def test_checksum_mismatch_is_one_clear_line(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    write_ett_csv(mirror / "ETT-small" / "ETTh1.csv", 14400)
    proc = run_train(
        ["task=tsf/etth1", "preset=smoke"], tmp_path, env={"RA_DATA_MIRROR": str(mirror)}, check=False
    )
    assert proc.returncode == 2
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert (
        "sha256 mismatch" in line
        and "f18de3ad269cef59bb07b5438d79bb3042d3be49bdeecf01c1cd6d29695ee066" in line
    )


def test_metrics_csv_logs_the_tslib_learning_rate_of_every_epoch(ett_csv: Path, tmp_path: Path) -> None:
    run_train(["model=aaren", f"task.datamodule.path={ett_csv}", *SMOKE, "task.max_epochs=4"], tmp_path)
    (metrics,) = tmp_path.rglob("metrics.csv")
    rates = pd.read_csv(metrics)["train/lr"].dropna().tolist()
    assert rates == pytest.approx([1e-4, 1e-4, 5e-5, 2.5e-5], rel=1e-6)  # logged as float32
