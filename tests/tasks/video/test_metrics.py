"""mCA (mean per-class recall) and top-1 against hand-computed values, whatever the batching."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.tasks.video.metrics import VideoTotals

TARGET = torch.tensor([0, 0, 0, 1, 2, 2])
PREDICTED = torch.tensor([0, 1, 0, 1, 0, 2])


def test_mca_by_hand() -> None:
    totals = VideoTotals(n_classes=4)  # class 3 never occurs: left out of the mean
    totals.update(PREDICTED, TARGET, loss_sum=3.0)
    metrics = totals.compute()
    # recalls: class 0 -> 2/3, class 1 -> 1/1, class 2 -> 1/2
    assert metrics["mca"] == pytest.approx(100 * (2 / 3 + 1 + 1 / 2) / 3)
    assert metrics["acc"] == pytest.approx(100 * 4 / 6)
    assert metrics["loss"] == pytest.approx(0.5)


def test_mca_does_not_depend_on_batches() -> None:
    totals = VideoTotals(n_classes=3)
    for start in range(0, 6, 4):
        totals.update(PREDICTED[start : start + 4], TARGET[start : start + 4])
    assert totals.compute()["mca"] == pytest.approx(100 * (2 / 3 + 1 + 1 / 2) / 3)


def test_mca_differs_from_accuracy_on_unbalanced_classes() -> None:
    totals = VideoTotals(n_classes=2)
    totals.update(torch.zeros(10, dtype=torch.long), torch.tensor([0] * 9 + [1]))
    metrics = totals.compute()
    assert metrics["acc"] == pytest.approx(90.0) and metrics["mca"] == pytest.approx(50.0)


def test_class_count_is_not_a_summed_total() -> None:
    totals = VideoTotals(n_classes=31)
    numbers = [name for name, value in vars(totals).items() if isinstance(value, (bool, int, float))]
    assert len(numbers) == 3 + 2 * 31  # what sum_across_ranks adds: counts only, not the class count
