"""Mean class accuracy (mCA: the mean over classes of per-class recall) and top-1 accuracy, in percent.

mCA is Toyota Smarthome's headline metric because its classes are very unbalanced; it equals
sklearn's ``balanced_accuracy_score``. Classes absent from a split (the CS validation set lacks
three) are left out of the mean, as balanced accuracy does.
"""

from __future__ import annotations

import torch
from torch import Tensor


class VideoTotals:
    """Per-class counts over a whole split; every number attribute is a sum, so ranks combine by adding.

    The class count is kept as a ``range`` (not a number), so that summing over ranks leaves it alone.
    """

    def __init__(self, n_classes: int) -> None:
        self.classes = range(n_classes)
        self.count, self.correct, self.loss_sum = 0, 0, 0.0
        for k in self.classes:
            setattr(self, f"seen_{k}", 0)
            setattr(self, f"hit_{k}", 0)

    def update(self, predicted: Tensor, target: Tensor, loss_sum: float = 0.0) -> None:
        """``predicted`` and ``target`` are class indices ``(B,)``; ``loss_sum`` the batch's summed loss."""
        predicted, target = predicted.detach().cpu(), target.detach().cpu()
        hits = predicted == target
        seen = torch.bincount(target, minlength=len(self.classes)).tolist()
        hit = torch.bincount(target[hits], minlength=len(self.classes)).tolist()
        for k in self.classes:
            setattr(self, f"seen_{k}", getattr(self, f"seen_{k}") + seen[k])
            setattr(self, f"hit_{k}", getattr(self, f"hit_{k}") + hit[k])
        self.count += len(target)
        self.correct += int(hits.sum())
        self.loss_sum += loss_sum

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise RuntimeError("no predictions were accumulated")
        recalls = [
            getattr(self, f"hit_{k}") / getattr(self, f"seen_{k}")
            for k in self.classes
            if getattr(self, f"seen_{k}") > 0
        ]
        return {
            "mca": 100.0 * sum(recalls) / len(recalls),
            "acc": 100.0 * self.correct / self.count,
            "loss": self.loss_sum / self.count,
        }
