"""Runs you can trust: exact resume, force, corrupt checkpoints, one writer per folder, failures.

Each test runs ``train.py`` as users do, on a generated ETT-format file with the smoke preset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from recurrent_attention.data import sha256sum
from tests.conftest import ROOT, read_summaries, run_train
from tests.tasks.tsf.test_data import write_ett_csv

pytestmark = pytest.mark.slow

# Three epochs of four shuffled batches, dropout on: a resume that loses any random state or the
# data order ends with different metrics.
SETTINGS = ["model=aaren", "preset=smoke", "task.pred_len=8", "task.seq_len=16", "task.max_epochs=3"]
SETTINGS += ["trainer.limit_train_batches=4"]
HELPERS = "tests.helpers.crash_callback"
# The helpers' callbacks are imported from the checkout's root, the package as the tests import it.
WITH_HELPERS = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def ett_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("ett") / "ETTh1.csv"
    write_ett_csv(path, 14400)
    return path


@pytest.fixture(scope="module")
def uninterrupted(ett_csv: Path, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("uninterrupted")
    run_train([*SETTINGS, f"task.datamodule.path={ett_csv}"], out)
    (summary,) = read_summaries(out)
    return summary


ONE_EPOCH = [*SETTINGS, "task.max_epochs=1"]


@pytest.fixture(scope="module")
def finished(ett_csv: Path, tmp_path_factory) -> Path:
    """An output folder holding one finished one-epoch run; tests copy it rather than train again."""
    out = tmp_path_factory.mktemp("finished")
    run_train([*ONE_EPOCH, f"task.datamodule.path={ett_csv}"], out)
    return out


def copy_of(finished: Path, tmp_path: Path) -> list[str]:
    """Copy the finished run into ``tmp_path``; returns the command that made it."""
    shutil.copytree(finished, tmp_path, dirs_exist_ok=True)
    return [*ONE_EPOCH, f"task.datamodule.path={ett_csv_of(finished)}"]


def ett_csv_of(output_dir: Path) -> str:
    (summary,) = read_summaries(output_dir)
    (path,) = [o.split("=", 1)[1] for o in summary["overrides"] if o.startswith("task.datamodule.path=")]
    return path


def run_dir_of(output_dir: Path) -> Path:
    (folder,) = {path.parent for path in output_dir.rglob(".hydra")}
    return folder


def test_killed_run_resumes_to_the_metrics_of_an_unbroken_one(
    ett_csv: Path, uninterrupted: dict, tmp_path: Path
) -> None:
    command = [
        *SETTINGS,
        f"task.datamodule.path={ett_csv}",
        f"+callbacks.kill._target_={HELPERS}.KillAfterEpoch",
        "+callbacks.kill.epoch=1",
        f"+callbacks.kill.once_marker={tmp_path}/killed",
    ]
    killed = run_train(command, tmp_path, env=WITH_HELPERS, check=False)
    assert killed.returncode == 137 and not read_summaries(tmp_path)
    last = run_dir_of(tmp_path) / "checkpoints" / "last.ckpt"
    before_kill_s = torch.load(last, weights_only=True)["callbacks"]["WallClock"]["seconds"]
    run_train(command, tmp_path, env=WITH_HELPERS)
    (resumed,) = read_summaries(tmp_path)
    assert resumed["resumed"] is True and resumed["epochs"] == 3
    assert resumed["metrics"] == uninterrupted["metrics"]
    # the run's wall time is both segments', not the resumed one's alone
    assert before_kill_s > 0
    assert resumed["wall_time_s"] == pytest.approx(before_kill_s + resumed["wall_time_segment_s"], abs=1e-6)


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])  # SLURM or kill; Ctrl-C
def test_sigterm_saves_a_checkpoint_and_the_resumed_run_is_exact(
    ett_csv: Path, uninterrupted: dict, tmp_path: Path, signal_name: str
) -> None:
    command = [
        *SETTINGS,
        f"task.datamodule.path={ett_csv}",
        f"+callbacks.term._target_={HELPERS}.TerminateAtBatch",
        "+callbacks.term.epoch=1",
        "+callbacks.term.batch=1",
        f"+callbacks.term.once_marker={tmp_path}/terminated",
        f"+callbacks.term.signal_name={signal_name}",
    ]
    stopped = run_train(command, tmp_path, env=WITH_HELPERS, check=False)
    assert stopped.returncode == 143 and not read_summaries(tmp_path)
    assert [line for line in stopped.stderr.splitlines() if line.startswith("interrupted:")]
    assert (run_dir_of(tmp_path) / "checkpoints" / "last.ckpt").is_file()
    # Lightning's; the interrupted: line says it all
    assert "Received SIGTERM" not in stopped.stderr and "weights_only" not in stopped.stdout + stopped.stderr
    again = run_train(command, tmp_path, env=WITH_HELPERS)
    (resumed,) = read_summaries(tmp_path)
    assert resumed["resumed"] is True
    assert resumed["metrics"] == uninterrupted["metrics"]
    # a mid-epoch resume is exact: Lightning's "can cause unreliable results" is not for it
    assert "unreliable results" not in again.stderr and "(exact: the batches done are skipped" in again.stderr


def test_force_starts_clean_and_keeps_the_old_run_aside(finished: Path, tmp_path: Path) -> None:
    command = copy_of(finished, tmp_path)
    run_dir = run_dir_of(tmp_path)
    first = json.loads((run_dir / "summary.json").read_text())
    forced = run_train([*command, "force=true"], tmp_path)
    (again,) = read_summaries(tmp_path)
    assert again["resumed"] is False and again["wall_time_s"] != first["wall_time_s"]
    assert "resuming" not in forced.stderr
    (aside,) = run_dir.glob("replaced-*")
    assert json.loads((aside / "summary.json.replaced").read_text()) == first
    assert (aside / "checkpoints" / "last.ckpt").is_file()


def test_corrupt_last_checkpoint_is_set_aside_and_the_run_starts_over(finished: Path, tmp_path: Path) -> None:
    command = copy_of(finished, tmp_path)
    run_dir = run_dir_of(tmp_path)
    (run_dir / "summary.json").unlink()
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:100])  # a write cut short
    proc = run_train(command, tmp_path)
    warnings = [
        line for line in proc.stderr.splitlines() if line.startswith("warning:") and "last.ckpt" in line
    ]
    assert len(warnings) == 1 and "Traceback" not in proc.stderr
    (summary,) = read_summaries(tmp_path)
    assert summary["resumed"] is False
    # the dead attempt's checkpoints went aside with its last.ckpt: the new best is best.ckpt, not
    # best-v1.ckpt beside the old weights
    (aside,) = (run_dir / "checkpoints").glob("corrupt-*")
    assert sorted(p.name for p in aside.iterdir()) == ["best.ckpt", "last.ckpt"]
    assert Path(summary["best_checkpoint"]).name == "best.ckpt"
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.ckpt")) == ["best.ckpt", "last.ckpt"]


def test_a_second_writer_of_a_folder_stops_with_the_folder_and_pid(finished: Path, tmp_path: Path) -> None:
    command = copy_of(finished, tmp_path)
    run_dir = run_dir_of(tmp_path)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from recurrent_attention.runs.lock import RunLock\n"
            f"with RunLock({str(run_dir)!r}):\n    print('locked', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        second = run_train([*command, "force=true"], tmp_path, check=False)
    finally:
        holder.kill()
        holder.wait()
    assert second.returncode != 0
    (line,) = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert str(run_dir) in line and f"pid {holder.pid}" in line
    assert json.loads((run_dir / "summary.json").read_text())["resumed"] is False


def test_nan_metric_fails_the_run_and_writes_no_summary(ett_csv: Path, tmp_path: Path) -> None:
    proc = run_train(
        [*SETTINGS, f"task.datamodule.path={ett_csv}", "task.max_epochs=1", "task.lr=1e15"],
        tmp_path,
        check=False,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert "nan" in line.lower() or "inf" in line.lower()
    assert not read_summaries(tmp_path)
    (failed,) = [json.loads(p.read_text()) for p in tmp_path.rglob("failed.json")]
    assert failed["model"] == "aaren" and failed["run_id"] and failed["config_id"]


def test_an_empty_training_loader_is_refused_and_nothing_is_tested(ett_csv: Path, tmp_path: Path) -> None:
    """The bug: a batch larger than the training split left the loader empty (its incomplete batch
    dropped); the run exited 0 with a random initialisation's test MSE in summary.json."""
    # 8640 training rows of the ETT layout hold 8640 - 16 - 8 + 1 = 8617 windows
    proc = run_train(
        [*ONE_EPOCH, f"task.datamodule.path={ett_csv}", "task.batch_size=100000"], tmp_path, check=False
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: task.batch_size=100000 is larger than the training split (8617 samples; an incomplete "
        "batch is dropped), so nothing would be trained: use task.batch_size<=8617"
    )
    assert not read_summaries(tmp_path) and "test/mse" not in proc.stdout
    # Lightning's hints that mean nothing to the user are not printed (runs.quiet)
    assert not [noise for noise in ("`srun`", "💡 Tip", "LeafSpec") if noise in proc.stderr]


def test_a_summary_counts_the_optimiser_steps_taken(finished: Path) -> None:
    (summary,) = read_summaries(finished)
    assert summary["optimizer_steps"] == 4  # one epoch of trainer.limit_train_batches=4


def test_a_full_disk_loses_nothing_and_the_same_command_resumes(
    uninterrupted: dict, ett_csv: Path, tmp_path: Path
) -> None:
    """The bug: a full disk gave a 95-line traceback, a truncated best.ckpt and a .failed.json.* temp
    file; the rerun wrote best-v1.ckpt beside the stale one."""
    command = [*SETTINGS, f"task.datamodule.path={ett_csv}"]
    command += [f"+callbacks.full._target_={HELPERS}.DiskFullOnce", "+callbacks.full.epoch=2"]
    command += [f"+callbacks.full.once_marker={tmp_path}/full_once"]
    full = run_train(command, tmp_path / "out", env=WITH_HELPERS, check=False)
    (run_dir,) = {p.parent for p in (tmp_path / "out").rglob("identity.json")}
    last = run_dir / "checkpoints" / "last.ckpt"
    assert full.returncode == 1 and "Traceback" not in full.stderr and "test/mse" not in full.stdout
    assert full.stderr.strip().splitlines()[-1] == (
        f"error: no space left on the device of {run_dir}: free some space and run the same command; "
        f"it resumes from {last}, the last checkpoint written whole"
    )
    assert not [p for p in run_dir.rglob(".*") if p.is_file()]  # no temporary file left
    assert torch.load(last, weights_only=False)["epoch"] == 1  # the last good one, whole
    resumed = run_train(command, tmp_path / "out", env=WITH_HELPERS)
    assert "resuming from" in resumed.stderr
    (summary,) = read_summaries(tmp_path / "out")
    assert summary["metrics"] == uninterrupted["metrics"]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]


def test_a_later_success_removes_the_stale_failure(ett_csv: Path, tmp_path: Path) -> None:
    command = [*SETTINGS, f"task.datamodule.path={ett_csv}", "task.max_epochs=1"]
    command += [f"+callbacks.fail._target_={HELPERS}.FailOnce", "+callbacks.fail.epoch=0"]
    command += [f"+callbacks.fail.once_marker={tmp_path}/failed_once"]
    failed = run_train(command, tmp_path / "out", env=WITH_HELPERS, check=False)
    assert failed.returncode != 0
    (failure,) = [json.loads(p.read_text()) for p in tmp_path.rglob("failed.json")]
    fields = (
        "task",
        "family",
        "dataset",
        "model",
        "seed",
        "preset",
        "compat",
        "run_id",
        "config_id",
        "git_commit",
    )
    assert set(fields) <= set(failure) and "does not repeat" in failure["error"] and failure["traceback"]
    run_train(command, tmp_path / "out", env=WITH_HELPERS)
    (summary,) = read_summaries(tmp_path / "out")
    assert summary["run_id"] == failure["run_id"] and summary["config_id"] == failure["config_id"]
    assert not list(tmp_path.rglob("failed.json"))


def test_own_data_that_is_not_there_is_one_line_and_no_failed_run(tmp_path: Path) -> None:
    missing = tmp_path / "late" / "ETTh1.csv"
    proc = run_train([*ONE_EPOCH, f"task.datamodule.path={missing}"], tmp_path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: task.datamodule.path={missing}: no such file or folder; check the path (own data)"
    )
    assert not list(tmp_path.rglob("failed.json"))


def test_registry_data_not_found_is_recorded_as_read_no_data(tmp_path: Path) -> None:
    """Tables must not count it as a failed seed of ETTh1's row (results.collect: "no data")."""
    settings = ["preset=smoke", f"paths.data_dir={tmp_path / 'empty'}", "paths.download=false"]
    proc = run_train(settings, tmp_path / "out", env={"RA_DATA_MIRROR": ""}, check=False)
    assert proc.returncode == 2 and "not found" in proc.stderr.strip().splitlines()[-1]
    (failed,) = [json.loads(p.read_text()) for p in tmp_path.rglob("failed.json")]
    assert failed["data_read"] is False and failed["error"].startswith("DataMissingError: ")


def test_own_data_that_is_a_folder_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "ETTh1"
    folder.mkdir()
    proc = run_train([*ONE_EPOCH, f"task.datamodule.path={folder}"], tmp_path / "out", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1]
        == f"error: {folder}: a folder, not a CSV file; give the path of the file itself"
    )


def test_the_summary_names_own_data_by_its_file_and_records_what_was_read(finished: Path) -> None:
    (summary,) = read_summaries(finished)
    csv = Path(ett_csv_of(finished))
    assert summary["dataset"] == "ETTh1.csv" and summary["own_data"] is True
    assert summary["task_dataset"] == "ETTh1"
    assert summary["data"]["files"]["task.datamodule.path"] == {
        "path": str(csv),
        "bytes": csv.stat().st_size,
        "sha256": sha256sum(csv),
    }
    assert summary["package_version"] == metadata.version("recurrent-attention")


def test_a_run_ends_by_printing_its_folder(finished: Path, tmp_path: Path) -> None:
    proc = run_train(copy_of(finished, tmp_path), tmp_path)
    assert proc.stderr.splitlines()[-1] == f"run folder: {run_dir_of(tmp_path)}"


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` with its bytes and modification time: what "unchanged" means."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
    }


def test_a_folder_holding_another_configs_run_refuses_and_is_left_unchanged(
    finished: Path, tmp_path: Path
) -> None:
    command = copy_of(finished, tmp_path)
    run_dir = run_dir_of(tmp_path)
    before = snapshot(run_dir)
    (recorded,) = read_summaries(tmp_path)
    proc = run_train([*command, "seed=23", f"hydra.run.dir={run_dir}"], tmp_path, check=False)
    assert proc.returncode == 2
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {run_dir} holds run {recorded['run_id']}, not this config's run ")
    assert "force=true" in line
    assert snapshot(run_dir) == before


def test_a_skipped_or_refused_command_leaves_the_finished_run_unchanged(
    finished: Path, tmp_path: Path
) -> None:
    command = copy_of(finished, tmp_path)
    run_dir = run_dir_of(tmp_path)
    before = {name: content for name, (content, _) in snapshot(run_dir).items()}
    skipped = run_train([*command, "logger=tensorboard"], tmp_path)
    assert "already finished" in skipped.stderr
    refused = run_train([*command, "force=yes"], tmp_path, check=False)
    assert refused.returncode == 2
    after = snapshot(run_dir)
    assert {name: content for name, (content, _) in after.items()} == before
    # the record is not even rewritten with the same bytes (run.lock is the lock's, not the record)
    copied = snapshot(run_dir_of(finished))
    assert all(after[name][1] == copied[name][1] for name in after if name != "run.lock")


@pytest.mark.parametrize("logging", [[], ["hydra/job_logging=disabled"]])  # ours, or a user's choice
def test_a_config_refused_up_front_leaves_no_folder(tmp_path: Path, logging: list[str]) -> None:
    proc = run_train([*ONE_EPOCH, *logging, "model.n_heads=0"], tmp_path / "out", check=False)
    assert proc.returncode == 2 and "model.n_heads=0" in proc.stderr.strip().splitlines()[-1]
    assert not list((tmp_path / "out").rglob("*"))
