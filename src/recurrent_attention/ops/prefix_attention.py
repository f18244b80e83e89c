"""Attention with one query per head computed as a many-to-many RNN (Aaren, Feng et al. 2024, §3.2).

For a fixed query, per-token scores ``s_i`` and values ``v_i``, every prefix output
``o_k = softmax(s_{1:k}) · v_{1:k}`` is a reduction of the triples ``(m, u, w)``:
running max, running sum of ``exp(s - m)`` and running ``exp(s - m)``-weighted sum of values.
The paper's operator ``⊕`` combines two such triples and is associative, so the outputs can be
computed three ways that must agree:

- :func:`attention_scan`: a parallel (Hillis-Steele) prefix scan with ``⊕`` — O(N log N) work.
- :func:`attention_recurrent`: the O(1)-state recurrence, one token at a time (:func:`attention_step`).
- :func:`attention_chunked`: the fast path. Inside a chunk of ``C`` tokens the weights are a masked
  ``C x C`` matrix (``exp(s_i - m_k)`` for ``i <= k``, ``m_k`` the true prefix max, so no weight
  overflows and the largest one is exactly 1), applied with one batched matmul; the chunks are
  linked by a scan of their ``(m, u, w)`` summaries. O(N·C) work, all of it dense.

Every path computes in float32 (or float64 if given float64) and returns the values' dtype, so
fp16/bf16 inputs and scores of magnitude 1e4 give no NaN or inf. Shapes: scores ``(..., N)``,
values ``(..., N, D)``; a state holds ``m, u`` of shape ``(...)`` and ``w`` of shape ``(..., D)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class ScanState(NamedTuple):
    """The RNN state of one attention head: constant size whatever the number of tokens seen."""

    m: Tensor  # running max of the scores, (...)
    u: Tensor  # running sum of exp(s - m), (...)
    w: Tensor  # running sum of exp(s - m) * v, (..., D)


def empty_state(
    batch_shape: tuple[int, ...],
    d: int,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> ScanState:
    """The identity of ``⊕``: no token seen yet (max -inf, sums 0)."""
    return ScanState(
        m=torch.full(batch_shape, float("-inf"), device=device, dtype=dtype),
        u=torch.zeros(batch_shape, device=device, dtype=dtype),
        w=torch.zeros((*batch_shape, d), device=device, dtype=dtype),
    )


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rescale(m_old: Tensor, m_new: Tensor) -> Tensor:
    """``exp(m_old - m_new)``, defined as 0 where both are -inf (two empty sets), never NaN."""
    safe_new = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
    return torch.exp(m_old - safe_new)


def combine(a: ScanState, b: ScanState) -> ScanState:
    """The paper's associative operator: ``(m_A, u_A, w_A) ⊕ (m_B, u_B, w_B) = (m_AuB, u_AuB, w_AuB)``."""
    m = torch.maximum(a.m, b.m)
    scale_a, scale_b = _rescale(a.m, m), _rescale(b.m, m)
    return ScanState(
        m=m,
        u=a.u * scale_a + b.u * scale_b,
        w=a.w * scale_a.unsqueeze(-1) + b.w * scale_b.unsqueeze(-1),
    )


def _readout(state: ScanState) -> Tensor:
    """``o = w / u``; an empty prefix (u = 0) reads out zeros instead of NaN."""
    u = state.u.unsqueeze(-1)
    return state.w / torch.where(u > 0, u, torch.ones_like(u))


def _inclusive_scan(elements: ScanState) -> ScanState:
    """Hillis-Steele inclusive scan of ``⊕`` along the token axis (-1 for m/u, -2 for w)."""
    m, u, w = elements
    n = m.shape[-1]
    offset = 1
    while offset < n:
        earlier = ScanState(m[..., :-offset], u[..., :-offset], w[..., :-offset, :])
        later = ScanState(m[..., offset:], u[..., offset:], w[..., offset:, :])
        merged = combine(earlier, later)
        m = torch.cat([m[..., :offset], merged.m], dim=-1)
        u = torch.cat([u[..., :offset], merged.u], dim=-1)
        w = torch.cat([w[..., :offset, :], merged.w], dim=-2)
        offset *= 2
    return ScanState(m, u, w)


def _last(prefixes: ScanState) -> ScanState:
    return ScanState(prefixes.m[..., -1], prefixes.u[..., -1], prefixes.w[..., -1, :])


def _prepend_state(prefixes: ScanState, state: ScanState) -> ScanState:
    """Fold a carried state (everything seen before this call) into every prefix."""
    carried = ScanState(state.m.unsqueeze(-1), state.u.unsqueeze(-1), state.w.unsqueeze(-2))
    return combine(carried, prefixes)


def _as_compute(scores: Tensor, values: Tensor, state: ScanState | None) -> tuple[Tensor, Tensor, ScanState]:
    dtype = _compute_dtype(values.dtype)
    scores, values = scores.to(dtype), values.to(dtype)
    if state is None:
        state = empty_state(scores.shape[:-1], values.shape[-1], scores.device, dtype)
    else:
        state = ScanState(*(t.to(dtype) for t in state))
    return scores, values, state


def attention_scan(
    scores: Tensor, values: Tensor, state: ScanState | None = None
) -> tuple[Tensor, ScanState]:
    """All prefix outputs by the parallel prefix scan of ``⊕`` on the leaves ``(s_i, 1, v_i)``."""
    out_dtype = values.dtype
    scores, values, state = _as_compute(scores, values, state)
    leaves = ScanState(scores, torch.ones_like(scores), values)
    prefixes = _prepend_state(_inclusive_scan(leaves), state)
    return _readout(prefixes).to(out_dtype), _last(prefixes)


def attention_step(score: Tensor, value: Tensor, state: ScanState) -> tuple[Tensor, ScanState]:
    """One token of the recurrence: ``score (...)``, ``value (..., D)`` -> output ``(..., D)``."""
    out_dtype = value.dtype
    dtype = _compute_dtype(value.dtype)
    leaf = ScanState(score.to(dtype), torch.ones_like(score, dtype=dtype), value.to(dtype))
    new_state = combine(ScanState(*(t.to(dtype) for t in state)), leaf)
    return _readout(new_state).to(out_dtype), new_state


def attention_recurrent(
    scores: Tensor, values: Tensor, state: ScanState | None = None
) -> tuple[Tensor, ScanState]:
    """All prefix outputs by running :func:`attention_step` token after token (O(1) state)."""
    out_dtype = values.dtype
    scores, values, state = _as_compute(scores, values, state)
    outputs = []
    for k in range(scores.shape[-1]):
        out, state = attention_step(scores[..., k], values[..., k, :], state)
        outputs.append(out)
    return torch.stack(outputs, dim=-2).to(out_dtype), state


def attention_chunked(
    scores: Tensor, values: Tensor, state: ScanState | None = None, chunk_size: int = 32
) -> tuple[Tensor, ScanState]:
    """All prefix outputs with dense intra-chunk weights and a scan over chunk summaries."""
    out_dtype = values.dtype
    scores, values, state = _as_compute(scores, values, state)
    n = scores.shape[-1]
    c = max(1, min(chunk_size, n))
    n_chunks = -(-n // c)
    pad = n_chunks * c - n
    if pad:
        # Padding goes after the last token, so it never reaches an earlier output.
        scores = torch.nn.functional.pad(scores, (0, pad), value=float("-inf"))
        values = torch.nn.functional.pad(values, (0, 0, 0, pad))
    s = scores.unflatten(-1, (n_chunks, c))  # (..., n_chunks, C)
    v = values.unflatten(-2, (n_chunks, c))  # (..., n_chunks, C, D)

    # The stabiliser cancels exactly in w / u, so it carries no gradient.
    local_max = torch.cummax(s.detach(), dim=-1).values  # prefix max inside each chunk
    chunk_max = local_max[..., -1]
    chunk_weights = torch.exp(s - torch.where(torch.isneginf(chunk_max), 0.0, chunk_max).unsqueeze(-1))
    summaries = ScanState(chunk_max, chunk_weights.sum(-1), (chunk_weights.unsqueeze(-2) @ v).squeeze(-2))
    inclusive = _prepend_state(_inclusive_scan(summaries), state)
    # Carry into chunk j = everything before it: the state, then chunks 0..j-1.
    carry = ScanState(
        torch.cat([state.m.unsqueeze(-1), inclusive.m[..., :-1]], dim=-1).detach(),
        torch.cat([state.u.unsqueeze(-1), inclusive.u[..., :-1]], dim=-1),
        torch.cat([state.w.unsqueeze(-2), inclusive.w[..., :-1, :]], dim=-2),
    )

    # Row k of a chunk weighs its tokens i <= k by exp(s_i - m_k) and the carry by exp(m_carry - m_k),
    # m_k being the true prefix max: the carry is one more "token" (column C) whose value is carry.w.
    prefix_max = torch.maximum(local_max, carry.m.unsqueeze(-1))  # (..., n_chunks, C)
    safe_max = torch.where(torch.isneginf(prefix_max), 0.0, prefix_max)
    future = torch.ones(c, c, dtype=torch.bool, device=s.device).triu(1)
    token_logits = (s.unsqueeze(-2) - safe_max.unsqueeze(-1)).masked_fill(future, float("-inf"))
    carry_logits = (carry.m.unsqueeze(-1) - safe_max).unsqueeze(-1)
    weights = torch.exp(torch.cat([token_logits, carry_logits], dim=-1))  # (..., n_chunks, C, C + 1)
    denominator = weights[..., :c].sum(-1) + weights[..., c] * carry.u.unsqueeze(-1)
    weights = weights / torch.where(denominator > 0, denominator, 1.0).unsqueeze(-1)
    out = weights @ torch.cat([v, carry.w.unsqueeze(-2)], dim=-2)  # (..., n_chunks, C, D)
    out = out.flatten(-3, -2)[..., :n, :]
    return out.to(out_dtype), _last(inclusive)


PATHS = {"scan": attention_scan, "recurrent": attention_recurrent, "chunked": attention_chunked}


def prefix_attention(
    scores: Tensor, values: Tensor, state: ScanState | None = None, path: str = "chunked"
) -> tuple[Tensor, ScanState]:
    """Dispatch to one of the three equivalent paths by name (``scan``, ``recurrent``, ``chunked``)."""
    try:
        fn = PATHS[path]
    except KeyError:
        raise ValueError(f"unknown prefix-attention path {path!r}; choose one of {sorted(PATHS)}") from None
    return fn(scores, values, state)
