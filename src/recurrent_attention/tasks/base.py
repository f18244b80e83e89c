"""What every task's LightningModule shares: a backbone, and an optimiser/scheduler from Hydra partials."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.models.base import Backbone

OptimizerFactory = Callable[..., torch.optim.Optimizer]
SchedulerFactory = Callable[[torch.optim.Optimizer], Any]


class TaskModule(L.LightningModule):
    """Base class: subclasses add a head, ``training_step``, ``validation_step``, ``test_step``.

    ``optimizer`` and ``scheduler`` are ``functools.partial`` objects (``_partial_: true`` in the
    config) so that the optimiser is built over this module's parameters, not the config's.
    ``scheduler_interval`` is ``epoch`` or ``step``, as Lightning understands it.
    """

    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        scheduler: SchedulerFactory | None = None,
        scheduler_interval: str = "epoch",
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.scheduler_interval = scheduler_interval

    def configure_optimizers(self) -> Any:
        optimizer = self.optimizer_factory(self.parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval},
        }

    def backbone_parameter_count(self) -> int:
        return sum(p.numel() for p in self.backbone.parameters())


def make_loader(
    dataset: Dataset,
    batch_size: int | None,
    shuffle: bool,
    num_workers: int = 0,
    drop_last: bool = False,
    collate_fn: Callable | None = None,
) -> DataLoader:
    """The DataLoader every datamodule uses (``batch_size=None``: items are batches already)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        collate_fn=collate_fn,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )
