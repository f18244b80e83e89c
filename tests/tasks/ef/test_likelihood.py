"""NLL, RMSE and accuracy by hand; the explicit L2 term equals Adam's coupled weight decay."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from scipy import stats

from recurrent_attention.models import Transformer
from recurrent_attention.ops import host_reads
from recurrent_attention.tasks.ef.data import collate
from recurrent_attention.tasks.ef.formats import EventSequence
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.likelihood import EventScores, score_batch
from recurrent_attention.tasks.ef.metrics import EventTotals
from recurrent_attention.tasks.ef.module import EventModule


def small_model(n_marks: int = 3) -> EventModel:
    torch.manual_seed(0)
    return (
        EventModel(Transformer(d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0), n_marks)
        .double()
        .eval()
    )


def hand_terms(model: EventModel, batch: dict, position: int) -> tuple[list, list, list, torch.Tensor]:
    """The mixture (as plain numbers) and mark log-probabilities predicted at ``position`` of row 0."""
    with torch.no_grad():
        mixture, logits = model.predict(model(batch["intervals"], batch["marks"])[0, position])
    weights = torch.softmax(mixture.log_weights, -1).tolist()
    return weights, mixture.mu.tolist(), mixture.sigma.tolist(), torch.log_softmax(logits, -1)


def test_two_event_nll_by_hand() -> None:
    """Event 1 conditions, event 2 is scored: NLL = -(log f(1.2) + log P(mark 2)), no survival term."""
    model = small_model()
    batch = collate([EventSequence([0.5, 1.7], [1, 2])], dtype=torch.float64)
    weights, mu, sigma, log_marks = hand_terms(model, batch, 0)
    density = sum(
        w * math.exp(-((math.log(1.2) - m) ** 2) / (2 * s * s)) / (1.2 * s * math.sqrt(2 * math.pi))
        for w, m, s in zip(weights, mu, sigma, strict=True)
    )
    expected = -(math.log(density) + float(log_marks[2]))
    with torch.no_grad():
        scores = score_batch(model, batch)
    assert float(scores.nll_sum()) == pytest.approx(expected, rel=1e-10)
    totals = EventTotals()
    totals.update(scores, batch)
    assert totals.compute()["nll"] == pytest.approx(expected, rel=1e-10)
    # Meta TPP scores the last (here the only predicted) interval by its survival and divides by 2 events.
    survival = sum(
        w * stats.lognorm(s=s, scale=math.exp(m)).sf(1.2) for w, m, s in zip(weights, mu, sigma, strict=True)
    )
    meta_tpp = -(math.log(survival) + float(log_marks[2])) / 2
    assert totals.compute(nll="meta_tpp")["nll"] == pytest.approx(meta_tpp, rel=1e-9)
    assert totals.compute()["nll_meta_tpp"] == pytest.approx(meta_tpp, rel=1e-9)
    mean = sum(w * math.exp(m + s * s / 2) for w, m, s in zip(weights, mu, sigma, strict=True))
    assert totals.compute()["rmse"] == pytest.approx(abs(mean - 1.2), rel=1e-10)
    assert totals.compute()["acc"] == (100.0 if int(log_marks.argmax()) == 2 else 0.0)


def test_window_end_adds_the_survival_term() -> None:
    model = small_model()
    closed = collate([EventSequence([0.5, 1.7], [1, 2])], dtype=torch.float64)
    open_ = collate([EventSequence([0.5, 1.7], [1, 2], t_end=2.5)], dtype=torch.float64)
    weights, mu, sigma, _ = hand_terms(model, open_, 1)
    survival = sum(
        w * stats.lognorm(s=s, scale=math.exp(m)).sf(0.8) for w, m, s in zip(weights, mu, sigma, strict=True)
    )
    with torch.no_grad():
        gap = float(score_batch(model, open_).nll_sum() - score_batch(model, closed).nll_sum())
    assert gap == pytest.approx(-math.log(survival), rel=1e-9)


def test_padding_does_not_change_a_sequence_score() -> None:
    model = small_model()
    short = EventSequence([0.0, 0.3, 1.1], [0, 1, 2])
    long = EventSequence([0.0, 0.2, 0.9, 1.0, 2.5, 4.0], [2, 2, 0, 1, 0, 1])
    with torch.no_grad():
        alone = score_batch(model, collate([short], dtype=torch.float64)).nll_sum()
        both = score_batch(model, collate([short, long], dtype=torch.float64))
        other = score_batch(model, collate([long], dtype=torch.float64)).nll_sum()
    assert float(both.nll_sum()) == pytest.approx(float(alone + other), rel=1e-10)


@pytest.mark.parametrize("host_devices", [{"cpu"}, set()], ids=["rows-selected", "dense-as-on-gpu"])
def test_mark_terms_equal_the_head_over_every_position(
    host_devices: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU the mark head runs only where an event is predicted; elsewhere (the form a GPU
    runs, with no host read) on every position, masked. Both forms' log-likelihood, predicted marks
    and gradients equal the naive form that scores every (padded) position and masks after."""
    monkeypatch.setattr(host_reads, "HOST_READ_DEVICES", frozenset(host_devices))
    model = small_model(n_marks=5)
    generator = torch.Generator().manual_seed(3)
    sequences = [
        EventSequence(
            torch.rand(n, generator=generator).cumsum(0).tolist(),
            torch.randint(5, (n,), generator=generator).tolist(),
        )
        for n in (2, 7, 4, 1)
    ]
    batch = collate(sequences, dtype=torch.float64)
    batch["marks"] = torch.where(batch["mask"], batch["marks"], 4)  # padding's mark: never read
    target = batch["mask"][:, 1:]
    scores = score_batch(model, batch)
    fast = torch.autograd.grad(scores.mark_ll.sum(), list(model.parameters()), allow_unused=True)
    _, logits = model.predict(model(batch["intervals"], batch["marks"]))
    log_probs = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["marks"][:, 1:, None]).squeeze(-1)
    naive = torch.where(target, log_probs, torch.zeros(()))
    slow = torch.autograd.grad(naive.sum(), list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(scores.mark_ll, naive, rtol=1e-12, atol=1e-12)
    assert torch.equal(scores.mark_pred[target], logits[:, :-1].argmax(-1)[target])
    assert not scores.mark_pred[~target].any()
    for a, b in zip(fast, slow, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def scores_with_errors(errors: list[list[float]], correct: list[list[bool]]) -> tuple[EventScores, dict]:
    """Fake scores whose predicted means differ from the targets by ``errors`` (row-wise, right-padded)."""
    n = max(len(e) for e in errors) + 1
    target = torch.tensor([[i < len(e) for i in range(n - 1)] for e in errors])
    intervals = torch.ones(len(errors), n, dtype=torch.float64)
    mean = intervals[:, 1:].clone()
    marks = torch.zeros(len(errors), n, dtype=torch.long)
    mark_pred = torch.ones(len(errors), n - 1, dtype=torch.long)
    for row, (err, ok) in enumerate(zip(errors, correct, strict=True)):
        mean[row, : len(err)] += torch.tensor(err, dtype=torch.float64)
        mark_pred[row, : len(ok)] = torch.tensor([0 if c else 1 for c in ok])
    zeros = torch.zeros_like(mean)
    per_row = torch.zeros(len(errors))
    scores = EventScores(zeros, zeros, per_row, target, mean, mark_pred, per_row, per_row)
    batch = {"intervals": intervals, "marks": marks, "lengths": target.sum(1) + 1}
    return scores, batch


def test_rmse_default_and_meta_tpp_quirk() -> None:
    """Errors [1, -1] and [2]: RMSE sqrt(6/3); Meta TPP squares each sequence's sum: sqrt((0 + 4)/3)."""
    scores, batch = scores_with_errors([[1.0, -1.0], [2.0]], [[True, False], [True]])
    totals = EventTotals()
    totals.update(scores, batch)
    assert totals.compute()["rmse"] == pytest.approx(math.sqrt(6 / 3))
    assert totals.compute(rmse="meta_tpp")["rmse"] == pytest.approx(math.sqrt(4 / 3))
    assert totals.compute()["acc"] == pytest.approx(100 * 2 / 3)


def test_l2_term_equals_adam_weight_decay() -> None:
    """One Adam step on NLL + wd/2 |theta|^2 lands where Adam(weight_decay=wd) on the NLL does."""
    batch = collate([EventSequence([0.0, 0.4, 1.5, 1.6], [0, 1, 1, 0])])
    results = []
    for explicit in (True, False):
        torch.manual_seed(0)
        backbone = Transformer(d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0)
        wd = 0.05
        module = EventModule(
            backbone,
            partial(torch.optim.Adam, lr=1e-2, weight_decay=0.0 if explicit else wd),
            2,
            weight_decay=wd,
        )
        optimizer = module.configure_optimizers()
        nll = module.score(batch).nll_sum()
        (nll + module.l2_penalty() if explicit else nll).backward()
        optimizer.step()
        results.append(torch.cat([p.detach().flatten() for p in module.parameters()]))
    torch.testing.assert_close(results[0], results[1], rtol=1e-5, atol=1e-6)
