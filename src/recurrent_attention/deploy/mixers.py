"""Each attention's one-token eval step on weights laid out once (``addmm`` operands, transposed).

At one token most of a step's cost is per-operation overhead, so a deployed step reads no module
attributes: :func:`lean_mixer` binds a mixer's laid-out weights to its step function, which
:mod:`~recurrent_attention.deploy.lean` calls inside the flat residual step. Tests hold each equal
to the mixer's own ``step``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.deploy.kv_cache import append
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.models.base import State
from recurrent_attention.models.linear_attention import LinearAttention, feature_map
from recurrent_attention.models.transformer import CausalSelfAttention, KVCache
from recurrent_attention.ops import ScanState, attention_step
from recurrent_attention.ops.linear_forms import EPS, LinearState

Mixer = Callable[[Tensor, State], tuple[Tensor, State]]
"""A one-token mixer: ``(x (B, d_model), state) -> (mixed (B, d_model), state)``."""

LaidOut = tuple[Tensor, Tensor, Tensor, Tensor, tuple[int, int]]
"""``(W_in^T, b_in, W_out^T, b_out, (heads, d_head))``: a mixer's input and output projections."""


def addmm_weights(weight: Tensor, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """``(W^T, b)`` for ``torch.addmm(b, x, W^T)`` from an ``(out, in)`` weight (a zero bias for None)."""
    return weight.t().contiguous(), weight.new_zeros(weight.shape[0]) if bias is None else bias


def aaren_weights(mixer: AarenAttention) -> LaidOut:
    """Aaren's values-and-scores projection (values, then scores, one ``addmm``) and its output."""
    out = mixer.proj.out_proj
    return (
        *addmm_weights(*mixer.value_score_projection()),
        *addmm_weights(out.weight, out.bias),
        (mixer.proj.n_heads, mixer.proj.d_head),
    )


def aaren_mix(
    mix_weight: Tensor,
    mix_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    state: ScanState,
) -> tuple[Tensor, ScanState]:
    """:meth:`AarenAttention.step` on :func:`aaren_weights`."""
    projected = torch.addmm(mix_bias, x, mix_weight)
    d_model = mix_weight.shape[0]
    values = projected[:, :d_model].view(-1, *head_shape)
    # Scores of finite tokens are finite: the state update needs no guard against -inf.
    out, state = attention_step(projected[:, d_model:], values, state, finite_scores=True)
    return torch.addmm(out_bias, out.view(-1, d_model), out_weight), state


def attention_weights(mixer: CausalSelfAttention) -> LaidOut:
    """Softmax attention's fused q/k/v projection (one ``addmm``) and its output."""
    p = mixer.proj
    qkv = addmm_weights(p.qkv.weight, p.qkv.bias)
    return (*qkv, *addmm_weights(p.out_proj.weight, p.out_proj.bias), (p.n_heads, p.d_head))


def heads_qkv(qkv_bias: Tensor, x: Tensor, qkv_weight: Tensor, head_shape: tuple[int, int]) -> list[Tensor]:
    """A token's queries, keys and values, each ``(B, heads, d_head)``, from one ``addmm`` with the
    fused q/k/v projection laid out by :func:`attention_weights`."""
    return torch.addmm(qkv_bias, x, qkv_weight).view(x.shape[0], 3, *head_shape).unbind(1)


def attention_mix(
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    cache: KVCache,
) -> tuple[Tensor, KVCache]:
    """:meth:`CausalSelfAttention.step` on :func:`attention_weights`: the token written into the
    cache in place (:func:`~recurrent_attention.deploy.kv_cache.append`), and one query attending to
    every cached key (no mask needed)."""
    q, k, v = heads_qkv(qkv_bias, x, qkv_weight, head_shape)
    cache = append(cache, k, v)
    out = F.scaled_dot_product_attention(q.unsqueeze(-2), *cache.tokens())
    return torch.addmm(out_bias, out.view(x.shape[0], -1), out_weight), cache


def linear_mix(
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    state: LinearState,
) -> tuple[Tensor, LinearState]:
    """:meth:`LinearAttention.step` on :func:`attention_weights` (the same fused q/k/v): the state
    absorbs ``phi(k) v^T`` in one batched outer product, the query reads ``S`` and ``z`` in one
    batched product each. The state is new tensors, never written in place, so one state can be
    stepped twice (a branch), as the model's step allows."""
    batch, (heads, d_head) = x.shape[0], head_shape
    q, k, v = heads_qkv(qkv_bias, x, qkv_weight, head_shape)
    rows = batch * heads
    q, k = feature_map(q).view(rows, 1, d_head), feature_map(k).view(rows, d_head, 1)
    s = torch.baddbmm(state.s.reshape(rows, d_head, d_head), k, v.reshape(rows, 1, d_head))
    z = state.z.reshape(rows, d_head, 1) + k
    out = torch.bmm(q, s).div_(torch.bmm(q, z).add_(EPS))  # (rows, 1, d_head)
    new_state = LinearState(s.view(batch, heads, d_head, d_head), z.view(batch, heads, d_head))
    return torch.addmm(out_bias, out.view(batch, -1), out_weight), new_state


LEAN_MIXERS: dict[type, tuple[Callable[[nn.Module], LaidOut], Callable[..., tuple[Tensor, State]]]] = {
    AarenAttention: (aaren_weights, aaren_mix),
    CausalSelfAttention: (attention_weights, attention_mix),
    LinearAttention: (attention_weights, linear_mix),
}
"""The mixers with a lean step (by exact type: a subclass may compute something else)."""


def has_lean_mixer(mixer: nn.Module) -> bool:
    return type(mixer) in LEAN_MIXERS


def lean_mixer(mixer: nn.Module) -> Mixer:
    """``mixer``'s step for a ``(B, d_model)`` token in eval mode, on its weights laid out now."""
    weights, mix = LEAN_MIXERS[type(mixer)]
    return partial(mix, *weights(mixer))
