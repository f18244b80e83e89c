"""The classifier around any backbone: TSLib's embedding and head, or a last-valid-token head.

Embedding (``embedding``), plus sinusoidal positions, then dropout:

- ``linear`` (default): a per-token linear value embedding. It sees one step, so a causal backbone
  stays causal and the same model can classify while streaming.
- ``tslib_conv`` (``compat=reference``): TSLib's ``TokenEmbedding``, a kernel-3 circular convolution
  without bias (Kaiming-normal, fan-in, leaky-ReLU gain), so each step also reads the previous and
  the next one, and the first and last steps read each other across the padding. Harmless when a
  case is classified once, whole (the benchmark); it cannot stream.

Heads (``head``):

- ``flatten`` (TSLib): GELU, dropout, zero the padded steps, flatten ``(max_len, d_model)``, linear.
- ``last``: the output at each case's last valid step, then GELU, dropout, linear. It depends only
  on steps up to that one, so a streaming backbone (``step``) can emit a class after every
  observation with the same weights (see :meth:`Classifier.classify`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from recurrent_attention.models.base import Backbone
from recurrent_attention.tasks.positions import sinusoidal_positions

HEADS = ("flatten", "last")
EMBEDDINGS = ("linear", "tslib_conv")


class CircularConvEmbedding(nn.Module):
    """TSLib's value embedding (layers/Embed.py ``TokenEmbedding``): ``(B, N, C) -> (B, N, d_model)``."""

    def __init__(self, n_channels: int, d_model: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(
            n_channels, d_model, kernel_size=3, padding=1, padding_mode="circular", bias=False
        )
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_in", nonlinearity="leaky_relu")

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class Classifier(nn.Module):
    def __init__(
        self,
        backbone: Backbone,
        n_channels: int,
        n_classes: int,
        max_len: int,
        head: str = "flatten",
        dropout: float = 0.1,
        embedding: str = "linear",
    ) -> None:
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"task.head={head!r}: choose one of {HEADS}")
        if embedding not in EMBEDDINGS:
            raise ValueError(f"task.embedding={embedding!r}: choose one of {EMBEDDINGS}")
        d_model = backbone.d_model
        self.backbone, self.head, self.max_len = backbone, head, max_len
        self.streamable = embedding == "linear"
        self.value_embedding = (
            nn.Linear(n_channels, d_model) if self.streamable else CircularConvEmbedding(n_channels, d_model)
        )
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model), persistent=False)
        self.embed_dropout = nn.Dropout(dropout)
        self.activation = nn.GELU()
        self.head_dropout = nn.Dropout(dropout)
        width = d_model * max_len if head == "flatten" else d_model
        self.projection = nn.Linear(width, n_classes)

    def embed(self, x: Tensor, start: int = 0) -> Tensor:
        """Tokens for values ``x (B, N, C)`` observed at positions ``start .. start + N - 1``."""
        if start + x.shape[1] > self.max_len:
            raise ValueError(f"a case of {start + x.shape[1]} steps exceeds task.max_len={self.max_len}")
        if not self.streamable and (start, x.shape[1]) != (0, self.max_len):
            raise ValueError(
                "task.embedding=tslib_conv reads the next step and wraps around the padded case: it embeds "
                f"whole cases of task.max_len={self.max_len} steps only, so it cannot stream; use "
                "task.embedding=linear"
            )
        return self.embed_dropout(self.value_embedding(x) + self.positions[start : start + x.shape[1]])

    def classify(self, hidden: Tensor) -> Tensor:
        """Logits from one backbone output per case, ``(B, d_model)`` (``head=last`` only)."""
        return self.projection(self.head_dropout(self.activation(hidden)))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """``x (B, max_len, C)`` right-padded, ``mask (B, max_len)`` true where valid -> logits ``(B, K)``."""
        hidden, _ = self.backbone(self.embed(x))
        if self.head == "last":
            last = mask.long().sum(dim=1).clamp(min=1) - 1
            return self.classify(hidden[torch.arange(len(hidden), device=hidden.device), last])
        features = self.head_dropout(self.activation(hidden)) * mask.unsqueeze(-1).to(hidden.dtype)
        return self.projection(features.flatten(1))
