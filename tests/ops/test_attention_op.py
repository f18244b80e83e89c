"""Prefix attention under bf16 autocast, without host-device syncs, and as one custom op (issue 64).

Truth is the naive masked softmax in float64 (:func:`tests.ops.test_prefix_attention.naive_prefix_attention`)
of the same (bf16-rounded) scores and values, and its autograd gradients.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from recurrent_attention.ops import PATHS, ScanState, attention_chunked, attention_op, host_reads
from recurrent_attention.ops.attention_op import (
    chunked_prefix_attention,
    chunked_prefix_attention_backward,
    prefix_attention,
)
from tests.helpers.host_sync import record_host_syncs
from tests.ops.kernels import use_cumulative_kernel
from tests.ops.test_prefix_attention import naive_prefix_attention

BF16 = torch.bfloat16


def naive_with_grads(
    scores: torch.Tensor, values: torch.Tensor, weights: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Outputs, score and value gradients of ``sum(out * weights)`` in float64."""
    s, v = scores.double().requires_grad_(), values.double().requires_grad_()
    out = naive_prefix_attention(s, v)
    (out * weights.double()).sum().backward()
    return out.detach(), s.grad, v.grad


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, tolerance: float) -> None:
    """Within ``tolerance`` of the expected tensor's largest magnitude (bf16 rounds relative to it),
    or of 1 (the inputs' and weights' order) where all of it is smaller: with scores of 1e4 each row
    is near one-hot and the score gradients are rounding far below it."""
    scale = max(expected.abs().max().item(), 1.0)
    torch.testing.assert_close(actual.double(), expected, rtol=tolerance, atol=tolerance * scale)


@pytest.mark.parametrize("scale", [3.0, 1e4])
@pytest.mark.parametrize(
    ("path", "n"),
    [("scan", 40), ("recurrent", 40), ("chunked", 40), ("chunked, chunks of 8", 40), ("chunked", 1030)],
)
def test_bf16_autocast_values_and_gradients_match_the_naive_softmax(path: str, n: int, scale: float) -> None:
    """Issue 64: under autocast the chunked backward mixed bf16 and float32 as soon as there was more
    than one chunk (N > 1024, or a chunk size below N). Scores and values are bf16, as autocast's
    projections hand them over; the path runs inside the autocast region."""
    fn = partial(attention_chunked, chunk_size=8) if path.endswith("of 8") else PATHS[path]
    gen = torch.Generator().manual_seed(n)
    batch = (1, 2) if n > 100 else (2, 3)
    scores = (torch.randn(*batch, n, generator=gen) * scale).to(BF16)
    values = torch.randn(*batch, n, 4, generator=gen).to(BF16)
    scores[..., n // 3] = float("-inf")
    weights = torch.randn(*batch, n, 4, generator=gen).to(BF16)
    s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
    with torch.autocast("cpu", dtype=BF16):
        out, _ = fn(s, v)
        loss = (out * weights).float().sum()
    loss.backward()
    assert out.dtype == BF16 and s.grad.dtype == BF16 and v.grad.dtype == BF16
    expected_out, expected_s, expected_v = naive_with_grads(scores, values, weights)
    assert_close_scaled(out, expected_out, 2e-2)
    assert_close_scaled(v.grad, expected_v, 2e-2)
    assert_close_scaled(s.grad, expected_s, 3e-2)


def accelerator_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chunked path as it runs off the CPU (no choice by reading the scores, no C++ kernel),
    here on the CPU."""
    monkeypatch.setattr(host_reads, "HOST_READ_DEVICES", frozenset())
    use_cumulative_kernel(False, monkeypatch)


@pytest.mark.parametrize("chunk_size", [None, 8])
def test_accelerator_rule_is_exact_for_any_scores_and_reads_nothing(
    chunk_size: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off the CPU the chunked path may not read the scores to pick a kernel: scores of 1e4 and
    -inf (which on the CPU send rows to the prefix-max kernel) stay exact, and neither the
    forward nor the backward makes a host-device sync."""
    accelerator_rule(monkeypatch)
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 3, 70, generator=gen, dtype=torch.float64) * 1e4
    scores[0, 1, 10:15] = float("-inf")
    values = torch.randn(2, 3, 70, 5, generator=gen, dtype=torch.float64)
    weights = torch.randn(2, 3, 70, 5, generator=gen, dtype=torch.float64)
    s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
    with record_host_syncs() as syncs:
        out, _ = attention_chunked(s, v, chunk_size=chunk_size)
        (out * weights).sum().backward()
    assert not syncs.found, syncs.summary()
    expected_out, expected_s, expected_v = naive_with_grads(scores, values, weights)
    for actual, expected in ((out, expected_out), (s.grad, expected_s), (v.grad, expected_v)):
        torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-10)


def op_inputs(with_state: bool, n: int = 13) -> tuple:
    """Scores and values as Aaren hands them over: heads-first views of ``(B, N, H)`` tensors."""
    gen = torch.Generator().manual_seed(5)
    scores = (torch.randn(2, n, 3, generator=gen, dtype=torch.float64) * 4).requires_grad_().transpose(1, 2)
    values = torch.randn(2, n, 3, 4, generator=gen, dtype=torch.float64).requires_grad_().transpose(1, 2)
    if not with_state:
        return scores, values, None, None, None
    m = torch.randn(2, 3, generator=gen, dtype=torch.float64)
    u = (torch.rand(2, 3, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()
    w = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64).requires_grad_()
    return scores, values, m, u, w


@pytest.mark.parametrize(("with_state", "n"), [(True, 13), (False, 1030)])  # one chunk; three, padded
def test_custom_op_passes_opcheck(with_state: bool, n: int) -> None:
    """Schema, fake (meta) implementation (shapes, dtypes, strides), autograd registration and AOT
    dispatch agree with the op."""
    torch.library.opcheck(chunked_prefix_attention, op_inputs(with_state, n))


@pytest.mark.parametrize("with_state", [True, False])
def test_custom_backward_op_passes_opcheck(with_state: bool) -> None:
    """The backward op alone (it is what a compiled backward graph calls): its fake gradients are
    contiguous, so the real ones must be too, whatever the inputs' strides; without a state its
    two state gradients are the same empty placeholders in both."""
    scores, values, m, u, w = (t.detach() if t is not None else None for t in op_inputs(with_state))
    u = torch.zeros(2, 3, dtype=torch.float64) if u is None else u
    w = torch.zeros(2, 3, 4, dtype=torch.float64) if w is None else w
    gen = torch.Generator().manual_seed(2)
    grads = [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in (values, u, w)]
    state = (m, u, w) if with_state else (None, None, None)
    torch.library.opcheck(chunked_prefix_attention_backward, (scores, values, *state, *grads))


@pytest.mark.parametrize("n", [13, 1030])  # one chunk, three
def test_custom_op_values_and_gradients_equal_the_naive_softmax(n: int) -> None:
    """The op's outputs, final state and backward (its second op) against the naive softmax over the
    state's tokens then the new ones: the state ``(m, u, w)`` stands for tokens of scores ``s0`` and
    values ``v0`` with ``u = sum exp(s0 - m)``, ``w = sum exp(s0 - m) v0``."""
    gen = torch.Generator().manual_seed(9)
    earlier_s = torch.randn(2, 3, 6, generator=gen, dtype=torch.float64) * 3
    earlier_v = torch.randn(2, 3, 6, 4, generator=gen, dtype=torch.float64)
    scores, values, *_ = op_inputs(False, n)
    weights = torch.randn(2, 3, n, 4, generator=gen, dtype=torch.float64)
    weight_u, weight_w = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    results = []
    for op in (True, False):
        s0, v0 = earlier_s.clone().requires_grad_(), earlier_v.clone().requires_grad_()
        s, v = scores.detach().clone().requires_grad_(), values.detach().clone().requires_grad_()
        m = s0.detach().amax(-1)
        u, w = (s0 - m.unsqueeze(-1)).exp().sum(-1), ((s0 - m.unsqueeze(-1)).exp().unsqueeze(-1) * v0).sum(-2)
        if op:
            out, final_m, final_u, final_w = chunked_prefix_attention(s, v, m, u, w)
            final = ScanState(final_m, final_u, final_w)
        else:  # the naive softmax over all 6 + n tokens, and the final state's true sums
            all_s, all_v = torch.cat([s0, s], -1), torch.cat([v0, v], -2)
            out = naive_prefix_attention(all_s, all_v)[..., 6:, :]
            top = all_s.detach().amax(-1, keepdim=True)
            final = ScanState(
                top[..., 0], (all_s - top).exp().sum(-1), ((all_s - top).exp().unsqueeze(-1) * all_v).sum(-2)
            )
        ((out * weights).sum() + (final.u * weight_u).sum() + (final.w * weight_w).sum()).backward()
        results.append((out, *final, s.grad, v.grad, s0.grad, v0.grad))
    for name, actual, expected in zip(
        ("out", "m", "u", "w", "ds", "dv", "ds0", "dv0"), *results, strict=True
    ):
        torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-10, msg=name)


@pytest.mark.parametrize("with_state", [True, False])
def test_the_traced_chunked_path_calls_the_op_with_the_state(
    with_state: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a tracer sees (``is_compiling`` true, without compiling: seconds, not minutes): the
    chunked path through the op, the state passed on, equal to the eager path's outputs and state."""
    scores, values, m, u, w = (t.detach() if t is not None else None for t in op_inputs(with_state))
    state = ScanState(m, u, w) if with_state else None
    eager_out, eager_state = prefix_attention(scores, values, state)
    calls = []
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(
        attention_op, "chunked_prefix_attention", lambda *a: calls.append(a) or chunked_prefix_attention(*a)
    )
    out, final = prefix_attention(scores, values, state)
    assert len(calls) == 1 and (calls[0][2] is None) == (not with_state)
    torch.testing.assert_close(out, eager_out, rtol=1e-12, atol=1e-12)
    for actual, expected in zip(final, eager_state, strict=True):
        torch.testing.assert_close(actual, expected, rtol=1e-12, atol=1e-12)
