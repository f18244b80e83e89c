"""MSE and MAE accumulated exactly over every window, step and channel of a split."""

from __future__ import annotations

from torch import Tensor


class ErrorTotals:
    """Running sums in float64, so the result equals the mean over the concatenated predictions."""

    def __init__(self) -> None:
        self.squared, self.absolute, self.count = 0.0, 0.0, 0

    def update(self, prediction: Tensor, target: Tensor) -> None:
        error = prediction.detach().double() - target.detach().double()
        self.squared += float(error.pow(2).sum())
        self.absolute += float(error.abs().sum())
        self.count += error.numel()

    def compute(self) -> dict[str, float]:
        if self.count == 0:
            raise RuntimeError("no predictions were accumulated")
        return {"mse": self.squared / self.count, "mae": self.absolute / self.count}
