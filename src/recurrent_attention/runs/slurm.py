"""A sweep on SLURM whose cluster keeps no accounting: job states from ``squeue``, quietly.

Submitit follows its jobs with ``sacct``. Where accounting is off (no slurmdbd: a small cluster, the
one-node cluster of ``scripts/slurm_cluster.py``), every poll fails with a warning and sacct's own
error, a screenful per poll, and submitit never learns a job's state: it waits for the job's result
file, so a job that ends without one (killed, cancelled, out of memory) keeps the sweep waiting
forever. When the cluster says ``AccountingStorageType=accounting_storage/none``, the sweep's first
process (this Hydra callback) says so in one line and polls ``squeue`` instead, which knows every
job that is queued, running or recently ended; a job it no longer lists has ended.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

NO_ACCOUNTING = "accounting_storage/none"
SQUEUE_FIELDS = "JobID|State|NodeList"  # the names submitit reads from sacct's header
# squeue's answer when none of the jobs asked about is known any more (all ended long enough ago)
UNKNOWN_JOBS = "Invalid job id specified"
GONE = "ENDED"  # the state of a job squeue no longer lists: it has ended
# The states of a job that will not run again (squeue also shows passing ones sacct does not, such
# as CONFIGURING, SIGNALING, STAGE_OUT: a job in those is not done). PREEMPTED is not among them: a
# preempted job is requeued, or squeue stops listing it.
ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY"}
ENDED |= {"REVOKED", "TIMEOUT", GONE}


def accounting_storage() -> str | None:
    """The cluster's ``AccountingStorageType`` (None where ``scontrol`` cannot say)."""
    try:
        shown = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in shown.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageType":
            return value.strip()
    return None


def squeue_watcher_class() -> type:
    """Submitit's watcher, asking ``squeue`` (built on demand: submitit is imported only for SLURM)."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    class SqueueInfoWatcher(SlurmInfoWatcher):
        """``SlurmInfoWatcher`` reading ``squeue``: the queued, running and recently ended jobs."""

        def _make_command(self) -> list[str] | None:
            to_check = sorted({job.split("_")[0] for job in self._registered - self._finished})
            if not to_check:
                return None
            return [
                "squeue",
                "--noheader",
                "--states=all",
                "--format=%i|%T|%N",
                f"--jobs={','.join(to_check)}",
            ]

        def is_done(self, job_id: str, mode: str = "standard") -> bool:
            return self.get_state(job_id, mode=mode).upper() in ENDED

        def update(self) -> None:
            command = self._make_command()
            if command is None:
                return
            self._num_calls += 1
            try:
                proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.SubprocessError):
                proc = None
            self._last_status_check = time.time()
            if proc is None or (proc.returncode != 0 and UNKNOWN_JOBS not in proc.stderr):
                return  # the controller did not answer: ask again at the next poll
            listed = self.read_info(f"{SQUEUE_FIELDS}\n{proc.stdout}" if proc.returncode == 0 else "")
            for job in self._registered - self._finished:
                self._info_dict[job] = listed.get(job) or listed.get(job.split("_")[0]) or {"State": GONE}
                if self.is_done(job, mode="cache"):
                    self._finished.add(job)

    return SqueueInfoWatcher


def poll_with_squeue() -> None:
    """Every submitit SLURM job of this process is followed with ``squeue`` from now on."""
    from submitit.slurm.slurm import SlurmJob

    SlurmJob.watcher = squeue_watcher_class()(delay_s=60)


class QuietSlurmPolling(Callback):
    """Hydra callback: a ``submitit_slurm`` sweep on a cluster without accounting polls ``squeue``."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        target = str(config.hydra.launcher.get("_target_", ""))
        if not target.endswith("submitit_launcher.SlurmLauncher"):
            return
        if accounting_storage() == NO_ACCOUNTING:
            print(
                "SLURM accounting is off on this cluster (AccountingStorageType=accounting_storage/none):"
                " job states come from squeue, not sacct",
                file=sys.stderr,
            )
            poll_with_squeue()
