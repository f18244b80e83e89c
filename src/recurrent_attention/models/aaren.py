"""Aaren: attention with a learned query per head, computed as a many-to-many RNN.

Each layer replaces causal self-attention by ``o_k = softmax(q·k_{1:k}) v_{1:k}`` with a query
``q`` that is a learned token (projected by the same query matrix a Transformer has), so the only
new parameters are one ``d_model`` vector per layer. The state per layer and head is ``(m, u, w)``
(:class:`~recurrent_attention.ops.ScanState`): constant size whatever the number of tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack
from recurrent_attention.ops import PATHS, ScanState, attention_step, empty_state, prefix_attention


class AarenAttention(nn.Module):
    """Prefix attention from a learned query; ``path`` picks scan, recurrent or chunked."""

    def __init__(self, d_model: int, n_heads: int, path: str = "chunked", qkv_bias: bool = True) -> None:
        super().__init__()
        if path not in PATHS:
            raise ValueError(f"model.path={path!r}: choose one of {sorted(PATHS)}")
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.query = nn.Parameter(torch.randn(d_model) * d_model**-0.5)
        self.path = path

    def _scores_and_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Scores ``(..., H, N)`` and values ``(..., H, N, d_head)`` for tokens ``x (..., N, d_model)``."""
        q = self.proj.q_proj(self.query).unflatten(-1, (self.proj.n_heads, self.proj.d_head))  # (H, d_head)
        k = self.proj.split_heads(self.proj.k_proj(x))
        v = self.proj.split_heads(self.proj.v_proj(x))
        scores = torch.einsum("...hnd,hd->...hn", k, q) * self.proj.d_head**-0.5
        return scores, v

    def forward(self, x: Tensor, state: ScanState | None = None) -> tuple[Tensor, ScanState]:
        scores, v = self._scores_and_values(x)
        out, state = prefix_attention(scores, v, state, self.path)
        return self.proj.merge_heads(out), state

    def step(self, x_t: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
        scores, v = self._scores_and_values(x_t.unsqueeze(-2))
        out, state = attention_step(scores[..., 0], v[..., 0, :], state)
        return self.proj.merge_heads(out.unsqueeze(-2)).squeeze(-2), state

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> ScanState:
        dtype = torch.float64 if dtype == torch.float64 else torch.float32
        return empty_state((batch_size, self.proj.n_heads), self.proj.d_head, device, dtype)


class Aaren(LayerStack):
    """Stacked Aaren layers in the same residual blocks as :class:`~.transformer.Transformer`."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_layers: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "gelu",
        norm_first: bool = False,
        final_norm: bool = True,
        path: str = "chunked",
        attn_dropout: float | None = None,
        qkv_bias: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        # attn_dropout is accepted so model configs stay interchangeable; Aaren has no attention
        # matrix to drop (the residual and feed-forward dropout still apply).
        del attn_dropout
        mixers = [AarenAttention(d_model, n_heads, path, qkv_bias) for _ in range(n_layers)]
        super().__init__(mixers, d_model, d_ff, dropout, activation, norm_first, final_norm, norm_eps)
