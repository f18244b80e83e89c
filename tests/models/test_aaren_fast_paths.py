"""Aaren's fused values-and-scores projection and its step equal the explicit-key formulation
they replace.

The reference here is the textbook one: materialise the keys ``K = x W_k^T + b_k``, take
``s = K q / sqrt(d_head)`` per head, and update the state with the paper's ``⊕``
(:func:`~recurrent_attention.ops.combine`). Values and gradients must agree.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.ops import ScanState, attention_step, combine, empty_state

D_MODEL, HEADS = 16, 4


def explicit_scores(mixer: AarenAttention, x: torch.Tensor) -> torch.Tensor:
    """Scores ``(..., H, N)`` from the materialised keys (the formulation before the fusion)."""
    proj = mixer.proj
    (query_weight, query_bias), (key_weight, key_bias), _ = proj.parts()
    q = F.linear(mixer.query, query_weight, query_bias).unflatten(-1, (proj.n_heads, proj.d_head))
    k = proj.split_heads(F.linear(x, key_weight, key_bias))
    return torch.einsum("...hnd,hd->...hn", k, q) * proj.d_head**-0.5


def explicit_values(mixer: AarenAttention, x: torch.Tensor) -> torch.Tensor:
    """Values ``(..., H, N, d_head)`` from the value projection alone."""
    _, _, (value_weight, value_bias) = mixer.proj.parts()
    return mixer.proj.split_heads(F.linear(x, value_weight, value_bias))


def combine_step(
    score: torch.Tensor, value: torch.Tensor, state: ScanState
) -> tuple[torch.Tensor, ScanState]:
    """``state ⊕ (s, 1, v)`` and its read-out, as the paper writes the recurrence."""
    new = combine(state, ScanState(score, torch.ones_like(score), value))
    u = new.u.unsqueeze(-1)
    return new.w / torch.where(u > 0, u, torch.ones_like(u)), new


def make_mixer(dtype: torch.dtype, qkv_bias: bool = True) -> AarenAttention:
    torch.manual_seed(0)
    return AarenAttention(D_MODEL, HEADS, qkv_bias=qkv_bias).to(dtype)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-6), (torch.float64, 1e-12)])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_fused_scores_values_and_gradients_equal_explicit_keys(
    dtype: torch.dtype, tol: float, qkv_bias: bool
) -> None:
    mixer = make_mixer(dtype, qkv_bias)
    x = torch.randn(3, 11, D_MODEL, dtype=dtype)
    weights = torch.randn(3, HEADS, 11, dtype=dtype), torch.randn(3, HEADS, 11, D_MODEL // HEADS, dtype=dtype)
    results = []
    for scores_and_values in (
        lambda: mixer._scores_and_values(x, *mixer.value_score_projection()),
        lambda: (explicit_scores(mixer, x), explicit_values(mixer, x)),
    ):
        mixer.zero_grad()
        scores, values = scores_and_values()
        ((scores * weights[0]).sum() + (values * weights[1]).sum()).backward()
        grads = {n: p.grad.clone() for n, p in mixer.named_parameters() if p.grad is not None}
        results.append((scores.detach(), values.detach(), grads))
    (fused, fused_values, fused_grads), (explicit, values, explicit_grads) = results
    torch.testing.assert_close(fused, explicit, rtol=tol, atol=tol)
    torch.testing.assert_close(fused_values, values, rtol=tol, atol=tol)
    assert (
        fused_grads.keys()
        == explicit_grads.keys()
        == {"query", "proj.qkv.weight"} | ({"proj.qkv.bias"} if qkv_bias else set())
    )
    for name in fused_grads:
        torch.testing.assert_close(fused_grads[name], explicit_grads[name], rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("qkv_bias", [True, False])
def test_step_equals_explicit_step(dtype: torch.dtype, qkv_bias: bool) -> None:
    """20 tokens through the fused step vs explicit keys + ``⊕``, also under autograd."""
    mixer = make_mixer(dtype, qkv_bias).eval()
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    x = torch.randn(20, 2, D_MODEL, dtype=dtype)
    proj = mixer.proj
    for grad in (False, True):
        lean_state = reference_state = mixer.init_state(2, dtype=dtype)
        with torch.set_grad_enabled(grad):
            for x_t in x:
                lean, lean_state = mixer.step(x_t, lean_state)
                scores = explicit_scores(mixer, x_t.unsqueeze(-2))[..., 0]
                values = explicit_values(mixer, x_t.unsqueeze(-2))[..., 0, :]
                out, reference_state = combine_step(scores, values, reference_state)
                reference = proj.out_proj(out.flatten(-2))
                torch.testing.assert_close(lean, reference, rtol=tol, atol=tol)
        for a, b in zip(lean_state, reference_state, strict=True):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("scale", [1e4, 1.0])  # 1.0: softmax weights not one-hot, so u != 1
def test_attention_step_without_guards_equals_combine_on_finite_scores(scale: float) -> None:
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(12, 2, 3, generator=gen, dtype=torch.float64) * scale
    values = torch.randn(12, 2, 3, 4, generator=gen, dtype=torch.float64)
    lean_state = reference_state = empty_state((2, 3), 4, dtype=torch.float64)
    for s, v in zip(scores, values, strict=True):
        lean, lean_state = attention_step(s, v, lean_state, finite_scores=True)
        reference, reference_state = combine_step(s, v, reference_state)
        torch.testing.assert_close(lean, reference, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_attention_step_equals_combine(dtype: torch.dtype) -> None:
    """The written-out update against ``⊕``, with scores of 1e4 and -inf (empty prefixes)."""
    gen = torch.Generator().manual_seed(1)
    scores = (torch.randn(12, 2, 3, generator=gen, dtype=torch.float64) * 1e4).to(dtype)
    scores[:3, 0] = float("-inf")
    values = torch.randn(12, 2, 3, 4, generator=gen, dtype=torch.float64).to(dtype)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    lean_state = reference_state = empty_state((2, 3), 4, dtype=compute)
    for s, v in zip(scores, values, strict=True):
        lean, lean_state = attention_step(s, v, lean_state)
        reference, reference_state = combine_step(s.to(compute), v.to(compute), reference_state)
        assert lean.dtype == dtype and torch.isfinite(lean).all()
        torch.testing.assert_close(lean, reference.to(dtype), rtol=0, atol=1e-12)
    for a, b in zip(lean_state, reference_state, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
