"""A run's wall time across resumes: the seconds spent before a stop travel in the checkpoint.

Without it, a resumed run's ``summary.json`` times only its last segment: a paper-size run killed
at 90 % and resumed would report a tenth of what it cost. The time between the last checkpoint
and a kill is not counted, since that work is done again, and counted, after the resume.

Lightning's ``Timer`` callback also keeps elapsed time in checkpoints, but it times the training
loop only (not data set-up and test) and restores its offset whenever a checkpoint is loaded, so
``trainer.test(ckpt_path=best)`` would reset it to the best checkpoint's earlier time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import lightning as L


class WallClock(L.Callback):
    """Seconds since this process started the run, plus those its checkpoint says came before."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self.earlier_s = 0.0
        self._fitting = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Lightning calls this before it restores a checkpoint's callback states
        self._fitting = stage == "fit"

    def segment_s(self) -> float:
        """Seconds of this process's segment of the run."""
        return self._clock() - self._started

    def total_s(self) -> float:
        """Seconds of the whole run: earlier segments (up to their last checkpoint) and this one."""
        return self.earlier_s + self.segment_s()

    def state_dict(self) -> dict[str, Any]:
        return {"seconds": self.total_s()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Testing a checkpoint restores callback states too: only a resumed fit carries earlier time.
        if self._fitting:
            self.earlier_s = float(state_dict["seconds"])
