"""The synthetic ``sin`` set: an inhomogeneous Poisson process with a sinusoidal intensity.

``lambda(t) = a + b sin(2 pi t / period)`` with ``a = b = 1``, ``period = 4 pi`` and each sequence
observed on ``[0, 32 pi]`` (the Aaren paper's appendix C.2: a sine of period 4 pi over [0, 32 pi];
Meta TPP does not publish the amplitude, so ``a = b = 1`` is our choice: a non-negative intensity
with mean 1, about 100.5 events per sequence). Sampled by Lewis-Shedler thinning: candidates from a
homogeneous process of rate ``a + |b|``, each kept with probability ``lambda(t) / (a + |b|)``.
1000 sequences from ``numpy.random.default_rng(seed)``, seed 0 unless configured.

Because the process is known, :func:`process_meta_tpp_nll` scores a split under the process itself:
what a perfect model would score there, so a trained model's NLL can be read against it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from recurrent_attention.tasks.ef.formats import EventSequence
from recurrent_attention.tasks.ef.mixture import clamped_log_survival


@dataclass(frozen=True)
class SinIntensity:
    a: float = 1.0
    b: float = 1.0
    period: float = 4 * math.pi
    t_end: float = 32 * math.pi

    def __post_init__(self) -> None:
        if self.a < abs(self.b):
            raise ValueError(f"intensity a + b sin(.) must be non-negative: a={self.a} < |b|={abs(self.b)}")

    def __call__(self, t: np.ndarray) -> np.ndarray:
        return self.a + self.b * np.sin(2 * math.pi * np.asarray(t) / self.period)

    def integral(self, t0: np.ndarray | float, t1: np.ndarray | float) -> np.ndarray:
        """``int_{t0}^{t1} lambda(t) dt``: the expected number of events in ``[t0, t1]``."""
        w = 2 * math.pi / self.period
        return self.a * (np.asarray(t1) - t0) - self.b / w * (
            np.cos(w * np.asarray(t1)) - np.cos(w * np.asarray(t0))
        )


def sample_thinning(intensity: SinIntensity, rng: np.random.Generator) -> np.ndarray:
    """One sequence of event times on ``[0, t_end]`` by Lewis-Shedler thinning."""
    bound = intensity.a + abs(intensity.b)
    candidates: list[float] = []
    t = 0.0
    while True:
        t += rng.exponential(1.0 / bound)
        if t > intensity.t_end:
            break
        candidates.append(t)
    times = np.asarray(candidates)
    keep = rng.uniform(size=len(times)) * bound < intensity(times)
    return times[keep]


def generate_sin(
    n_sequences: int = 1000, seed: int = 0, intensity: SinIntensity | None = None
) -> list[EventSequence]:
    """``n_sequences`` unmarked sequences on ``[0, t_end]`` (the window end enters the likelihood)."""
    intensity = intensity or SinIntensity()
    rng = np.random.default_rng(seed)
    sequences = []
    for _ in range(n_sequences):
        times = sample_thinning(intensity, rng)
        sequences.append(EventSequence(times, np.zeros(len(times), np.int64), t_end=intensity.t_end))
    return sequences


def process_meta_tpp_nll(sequences: Sequence[EventSequence], intensity: SinIntensity) -> float:
    """Meta TPP's NLL (:mod:`.likelihood`) of ``sequences`` under the process that generated them.

    Given event ``t_i`` the next interval has density ``lambda(t_{i+1}) exp(-Lambda(t_i, t_{i+1}))``
    (a Poisson process forgets the rest of its history). As Meta TPP scores it, every interval after
    each first event is scored by that density except the last, which is scored by its survival
    ``exp(-Lambda)`` with the CDF clamped as Meta TPP clamps it; the sum over sequences is divided
    by all their events, first ones included. Unmarked, so there is no mark term.
    """
    total, n_events = 0.0, 0
    for s in sequences:
        n_events += len(s)
        if len(s) < 2:
            continue
        times = np.asarray(s.times, dtype=np.float64)
        compensator = intensity.integral(times[:-1], times[1:])
        log_density = np.log(intensity(times[1:-1])) - compensator[:-1]
        total -= float(log_density.sum()) + clamped_log_survival(1.0 - math.exp(-float(compensator[-1])))
    return total / n_events
