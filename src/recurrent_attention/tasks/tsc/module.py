"""LightningModule for classification: cross-entropy training; accuracy and loss on val and test."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.base import ExactEvaluationModule, OptimizerFactory, SchedulerFactory
from recurrent_attention.tasks.tsc.head import Classifier
from recurrent_attention.tasks.tsc.metrics import ClassificationTotals


class ClassificationModule(ExactEvaluationModule):
    """Logs ``val/acc``, ``val/loss`` per validation epoch and ``test/acc``, ``test/loss`` (acc in %)."""

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
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="epoch")
        self.model = Classifier(backbone, n_channels, n_classes, max_len, head, dropout)
        self.totals = ClassificationTotals()

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
