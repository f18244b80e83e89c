"""Aaren's Figure 5 on this machine: memory and cumulative time of N token-by-token steps.

Unlike :mod:`~recurrent_attention.bench.streaming`, which times one step at a given context, every
model here streams from an empty state, token after token, up to ``n_max`` tokens, and the figure is
read at each power of two: the cumulative seconds, the bytes its state holds (a KV cache's allocated
capacity, which the lean step doubles when full; an exported Transformer's fixed capacity), and the
peak growth of the process's resident memory over the stream so far (Linux: ``VmHWM`` after
resetting it through ``/proc/self/clear_refs``, over the resident size the stream starts from;
elsewhere not measured). Each stream runs in a fresh process (:class:`StreamSpec` says how it
builds its model there): in a process that has done other work first, the allocator hands the
stream memory it kept from that work, already resident, and the growth reads zero.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from recurrent_attention.bench.streaming import exported_stream, state_bytes, stream_step
from recurrent_attention.deploy import fast_stepper
from recurrent_attention.deploy.onnx_kv import OnnxKVStream
from recurrent_attention.models.base import Backbone

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


@dataclass
class StreamSpec:
    """What a fresh process needs to build one stream: the backbone (class, arguments and weights),
    and for an exported step the ONNX file it runs instead of the eager step (Aaren's and linear
    attention's through :func:`~recurrent_attention.bench.streaming.exported_stream`, the
    Transformer's through :class:`~recurrent_attention.deploy.onnx_kv.OnnxKVStream` with a cache of
    ``capacity`` slots)."""

    model_class: type[Backbone]
    arguments: dict
    weights: dict[str, Tensor] = field(repr=False)
    onnx: str | None = None
    capacity: int = 0

    @classmethod
    def of(
        cls, model: Backbone, arguments: dict, onnx: str | Path | None = None, capacity: int = 0
    ) -> StreamSpec:
        """``model``'s stream (built from ``arguments``, its weights copied)."""
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return cls(type(model), arguments, weights, None if onnx is None else str(onnx), capacity)

    def runner(self) -> StreamRunner:
        model = self.model_class(**self.arguments).eval()
        model.load_state_dict(self.weights)
        empty = model.init_state(1)
        if self.onnx is None:
            return StreamRunner(fast_stepper(model).step, empty)
        if self.capacity:
            stream = OnnxKVStream(self.onnx, empty, self.capacity)
            held = stream.cache_bytes
        else:
            stream = exported_stream(self.model_class, self.onnx, empty)
            held = stream.state_bytes
        return StreamRunner(stream_step(stream), None, lambda _: held, numpy=True)


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
def _stream(name: str, spec: StreamSpec, tokens: np.ndarray, threads: int) -> list[StreamCost]:
    """One stream, in the process that calls it: built, then every token from the empty state."""
    torch.set_num_threads(threads)
    runner = spec.runner()
    steps = list(tokens) if runner.numpy else list(torch.from_numpy(tokens))
    marks = set(checkpoints(len(steps)))
    if not runner.numpy:
        # An eager step leaves the state it is given as it was: one from the empty state loads what
        # a process loads once (the compiled kernels, the step's laid-out weights) before the stream.
        runner.step(steps[0], runner.state)
    rows, state, seconds = [], runner.state, 0.0
    start_kib = _reset_peak()
    for n, x_t in enumerate(steps, start=1):
        begin = time.perf_counter()
        _, state = runner.step(x_t, state)
        seconds += time.perf_counter() - begin
        if n in marks:
            peak = _memory_kib("VmHWM")
            grown = None if start_kib is None or peak is None else max(0, peak - start_kib) * 1024
            rows.append(StreamCost(name, n, seconds, runner.nbytes(state), grown))
    return rows


def stream_costs(
    specs: dict[str, StreamSpec],
    tokens: Tensor,
    progress: Callable[[str], None] | None = None,
    threads: int = 1,
) -> list[StreamCost]:
    """Each stream, in a fresh process of its own on ``threads`` torch threads, streams every token
    of ``tokens (N, batch, d_model)`` from its empty state; a row per checkpoint."""
    rows = []
    for name, spec in specs.items():
        if progress:
            progress(f"stream {name} ({len(tokens)} tokens)")
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as fresh:
            # numpy, so the tokens reach the process by value, not as shared memory it would map
            # (and count as resident) token by token during the stream
            rows += fresh.submit(_stream, name, spec, tokens.numpy(), threads).result()
    return rows


def as_rows(costs: list[StreamCost]) -> list[dict]:
    return [asdict(c) for c in costs]
