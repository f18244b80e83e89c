"""The three prefix-attention paths against a naive masked softmax (independent truth)."""

from __future__ import annotations

import importlib
from functools import partial

import pytest
import torch

from recurrent_attention.ops import (
    PATHS,
    attention_chunked,
    attention_recurrent,
    attention_scan,
    attention_step,
    empty_state,
)
from tests.ops.kernels import cumulative_kernels, use_cumulative_kernel

# The module, not the function of the same name that recurrent_attention.ops exports.
prefix_attention_module = importlib.import_module("recurrent_attention.ops.prefix_attention")


@pytest.fixture(
    params=[
        "cumulative (C++)",
        "cumulative (PyTorch)",
        "cumulative and prefix-max rows (C++)",
        "cumulative and prefix-max rows (PyTorch)",
        "prefix-max",
    ]
)
def chunk_kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each chunked test five times: the cumulative kernel as it runs, in C++ and in PyTorch; with
    a spread limit of 1 so that rows of both kernels mix in every chunk, again in both; and with
    every row going to the prefix-max one."""
    mode = request.param
    if "prefix-max" in mode:
        limit = 1.0 if mode.startswith("cumulative") else float("-inf")
        monkeypatch.setattr(prefix_attention_module, "_spread_limit", lambda _dtype: limit)
    use_cumulative_kernel(mode.endswith("(C++)"), monkeypatch)
    return mode


def naive_prefix_attention(scores: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """o_k = softmax(s_1..s_k) · v_1..v_k by materialising the full masked N x N softmax."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    logits = scores.unsqueeze(-2).expand(*scores.shape[:-1], n, n).masked_fill(future, float("-inf"))
    return torch.softmax(logits, dim=-1) @ values


def random_inputs(n: int, scale: float, seed: int, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 3, n, generator=gen, dtype=torch.float64) * scale
    values = torch.randn(2, 3, n, 5, generator=gen, dtype=torch.float64)
    return scores.to(dtype), values.to(dtype)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(("n", "scale"), [(1, 1.0), (7, 1.0), (64, 3.0), (97, 1e4), (130, 1e4), (1100, 3.0)])
def test_paths_equal_naive_softmax(path: str, n: int, scale: float, chunk_kernel: str) -> None:
    scores, values = random_inputs(n, scale, seed=n)
    out, _ = PATHS[path](scores, values)
    torch.testing.assert_close(out, naive_prefix_attention(scores, values), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 200])
def test_chunked_any_chunk_size(chunk_size: int, chunk_kernel: str) -> None:
    scores, values = random_inputs(50, 30.0, seed=chunk_size)
    out, _ = attention_chunked(scores, values, chunk_size=chunk_size)
    torch.testing.assert_close(out, naive_prefix_attention(scores, values), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_carried_state_continues_the_sequence(path: str, chunk_kernel: str) -> None:
    scores, values = random_inputs(45, 1e3, seed=3)
    first, state = PATHS[path](scores[..., :19], values[..., :19, :])
    second, _ = PATHS[path](scores[..., 19:], values[..., 19:, :], state)
    torch.testing.assert_close(
        torch.cat([first, second], dim=-2), naive_prefix_attention(scores, values), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("n", [20, 33, 100])
def test_final_states_agree_and_have_constant_size(n: int, chunk_kernel: str) -> None:
    scores, values = random_inputs(n, 10.0, seed=4)
    states = [PATHS[p](scores, values)[1] for p in sorted(PATHS)]
    for other in states[1:]:
        for a, b in zip(states[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert states[0].m.shape == (2, 3) and states[0].w.shape == (2, 3, 5)


def test_step_from_empty_state_is_the_value() -> None:
    state = empty_state((2,), 4, dtype=torch.float64)
    value = torch.randn(2, 4, dtype=torch.float64)
    out, state = attention_step(torch.tensor([1e4, -1e4], dtype=torch.float64), value, state)
    torch.testing.assert_close(out, value)
    assert torch.equal(state.u, torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize("path", sorted(PATHS))
def test_gradients_match_naive(path: str, chunk_kernel: str) -> None:
    scores, values = random_inputs(21, 5.0, seed=5)
    weights = torch.randn(2, 3, 21, 5, dtype=torch.float64)
    grads = []
    for fn in (PATHS[path], lambda s, v: (naive_prefix_attention(s, v), None)):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        (fn(s, v)[0] * weights).sum().backward()
        grads.append((s.grad, v.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 64])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_chunked_gradients_across_chunks_and_a_carried_state(
    chunk_size: int, scale: float, chunk_kernel: str
) -> None:
    """The hand-written backward, with the gradient flowing back through a carried state.

    Two calls (19 tokens, then 26 carrying the first call's state) against one naive softmax over
    all 45: every path between chunks and into the carry (u, w) gets a gradient checked here.
    """
    scores, values = random_inputs(45, scale, seed=chunk_size)
    weights = torch.randn(2, 3, 45, 5, dtype=torch.float64)
    grads = []
    for split in (True, False):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        if split:
            first, state = attention_chunked(s[..., :19], v[..., :19, :], chunk_size=chunk_size)
            second, _ = attention_chunked(s[..., 19:], v[..., 19:, :], state, chunk_size=chunk_size)
            out = torch.cat([first, second], dim=-2)
        else:
            out = naive_prefix_attention(s, v)
        (out * weights).sum().backward()
        grads.append((s.grad, v.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-8, atol=1e-10)


def test_chunked_gradient_of_the_final_state(chunk_kernel: str) -> None:
    """The returned state is differentiable too: its read-out is the last output, so grads agree."""
    scores, values = random_inputs(30, 3.0, seed=8)
    grads = []
    for use_state in (True, False):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        out, state = attention_chunked(s, v, chunk_size=8)
        last = state.w / state.u.unsqueeze(-1) if use_state else out[..., -1, :]
        last.sum().backward()
        grads.append((s.grad, v.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-8, atol=1e-12)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("split", [None, 12])
def test_one_chunk_final_state_and_outputs_have_the_naive_gradients(
    split: int | None, chunk_kernel: str
) -> None:
    """A sequence of one chunk returns its final state from the outputs' kernel; its gradients
    (through ``u`` and ``w``, and through a carried state) must equal those of plain sums.

    ``u e^m = sum_i exp(s_i)`` and ``w e^m = sum_i exp(s_i) v_i`` whatever the stabiliser ``m``.
    """
    scores, values = random_inputs(30, 3.0, seed=9)
    gen = torch.Generator().manual_seed(10)
    out_weights, u_weights = (
        torch.randn(2, 3, 30, 5, generator=gen, dtype=torch.float64),
        torch.randn(2, 3, generator=gen, dtype=torch.float64),
    )
    w_weights = torch.randn(2, 3, 5, generator=gen, dtype=torch.float64)
    grads = []
    for naive in (False, True):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        if naive:
            out, u, w = naive_prefix_attention(s, v), s.exp().sum(-1), (s.exp().unsqueeze(-1) * v).sum(-2)
        else:
            if split is None:
                out, state = attention_chunked(s, v)
            else:
                first, carried = attention_chunked(s[..., :split], v[..., :split, :])
                second, state = attention_chunked(s[..., split:], v[..., split:, :], carried)
                out = torch.cat([first, second], dim=-2)
            scale = state.m.exp()
            u, w = state.u * scale, state.w * scale.unsqueeze(-1)
        ((out * out_weights).sum() + (u * u_weights).sum() + (w * w_weights).sum()).backward()
        grads.append((s.grad, v.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("scale", [10.0, 1e4])
@pytest.mark.parametrize("n", [40, 70])  # the prefix-max kernel: one chunk, then several
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_half_precision_is_finite_and_close(
    path: str, dtype: torch.dtype, n: int, scale: float, chunk_kernel: str
) -> None:
    scores, values = random_inputs(n, scale, seed=6)
    s, v = scores.to(dtype).requires_grad_(), values.to(dtype).requires_grad_()
    out, _ = PATHS[path](s, v)
    out.float().sum().backward()
    assert out.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(s.grad).all() and torch.isfinite(v.grad).all()
    reference = naive_prefix_attention(s.detach().double(), v.detach().double())
    tolerance = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.double(), reference, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("chunk_size", [None, 2])  # one chunk, then chunks that are all -inf
def test_masked_scores_give_zero_not_nan(chunk_size: int | None, chunk_kernel: str) -> None:
    scores = torch.full((1, 1, 4), float("-inf"), dtype=torch.float64)
    scores[..., 2] = 0.5
    values = torch.arange(8, dtype=torch.float64).reshape(1, 1, 4, 2)
    chunked = partial(attention_chunked, chunk_size=chunk_size)
    for fn in (attention_scan, chunked, attention_recurrent):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        out, state = fn(s, v)
        assert torch.isfinite(out).all()
        (out.sum() + state.u.sum() + state.w.sum()).backward()
        assert torch.isfinite(s.grad).all() and torch.isfinite(v.grad).all()
        torch.testing.assert_close(out[0, 0, :2], torch.zeros(2, 2, dtype=torch.float64))
        torch.testing.assert_close(out[0, 0, 2], values[0, 0, 2])


@pytest.mark.parametrize("compiled", [True, False], ids=["C++", "PyTorch"])
def test_late_rows_start_where_a_score_leaves_the_spread_limit_and_stay_late(compiled: bool) -> None:
    """The cumulative kernel hands a row to the prefix-max kernel from the first score more than
    log(max float) / 2 above the chunk's first (or NaN) on, and never any row before it."""
    kernel = cumulative_kernels(compiled)
    for dtype in (torch.float32, torch.float64):
        s = torch.zeros(4, 8, dtype=dtype)
        s[0, 5] = 40.0  # within reach: no late row
        s[1, 5] = 1e4
        s[2, 0] = float("-inf")
        s[3, 3] = float("nan")
        late = kernel(s, torch.ones(4, 8, 2, dtype=dtype), None, None, None)[-1]
        first_late = [8, 5, 0, 3]
        assert late.tolist() == [[k >= first for k in range(8)] for first in first_late]
        assert kernel(s[:1], torch.ones(1, 8, 2, dtype=dtype), None, None, None)[-1] is None


@pytest.mark.parametrize("carry", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 8])
def test_prefix_max_kernel_reruns_only_the_sequences_with_late_rows(
    chunk_size: int | None, carry: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One head of one sequence gets a score 1e4 above its chunk's first: only that sequence goes
    through the prefix-max kernel, and every output, final state and gradient is still exact."""
    chunked = prefix_attention_module._chunked
    exact_batches = []

    def spy(kernel, scores, values, state, size):
        if kernel is prefix_attention_module._prefix_max_kernel:
            exact_batches.append(tuple(scores.shape[:-1]))
        return chunked(kernel, scores, values, state, size)

    monkeypatch.setattr(prefix_attention_module, "_chunked", spy)
    scores, values = random_inputs(30, 3.0, seed=12)
    scores[1, 2, 17] = 1e4
    weights = torch.randn(2, 3, 30, 5, dtype=torch.float64)
    results, final = [], None
    for naive in (False, True):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        if naive:
            out = naive_prefix_attention(s, v)
        else:
            first, state = None, None
            if carry:
                first, state = attention_chunked(s[..., :10], v[..., :10, :], chunk_size=chunk_size)
            out, final = attention_chunked(s[..., 10 * carry :], v[..., 10 * carry :, :], state, chunk_size)
            out = out if first is None else torch.cat([first, out], dim=-2)
        (out * weights).sum().backward()
        results.append((out, s.grad, v.grad))
    assert exact_batches == [(1,)]
    for chunked_result, naive_result in zip(*results, strict=True):
        torch.testing.assert_close(chunked_result, naive_result, rtol=1e-9, atol=1e-10)
    top = scores.amax(-1)  # the state's sums against the true ones, both under the true max
    torch.testing.assert_close(final.m, top)
    torch.testing.assert_close(final.u, (scores - top.unsqueeze(-1)).exp().sum(-1), rtol=1e-9, atol=0)
    torch.testing.assert_close(final.w / final.u.unsqueeze(-1), results[1][0][..., -1, :].detach())


@pytest.mark.parametrize("chunk_size", [None, 4])
def test_chunked_takes_the_models_strided_layout(chunk_size: int | None, chunk_kernel: str) -> None:
    """Aaren hands over scores and values as transposed views of its projections ``(B, N, H)``,
    which one chunk takes as they are: values and gradients must still be the naive ones."""
    gen = torch.Generator().manual_seed(11)
    scores = torch.randn(2, 21, 3, generator=gen, dtype=torch.float64) * 5.0
    values = torch.randn(2, 21, 3, 4, generator=gen, dtype=torch.float64)
    weights = torch.randn(2, 3, 21, 4, generator=gen, dtype=torch.float64)
    results = []
    for naive in (False, True):
        s, v = scores.clone().requires_grad_(), values.clone().requires_grad_()
        s_heads, v_heads = s.transpose(1, 2), v.transpose(1, 2)
        if naive:
            out = naive_prefix_attention(s_heads, v_heads)
        else:
            out, _ = attention_chunked(s_heads, v_heads, chunk_size=chunk_size)
        (out * weights).sum().backward()
        results.append((out, s.grad, v.grad))
    for chunked, naive in zip(*results, strict=True):
        torch.testing.assert_close(chunked, naive, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("compiled", [True, False], ids=["C++", "PyTorch"])
@pytest.mark.parametrize("chunk_size", [16, None])  # several chunks, then one
@pytest.mark.parametrize("t", [0, 9, 33])
def test_chunked_outputs_before_a_token_never_change_with_it(
    t: int, chunk_size: int | None, compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exact causality, bit for bit, also when the changed token sends later rows to the other kernel."""
    use_cumulative_kernel(compiled, monkeypatch)
    scores, values = random_inputs(40, 3.0, seed=t, dtype=torch.float32)
    out, _ = attention_chunked(scores, values, chunk_size=chunk_size)
    for change in (5.0, 1e4, float("nan")):
        changed_scores, changed_values = scores.clone(), values.clone()
        changed_scores[..., t] += change
        changed_values[..., t, :] += 1.0
        changed, _ = attention_chunked(changed_scores, changed_values, chunk_size=chunk_size)
        assert torch.equal(changed[..., :t, :], out[..., :t, :])
        assert not torch.equal(changed[..., t, :], out[..., t, :])


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("batch", [(), (4,)])
def test_paths_take_any_batch_rank(path: str, batch: tuple[int, ...]) -> None:
    """Scores ``(*batch, N)``, values ``(*batch, N, D)`` with fewer batch axes than a model's (B, H)."""
    scores, values = random_inputs(6, 1.0, seed=8)
    scores, values = (
        scores.reshape(-1, 6)[: (batch or (1,))[0]],
        values.reshape(-1, 6, 5)[: (batch or (1,))[0]],
    )
    scores, values = scores.reshape(*batch, 6), values.reshape(*batch, 6, 5)
    out, state = PATHS[path](scores, values)
    torch.testing.assert_close(out, naive_prefix_attention(scores, values), rtol=1e-12, atol=1e-12)
    assert state.m.shape == batch and state.w.shape == (*batch, 5)
