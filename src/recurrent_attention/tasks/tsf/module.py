"""LightningModule for forecasting: MSE training, validation loss, exact test MSE/MAE."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.base import OptimizerFactory, SchedulerFactory, TaskModule
from recurrent_attention.tasks.tsf.head import Forecaster
from recurrent_attention.tasks.tsf.metrics import ErrorTotals


class ForecastModule(TaskModule):
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
        self.test_errors = ErrorTotals()

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        return self.model(batch["x"], batch["x_mark"], batch["y_mark"])

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        loss = F.mse_loss(self(batch), batch["y"])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        loss = F.mse_loss(self(batch), batch["y"])
        self.log("val/loss", loss, prog_bar=True, batch_size=len(batch["y"]))

    def on_test_epoch_start(self) -> None:
        self.test_errors = ErrorTotals()

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.test_errors.update(self(batch), batch["y"])

    def on_test_epoch_end(self) -> None:
        for name, value in self.test_errors.compute().items():
            self.log(f"test/{name}", value)
