"""The causal forecasting model shared by every backbone (docs/protocols.md, TSF).

The backbone reads the ``seq_len`` normalised inputs followed by one placeholder token per future
step (zero value + that step's time features + its position); the outputs at the placeholder
positions are projected to the channels. Inputs are normalised per window (Liu et al. 2022:
subtract the mean, divide by sqrt(var + 1e-5), both detached) and outputs de-normalised.
The value embedding is a per-token linear map: TSLib's circular convolution would leak the
future into the past, which a causal backbone must not see.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.positions import sinusoidal_positions


class Forecaster(nn.Module):
    def __init__(
        self,
        backbone: Backbone,
        n_channels: int,
        n_time_features: int,
        seq_len: int,
        pred_len: int,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        d_model = backbone.d_model
        self.backbone = backbone
        self.seq_len, self.pred_len = seq_len, pred_len
        self.value_embedding = nn.Linear(n_channels, d_model)
        self.time_embedding = nn.Linear(n_time_features, d_model, bias=False)
        self.register_buffer("positions", sinusoidal_positions(seq_len + pred_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(d_model, n_channels)

    def forward(self, x: Tensor, x_mark: Tensor, y_mark: Tensor) -> Tensor:
        """``x (B, seq_len, C)``, marks ``(B, ·, F)`` -> forecast ``(B, pred_len, C)`` on x's scale."""
        mean = x.mean(dim=1, keepdim=True).detach()
        std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + 1e-5).detach()
        placeholders = x.new_zeros(x.shape[0], self.pred_len, x.shape[2])
        values = torch.cat([(x - mean) / std, placeholders], dim=1)
        marks = torch.cat([x_mark, y_mark], dim=1)
        tokens = self.value_embedding(values) + self.time_embedding(marks) + self.positions
        hidden, _ = self.backbone(self.dropout(tokens))
        return self.projection(hidden[:, -self.pred_len :]) * std + mean
