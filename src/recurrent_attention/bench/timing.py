"""Wall-clock timing with warm-up and adaptive repetition (benchmarks only, never tests)."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(
    fn: Callable[[], object], device: torch.device, budget_s: float = 2.0, max_reps: int = 20
) -> float:
    """Median seconds per call: one warm-up, then repeat until ``budget_s`` or ``max_reps``."""
    fn()
    _sync(device)
    times: list[float] = []
    while len(times) < max_reps and sum(times) < budget_s:
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]
