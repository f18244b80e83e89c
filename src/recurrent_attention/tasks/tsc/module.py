"""LightningModule for classification: cross-entropy training; accuracy and loss on val and test."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.base import ExactEvaluationModule, OptimizerFactory, SchedulerFactory
from recurrent_attention.tasks.tsc.head import Classifier
from recurrent_attention.tasks.tsc.metrics import ClassificationTotals
from recurrent_attention.tasks.tsc.protocol import DEFAULT, TSCProtocol
from recurrent_attention.tasks.tsc.selection import TiesImprove


class ClassificationModule(ExactEvaluationModule):
    """Logs ``val/acc``, ``val/loss`` per validation epoch and ``test/acc``, ``test/loss`` (acc in %).

    Where the protocol selects on ``val/tslib_improvements`` (``reference``) it also logs that
    count (:mod:`.selection`), so that an equal accuracy counts as an improvement.
    """

    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        n_channels: int,
        n_classes: int,
        max_len: int,
        head: str = "flatten",
        dropout: float = 0.1,
        scheduler: SchedulerFactory | None = None,
        rules: TSCProtocol = DEFAULT,
        embedding: str = "linear",
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="epoch")
        self.model = Classifier(backbone, n_channels, n_classes, max_len, head, dropout, embedding)
        self.totals = ClassificationTotals()
        self.rules = rules
        self.selection = TiesImprove()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch["x"], batch["mask"])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = F.cross_entropy(self(batch), batch["y"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["y"]))
        return loss

    def new_totals(self) -> ClassificationTotals:
        return ClassificationTotals()

    def accumulate(self, batch: dict[str, Tensor], stage: str) -> None:
        self.totals.update(self(batch), batch["y"])

    def end_split(self, stage: str) -> None:
        super().end_split(stage)
        if stage == "val" and self.rules.selection_metric == "val/tslib_improvements":
            if not self.trainer.sanity_checking:
                self.selection.update(self.totals.compute()["acc"])
            self.log("val/tslib_improvements", float(self.selection.improvements))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["tslib_selection"] = self.selection.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        if "tslib_selection" in checkpoint:
            self.selection.load_state_dict(checkpoint["tslib_selection"])
