"""Callbacks that stop a training run abruptly, once, the way users' runs get stopped.

``once_marker`` makes the stop happen only the first time: the marker file is created right before
stopping, so running the very same command again (same config, hence same run folder) resumes.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

import lightning as L


def _first_time(marker: str | None) -> bool:
    if marker is None:
        return True
    if Path(marker).exists():
        return False
    Path(marker).touch()
    return True


class KillAfterEpoch(L.Callback):
    """Exit with no clean-up at all (like SIGKILL) after a given training epoch."""

    def __init__(self, epoch: int, once_marker: str | None = None) -> None:
        self.epoch, self.once_marker = epoch, once_marker

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning runs ModelCheckpoint after every other callback, so last.ckpt is the previous epoch's.
        if trainer.current_epoch == self.epoch and _first_time(self.once_marker):
            os._exit(137)


class TerminateAtBatch(L.Callback):
    """Send this process SIGTERM (as SLURM or ``kill`` does) or another signal (``SIGINT``: Ctrl-C)
    after a given batch of a given epoch."""

    def __init__(
        self, epoch: int, batch: int, once_marker: str | None = None, signal_name: str = "SIGTERM"
    ) -> None:
        self.epoch, self.batch, self.once_marker, self.signal_name = epoch, batch, once_marker, signal_name

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch) and _first_time(self.once_marker):
            os.kill(os.getpid(), getattr(signal, self.signal_name))


class FailOnce(L.Callback):
    """Raise at the end of ``epoch`` (a crash that is not the data's fault), only the first time."""

    def __init__(self, epoch: int, once_marker: str) -> None:
        self.epoch, self.once_marker = epoch, once_marker

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch and _first_time(self.once_marker):
            raise RuntimeError("a crash that the same command does not repeat")


class AwaitStopAtBatch(L.Callback):
    """After a given batch of a given epoch, the first time: touch ``ready_marker`` and wait (at most
    ``timeout_s``) for a stop from outside (SIGTERM, or SLURM's warning to a submitit job), so that a
    test can signal a run mid-epoch whatever the machine's speed."""

    def __init__(self, epoch: int, batch: int, ready_marker: str, timeout_s: float = 120) -> None:
        self.epoch, self.batch, self.ready_marker, self.timeout_s = epoch, batch, ready_marker, timeout_s

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if (trainer.current_epoch, batch_idx) != (self.epoch, self.batch) or Path(self.ready_marker).exists():
            return
        Path(self.ready_marker).touch()
        deadline = time.monotonic() + self.timeout_s
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.05)


class DiskFullOnce(L.Callback):
    """From the first checkpoint of ``epoch`` on, every write that reaches the disk (``os.fsync``)
    fails with ENOSPC, as on a full disk; only the first time."""

    def __init__(self, epoch: int, once_marker: str) -> None:
        self.epoch, self.once_marker = epoch, once_marker

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        if trainer.current_epoch == self.epoch and _first_time(self.once_marker):

            def full(fd: int) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            os.fsync = full
