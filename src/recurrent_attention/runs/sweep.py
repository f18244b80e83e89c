"""A sweep whose job failed exits non-zero and lists the failed jobs' folders at its end.

Jobs may run in other processes (joblib) or on other machines (SLURM), so a failing job appends
its folder to a file named by ``RA_SWEEP_FAILURES``, which the sweep's first process sets before
any job starts (launchers pass the environment on) and reads when the sweep ends.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

FAILURES_ENV = "RA_SWEEP_FAILURES"


def note_failed_job(run_dir: str | Path) -> None:
    """Called by a failing job of a sweep (no-op outside one)."""
    registry = os.environ.get(FAILURES_ENV)
    if registry:
        with open(registry, "a") as file:
            file.write(f"{run_dir}\n")


class FailedJobsReport(Callback):
    """Hydra callback: on ``-m`` sweeps, report failed jobs and make the command exit 1."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        handle, path = tempfile.mkstemp(prefix=".failed-jobs-", suffix=".txt", dir=sweep_dir)
        os.close(handle)
        os.environ[FAILURES_ENV] = path

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        registry = Path(os.environ.pop(FAILURES_ENV, ""))
        if not registry.is_file():
            return
        failed = registry.read_text().splitlines()
        registry.unlink()
        if failed:
            print(f"{len(failed)} job(s) of this sweep failed (see failed.json in each):", file=sys.stderr)
            for run_dir in failed:
                print(f"  {run_dir}", file=sys.stderr)
            sys.exit(1)
