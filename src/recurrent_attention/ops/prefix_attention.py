"""Prefix attention as training runs it: the chunked fast path, and the choice between the paths.

The math is :mod:`.scan`'s: the operator ``⊕`` on ``(m, u, w)`` triples, the parallel scan and
the recurrence. :func:`attention_chunked` computes the same outputs faster. Chunks are linked by a
scan of their ``(m, u, w)`` summaries; inside a chunk, kernels with hand-written backwards compute
every row: cumulative sums of ``exp(s_i - r)`` and ``exp(s_i - r) v_i`` under the chunk's first
score ``r`` (:class:`_ChunkCumulativeAttention`, O(C·D) per chunk), except for the rows from a
score more than ~44 (fp32) above ``r`` on, which take masked ``C x C`` weights ``exp(s_i - m_k)``
under the true prefix max ``m_k`` (:class:`_ChunkLocalAttention`, one batched matmul, no weight can
overflow), safe with any scores, 1e4 or -inf. Either way a row sees only the tokens up to it.
That choice reads the scores, so it is made on the CPU only; on an accelerator every row takes the
prefix-max kernel and nothing is read back (no host-device sync). :data:`PATHS` names the three
equivalent paths (``scan``, ``recurrent``, ``chunked``) for
:func:`~recurrent_attention.ops.attention_op.prefix_attention`. The chunked path's speed against
SDPA and the other paths: ``results/bench/bench.md`` (``make bench``).

As in :mod:`.scan`, every path computes in float32 (or float64 if given float64), under autocast
too (:func:`autocast_off`), and returns the values' dtype. Shapes: scores ``(..., N)``, values
``(..., N, D)``; a state holds ``m, u`` of shape ``(...)`` and ``w`` of shape ``(..., D)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from recurrent_attention.ops import native
from recurrent_attention.ops.host_reads import reads_are_free
from recurrent_attention.ops.scan import (
    ScanState,
    attention_recurrent,
    attention_scan,
    compute_dtype,
    empty_state,
    final_state,
    inclusive_scan,
    prepend_state,
    rescale_factor,
)


class _ChunkLocalAttention(torch.autograd.Function):
    """Outputs of every chunk row from its tokens and the state carried into the chunk.

    Row ``k`` of a chunk weighs its tokens ``i <= k`` by ``exp(s_i - m_k)`` and the carry by
    ``exp(m_carry - m_k)``, ``m_k`` being the true prefix max, so no weight overflows. Autograd
    would keep every ``C x C`` intermediate; instead the forward keeps only the row log-normalisers
    ``L_k`` and the backward rebuilds the probabilities ``p_ki = exp(s_i - L_k) <= 1`` in one
    temporary: ``dv_i = sum_k p_ki g_k``, ``ds_i = v_i·dv_i - sum_k p_ki (g_k·o_k)``,
    ``dw_carry = sum_k exp(m_carry - L_k) g_k``, ``du_carry = -sum_k exp(m_carry - L_k) (g_k·o_k)``.
    ``m_carry`` is a stabiliser (it cancels in the outputs), so it gets no gradient.

    The last row's unnormalised sums are the chunk's final state ``(m_C, u_C, w_C)``, returned
    beside the outputs, so a sequence of one chunk needs no separate summary. Their gradients fold
    into the last row: ``w_C = u_C o_C`` weighs token ``i`` by ``u_C p_Ci``, so ``g_w`` joins
    ``g_C`` as ``u_C g_w`` in ``dv`` (not in ``g_C·o_C``), and ``du_C/ds_i = u_C p_Ci`` subtracts
    ``u_C g_u`` from row C's ``g·o``.
    Shapes: ``s (..., C)``, ``v (..., C, D)``, carry ``m, u (...)``, ``w (..., D)``: any batch shape,
    so a call of one chunk passes its (possibly strided) inputs as they are, without a copy.
    """

    @staticmethod
    def forward(
        ctx, s: Tensor, v: Tensor, carry_m: Tensor | None, carry_u: Tensor | None, carry_w: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        prefix_max = torch.cummax(s, dim=-1).values
        if carry_m is not None:
            prefix_max = torch.maximum(prefix_max, carry_m.unsqueeze(-1))
        safe_max = prefix_max.clamp_min(torch.finfo(s.dtype).min)
        # Zeroing the future before and after exp keeps exp's input finite (inf/-inf take a slow path).
        weights = (s.unsqueeze(-2) - safe_max.unsqueeze(-1)).tril_().exp_().tril_()
        numerator, denominator = weights @ v, weights.sum(-1)
        if carry_m is not None:
            carry_weight = torch.exp(carry_m.unsqueeze(-1) - safe_max)  # (..., C)
            numerator.addcmul_(carry_weight.unsqueeze(-1), carry_w.unsqueeze(-2))
            denominator.addcmul_(carry_weight, carry_u.unsqueeze(-1))
        # A row with a token or a carry has denominator >= 1 (its max's own weight); only an empty
        # row (nothing seen, output 0) is clamped, and its L then stays near the lowest float, so
        # its probabilities exp(-inf - L) are 0.
        safe_denominator = denominator.clamp_min(torch.finfo(s.dtype).tiny)
        out = numerator / safe_denominator.unsqueeze(-1)
        log_norm = safe_denominator.log_().add_(safe_max)
        final_m, final_u = prefix_max[..., -1], denominator[..., -1]
        ctx.save_for_backward(s, v, carry_m, out, log_norm, final_u)
        ctx.mark_non_differentiable(final_m)
        ctx.set_materialize_grads(False)
        return out, final_m, final_u, numerator[..., -1, :]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx, grad_out: Tensor | None, _: None, grad_u: Tensor | None, grad_w: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        s, v, carry_m, out, log_norm, final_u = ctx.saved_tensors
        # contiguous: an expanded gradient (of a sum) sends bmm to a slow loop.
        grad_out = torch.zeros_like(out) if grad_out is None else grad_out.contiguous()
        delta = (grad_out * out).sum(-1)  # g_k · o_k, (..., C)
        if grad_w is not None:
            grad_out = grad_out.clone()
            grad_out[..., -1, :].addcmul_(final_u.unsqueeze(-1), grad_w)
        if grad_u is not None:
            delta[..., -1].addcmul_(final_u, grad_u, value=-1)
        # Built transposed, [i, k] = p_ki, so both products below are plain (fast) batched matmuls.
        probs_t = (s.unsqueeze(-1) - log_norm.unsqueeze(-2)).triu_().exp_().triu_()
        grad_v = probs_t @ grad_out
        grad_s = (v * grad_v).sum(-1) - (probs_t @ delta.unsqueeze(-1)).squeeze(-1)
        if carry_m is None:
            return grad_s, grad_v, None, None, None
        carry_probs = torch.exp(carry_m.unsqueeze(-1) - log_norm)  # (..., C)
        grad_carry_u = -(carry_probs * delta).sum(-1)
        grad_carry_w = (carry_probs.unsqueeze(-2) @ grad_out).squeeze(-2)
        return grad_s, grad_v, None, grad_carry_u, grad_carry_w


class _WeightedValueSum(torch.autograd.Function):
    """``sum_i a_i v_i`` per chunk, ``a (B, C)``, ``v (B, C, D)`` -> ``(B, D)``.

    Autograd's backward of this batched vector-matrix product runs as an outer-product matmul,
    which on CPU is slower than the broadcast multiply written here.
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


def _spread_limit(dtype: torch.dtype) -> float:
    """How far above its chunk's reference a score may lie for the cumulative kernel: exp of it is
    at most the square root of the largest float, so no sum or gradient product overflows."""
    return math.log(torch.finfo(dtype).max) / 2


class _ChunkCumulativeAttention(torch.autograd.Function):
    """:class:`_ChunkLocalAttention`'s outputs and final state by cumulative sums, O(C·D) per chunk.

    The reference ``r`` is what precedes the chunk's other rows: its first score, or the carry's
    ``m`` if larger. With ``e_i = exp(s_i - r)`` and the carry ``(m, u, w)``, row ``k`` is
    ``o_k = n_k / d_k``, ``n_k = sum_{i<=k} e_i v_i + b w``, ``d_k = sum_{i<=k} e_i + b u``,
    ``b = exp(m - r) <= 1``; ``d_k >= 1``, and ``e_i <= exp(L)``, ``L = log(max float) / 2``, as
    long as no score exceeds ``r + L``. From the first row that has (or any NaN), every later row
    of the chunk is *late*: its tokens get ``e = 0``, and the caller replaces it with the
    prefix-max kernel's row. Every row thus depends only on the tokens up to it, exactly.
    The backward is two reversed cumulative sums, ``N_i = sum_{k>=i} dL/dn_k`` and
    ``D_i = sum_{k>=i} dL/dd_k``: ``dv_i = e_i N_i``, ``ds_i = e_i (v_i·N_i + D_i)``,
    ``dw = b N_1``, ``du = b D_1``. The final state is the last row rescaled to the true max
    ``m' = max(M, m)``, ``(m', rho d_C, rho n_C)`` with ``rho = exp(r - m')``, so its gradients join
    ``dL/dn_C`` and ``dL/dd_C`` times ``rho``. Shapes as in :class:`_ChunkLocalAttention`; also
    returns the late rows ``(..., C)``, or None when no score lies past ``r + L`` (the common case,
    told by one comparison of the largest spread, which spares the per-row mask and the caller's
    fallback).
    """

    @staticmethod
    def forward(
        ctx, s: Tensor, v: Tensor, carry_m: Tensor | None, carry_u: Tensor | None, carry_w: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
        reference, top = s[..., 0], s.amax(-1)
        if carry_m is not None:
            reference, top = torch.maximum(reference, carry_m), torch.maximum(top, carry_m)
        shifted = s - reference.unsqueeze(-1)
        limit = _spread_limit(s.dtype)
        # One comparison (a NaN fails it) spares the per-row mask in the common case: no late rows.
        late = None
        if not (top - reference).max() <= limit:
            late = torch.cummax(~(shifted <= limit), dim=-1).values
            shifted.masked_fill_(late, float("-inf"))
        e = shifted.exp_()
        numerator = (e.unsqueeze(-1) * v).cumsum_(-2)
        denominator = e.cumsum(-1)
        carried = None
        if carry_m is not None:
            carried = rescale_factor(carry_m, reference)
            numerator.add_((carried.unsqueeze(-1) * carry_w).unsqueeze(-2))
            denominator.add_((carried * carry_u).unsqueeze(-1))
        # Only a row with nothing in it (all late, no carry) has d < 1: it reads out 0.
        denominator.clamp_min_(torch.finfo(s.dtype).tiny)
        out = numerator / denominator.unsqueeze(-1)
        rescale = torch.exp(reference - top)
        if late is not None:
            rescale.masked_fill_(late[..., -1], 0.0)
            ctx.mark_non_differentiable(late)
        final_u, final_w = denominator[..., -1] * rescale, numerator[..., -1, :] * rescale.unsqueeze(-1)
        ctx.save_for_backward(e, v, denominator, out, carried, rescale)
        ctx.mark_non_differentiable(top)
        ctx.set_materialize_grads(False)
        return out, top, final_u, final_w, late

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(
        ctx, grad_out: Tensor | None, _m: None, grad_u: Tensor | None, grad_w: Tensor | None, _late: None
    ) -> tuple[Tensor | None, ...]:
        e, v, denominator, out, carried, rescale = ctx.saved_tensors
        grad_out = torch.zeros_like(out) if grad_out is None else grad_out
        grad_numerator = grad_out / denominator.unsqueeze(-1)
        # -dL/dd_k = g_k·o_k / d_k, kept with this sign (one op fewer) and subtracted below.
        minus_grad_denominator = (grad_numerator * out).sum(-1)
        if grad_w is not None:
            grad_numerator[..., -1, :] += rescale.unsqueeze(-1) * grad_w
        if grad_u is not None:
            minus_grad_denominator[..., -1] -= rescale * grad_u
        later_numerator = grad_numerator.flip(-2).cumsum_(-2).flip(-2)
        minus_later_denominator = minus_grad_denominator.flip(-1).cumsum_(-1).flip(-1)
        grad_s = e * ((v * later_numerator).sum(-1) - minus_later_denominator)
        grad_carry_u = grad_carry_w = None
        if carried is not None:
            grad_carry_w = carried.unsqueeze(-1) * later_numerator[..., 0, :]
            grad_carry_u = -carried * minus_later_denominator[..., 0]
        return grad_s, later_numerator.mul_(e.unsqueeze(-1)), None, grad_carry_u, grad_carry_w


def autocast_off(device: torch.device) -> torch.autocast:
    """Autocast switched off on ``device``'s type, for :func:`attention_chunked`'s body: it casts to
    its compute dtype itself, and autocast would run its matrix products in bf16/fp16 again, losing
    the float32 sums and handing a hand-written backward tensors of two dtypes (torch's
    ``expected m1 and m2 to have the same dtype``). Any device type, so CUDA's autocast is off too."""
    return torch.autocast(device.type, enabled=False)


def cumulative_chunk_size(n: int) -> int:
    """For :class:`_ChunkCumulativeAttention`: one chunk up to 1024 tokens (no scan), then 512.

    Its work is O(C·D) per chunk whatever C, so longer chunks only save scan steps; they also
    give a score far above its chunk's first more rows to send to the fallback, hence the cap.
    Chosen by timing forward+backward on CPU at the operator benchmark's shape (B=32, H=4, d_head 32;
    its results: ``results/bench/bench.md``).
    """
    return n if n <= 1024 else 512


def prefix_max_chunk_size(n: int) -> int:
    """For :class:`_ChunkLocalAttention`: one chunk up to 64 tokens (no scan at all), then 32.

    Its ``C x C`` weights grow with C while the scan over chunks shrinks: below ~64 tokens the
    scan's fixed cost outweighs the matrix, above it small chunks win. Chosen by timing as
    :func:`cumulative_chunk_size` was.
    """
    return n if n <= 64 else 32


def attention_chunked(
    scores: Tensor, values: Tensor, state: ScanState | None = None, chunk_size: int | None = None
) -> tuple[Tensor, ScanState]:
    """All prefix outputs from a kernel per chunk and a scan over the chunks' summaries.

    On the CPU the kernel is :class:`_ChunkCumulativeAttention` (its C++ form, :mod:`.native`,
    where that builds); the rows it calls late (a score far above the chunk's first, or NaN) come
    from :class:`_ChunkLocalAttention` instead, which is exact for any scores and runs on the
    sequences with a late row only. Both choices read the scores, which on the CPU is a memory
    access; on any other device it would be a host-device sync (:func:`~.host_reads.reads_are_free`), so there
    every row takes :class:`_ChunkLocalAttention`: the same exact outputs, no read. ``chunk_size``
    None picks each kernel's own (:func:`cumulative_chunk_size`, :func:`prefix_max_chunk_size`).
    A sequence of one chunk needs no summary and no scan: the kernel's last row is the final state.
    """
    out_dtype = values.dtype
    dtype = compute_dtype(out_dtype)
    with autocast_off(values.device):
        scores, values = scores.to(dtype), values.to(dtype)
        if state is not None:
            state = ScanState(*(t.to(dtype) for t in state))
        n = scores.shape[-1]
        if not reads_are_free(scores.device):
            size = prefix_max_chunk_size(n) if chunk_size is None else chunk_size
            out, final, _ = _chunked(_prefix_max_kernel, scores, values, state, size)
            return out.to(out_dtype), final
        size = cumulative_chunk_size(n) if chunk_size is None else chunk_size
        out, final, late = _chunked(_cumulative_kernel, scores, values, state, size)
        if late is not None:
            size = prefix_max_chunk_size(n) if chunk_size is None else chunk_size
            out, final = _replace_late_rows(scores, values, state, size, out, final, late)
        return out.to(out_dtype), final


def _replace_late_rows(
    scores: Tensor,
    values: Tensor,
    state: ScanState | None,
    chunk_size: int,
    out: Tensor,
    final: ScanState,
    late: Tensor,
) -> tuple[Tensor, ScanState]:
    """The cumulative kernel's outputs and final state with its late rows replaced by the prefix-max
    kernel's, which runs on the sequences that have a late row only (often one head of a batch)."""
    batch, n, d = late.shape[:-1], scores.shape[-1], values.shape[-1]
    affected = late.reshape(-1, n).any(-1).nonzero().squeeze(-1)

    def pick(t: Tensor, *tail: int) -> Tensor:
        return t.reshape(-1, *tail)[affected]

    def merge(t: Tensor, exact: Tensor, take_exact: Tensor, *tail: int) -> Tensor:
        merged = torch.where(take_exact, exact, pick(t, *tail))
        return t.reshape(-1, *tail).index_copy(0, affected, merged).view(*batch, *tail)

    exact_state = None if state is None else ScanState(pick(state.m), pick(state.u), pick(state.w, d))
    exact_out, exact_final, _ = _chunked(
        _prefix_max_kernel, pick(scores, n), pick(values, n, d), exact_state, chunk_size
    )
    sub_late = pick(late, n)
    last = sub_late[:, -1]
    out = merge(out, exact_out, sub_late.unsqueeze(-1), n, d)
    final = ScanState(
        merge(final.m, exact_final.m, last),
        merge(final.u, exact_final.u, last),
        merge(final.w, exact_final.w, last.unsqueeze(-1), d),
    )
    return out, final


Kernel = Callable[..., tuple]
"""``(s, v, carry_m, carry_u, carry_w) -> (out, m, u, w[, late])`` for one chunk per sequence."""


def _cumulative_kernel(
    s: Tensor, v: Tensor, carry_m: Tensor | None, carry_u: Tensor | None, carry_w: Tensor | None
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor | None]:
    """:class:`_ChunkCumulativeAttention`, compiled (:mod:`.native`) where it can be."""
    compiled = native.cumulative_attention(s)
    if compiled is None:
        return _ChunkCumulativeAttention.apply(s, v, carry_m, carry_u, carry_w)
    return compiled(s, v, carry_m, carry_u, carry_w, _spread_limit(s.dtype))


_prefix_max_kernel: Kernel = _ChunkLocalAttention.apply


def _chunked(
    kernel: Kernel,
    scores: Tensor,
    values: Tensor,
    state: ScanState | None,
    chunk_size: int,
) -> tuple[Tensor, ScanState, Tensor | None]:
    """Outputs ``(..., N, D)``, final state and (for the cumulative kernel) late rows ``(..., N)``,
    None where there are none."""
    n = scores.shape[-1]
    if chunk_size >= n:
        # The kernels take any batch shape: one chunk is the call itself, never copied.
        carry = (None, None, None) if state is None else (state.m.detach(), state.u, state.w)
        out, m, u, w, *late = kernel(scores, values, *carry)
        return out, ScanState(m, u, w), late[0] if late else None
    s, v = _split(scores, values, chunk_size)
    c, d = s.shape[-1], v.shape[-1]
    # The stabiliser cancels exactly in w / u, so it carries no gradient.
    carry, final = _carries(_summaries(s, v, s.detach().amax(-1)), state)
    flat_carry = (carry.m.reshape(-1), carry.u.reshape(-1), carry.w.reshape(-1, d))
    out, _, _, _, *late = kernel(s.reshape(-1, c), v.reshape(-1, c, d), *flat_carry)
    out = out.view(*s.shape, d).flatten(-3, -2)[..., :n, :]
    if not late or late[0] is None:
        return out, final, None
    return out, final, late[0].view(s.shape).flatten(-2, -1)[..., :n]


def _split(scores: Tensor, values: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """``(..., n_chunks, C)`` scores and ``(..., n_chunks, C, D)`` values, padded after the last token
    (so the padding never reaches an earlier output) with scores -inf and values 0."""
    n = scores.shape[-1]
    c = max(1, min(chunk_size, n))
    n_chunks = -(-n // c)
    pad = n_chunks * c - n
    if pad:
        scores = torch.nn.functional.pad(scores, (0, pad), value=float("-inf"))
        values = torch.nn.functional.pad(values, (0, 0, 0, pad))
    return scores.unflatten(-1, (n_chunks, c)), values.unflatten(-2, (n_chunks, c))


def _summaries(s: Tensor, v: Tensor, chunk_max: Tensor) -> ScanState:
    """Each chunk's ``(m, u, w)``: ``s (..., n_chunks, C)``, ``v (..., n_chunks, C, D)``."""
    c, d = s.shape[-1], v.shape[-1]
    chunk_weights = torch.exp(s - chunk_max.clamp_min(torch.finfo(s.dtype).min).unsqueeze(-1))
    chunk_sums = _WeightedValueSum.apply(chunk_weights.reshape(-1, c), v.reshape(-1, c, d))
    return ScanState(chunk_max, chunk_weights.sum(-1), chunk_sums.view(*s.shape[:-1], d))


def _carries(summaries: ScanState, state: ScanState | None) -> tuple[ScanState, ScanState]:
    """The state carried into each chunk (the given state, then chunks 0..j-1; ``m`` detached) and
    the final state, from the chunks' summaries ``(..., n_chunks)``."""
    inclusive = inclusive_scan(summaries)
    if state is None:
        m, w = summaries.m, summaries.w
        state = empty_state(m.shape[:-1], w.shape[-1], w.device, w.dtype)
    else:
        inclusive = prepend_state(inclusive, state)
    carry = ScanState(
        torch.cat([state.m.unsqueeze(-1), inclusive.m[..., :-1]], dim=-1).detach(),
        torch.cat([state.u.unsqueeze(-1), inclusive.u[..., :-1]], dim=-1),
        torch.cat([state.w.unsqueeze(-2), inclusive.w[..., :-1, :]], dim=-2),
    )
    return carry, final_state(inclusive)


PATHS = {"scan": attention_scan, "recurrent": attention_recurrent, "chunked": attention_chunked}
