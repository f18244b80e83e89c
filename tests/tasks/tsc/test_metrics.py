"""Accuracy and mean cross-entropy over a split, against a hand count."""

from __future__ import annotations

import math

import pytest
import torch

from recurrent_attention.tasks.tsc.metrics import ClassificationTotals


def nll(row: list[float], k: int) -> float:
    """-log softmax(row)[k], written out."""
    return -(row[k] - math.log(sum(math.exp(v) for v in row)))


def test_accuracy_and_loss_against_a_hand_count() -> None:
    totals = ClassificationTotals()
    # batch 1: predictions 1, 0, 2 for targets 1, 1, 2 -> 2 right; batch 2: prediction 0 for 0 -> right
    totals.update(torch.tensor([[0.0, 3.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 5.0]]), torch.tensor([1, 1, 2]))
    totals.update(torch.tensor([[0.0, 0.0, 0.0]]), torch.tensor([0]))
    result = totals.compute()
    assert result["acc"] == pytest.approx(75.0)
    expected = (nll([0, 3, 0], 1) + nll([2, 1, 0], 1) + nll([0, 0, 5], 2) + nll([0, 0, 0], 0)) / 4
    assert result["loss"] == pytest.approx(expected, rel=1e-12)


def test_empty_totals_refuse_to_report() -> None:
    with pytest.raises(RuntimeError):
        ClassificationTotals().compute()
