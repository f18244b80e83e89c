"""The one interface every backbone keeps, so that any task head can use any backbone.

A backbone maps a causal sequence of embeddings ``(B, N, d_model)`` to outputs of the same shape
and carries a state between calls: ``forward`` processes many tokens in parallel (continuing from
a state when one is given), ``step`` processes one token and must agree with ``forward``.
Heads never look inside the state; they only pass it back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor, nn

State = Any


class Backbone(nn.Module, ABC):
    """Causal sequence model with a carried state. Subclasses set ``d_model``."""

    d_model: int

    @abstractmethod
    def forward(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """``x (B, N, d_model)`` -> ``(y (B, N, d_model), state after the last token)``."""

    @abstractmethod
    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State:
        """The state before any token."""

    @abstractmethod
    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        """One token ``x_t (B, d_model)`` -> ``(y_t (B, d_model), new state)``."""
