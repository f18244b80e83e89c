"""The chunked class log-likelihood equals the plain log-softmax head: values, argmax, gradients."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.ops.categorical import (
    CHUNK_LOGITS,
    ChunkedClassLogLikelihood,
    class_log_likelihood,
    class_log_likelihood_plain,
)


def head(rows: int, classes: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(rows * 31 + classes)
    hidden = torch.randn(rows, 6, generator=generator, dtype=dtype, requires_grad=True)
    weight = torch.randn(classes, 6, generator=generator, dtype=dtype, requires_grad=True)
    bias = torch.randn(classes, generator=generator, dtype=dtype, requires_grad=True)
    target = torch.randint(classes, (rows,), generator=generator)
    return hidden, weight, bias, target


@pytest.mark.parametrize(("rows", "chunk"), [(50, 16), (50, 50), (50, 64), (1, 3), (33, 1)])
def test_chunked_equals_plain_values_argmax_and_gradients(rows: int, chunk: int) -> None:
    hidden, weight, bias, target = head(rows, 37)
    upstream = torch.linspace(-1.0, 2.0, rows, dtype=torch.float64)  # unequal weights per row
    fast, fast_best = class_log_likelihood(hidden, weight, bias, target, chunk=chunk)
    slow, slow_best = class_log_likelihood_plain(hidden, weight, bias, target)
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    assert torch.equal(fast_best, slow_best)
    fast_grads = torch.autograd.grad((fast * upstream).sum(), (hidden, weight, bias))
    slow_grads = torch.autograd.grad((slow * upstream).sum(), (hidden, weight, bias))
    for a, b in zip(fast_grads, slow_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_float32_matches_plain_within_float32_rounding() -> None:
    *parameters, target = head(200, 823)
    hidden, weight, bias = (t.detach().float().requires_grad_() for t in parameters)
    fast, _ = class_log_likelihood(hidden, weight, bias, target)
    slow, _ = class_log_likelihood_plain(hidden, weight, bias, target)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    for a, b in zip(
        torch.autograd.grad(fast.sum(), (hidden, weight, bias)),
        torch.autograd.grad(slow.sum(), (hidden, weight, bias)),
        strict=True,
    ):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_gradcheck() -> None:
    hidden, weight, bias, target = head(7, 5)
    assert torch.autograd.gradcheck(
        lambda h, w, b: ChunkedClassLogLikelihood.apply(h, w, b, target, 3)[0], (hidden, weight, bias)
    )


def test_no_rows_gives_empty_outputs_and_zero_gradients() -> None:
    hidden, weight, bias, target = head(0, 4)
    scored, best = class_log_likelihood(hidden, weight, bias, target)
    assert scored.shape == best.shape == (0,)
    grads = torch.autograd.grad(scored.sum(), (hidden, weight, bias), allow_unused=True)
    assert all(g is None or not g.any() for g in grads)


def test_default_chunk_holds_a_fixed_number_of_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many classes: few rows a chunk (the logits stay in cache); few classes: the rows in one chunk."""
    seen = []
    apply = ChunkedClassLogLikelihood.apply
    monkeypatch.setattr(
        ChunkedClassLogLikelihood,
        "apply",
        lambda h, w, b, t, rows: seen.append(rows) or apply(h, w, b, t, rows),
    )
    for classes in (8227, 75, CHUNK_LOGITS + 1):
        hidden, weight, bias, target = head(3, classes, torch.float32)
        class_log_likelihood(hidden, weight, bias, target)
    assert seen == [CHUNK_LOGITS // 8227, CHUNK_LOGITS // 75, 1]  # more classes than a chunk: one row
    assert seen[0] == 31 and seen[1] > 3000


def test_autocast_takes_the_plain_form_and_its_casts() -> None:
    hidden, weight, bias, target = (t.detach() if t.is_floating_point() else t for t in head(40, 300))
    hidden, weight, bias = hidden.float(), weight.float(), bias.float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scored, best = class_log_likelihood(hidden.bfloat16(), weight, bias, target)
        plain, plain_best = class_log_likelihood_plain(hidden.bfloat16(), weight, bias, target)
    assert torch.equal(scored, plain) and torch.equal(best, plain_best)


def test_without_a_bias_the_plain_form_is_the_log_softmax_by_hand() -> None:
    """No bias: the plain form (the chunked one needs a bias), equal to log_softmax written out."""
    hidden, weight, _, target = (t.detach() for t in head(9, 7))
    scored, best = class_log_likelihood(hidden, weight, None, target, chunk=2)
    logits = hidden @ weight.T
    log_probs = logits - logits.exp().sum(-1, keepdim=True).log()
    torch.testing.assert_close(scored, log_probs[torch.arange(9), target], rtol=1e-12, atol=1e-12)
    assert torch.equal(best, logits.argmax(-1))
