"""Perplexity by hand, the adaptive softmax is a distribution, the Transformer baseline drops its state."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F

from recurrent_attention.models.transformer import Transformer
from recurrent_attention.models.transformer_xl import TransformerXL
from recurrent_attention.tasks.lm.head import AdaptiveSoftmax
from recurrent_attention.tasks.lm.metrics import NLLTotals
from recurrent_attention.tasks.lm.module import LanguageModelModule, cosine_with_warmup, detach_state


def test_perplexity_by_hand():
    totals = NLLTotals()
    # probabilities 1/2, 1/4 in one batch, 1/8 in the next: mean NLL = 2 ln 2, perplexity 4.
    totals.update(torch.tensor([[math.log(2), math.log(4)]], dtype=torch.float64))
    totals.update(torch.tensor([math.log(8)], dtype=torch.float64))
    result = totals.compute()
    assert result["ppl"] == pytest.approx(4.0, rel=1e-12)
    assert result["loss"] == pytest.approx(2 * math.log(2), rel=1e-12)


@pytest.mark.parametrize("cutoffs", [(), (3,), (3, 6, 9)])
def test_adaptive_softmax_is_a_distribution(cutoffs):
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(11, 4))
    softmax = AdaptiveSoftmax(weight, cutoffs)
    with torch.no_grad():
        softmax.cluster_weight.normal_()
        softmax.bias.normal_()
    hidden = torch.randn(5, 4)
    log_probs = torch.stack([-softmax(hidden, torch.full((5,), w)) for w in range(11)], dim=1)
    assert torch.allclose(log_probs.logsumexp(dim=1), torch.zeros(5), atol=1e-5)
    if not cutoffs:
        naive = F.cross_entropy(hidden @ weight.T + softmax.bias, torch.arange(5), reduction="none")
        assert torch.allclose(softmax(hidden, torch.arange(5)), naive, atol=1e-6)


def _module(backbone, carry_state: bool, vocab: int = 7) -> LanguageModelModule:
    optimizer = partial(torch.optim.Adam, lr=1e-3)
    return LanguageModelModule(
        backbone, optimizer, vocab, seg_len=3, carry_state=carry_state, dropout=0.0
    ).eval()


def test_uniform_model_has_perplexity_equal_to_vocab_size():
    torch.manual_seed(0)
    module = _module(Transformer(8, 2, 1, 16, dropout=0.0), carry_state=False, vocab=7)
    with torch.no_grad():
        module.model.embedding.weight.zero_()  # tied output weights: every logit is equal
    batch = {"x": torch.randint(0, 7, (2, 6)), "y": torch.randint(0, 7, (2, 6))}
    totals = NLLTotals()
    totals.update(module.window_nll(batch, "test"))
    assert totals.compute()["ppl"] == pytest.approx(7.0, rel=1e-6)


def test_transformer_baseline_sees_each_segment_alone_and_txl_carries_memory():
    torch.manual_seed(0)
    x2 = torch.randint(0, 7, (1, 3))
    batches = [
        {"x": torch.cat([torch.randint(0, 7, (1, 3)), x2], 1), "y": torch.zeros(1, 6, dtype=torch.long)}
        for _ in range(2)
    ]
    for backbone, carry in (
        (Transformer(8, 2, 1, 16, dropout=0.0), False),
        (TransformerXL(8, 2, 1, 16, mem_len=3, dropout=0.0), True),
    ):
        module = _module(backbone, carry)
        second = [module.window_nll(b, "val")[:, 3:] for b in batches]
        assert torch.allclose(second[0], second[1]) != carry


def test_detach_state_keeps_structure():
    x = torch.ones(2, requires_grad=True) * 2
    state = ([x, (x, {"a": x})], 3)
    detached = detach_state(state)
    assert not detached[0][0].requires_grad and not detached[0][1][1]["a"].requires_grad
    assert detached[1] == 3 and isinstance(detached[0][1], tuple)


def test_cosine_schedule_by_hand():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = cosine_with_warmup(optimizer, total_steps=12, warmup_steps=2)
    lrs = []
    for _ in range(13):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0) and lrs[2] == pytest.approx(1.0)
    assert lrs[7] == pytest.approx(0.5) and lrs[12] == pytest.approx(0.0, abs=1e-12)
