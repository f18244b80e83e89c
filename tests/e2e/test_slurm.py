"""Sweeps on a real SLURM cluster: one node on this machine, started by the tests themselves.

The cluster (``cli/slurm_cluster.py``: munged, slurmctld, slurmd, its own slurm.conf, ports and
munge socket in a temporary folder) serves every test of this file, which therefore stays on one
pytest-xdist worker; it is stopped, jobs and daemons, when the file's tests end, passed or failed.
Accounting is off, as on many small clusters: the sweeps below also check that submitit is told
the job states by ``squeue`` (``runs/slurm.py``). Without ``slurm-wlm`` and ``munge`` the tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from recurrent_attention.cli import slurm_cluster
from recurrent_attention.cli.slurm_cluster import INSTALL_HINT, LocalSlurm, missing_binaries
from recurrent_attention.runs.slurm import GONE, squeue_watcher_class
from tests.conftest import ROOT, read_summaries, run_train
from tests.e2e.test_ddp import DDP, assert_same_as_one_process
from tests.tasks.tsf.test_data import own_csv_run

# each test bounded; a timeout ends the test, and the cluster's teardown still cancels its jobs
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLURM = [
    "-m",
    "hydra/launcher=submitit_slurm",
    # a CPU-only node: the launcher defaults are a GPU cluster's (conf/hydra/launcher/submitit_slurm.yaml)
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    # submitit calls a warned job "timed out" past min(80%, timeout_min - 10 min) of its time
    "hydra.launcher.timeout_min=30",
]
HELPERS = "tests.helpers.crash_callback"
# The helpers' callbacks are imported from the checkout's root, in the jobs too (sbatch passes the
# submitting environment on).
WITH_HELPERS = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="session")
def slurm(tmp_path_factory) -> LocalSlurm:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"SLURM tests need {', '.join(missing)}: {INSTALL_HINT}")
    if os.geteuid() != 0:
        pytest.skip("SLURM tests start slurmd, which starts jobs as their user: run them as root (CI does)")
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def on(cluster: LocalSlurm, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"SLURM_CONF": str(cluster.conf), **WITH_HELPERS, **(extra or {})}


def submitit_logs(output_dir: Path, suffix: str) -> str:
    return "\n".join(p.read_text() for p in sorted((output_dir / ".submitit").rglob(f"*{suffix}")))


def squeue(cluster: LocalSlurm, *args: str) -> str:
    return subprocess.run(
        ["squeue", "--noheader", *args], env=cluster.env, capture_output=True, text=True, check=True
    ).stdout


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_command_line_starts_a_cluster_refuses_a_second_and_stops_it_by_pid(
    slurm: LocalSlurm, tmp_path: Path, capsys
) -> None:
    folder = tmp_path / "c"
    assert slurm_cluster.main(["start", "--dir", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == f"export SLURM_CONF={folder / 'slurm.conf'}"
    cluster = LocalSlurm(folder)
    daemons = cluster.running()
    try:
        assert len(daemons) == 3
        assert squeue(cluster, "--format=%i") == ""  # its own controller, not the session's cluster's
        assert slurm_cluster.main(["start", "--dir", str(folder)]) == 1
        assert "already running" in capsys.readouterr().err
    finally:
        assert slurm_cluster.main(["stop", "--dir", str(folder)]) == 0
    assert not [pid for pid in daemons if alive(pid)]


def test_squeue_polling_sees_a_job_that_ended_without_a_result(slurm: LocalSlurm, monkeypatch) -> None:
    """Without accounting, a job that ends with no result file (cancelled, killed) still ends for
    submitit: squeue lists it as such, then no more."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    job = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null", "--wrap=sleep 60"],
        env=slurm.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    watcher = squeue_watcher_class()(delay_s=60)
    assert watcher.get_state(job, mode="force") in ("PENDING", "RUNNING")
    assert not watcher.is_done(job, mode="cache")
    subprocess.run(["scancel", job], env=slurm.env, check=True)
    deadline = time.monotonic() + 30
    while watcher.get_state(job, mode="force") not in ("CANCELLED", GONE) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert watcher.is_done(job, mode="cache")
    # a job squeue no longer knows (ended before MinJobAge) has ended too, without an error
    assert watcher.get_state("99999", mode="force") == GONE
    assert watcher.num_calls >= 3


def test_a_sweep_of_two_models_and_two_seeds_runs_as_slurm_jobs_and_reports_its_failure(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    # Each model's seed-1 job fails once, at the end of its second epoch; seed 2 has no such epoch.
    command = [
        *SLURM,
        "model=transformer,aaren",
        "seed=1,2",
        "preset=smoke",
        "task.max_epochs=2",
        f"+callbacks.fail._target_={HELPERS}.FailOnce",
        "+callbacks.fail.epoch=${seed}",
        "+callbacks.fail.once_marker=${paths.output_dir}/failed-${model.name}",
        *own_csv_run(tmp_path),
    ]
    first = run_train(command, out, env=on(slurm), check=False)
    assert first.returncode == 1, first.stderr[-3000:]
    report = first.stderr.split("2 job(s) of this sweep failed:\n", 1)[1].split()[:2]
    listed = [Path(line).parent for line in report]  # each line: the job's failed.json
    assert sorted(folder.parent.parent.name for folder in listed) == ["aaren", "transformer"]
    assert all((folder / "failed.json").is_file() and "seed1-" in folder.name for folder in listed)
    assert sorted((s["model"], s["seed"]) for s in read_summaries(out)) == [("aaren", 2), ("transformer", 2)]
    # accounting is off: one line says so, and submitit never polled sacct
    assert first.stderr.count("SLURM accounting is off") == 1
    assert "Bypassing sacct error" not in first.stderr

    run_train(command, out, env=on(slurm))  # the failed jobs resume, the finished are skipped
    summaries = read_summaries(out)
    assert sorted((s["model"], s["seed"]) for s in summaries) == [
        ("aaren", 1),
        ("aaren", 2),
        ("transformer", 1),
        ("transformer", 2),
    ]
    assert sorted(s["resumed"] for s in summaries) == [False, False, True, True]
    assert not list(out.rglob("failed.json"))
    assert submitit_logs(out, "_log.err").count("already finished") == 2


# Three epochs of four shuffled batches, dropout on (as tests/e2e/test_run_lifecycle.py): a resume
# that loses any random state or the data order ends with different metrics.
EXACT = ["model=aaren", "preset=smoke", "task.max_epochs=3", "trainer.limit_train_batches=4"]


def test_a_job_warned_by_slurm_is_requeued_and_resumes_to_an_unbroken_runs_metrics(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    data = own_csv_run(tmp_path, n_rows=600)
    out, ready = tmp_path / "out", tmp_path / "ready"
    command = [
        *SLURM,
        *EXACT,
        *data,
        f"+callbacks.wait._target_={HELPERS}.AwaitStopAtBatch",
        "+callbacks.wait.epoch=1",
        "+callbacks.wait.batch=1",
        f"+callbacks.wait.ready_marker={ready}",
    ]
    sweep: dict[str, subprocess.CompletedProcess] = {}
    thread = threading.Thread(
        target=lambda: sweep.update(proc=run_train(command, out, env=on(slurm))), daemon=True
    )
    thread.start()
    unbroken = tmp_path / "unbroken"
    run_train([*EXACT, *data], unbroken)  # the same run here, never stopped, while the job starts
    (expected,) = read_summaries(unbroken)
    deadline = time.monotonic() + 120
    while not ready.exists() and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ready.exists(), "the job never reached epoch 1, batch 1"
    (job,) = squeue(slurm, "--format=%i").split()
    # what SLURM sends before a time limit (submitit's --signal=USR2@signal_delay_s) or on preemption
    subprocess.run(["scancel", "--signal=USR2", job], env=slurm.env, check=True)
    thread.join(timeout=240)
    assert "proc" in sweep, "the sweep did not end"

    (resumed,) = read_summaries(out)
    assert resumed["resumed"] is True
    assert resumed["metrics"] == expected["metrics"]
    logs = submitit_logs(out, "_log.out")
    assert f"Requeued job {job}" in logs
    errors = submitit_logs(out, "_log.err")
    assert (
        "interrupted: checkpoint saved to" in errors and "SLURM runs the job again, which resumes" in errors
    )
    # the requeued job resumed mid-epoch from the checkpoint written when it was warned
    assert "resuming from" in errors
    print(json.dumps({"requeued_job_metrics": resumed["metrics"], "unbroken": expected["metrics"]}))


def test_ddp_under_srun_takes_its_ranks_from_slurm_and_equals_one_process(
    slurm: LocalSlurm, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    run_train(
        [
            *SLURM,
            "hydra.launcher.tasks_per_node=2",
            "trainer.devices=2",
            *DDP,
            *own_csv_run(tmp_path),  # 41 test windows: an odd count
        ],
        out,
        env=on(slurm),
    )
    assert_same_as_one_process(out)
    # two SLURM tasks, not two processes Lightning started itself
    rank_logs = sorted(p.name for p in (out / ".submitit").rglob("*_log.err"))
    assert len(rank_logs) == 2, rank_logs
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in submitit_logs(out, "_1_log.err")
