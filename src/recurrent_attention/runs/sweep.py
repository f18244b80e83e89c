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


def note_failed_job(run_dir: str | Path, error: BaseException | str = "") -> None:
    """Called by a failing job of a sweep (no-op outside one), with the first line of its error."""
    registry = os.environ.get(FAILURES_ENV)
    if registry:
        line = str(error).splitlines()[0] if str(error) else ""
        with open(registry, "a") as file:
            file.write(f"{run_dir}\t{line}\n")


def report_line(entry: str) -> str:
    """A failed job as the sweep's report shows it: its ``failed.json`` where the job wrote one,
    else (a command refused before it ran leaves no folder) the error itself."""
    run_dir, _, error = entry.partition("\t")
    failed = Path(run_dir) / "failed.json"
    if failed.is_file():
        return f"  {failed}"
    return f"  {run_dir} (refused, no folder): {error or 'see the error line above'}"


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
            print(f"{len(failed)} job(s) of this sweep failed:", file=sys.stderr)
            for entry in failed:
                print(report_line(entry), file=sys.stderr)
            sys.exit(1)
