"""The three prefix-attention paths against a naive masked softmax (independent truth)."""

from __future__ import annotations

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
@pytest.mark.parametrize(("n", "scale"), [(1, 1.0), (7, 1.0), (64, 3.0), (97, 1e4), (130, 1e4)])
def test_paths_equal_naive_softmax(path: str, n: int, scale: float) -> None:
    scores, values = random_inputs(n, scale, seed=n)
    out, _ = PATHS[path](scores, values)
    torch.testing.assert_close(out, naive_prefix_attention(scores, values), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 200])
def test_chunked_any_chunk_size(chunk_size: int) -> None:
    scores, values = random_inputs(50, 30.0, seed=chunk_size)
    out, _ = attention_chunked(scores, values, chunk_size=chunk_size)
    torch.testing.assert_close(out, naive_prefix_attention(scores, values), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_carried_state_continues_the_sequence(path: str) -> None:
    scores, values = random_inputs(45, 1e3, seed=3)
    first, state = PATHS[path](scores[..., :19], values[..., :19, :])
    second, _ = PATHS[path](scores[..., 19:], values[..., 19:, :], state)
    torch.testing.assert_close(
        torch.cat([first, second], dim=-2), naive_prefix_attention(scores, values), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("n", [20, 33, 100])
def test_final_states_agree_and_have_constant_size(n: int) -> None:
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
def test_gradients_match_naive(path: str) -> None:
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
def test_chunked_gradients_across_chunks_and_a_carried_state(chunk_size: int, scale: float) -> None:
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


def test_chunked_gradient_of_the_final_state() -> None:
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_half_precision_is_finite_and_close(path: str, dtype: torch.dtype) -> None:
    scores, values = random_inputs(70, 1e4, seed=6)
    s, v = scores.to(dtype).requires_grad_(), values.to(dtype).requires_grad_()
    out, _ = PATHS[path](s, v)
    out.float().sum().backward()
    assert out.dtype == dtype
    assert torch.isfinite(out).all() and torch.isfinite(s.grad).all() and torch.isfinite(v.grad).all()
    reference = naive_prefix_attention(s.detach().double(), v.detach().double())
    tolerance = 1e-2 if dtype == torch.float16 else 4e-2
    torch.testing.assert_close(out.double(), reference, rtol=tolerance, atol=tolerance)


def test_masked_scores_give_zero_not_nan() -> None:
    scores = torch.full((1, 1, 4), float("-inf"), dtype=torch.float64)
    scores[..., 2] = 0.5
    values = torch.arange(8, dtype=torch.float64).reshape(1, 1, 4, 2)
    for fn in (attention_scan, attention_chunked, attention_recurrent):
        out, _ = fn(scores, values)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[0, 0, :2], torch.zeros(2, 2, dtype=torch.float64))
        torch.testing.assert_close(out[0, 0, 2], values[0, 0, 2])
