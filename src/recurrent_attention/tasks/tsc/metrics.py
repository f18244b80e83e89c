"""Accuracy (in percent, as the paper reports it) and mean cross-entropy over a whole split."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


class ClassificationTotals:
    """Exact counts over every case of a split, whatever the batch sizes (the last batch is smaller)."""

    def __init__(self) -> None:
        self.correct, self.count, self.loss_sum = 0, 0, 0.0

    def update(self, logits: Tensor, target: Tensor) -> None:
        logits, target = logits.detach(), target.detach()
        self.correct += int((logits.argmax(dim=-1) == target).sum())
        self.count += len(target)
        self.loss_sum += float(F.cross_entropy(logits.double(), target, reduction="sum"))

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise RuntimeError("no predictions were accumulated")
        return {"acc": 100.0 * self.correct / self.count, "loss": self.loss_sum / self.count}
