"""What every task's LightningModule shares: a backbone, and an optimiser/scheduler from Hydra partials."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

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
        scheduler = self.build_scheduler(optimizer)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": self.scheduler_interval},
        }

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> Any:
        """The scheduler partial applied to the optimiser; families needing more arguments override this."""
        return self.scheduler_factory(optimizer)

    def on_train_epoch_start(self) -> None:
        """Log the learning rate this epoch trains with: ``train/lr``, one value per epoch in metrics.csv."""
        rate = self.trainer.optimizers[0].param_groups[0]["lr"]
        self.log("train/lr", rate, on_step=False, on_epoch=True)


class SplitTotals(Protocol):
    """Running sums over a whole split that turn into metrics once the split is done."""

    def compute(self) -> dict[str, float]: ...


class ExactEvaluationModule(TaskModule):
    """Validation and test metrics accumulated over every item of the split, logged once per epoch.

    Lightning's epoch means average batch means; accuracy, NLL per event or perplexity need exact
    totals instead. Subclasses say how totals start (:meth:`new_totals`) and how one batch folds in
    (:meth:`accumulate`); the hooks below are the same for every family.
    """

    totals: SplitTotals

    def new_totals(self) -> SplitTotals:
        raise NotImplementedError

    def accumulate(self, batch: Any, stage: str) -> None:
        raise NotImplementedError

    def computed_totals(self) -> dict[str, float]:
        return self.totals.compute()

    def in_progress_bar(self, stage: str, name: str) -> bool:
        return stage == "val"

    def start_split(self, stage: str) -> None:
        self.totals = self.new_totals()

    def end_split(self, stage: str) -> None:
        for name, value in self.computed_totals().items():
            self.log(f"{stage}/{name}", value, prog_bar=self.in_progress_bar(stage, name))

    def on_validation_epoch_start(self) -> None:
        self.start_split("val")

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.accumulate(batch, "val")

    def on_validation_epoch_end(self) -> None:
        self.end_split("val")

    def on_test_epoch_start(self) -> None:
        self.start_split("test")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.accumulate(batch, "test")

    def on_test_epoch_end(self) -> None:
        self.end_split("test")


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
