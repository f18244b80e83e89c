"""A history-free floor for an event-forecasting NLL: one log-normal over intervals, a bigram over marks.

Why: a neural TPP's NLL says little until it is set beside a model that ignores the history. The
interval model is one log-normal fitted by maximum likelihood to the training intervals (no
history at all); the mark model is the training set's mark-to-next-mark transition frequencies
(add-``alpha`` smoothed), the smallest model that uses the previous mark. Scored with Meta TPP's NLL
(:mod:`.likelihood`: each sequence's last interval by its clamped log survival, every other
interval after the first by its density, every mark after the first; divided by all events), the
number the paper's tables report, so it bounds what a trained model's number can be on a split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

from recurrent_attention.tasks.ef.formats import EventSequence
from recurrent_attention.tasks.ef.mixture import HALF_LOG_2PI, clamped_log_survival


@dataclass(frozen=True)
class HistoryFreeBaseline:
    """``log tau ~ Normal(mu, sigma)`` for every interval; ``log_transition[j, k] = log P(k | prev. j)``."""

    mu: float
    sigma: float
    log_transition: np.ndarray

    @classmethod
    def fit(
        cls, sequences: Sequence[EventSequence], n_marks: int, alpha: float = 1.0, time_eps: float = 1e-12
    ) -> HistoryFreeBaseline:
        """Maximum likelihood on every predicted interval (all but each first); smoothed transition counts."""
        log_tau = np.concatenate([np.log(s.intervals()[1:] + time_eps) for s in sequences])
        counts = np.full((n_marks, n_marks), float(alpha))
        for s in sequences:
            np.add.at(counts, (s.marks[:-1], s.marks[1:]), 1.0)
        return cls(float(log_tau.mean()), float(log_tau.std()), np.log(counts / counts.sum(1, keepdims=True)))

    def meta_tpp_nll(self, sequences: Sequence[EventSequence], time_eps: float = 1e-12) -> float:
        """Meta TPP's NLL over ``sequences``: summed over them, divided by all their events."""
        total, n_events = 0.0, 0
        for s in sequences:
            n_events += len(s)
            if len(s) < 2:
                continue
            z = (np.log(s.intervals()[1:] + time_eps) - self.mu) / self.sigma
            density = (
                -np.log(s.intervals()[1:-1] + time_eps)
                - math.log(self.sigma)
                - HALF_LOG_2PI
                - 0.5 * z[:-1] ** 2
            )
            survival = clamped_log_survival(float(ndtr(z[-1])))
            marks = self.log_transition[s.marks[:-1], s.marks[1:]]
            total -= density.sum() + survival + marks.sum()
        return total / n_events


def fit_on_dev(
    train: Sequence[EventSequence],
    dev: Sequence[EventSequence],
    n_marks: int,
    alphas: Sequence[float] = (1.0, 0.3, 0.1, 0.03, 0.01, 0.001),
) -> tuple[HistoryFreeBaseline, float]:
    """The baseline fitted on ``train`` with the smoothing of the lowest ``dev`` NLL, and that ``alpha``."""
    fits = [(HistoryFreeBaseline.fit(train, n_marks, alpha), alpha) for alpha in alphas]
    return min(fits, key=lambda fit: fit[0].meta_tpp_nll(dev))
