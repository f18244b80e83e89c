"""Scoring a batch in pieces of similar length gives the whole batch's loss, gradients and metrics."""

from __future__ import annotations

import itertools
from functools import partial

import pytest
import torch

from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.tasks.ef import module as event_module
from recurrent_attention.tasks.ef.batching import length_groups, split_by_length
from recurrent_attention.tasks.ef.data import collate
from recurrent_attention.tasks.ef.formats import EventSequence
from recurrent_attention.tasks.ef.module import EventModule
from tests.helpers.protocols import protocol

LENGTHS = (3, 40, 5, 2, 38, 9, 4, 17)


def brute_force_cost(lengths: list[int], overhead: float) -> float:
    """The cheapest ``sum(overhead + rows * longest)`` over every split of the sorted lengths."""
    ordered = sorted(lengths)
    best = float("inf")
    for cuts in itertools.product((False, True), repeat=len(ordered) - 1):
        cost, start = 0.0, 0
        for end in [i + 1 for i, cut in enumerate(cuts) if cut] + [len(ordered)]:
            cost += overhead + (end - start) * ordered[end - 1]
            start = end
        best = min(best, cost)
    return best


@pytest.mark.parametrize("overhead", [0.0, 5.0, 30.0, 1e9])
def test_groups_cover_every_row_once_at_the_least_cost(overhead: float) -> None:
    generator = torch.Generator().manual_seed(int(overhead) % 97)
    for _ in range(20):
        lengths = torch.randint(1, 60, (7,), generator=generator).tolist()
        groups = length_groups(lengths, overhead)
        assert sorted(itertools.chain(*groups)) == list(range(len(lengths)))
        cost = sum(overhead + len(g) * max(lengths[row] for row in g) for g in groups)
        assert cost == pytest.approx(brute_force_cost(lengths, overhead))
    assert len(length_groups(list(LENGTHS), 1e9)) == 1


def sequences() -> list[EventSequence]:
    generator = torch.Generator().manual_seed(5)
    return [
        EventSequence(
            torch.rand(n, generator=generator, dtype=torch.float64).mul(2).cumsum(0).tolist(),
            torch.randint(4, (n,), generator=generator).tolist(),
        )
        for n in LENGTHS
    ]


def test_pieces_are_the_rows_cut_to_their_longest() -> None:
    batch = collate(sequences(), dtype=torch.float64)
    pieces = split_by_length(batch, overhead=10.0)
    assert [sorted(p["lengths"].tolist()) for p in pieces] == [[2, 3, 4, 5], [9, 17], [38, 40]]
    assert sorted(itertools.chain(*(p["lengths"].tolist() for p in pieces))) == sorted(LENGTHS)
    for piece in pieces:
        assert piece["intervals"].shape[1] == int(piece["lengths"].max())
        for row, n in enumerate(piece["lengths"].tolist()):
            original = LENGTHS.index(n)  # the lengths are distinct
            assert torch.equal(piece["intervals"][row, :n], batch["intervals"][original, :n])
            assert torch.equal(piece["marks"][row, :n], batch["marks"][original, :n])
            assert torch.equal(piece["tail"][row], batch["tail"][original])


def module(backbone: str, compat: str) -> EventModule:
    torch.manual_seed(0)
    make = Aaren if backbone == "aaren" else Transformer
    net = make(d_model=8, n_heads=2, n_layers=2, d_ff=16, dropout=0.0)
    return EventModule(
        net, partial(torch.optim.Adam, lr=1e-3), 4, weight_decay=0.0, rules=protocol("ef", compat)
    ).double()


def record(logged: dict[str, float], key: str, value: torch.Tensor, **_: object) -> None:
    logged[key] = float(value.detach())


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
@pytest.mark.parametrize("compat", ["default", "reference"])
@pytest.mark.parametrize("backbone", ["aaren", "transformer"])
def test_split_training_loss_gradients_and_metrics_equal_the_whole_batch(
    backbone: str, compat: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = collate(sequences(), dtype=torch.float64)
    results = {}
    for name, split in (("whole", lambda b: [b]), ("pieces", partial(split_by_length, overhead=10.0))):
        monkeypatch.setattr(event_module, "split_by_length", split)
        model = module(backbone, compat)
        logged: dict[str, float] = {}
        model.log = partial(record, logged)
        loss = model.training_step(batch, 0)
        grads = torch.autograd.grad(loss, list(model.parameters()))
        with torch.no_grad():
            model.eval()
            model.accumulate(batch, "test")
        results[name] = (loss.detach(), grads, logged["train/nll"], model.computed_totals("val"))
    whole, pieces = results["whole"], results["pieces"]
    torch.testing.assert_close(pieces[0], whole[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(pieces[1], whole[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    # train/nll: per predicted event (default) or, as Meta TPP divides, per event (reference)
    events = sum(LENGTHS) if compat == "reference" else sum(n - 1 for n in LENGTHS)
    assert pieces[2] == pytest.approx(float(whole[0]) / events, rel=1e-12)
    assert whole[2] == pytest.approx(float(whole[0]) / events, rel=1e-12)
    assert pieces[3] == pytest.approx(whole[3], rel=1e-12)
