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
  linked by a scan of their ``(m, u, w)`` summaries. O(N·C) work, all of it dense; a hand-written
  backward (:class:`_ChunkLocalAttention`) keeps no ``C x C`` matrix between forward and backward.

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
    return torch.exp(m_old - m_new.clamp_min(torch.finfo(m_new.dtype).min))


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


def attention_step(
    score: Tensor, value: Tensor, state: ScanState, finite_scores: bool = False
) -> tuple[Tensor, ScanState]:
    """One token of the recurrence: ``score (...)``, ``value (..., D)`` -> output ``(..., D)``.

    ``state ⊕ (score, 1, value)`` written out in a dozen element-wise ops, the per-token cost of
    Aaren's inference. The max is clamped to the lowest finite number so that an empty state
    meeting a score of -inf rescales by ``exp(-inf) = 0`` instead of NaN; after any finite score
    ``u >= 1`` (the max's own weight is 1), so the read-out's clamp only turns an empty 0/0 into 0.
    ``finite_scores=True`` (scores computed from finite tokens) skips both clamps.
    """
    out_dtype = value.dtype
    dtype = _compute_dtype(value.dtype)
    if value.dtype != dtype or score.dtype != dtype or state.w.dtype != dtype:
        score, value, state = score.to(dtype), value.to(dtype), ScanState(*(t.to(dtype) for t in state))
    m = torch.maximum(state.m, score)
    finite_m = m if finite_scores else m.clamp_min(torch.finfo(dtype).min)
    old_scale, new_scale = torch.exp(state.m - finite_m), torch.exp(score - finite_m)
    u = torch.addcmul(new_scale, state.u, old_scale)
    w = torch.addcmul(value * new_scale.unsqueeze(-1), state.w, old_scale.unsqueeze(-1))
    out = w / (u if finite_scores else u.clamp_min(torch.finfo(dtype).tiny)).unsqueeze(-1)
    return (out if out_dtype == dtype else out.to(out_dtype)), ScanState(m, u, w)


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


class _ChunkLocalAttention(torch.autograd.Function):
    """Outputs of every chunk row from its tokens and the state carried into the chunk.

    Row ``k`` of a chunk weighs its tokens ``i <= k`` by ``exp(s_i - m_k)`` and the carry by
    ``exp(m_carry - m_k)``, ``m_k`` being the true prefix max, so no weight overflows. Autograd
    would keep every ``C x C`` intermediate; instead the forward keeps only the row log-normalisers
    ``L_k`` and the backward rebuilds the probabilities ``p_ki = exp(s_i - L_k) <= 1`` in one
    temporary: ``dv_i = sum_k p_ki g_k``, ``ds_i = v_i·dv_i - sum_k p_ki (g_k·o_k)``,
    ``dw_carry = sum_k exp(m_carry - L_k) g_k``, ``du_carry = -sum_k exp(m_carry - L_k) (g_k·o_k)``.
    ``m_carry`` is a stabiliser (it cancels in the outputs), so it gets no gradient.
    Shapes: ``s (B, C)``, ``v (B, C, D)``, carry ``m, u (B,)``, ``w (B, D)``; B = all chunks.
    """

    @staticmethod
    def forward(
        ctx, s: Tensor, v: Tensor, carry_m: Tensor | None, carry_u: Tensor | None, carry_w: Tensor | None
    ) -> Tensor:
        prefix_max = torch.cummax(s, dim=-1).values
        if carry_m is not None:
            prefix_max = torch.maximum(prefix_max, carry_m.unsqueeze(-1))
        safe_max = prefix_max.clamp_min(torch.finfo(s.dtype).min)
        # Zeroing the future before and after exp keeps exp's input finite (inf/-inf take a slow path).
        weights = (s.unsqueeze(-2) - safe_max.unsqueeze(-1)).tril_().exp_().tril_()
        numerator, denominator = torch.bmm(weights, v), weights.sum(-1)
        if carry_m is not None:
            carry_weight = torch.exp(carry_m.unsqueeze(-1) - safe_max)  # (B, C)
            numerator.addcmul_(carry_weight.unsqueeze(-1), carry_w.unsqueeze(-2))
            denominator.addcmul_(carry_weight, carry_u.unsqueeze(-1))
        out = numerator.div_(denominator.clamp_min(torch.finfo(s.dtype).tiny).unsqueeze(-1))
        # An empty row (nothing seen, output 0) gets L = +inf: every probability in it is then 0.
        log_norm = torch.where(denominator > 0, safe_max + denominator.log(), float("inf"))
        ctx.save_for_backward(s, v, carry_m, out, log_norm)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        s, v, carry_m, out, log_norm = ctx.saved_tensors
        grad_out = grad_out.contiguous()  # an expanded gradient (of a sum) sends bmm to a slow loop
        delta = (grad_out * out).sum(-1)  # g_k · o_k, (B, C)
        # Built transposed, [i, k] = p_ki, so both products below are plain (fast) batched matmuls.
        probs_t = (s.unsqueeze(-1) - log_norm.unsqueeze(-2)).triu_().exp_().triu_()
        grad_v = probs_t @ grad_out
        grad_s = (v * grad_v).sum(-1) - (probs_t @ delta.unsqueeze(-1)).squeeze(-1)
        if carry_m is None:
            return grad_s, grad_v, None, None, None
        carry_probs = torch.exp(carry_m.unsqueeze(-1) - log_norm)  # (B, C)
        grad_u = -(carry_probs * delta).sum(-1)
        grad_w = (carry_probs.unsqueeze(-2) @ grad_out).squeeze(-2)
        return grad_s, grad_v, None, grad_u, grad_w


class _WeightedValueSum(torch.autograd.Function):
    """``sum_i a_i v_i`` per chunk, ``a (B, C)``, ``v (B, C, D)`` -> ``(B, D)``.

    Autograd's backward of this batched vector-matrix product runs as an outer-product matmul,
    many times slower on CPU than the broadcast multiply written here.
    """

    @staticmethod
    def forward(ctx, a: Tensor, v: Tensor) -> Tensor:
        ctx.save_for_backward(a, v)
        return (a.unsqueeze(-2) @ v).squeeze(-2)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, v = ctx.saved_tensors
        grad = grad.contiguous()
        return (v @ grad.unsqueeze(-1)).squeeze(-1), a.unsqueeze(-1) * grad.unsqueeze(-2)


SINGLE_CHUNK_MAX = 64
DEFAULT_CHUNK = 32


def default_chunk_size(n: int) -> int:
    """One chunk up to 64 tokens (no scan at all), then 32.

    Measured on CPU (B=32, H=4, d_head 32, fwd+bwd): 16 and 32 tie at N = 512-8192 and 64 is 1.3x
    slower there; below ~64 tokens the scan's fixed cost outweighs the C x C matrix.
    """
    return n if n <= SINGLE_CHUNK_MAX else DEFAULT_CHUNK


def attention_chunked(
    scores: Tensor, values: Tensor, state: ScanState | None = None, chunk_size: int | None = None
) -> tuple[Tensor, ScanState]:
    """All prefix outputs with dense intra-chunk weights and a scan over chunk summaries.

    ``chunk_size`` None picks :func:`default_chunk_size` for the sequence length.
    """
    out_dtype = values.dtype
    dtype = _compute_dtype(out_dtype)
    scores, values = scores.to(dtype), values.to(dtype)
    if state is not None:
        state = ScanState(*(t.to(dtype) for t in state))
    n, d = scores.shape[-1], values.shape[-1]
    c = max(1, min(default_chunk_size(n) if chunk_size is None else chunk_size, n))
    n_chunks = -(-n // c)
    pad = n_chunks * c - n
    if pad:
        # Padding goes after the last token, so it never reaches an earlier output.
        scores = torch.nn.functional.pad(scores, (0, pad), value=float("-inf"))
        values = torch.nn.functional.pad(values, (0, 0, 0, pad))
    s = scores.unflatten(-1, (n_chunks, c))  # (..., n_chunks, C)
    v = values.unflatten(-2, (n_chunks, c))  # (..., n_chunks, C, D)

    # Each chunk's summary (m, u, w); the stabiliser cancels exactly in w / u, so it carries no gradient.
    chunk_max = s.detach().amax(-1)
    chunk_weights = torch.exp(s - chunk_max.clamp_min(torch.finfo(s.dtype).min).unsqueeze(-1))
    chunk_sums = _WeightedValueSum.apply(chunk_weights.reshape(-1, c), v.reshape(-1, c, d))
    summaries = ScanState(chunk_max, chunk_weights.sum(-1), chunk_sums.view(*s.shape[:-1], d))
    if state is None and n_chunks == 1:
        carry = None  # one chunk, nothing before it: no scan, no carry
        final = _last(summaries)
    else:
        inclusive = _inclusive_scan(summaries)
        if state is None:
            state = empty_state(s.shape[:-2], d, s.device, s.dtype)
        else:
            inclusive = _prepend_state(inclusive, state)
        final = _last(inclusive)
        # Carry into chunk j = everything before it: the state, then chunks 0..j-1.
        carry = ScanState(
            torch.cat([state.m.unsqueeze(-1), inclusive.m[..., :-1]], dim=-1).detach().reshape(-1),
            torch.cat([state.u.unsqueeze(-1), inclusive.u[..., :-1]], dim=-1).reshape(-1),
            torch.cat([state.w.unsqueeze(-2), inclusive.w[..., :-1, :]], dim=-2).reshape(-1, d),
        )
    out = _ChunkLocalAttention.apply(s.reshape(-1, c), v.reshape(-1, c, d), *(carry or (None, None, None)))
    out = out.view(*s.shape, d).flatten(-3, -2)[..., :n, :]
    return out.to(out_dtype), final


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
