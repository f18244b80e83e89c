"""A callback that kills the process (no clean-up, like SIGKILL) after a given training epoch."""

from __future__ import annotations

import os

import lightning as L


class KillAfterEpoch(L.Callback):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Runs after ModelCheckpoint has written last.ckpt for this epoch (callbacks run in order).
        if trainer.current_epoch == self.epoch:
            os._exit(137)
