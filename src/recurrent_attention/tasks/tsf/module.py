"""LightningModule for forecasting: MSE training; exact MSE/MAE over every validation and test window."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.base import ExactEvaluationModule, OptimizerFactory, SchedulerFactory
from recurrent_attention.tasks.tsf.head import Forecaster
from recurrent_attention.tasks.tsf.metrics import ErrorTotals


class ForecastModule(ExactEvaluationModule):
    """Logs ``val/loss`` (the MSE, the early-stopping monitor) and ``val/mae``; ``test/mse``, ``test/mae``."""

    def __init__(
        self,
        backbone: Backbone,
        optimizer: OptimizerFactory,
        n_channels: int,
        n_time_features: int,
        seq_len: int,
        pred_len: int,
        dropout: float = 0.1,
        scheduler: SchedulerFactory | None = None,
    ) -> None:
        super().__init__(backbone, optimizer, scheduler, scheduler_interval="epoch")
        self.model = Forecaster(backbone, n_channels, n_time_features, seq_len, pred_len, dropout)
        self.totals = ErrorTotals()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch["x"], batch["x_mark"], batch["y_mark"])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = F.mse_loss(self(batch), batch["y"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def new_totals(self) -> ErrorTotals:
        return ErrorTotals()

    def accumulate(self, batch: dict[str, Tensor], stage: str) -> None:
        self.totals.update(self(batch), batch["y"])

    def computed_totals(self, stage: str) -> dict[str, float]:
        metrics = self.totals.compute()
        if stage == "val":
            metrics["loss"] = metrics.pop("mse")
        return metrics
