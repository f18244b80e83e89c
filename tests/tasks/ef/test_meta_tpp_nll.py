"""The reference protocol's NLL and loss against a transcription of Meta TPP's, on a hand-made batch.

The transcription follows BorealisAI/meta-tpp (``src/models/tpp/tpp_network.py`` TransformerMix.forward,
``src/models/tpp/prob_dists.py`` LogNormalMixture.forward, ``src/models/tpp_module.py`` model_step and
validation_step) in Meta TPP's own representation: padded inter-event ``times`` (0 = pad), marks
1-indexed (0 = pad), float ``masks``. It starts from the encoder outputs (``histories``), which both
sides share, so it checks the likelihood and its normaliser, not the encoder.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Categorical, LogNormal

from recurrent_attention.models import Transformer
from recurrent_attention.tasks.ef.data import collate
from recurrent_attention.tasks.ef.formats import EventSequence
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.likelihood import score_batch
from recurrent_attention.tasks.ef.metrics import EventTotals
from recurrent_attention.tasks.ef.module import EventModule
from tests.helpers.protocols import protocol

SEQUENCES = [
    EventSequence([0.0, 0.7, 0.9, 2.4, 2.45], [2, 0, 1, 1, 2]),
    EventSequence([0.0, 1.5], [1, 0]),
    EventSequence([0.0, 0.2, 0.25, 3.0], [0, 2, 2, 1]),
]


def clamp_preserve_gradients(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return x + (x.clamp(low, high) - x).detach()


def meta_tpp_loss(
    histories: torch.Tensor,
    decoder,
    mark_linear,
    times: torch.Tensor,
    marks: torch.Tensor,
    masks: torch.Tensor,
) -> torch.Tensor:
    """Meta TPP's ``-sum(event_ll + surv_ll)`` for a batch (no weight decay: evaluation mode)."""
    batch_size = times.shape[0]
    times, marks, masks = times.unsqueeze(-1), marks.unsqueeze(-1), masks.unsqueeze(-1)
    # TransformerMix.forward
    times, marks = times.squeeze(-1), marks.squeeze(-1)
    histories = histories[:, :-1]
    # LogNormalMixture.forward(histories, times[:, 1:], masks[:, 1:])
    t, m = times[:, 1:].unsqueeze(-1), masks[:, 1:]
    t = t + 1e-12
    weight_logits, mu, sigma_logits = decoder(histories).chunk(3, dim=-1)
    sigma = F.softplus(sigma_logits)
    log_weights = F.log_softmax(weight_logits, -1)
    dist = LogNormal(mu, sigma)
    log_probs = torch.logsumexp(log_weights + dist.log_prob(t), dim=-1, keepdim=True)
    cdf = clamp_preserve_gradients(LogNormal(mu, sigma).cdf(t), 1e-5, 1 - 1e-5)
    log_survival_all = torch.logsumexp(log_weights + torch.log(1.0 - cdf), dim=-1)
    last_event_idx = m.squeeze(-1).sum(-1, keepdim=True).long().squeeze(-1) - 1
    masks_without_last = m.clone()
    masks_without_last[torch.arange(batch_size), last_event_idx] = 0
    event_ll = (log_probs * masks_without_last).sum((1, 2))
    surv_ll = torch.gather(log_survival_all, dim=-1, index=last_event_idx.unsqueeze(-1)).squeeze(-1)
    # back in TransformerMix.forward: the marks
    last_event_idx = masks.squeeze(-1).sum(-1, keepdim=True).long().squeeze(-1) - 1
    masks_without_last = masks.clone()
    masks_without_last[torch.arange(batch_size), last_event_idx] = 0
    mark_logits = torch.log_softmax(mark_linear(histories), dim=-1)
    adjusted_marks = torch.where(marks - 1 >= 0, marks - 1, torch.zeros_like(marks))
    mark_log_probs = Categorical(logits=mark_logits).log_prob(adjusted_marks[:, 1:])
    mark_log_probs = torch.stack(
        [
            torch.sum(mark_log_prob[mask.bool()])
            for mark_log_prob, mask in zip(
                mark_log_probs, masks_without_last.squeeze(-1)[:, :-1], strict=True
            )
        ]
    )
    event_ll = event_ll + mark_log_probs
    # TPPLitModule.model_step
    return -torch.sum(event_ll + surv_ll)


def meta_tpp_inputs(batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Our padded batch in Meta TPP's representation: 0-padded times, 1-indexed marks, float masks."""
    mask = batch["mask"]
    times = torch.where(mask, batch["intervals"], torch.zeros_like(batch["intervals"]))
    marks = torch.where(mask, batch["marks"] + 1, torch.zeros_like(batch["marks"]))
    return times, marks, mask.to(times.dtype)


def model_and_batch() -> tuple[EventModel, dict]:
    torch.manual_seed(3)
    backbone = Transformer(d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0)
    model = EventModel(backbone, n_marks=3).double().eval()
    return model, collate(SEQUENCES, dtype=torch.float64)


def test_reference_nll_equals_meta_tpp_on_a_hand_made_batch() -> None:
    model, batch = model_and_batch()
    times, marks, masks = meta_tpp_inputs(batch)
    with torch.no_grad():
        histories = model(batch["intervals"], batch["marks"])
        loss = meta_tpp_loss(histories, model.time_head.net, model.mark_head, times, marks, masks)
        scores = score_batch(model, batch, time_eps=1e-12)
    assert float(scores.meta_tpp_nll_sum()) == pytest.approx(float(loss), rel=1e-12)
    totals = EventTotals()
    totals.update(scores, batch)
    expected = float(loss / masks.sum())  # val_nll: MeanMetricWithCount(loss, masks.sum())
    assert totals.compute(nll="meta_tpp")["nll"] == pytest.approx(expected, rel=1e-12)
    assert totals.compute()["nll_meta_tpp"] == pytest.approx(expected, rel=1e-12)
    # Our default NLL scores every interval by its density and divides by the predicted events only.
    assert totals.compute()["nll"] != pytest.approx(expected, rel=1e-3)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
def test_reference_training_loss_and_gradient_equal_meta_tpp() -> None:
    torch.manual_seed(3)
    backbone = Transformer(d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0)
    module = EventModule(
        backbone, partial(torch.optim.Adam, lr=1e-3), 3, weight_decay=0.0, rules=protocol("ef", "reference")
    )
    module.double()
    batch = collate(SEQUENCES, dtype=torch.float64)
    ours = module.training_step(batch, 0)
    (ours_grad,) = torch.autograd.grad(ours, module.model.mark_embedding.weight)
    times, marks, masks = meta_tpp_inputs(batch)
    model = module.model
    histories = model(batch["intervals"], batch["marks"])
    theirs = meta_tpp_loss(histories, model.time_head.net, model.mark_head, times, marks, masks)
    (their_grad,) = torch.autograd.grad(theirs, module.model.mark_embedding.weight)
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-12)
    torch.testing.assert_close(ours_grad, their_grad, rtol=1e-10, atol=1e-12)


def test_survival_cdf_is_clamped_as_meta_tpp_does() -> None:
    """An interval far beyond every component: the clamped CDF caps the survival at log(1e-5)."""
    model, _ = model_and_batch()
    batch = collate([EventSequence([0.0, 1.0, 1.0 + 1e6], [0, 1, 2])], dtype=torch.float64)
    with torch.no_grad():
        scores = score_batch(model, batch, time_eps=1e-12)
    assert float(scores.last_survival_ll[0]) == pytest.approx(math.log(1e-5), rel=1e-9)
