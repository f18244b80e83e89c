"""Aaren: attention with a learned query per head, computed as a many-to-many RNN.

Each layer replaces causal self-attention by ``o_k = softmax(q·k_{1:k}) v_{1:k}`` with a query
``q`` that is a learned token (projected by the same query matrix a Transformer has), so the only
new parameters are one ``d_model`` vector per layer. The state per layer and head is ``(m, u, w)``
(:class:`~recurrent_attention.ops.ScanState`): constant size whatever the number of tokens.
Faster forms of the step for deployment wrap a trained model from :mod:`recurrent_attention.deploy`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack
from recurrent_attention.ops import (
    PATHS,
    ScanState,
    attention_step,
    compiled_value_score_projection,
    empty_state,
    prefix_attention,
)


class AarenAttention(nn.Module):
    """Prefix attention from a learned query; ``path`` picks scan, recurrent or chunked.

    The query is a parameter, so the scores never need the keys: per head,
    ``s = (x W_k^T + b_k)·q / sqrt(d_head) = x·(W_k^T q) / sqrt(d_head) + b_k·q / sqrt(d_head)``.

    ``scaled_scores`` (default True) keeps the Transformer's ``1 / sqrt(d_head)``; False gives the
    paper's ``s_i = dot(q, k_i)`` (Aaren section 3). With a learned query the two are one model
    reparametrised (the query absorbs the factor), but they start from different scores, so they
    train differently: the scaled form starts where a softmax Transformer's scores start.
    :meth:`torch_value_score_projection` stacks those ``n_heads`` rows under the value projection's,
    built from the fused q/k/v parameter and the query (so the gradients reach ``W_q``, ``W_k``,
    their biases and the query exactly as through the unfused form): values and scores are then one
    matrix product of the tokens, in :meth:`forward` as in :meth:`step`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        path: str = "chunked",
        qkv_bias: bool = True,
        scaled_scores: bool = True,
    ) -> None:
        super().__init__()
        if path not in PATHS:
            raise ValueError(f"model.path={path!r}: choose one of {sorted(PATHS)}")
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.query = nn.Parameter(torch.randn(d_model) * d_model**-0.5)
        self.path, self.scaled_scores = path, scaled_scores

    def value_score_projection(self) -> tuple[Tensor, Tensor | None]:
        """:meth:`torch_value_score_projection`, by its compiled form where one applies (CPU float32/64:
        :func:`~recurrent_attention.ops.compiled_value_score_projection`, equal to rounding)."""
        proj = self.proj
        if not self.scaled_scores:  # the compiled kernel implements the scaled form
            return self.torch_value_score_projection()
        compiled = compiled_value_score_projection(self.query, proj.qkv.weight, proj.qkv.bias, proj.n_heads)
        return self.torch_value_score_projection() if compiled is None else compiled

    def torch_value_score_projection(self) -> tuple[Tensor, Tensor | None]:
        """``(W, b)``, ``W (d_model + H, d_model)``: values then scores ``(..., d_model + H) = x W^T + b``;
        ``b`` is None without ``qkv_bias``."""
        heads, d_head = self.proj.n_heads, self.proj.d_head
        (query_weight, query_bias), (key_weight, key_bias), (value_weight, value_bias) = self.proj.parts()
        q = F.linear(self.query, query_weight, query_bias).view(heads, d_head)
        if self.scaled_scores:
            q = q * d_head**-0.5
        weight = torch.cat([value_weight, (key_weight.view(heads, d_head, -1) * q.unsqueeze(-1)).sum(1)])
        if value_bias is None:
            return weight, None
        return weight, torch.cat([value_bias, (key_bias.view(heads, d_head) * q).sum(-1)])

    def _scores_and_values(self, x: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
        """Scores ``(..., H, N)`` and values ``(..., H, N, d_head)`` of tokens ``x (..., N, d_model)``
        from one product with the values-and-scores projection ``(weight, bias)``."""
        values, scores = F.linear(x, weight, bias).split([self.proj.d_model, self.proj.n_heads], dim=-1)
        return scores.transpose(-1, -2), self.proj.split_heads(values)

    def forward(self, x: Tensor, state: ScanState | None = None) -> tuple[Tensor, ScanState]:
        scores, v = self._scores_and_values(x, *self.value_score_projection())
        out, state = prefix_attention(scores, v, state, self.path)
        return self.proj.merge_heads(out), state

    def step(self, x_t: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
        """One token ``x_t (B, d_model)``: the recurrence ``state ⊕ (s_t, 1, v_t)`` and its read-out."""
        scores, values = self._scores_and_values(x_t.unsqueeze(-2), *self.value_score_projection())
        out, state = attention_step(scores[..., 0], values[..., 0, :], state)
        return self.proj.out_proj(out.flatten(-2)), state

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
        scaled_scores: bool = True,
    ) -> None:
        # attn_dropout is accepted so model configs stay interchangeable; Aaren has no attention
        # matrix to drop (the residual and feed-forward dropout still apply).
        del attn_dropout
        mixers = [AarenAttention(d_model, n_heads, path, qkv_bias, scaled_scores) for _ in range(n_layers)]
        super().__init__(mixers, d_model, d_ff, dropout, activation, norm_first, final_norm, norm_eps)
