"""Aaren's Figure 5 on this machine: memory and cumulative time of N token-by-token steps.

Unlike :mod:`~recurrent_attention.bench.streaming`, which times one step at a given context, every
model here streams from an empty state, token after token, up to ``n_max`` tokens, and the figure is
read at each power of two: the cumulative seconds, the bytes its state holds (a KV cache's allocated
capacity, which the lean step doubles when full; an exported Transformer's fixed capacity), and the
peak growth of the process's resident memory over the stream so far (Linux: ``VmHWM`` after
resetting it through ``/proc/self/clear_refs``; elsewhere not measured). That growth is a lower
bound: memory the allocator kept from earlier work in the process (the benchmark's step grid, a
previous stream) is reused without growing the resident set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from recurrent_attention.bench.streaming import state_bytes

_PROC = Path("/proc/self")


@dataclass
class StreamCost:
    model: str
    n: int  # tokens streamed so far
    seconds: float  # cumulative, all n steps
    state_bytes: int  # what the state holds after n tokens
    peak_bytes: int | None  # growth of resident memory over the stream so far (None: not measurable)


@dataclass
class StreamRunner:
    """A step ``(x_t, state) -> (y_t, state)``, its empty state and how many bytes a state holds;
    an exported step takes numpy tokens (``numpy=True``)."""

    step: Callable[[object, object], tuple[object, object]]
    state: object
    nbytes: Callable[[object], int] = state_bytes
    numpy: bool = False


def _memory_kib(field: str) -> int | None:
    try:
        for line in (_PROC / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> int | None:
    """Reset the resident-memory high-water mark; the resident KiB it starts from (None: unsupported)."""
    try:
        (_PROC / "clear_refs").write_text("5")
    except OSError:
        return None
    return _memory_kib("VmRSS")


def checkpoints(n_max: int) -> list[int]:
    """1, 2, 4, ... up to ``n_max`` (and ``n_max`` itself)."""
    points = [1 << k for k in range(n_max.bit_length()) if 1 << k <= n_max]
    return points if points[-1] == n_max else [*points, n_max]


@torch.no_grad()
def stream_costs(
    runners: dict[str, StreamRunner],
    tokens: list[torch.Tensor],
    progress: Callable[[str], None] | None = None,
) -> list[StreamCost]:
    """Each runner streams every token of ``tokens`` from its empty state; a row per checkpoint."""
    rows = []
    marks = set(checkpoints(len(tokens)))
    as_numpy = [t.numpy() for t in tokens]
    for name, runner in runners.items():
        if progress:
            progress(f"stream {name} ({len(tokens)} tokens)")
        state, seconds = runner.state, 0.0
        start_kib = _reset_peak()
        for n, x_t in enumerate(as_numpy if runner.numpy else tokens, start=1):
            begin = time.perf_counter()
            _, state = runner.step(x_t, state)
            seconds += time.perf_counter() - begin
            if n in marks:
                peak = _memory_kib("VmHWM")
                grown = None if start_kib is None or peak is None else max(0, peak - start_kib) * 1024
                rows.append(StreamCost(name, n, seconds, runner.nbytes(state), grown))
    return rows


def as_rows(costs: list[StreamCost]) -> list[dict]:
    return [asdict(c) for c in costs]
