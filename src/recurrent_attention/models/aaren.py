"""Aaren: attention with a learned query per head, computed as a many-to-many RNN.

Each layer replaces causal self-attention by ``o_k = softmax(q·k_{1:k}) v_{1:k}`` with a query
``q`` that is a learned token (projected by the same query matrix a Transformer has), so the only
new parameters are one ``d_model`` vector per layer. The state per layer and head is ``(m, u, w)``
(:class:`~recurrent_attention.ops.ScanState`): constant size whatever the number of tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.models.blocks import HeadProjections, LayerStack, ResidualBlock
from recurrent_attention.ops import PATHS, ScanState, attention_step, empty_state, native, prefix_attention


class AarenAttention(nn.Module):
    """Prefix attention from a learned query; ``path`` picks scan, recurrent or chunked.

    The query is a parameter, so the scores never need the keys: per head,
    ``s = (x W_k^T + b_k)·q / sqrt(d_head) = x·(W_k^T q) / sqrt(d_head) + b_k·q / sqrt(d_head)``,
    a ``d_model x n_heads`` projection (:meth:`score_projection`) built from the same parameters
    (so the gradients reach ``W_k``, ``b_k``, ``W_q``, ``b_q`` and the query exactly as before).
    :meth:`step` applies the value and score projections as one matrix; without gradients that
    matrix is built once and reused until a parameter changes.
    """

    def __init__(self, d_model: int, n_heads: int, path: str = "chunked", qkv_bias: bool = True) -> None:
        super().__init__()
        if path not in PATHS:
            raise ValueError(f"model.path={path!r}: choose one of {sorted(PATHS)}")
        self.proj = HeadProjections(d_model, n_heads, qkv_bias)
        self.query = nn.Parameter(torch.randn(d_model) * d_model**-0.5)
        self.path = path
        self._step_cache: tuple[tuple[Tensor, ...], list[int], tuple[Tensor, Tensor | None]] | None = None
        self.register_load_state_dict_post_hook(self._clear_step_cache)

    def score_projection(self) -> tuple[Tensor, Tensor | None]:
        """``(A, b)`` with scores ``(..., N, H) = x @ A + b``; ``b`` is None when ``k_proj`` has no bias.

        On CPU in float32/float64 this is one compiled call each way (:mod:`~recurrent_attention.ops.native`),
        whose parameters must then be of the query's dtype; :meth:`torch_score_projection` otherwise.
        """
        compiled = native.score_projection(self.query)
        if compiled is None:
            return self.torch_score_projection()
        q, k = self.proj.q_proj, self.proj.k_proj
        return compiled(self.query, q.weight, q.bias, k.weight, k.bias, self.proj.n_heads)

    def torch_score_projection(self) -> tuple[Tensor, Tensor | None]:
        """:meth:`score_projection` in PyTorch ops (any device and dtype; the reference in tests)."""
        heads, d_head = self.proj.n_heads, self.proj.d_head
        q = self.proj.q_proj(self.query).view(heads, d_head) * d_head**-0.5
        matrix = (self.proj.k_proj.weight.view(heads, d_head, -1) * q.unsqueeze(-1)).sum(1).t()
        bias = self.proj.k_proj.bias
        return matrix, None if bias is None else (bias.view(heads, d_head) * q).sum(-1)

    def _fused_step_projection(self) -> tuple[Tensor, Tensor | None]:
        """One ``(d_model + H) x d_model`` weight giving values then scores, cached when no grad.

        The cache holds the parameters it was built from and their version counters, so an
        in-place update (an optimiser step, ``load_state_dict``) rebuilds it; moving the module
        (``.to``, ``.double``) or loading with ``assign=True`` clears it.
        """
        if torch.is_grad_enabled():
            return self._build_fused_projection()
        cache = self._step_cache
        if cache is None or cache[1] != [p._version for p in cache[0]]:
            parameters = tuple(self.parameters())
            cache = self._step_cache = (
                parameters,
                [p._version for p in parameters],
                self._build_fused_projection(),
            )
        return cache[2]

    def _clear_step_cache(self, *_: object) -> None:
        self._step_cache = None

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> AarenAttention:
        self._clear_step_cache()
        return super()._apply(fn, recurse)

    def _build_fused_projection(self) -> tuple[Tensor, Tensor | None]:
        matrix, score_bias = self.score_projection()
        weight = torch.cat([self.proj.v_proj.weight, matrix.t()])
        value_bias = self.proj.v_proj.bias
        if value_bias is None and score_bias is None:
            return weight, None
        if value_bias is None:
            value_bias = score_bias.new_zeros(self.proj.v_proj.out_features)
        if score_bias is None:
            score_bias = value_bias.new_zeros(self.proj.n_heads)
        return weight, torch.cat([value_bias, score_bias])

    def _scores_and_values(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Scores ``(..., H, N)`` and values ``(..., H, N, d_head)`` for tokens ``x (..., N, d_model)``."""
        matrix, bias = self.score_projection()
        if bias is None:
            scores = x @ matrix
        else:
            scores = torch.addmm(bias, x.flatten(0, -2), matrix).unflatten(0, x.shape[:-1])
        v = self.proj.split_heads(self.proj.v_proj(x))
        return scores.transpose(-1, -2), v

    def forward(self, x: Tensor, state: ScanState | None = None) -> tuple[Tensor, ScanState]:
        scores, v = self._scores_and_values(x)
        out, state = prefix_attention(scores, v, state, self.path)
        return self.proj.merge_heads(out), state

    def step(self, x_t: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
        weight, bias = self._fused_step_projection()
        projected = F.linear(x_t, weight, bias)  # (B, d_model + H): values, then scores
        d_model = weight.shape[1]
        values = projected[..., :d_model].unflatten(-1, (self.proj.n_heads, self.proj.d_head))
        out, state = attention_step(projected[..., d_model:], values, state)
        return self.proj.out_proj(out.flatten(-2)), state

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> ScanState:
        dtype = torch.float64 if dtype == torch.float64 else torch.float32
        return empty_state((batch_size, self.proj.n_heads), self.proj.d_head, device, dtype)


class _InferenceBlock(NamedTuple):
    """One residual block laid out for a one-token step: ``addmm`` weights (transposed, biases
    never None), layer-norm arguments and plain attributes, so the step reads no module attributes."""

    mix_weight: Tensor  # (d_model, d_model + H): values, then scores
    mix_bias: Tensor
    out_weight: Tensor
    out_bias: Tensor
    ff_in_weight: Tensor
    ff_in_bias: Tensor
    ff_out_weight: Tensor
    ff_out_bias: Tensor
    norm_mix: tuple
    norm_ff: tuple
    activation: Callable[[Tensor], Tensor]
    norm_first: bool
    head_shape: tuple[int, int]


def _weight_and_bias(weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    return weight.t().contiguous(), weight.new_zeros(weight.shape[0]) if bias is None else bias


def _norm_arguments(norm: nn.LayerNorm) -> tuple:
    return (norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def _inference_block(block: ResidualBlock) -> _InferenceBlock:
    weight, bias = block.mixer._build_fused_projection()
    proj = block.mixer.proj
    expand, activation, _, contract = block.ff
    return _InferenceBlock(
        *_weight_and_bias(weight, bias),
        *_weight_and_bias(proj.out_proj.weight, proj.out_proj.bias),
        *_weight_and_bias(expand.weight, expand.bias),
        *_weight_and_bias(contract.weight, contract.bias),
        _norm_arguments(block.norm_mix),
        _norm_arguments(block.norm_ff),
        activation.forward,  # the module's hooks are not run on this path; it has none
        block.norm_first,
        (proj.n_heads, proj.d_head),
    )


class Aaren(LayerStack):
    """Stacked Aaren layers in the same residual blocks as :class:`~.transformer.Transformer`.

    Without gradients and in eval mode, :meth:`step` runs the blocks as a flat list of ``addmm``,
    layer norms and the state update on weights laid out once (and relaid when a parameter
    changes): per-token latency is what Aaren is for, and at one token most of the cost is
    per-operation overhead. Tests hold it equal to the generic block-by-block step.
    """

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
        self._inference_cache: (
            tuple[tuple[Tensor, ...], list[int], list[_InferenceBlock], tuple | None] | None
        ) = None
        self.register_load_state_dict_post_hook(self._clear_inference_cache)

    def _clear_inference_cache(self, *_: object) -> None:
        self._inference_cache = None

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Aaren:
        self._clear_inference_cache()
        return super()._apply(fn, recurse)

    def _inference_layout(self) -> tuple[list[_InferenceBlock], tuple | None]:
        """Every block's :class:`_InferenceBlock` and the final layer norm's arguments (None: no norm)."""
        cache = self._inference_cache
        if cache is None or cache[1] != [p._version for p in cache[0]]:
            parameters = tuple(self.parameters())
            blocks = [_inference_block(block) for block in self.blocks]
            final = _norm_arguments(self.norm) if isinstance(self.norm, nn.LayerNorm) else None
            cache = self._inference_cache = (parameters, [p._version for p in parameters], blocks, final)
        return cache[2], cache[3]

    def step(self, x_t: Tensor, state: list[ScanState]) -> tuple[Tensor, list[ScanState]]:
        if self.training or torch.is_grad_enabled() or x_t.dim() != 2:
            return super().step(x_t, state)
        blocks, final_norm = self._inference_layout()
        new_states = []
        for weights, layer_state in zip(blocks, state, strict=True):
            x_t, layer_state = self._inference_block_step(weights, x_t, layer_state)
            new_states.append(layer_state)
        return (x_t if final_norm is None else F.layer_norm(x_t, *final_norm)), new_states

    @staticmethod
    def _inference_block_step(w: _InferenceBlock, x: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
        """:meth:`ResidualBlock.step` with :meth:`AarenAttention.step` inlined (eval: no dropout)."""
        h = F.layer_norm(x, *w.norm_mix) if w.norm_first else x
        projected = torch.addmm(w.mix_bias, h, w.mix_weight)
        d_model = w.mix_weight.shape[0]
        values = projected[:, :d_model].view(-1, *w.head_shape)
        # Scores of finite tokens are finite: the state update needs no guard against -inf.
        out, state = attention_step(projected[:, d_model:], values, state, finite_scores=True)
        mixed = torch.addmm(w.out_bias, out.view(-1, d_model), w.out_weight)
        if w.norm_first:
            x = x + mixed
            hidden = w.activation(torch.addmm(w.ff_in_bias, F.layer_norm(x, *w.norm_ff), w.ff_in_weight))
            return torch.addmm(w.ff_out_bias, hidden, w.ff_out_weight).add_(x), state
        x = F.layer_norm(mixed.add_(x), *w.norm_mix)
        hidden = w.activation(torch.addmm(w.ff_in_bias, x, w.ff_in_weight))
        return F.layer_norm(torch.addmm(w.ff_out_bias, hidden, w.ff_out_weight).add_(x), *w.norm_ff), state
