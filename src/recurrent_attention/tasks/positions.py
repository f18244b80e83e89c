"""Fixed sinusoidal position encodings (Vaswani et al. 2017), as TSLib's PositionalEmbedding.

The heads of TSF, TSC and LM add them to their embeddings (LM only where no model gives positions).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def sinusoidal_positions(n_positions: int, d_model: int) -> Tensor:
    """``(n_positions, d_model)``: sin on even dimensions, cos on odd ones."""
    position = torch.arange(n_positions, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table
