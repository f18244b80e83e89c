"""``last.ckpt`` holds the last epoch, also when the monitored metric stopped improving.

Lightning 2.6's ``save_last=True`` rewrote it only on improvement, so a killed run resumed from its
best epoch and PI-ViT's "last checkpoint" was the best one. The metric here is scripted to be best
at the first epoch and worse after it.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from recurrent_attention import train

SCORES = (1.0, 2.0, 3.0)  # mode min: epoch 0 is the best, epochs 1 and 2 do not improve
BATCHES = 2


class ScriptedScore(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)

    def training_step(self, batch: list[Tensor], batch_idx: int) -> Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def validation_step(self, batch: list[Tensor], batch_idx: int) -> None:
        self.log("val/score", SCORES[self.current_epoch])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.ones(BATCHES, 1)), batch_size=1)


def config(test_checkpoint: str) -> DictConfig:
    monitor = {"metric": "val/score", "mode": "min"}
    return OmegaConf.create({"seed": 0, "task": {"monitor": monitor, "test_checkpoint": test_checkpoint}})


def fit(test_checkpoint: str, run_dir: Path) -> L.Trainer:
    trainer = L.Trainer(
        max_epochs=len(SCORES),
        callbacks=train.training_callbacks(config(test_checkpoint), run_dir),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(ScriptedScore(), train_dataloaders=loader(), val_dataloaders=loader())
    return trainer


def saved_at(path: str | Path) -> tuple[int, int]:
    checkpoint = torch.load(path, weights_only=False)
    return checkpoint["epoch"], checkpoint["global_step"]


def test_last_checkpoint_is_the_last_epoch_and_best_the_best(tmp_path: Path) -> None:
    trainer = fit("best", tmp_path)
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["best.ckpt", "last.ckpt"]
    assert saved_at(checkpoints / "best.ckpt") == (0, BATCHES)
    assert saved_at(checkpoints / "last.ckpt") == (len(SCORES) - 1, len(SCORES) * BATCHES)
    assert train.tested_checkpoint(config("best"), trainer) == str(checkpoints / "best.ckpt")


def test_a_protocol_that_tests_the_last_checkpoint_gets_the_last_epoch(tmp_path: Path) -> None:
    trainer = fit("last", tmp_path)
    tested = train.tested_checkpoint(config("last"), trainer)
    assert tested == str(tmp_path / "checkpoints" / "last.ckpt")
    assert saved_at(tested) == (len(SCORES) - 1, len(SCORES) * BATCHES)
