"""Wall-clock timing with warm-up and adaptive repetition (benchmarks only, never tests)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    fn: Callable[[], object],
    device: torch.device,
    budget_s: float = 2.0,
    max_reps: int = 20,
    min_reps: int = 3,
) -> float:
    """Fastest seconds per call: one warm-up, then at least ``min_reps`` calls, more until
    ``budget_s`` is spent or ``max_reps`` reached.

    The fastest call is the one least disturbed by other work on a shared machine (``timeit``'s
    reasoning); a median of the one or two calls a slow case affords is not robust to that.
    """
    fn()
    sync(device)
    times: list[float] = []
    while len(times) < min_reps or (len(times) < max_reps and sum(times) < budget_s):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)
