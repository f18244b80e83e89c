"""Time-Series-Library's epoch-selection rule as a metric that Lightning's callbacks can monitor.

TSLib's ``EarlyStopping`` counts a validation score EQUAL to the best so far as an improvement: it
saves that epoch's checkpoint and resets the patience counter. Lightning's ``ModelCheckpoint`` and
``EarlyStopping`` need a strict improvement. The number of TSLib improvements so far rises exactly
on the epochs TSLib saves and stays flat on the others, so monitoring it (mode ``max``) makes both
callbacks choose the checkpoint and stop at the epoch TSLib would.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class TiesImprove:
    """Best score so far (higher is better) and how many epochs improved on it or equalled it."""

    best: float | None = None
    improvements: int = 0

    def update(self, score: float) -> int:
        if self.best is None or score >= self.best:
            self.best = score
            self.improvements += 1
        return self.improvements

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.improvements = state["best"], state["improvements"]
