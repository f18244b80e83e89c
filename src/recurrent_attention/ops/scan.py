"""Attention with one query per head computed as a many-to-many RNN (Aaren, Feng et al. 2024, §3.2).

For a fixed query, per-token scores ``s_i`` and values ``v_i``, every prefix output
``o_k = softmax(s_{1:k}) · v_{1:k}`` is a reduction of the triples ``(m, u, w)``:
running max, running sum of ``exp(s - m)`` and running ``exp(s - m)``-weighted sum of values.
The paper's operator ``⊕`` (:func:`combine`) combines two such triples and is associative, so the
outputs can be computed in ways that must agree. This module holds the paper's two forms:

- :func:`attention_scan`: a parallel (Hillis-Steele) prefix scan with ``⊕`` — O(N log N) work.
- :func:`attention_recurrent`: the O(1)-state recurrence, one token at a time (:func:`attention_step`).

The fast path that training runs, :func:`~recurrent_attention.ops.prefix_attention.attention_chunked`,
is built from these pieces plus kernels with hand-written backwards (:mod:`.prefix_attention`).

Every form computes in float32 (or float64 if given float64), under ``torch.autocast`` too (they
have no matrix product for it to cast), and returns the values' dtype, so fp16/bf16 inputs and
scores of magnitude 1e4 give no NaN or inf. Shapes: scores ``(..., N)``,
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


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype every form computes in for values of ``dtype``: float64 stays, all else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def rescale_factor(m_old: Tensor, m_new: Tensor) -> Tensor:
    """``exp(m_old - m_new)``, defined as 0 where both are -inf (two empty sets), never NaN."""
    return torch.exp(m_old - m_new.clamp_min(torch.finfo(m_new.dtype).min))


def combine(a: ScanState, b: ScanState) -> ScanState:
    """The paper's associative operator: ``(m_A, u_A, w_A) ⊕ (m_B, u_B, w_B) = (m_AuB, u_AuB, w_AuB)``."""
    m = torch.maximum(a.m, b.m)
    scale_a, scale_b = rescale_factor(a.m, m), rescale_factor(b.m, m)
    return ScanState(
        m=m,
        u=a.u * scale_a + b.u * scale_b,
        w=a.w * scale_a.unsqueeze(-1) + b.w * scale_b.unsqueeze(-1),
    )


def _readout(state: ScanState) -> Tensor:
    """``o = w / u``; an empty prefix (u = 0) reads out zeros instead of NaN."""
    u = state.u.unsqueeze(-1)
    return state.w / torch.where(u > 0, u, 1.0)


def inclusive_scan(elements: ScanState) -> ScanState:
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


def final_state(prefixes: ScanState) -> ScanState:
    """The last prefix of a scan: the state after every token."""
    return ScanState(prefixes.m[..., -1], prefixes.u[..., -1], prefixes.w[..., -1, :])


def prepend_state(prefixes: ScanState, state: ScanState) -> ScanState:
    """Fold a carried state (everything seen before this call) into every prefix."""
    carried = ScanState(state.m.unsqueeze(-1), state.u.unsqueeze(-1), state.w.unsqueeze(-2))
    return combine(carried, prefixes)


def _as_compute(scores: Tensor, values: Tensor, state: ScanState | None) -> tuple[Tensor, Tensor, ScanState]:
    dtype = compute_dtype(values.dtype)
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
    prefixes = prepend_state(inclusive_scan(leaves), state)
    return _readout(prefixes).to(out_dtype), final_state(prefixes)


def attention_step(
    score: Tensor, value: Tensor, state: ScanState, finite_scores: bool = False
) -> tuple[Tensor, ScanState]:
    """One token of the recurrence: ``score (...)``, ``value (..., D)`` -> output ``(..., D)``.

    ``state ⊕ (score, 1, value)`` written out in a dozen element-wise ops, the per-token cost of
    Aaren's inference. The max is clamped to the lowest finite number so that an empty state
    meeting a score of -inf rescales by ``exp(-inf) = 0`` instead of NaN; after any finite score
    ``u >= 1`` (the max's own weight is 1), so the read-out divides an empty state's 0 by 1 instead
    of 0 (by 1, not by the smallest float, so that its gradient stays finite).
    ``finite_scores=True`` (scores computed from finite tokens) skips both guards.
    """
    out_dtype = value.dtype
    dtype = compute_dtype(value.dtype)
    if value.dtype != dtype or score.dtype != dtype or state.w.dtype != dtype:
        score, value, state = score.to(dtype), value.to(dtype), ScanState(*(t.to(dtype) for t in state))
    m = torch.maximum(state.m, score)
    finite_m = m if finite_scores else m.clamp_min(torch.finfo(dtype).min)
    old_scale, new_scale = torch.exp(state.m - finite_m), torch.exp(score - finite_m)
    u = torch.addcmul(new_scale, state.u, old_scale)
    w = torch.addcmul(value * new_scale.unsqueeze(-1), state.w, old_scale.unsqueeze(-1))
    new_state = ScanState(m, u, w)
    out = w / u.unsqueeze(-1) if finite_scores else _readout(new_state)
    return (out if out_dtype == dtype else out.to(out_dtype)), new_state


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
