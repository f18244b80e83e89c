"""Per-token inference cost at a given context length, for each backbone's deployed step (Aaren §4.5).

The cost of one step depends only on the shapes in the state (a KV cache of N tokens, or the
constant ``(m, u, w)`` of Aaren and ``(S, z)`` of linear attention), not on the numbers in it, so
the state at context N is filled with random contents of the right shape instead of streaming N
tokens first (16384 tokens at batch 64 would take the Transformer hours on a CPU). Then the step
(:func:`~recurrent_attention.deploy.fast_stepper`'s, and the Transformer's own, whose cache grows by
concatenation, as an extra column) runs token after token from there, state carried, and the
fastest step is kept (see :func:`fastest_seconds_per_step`).
:func:`check_and_time` does the same for one exported step against its eager form, after checking
that the two agree token after token (``scripts/export_step.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from recurrent_attention.deploy import Stepper, fast_stepper
from recurrent_attention.deploy.kv_cache import with_capacity
from recurrent_attention.deploy.onnx_aaren import OnnxStream, export_onnx
from recurrent_attention.deploy.onnx_linear import OnnxLinearStream, export_linear_onnx
from recurrent_attention.deploy.onnx_state import StateStream
from recurrent_attention.models.aaren import Aaren
from recurrent_attention.models.base import Backbone, State
from recurrent_attention.models.linear_attention import LinearTransformer
from recurrent_attention.models.transformer import KVCache, Transformer
from recurrent_attention.ops import ScanState
from recurrent_attention.ops.linear_forms import LinearState

EXPORTED_STEPS = 66  # tokens an exported step runs (2 untimed): its fastest of 64 is kept


@dataclass
class StepTiming:
    model: str
    batch: int
    n: int  # tokens already in the state when the timed steps start
    us_per_token: float | None  # None: skipped (see note)
    state_bytes: int
    note: str = ""


def state_bytes(state: object) -> int:
    """Bytes of every tensor (or numpy array) reachable in a (nested) state."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, np.ndarray):
        return state.nbytes
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(s) for s in state)
    if isinstance(state, dict):
        return sum(state_bytes(s) for s in state.values())
    return 0


def state_at_context(model: Backbone, n: int, batch: int, seed: int = 0) -> State:
    """A state of the shape ``model`` holds after ``n`` tokens, with random contents."""
    gen = torch.Generator().manual_seed(seed)
    empty = model.init_state(batch)
    if isinstance(model, Transformer):
        return [
            KVCache(*(torch.randn(*c.k.shape[:2], n, c.k.shape[-1], generator=gen) for _ in range(2)))
            for c in empty
        ]
    if isinstance(model, Aaren):
        return [
            ScanState(
                torch.randn(s.m.shape, generator=gen) * 3,
                1 + torch.rand(s.u.shape, generator=gen) * n,
                torch.randn(s.w.shape, generator=gen) * n**0.5,
            )
            for s in empty
        ]
    if isinstance(model, LinearTransformer):
        # sums over n tokens: of phi(k_j) v_j^T (signed) and of the positive features phi(k_j)
        return [
            LinearState(
                torch.randn(s.s.shape, generator=gen) * n**0.5,
                1 + torch.rand(s.z.shape, generator=gen) * n,
            )
            for s in empty
        ]
    raise TypeError(f"no context-filled state for {type(model).__name__}")


@dataclass
class Runner:
    """A step function with its own tokens and state, timed by :func:`fastest_seconds_per_step`."""

    step: Callable[[object, object], tuple[object, object]]
    tokens: list
    state: object


def fastest_seconds_per_step(
    runners: dict[str, Runner], budget_s: float = 2.0, min_steps: int = 50, cap_s: float = 5.0
) -> dict[str, float]:
    """The fastest step of each runner, each run on its own token after token (state carried).

    Each runner gets 2 untimed steps, then at least ``min_steps`` timed ones and until it has spent
    ``budget_s`` (but at least 3 and at most ``cap_s`` for a slow one). The fastest step is the
    one least disturbed by other work on a shared machine (``timeit``'s reasoning). Runners do not
    take turns step by step: a one-token step is small enough that another model's step in between
    evicts its weights from cache, which a deployed step never suffers.
    """
    fastest = {}
    for name, runner in runners.items():
        for x_t in runner.tokens[:2]:
            _, runner.state = runner.step(x_t, runner.state)
        times: list[float] = []
        for x_t in runner.tokens[2:]:
            start = time.perf_counter()
            _, runner.state = runner.step(x_t, runner.state)
            times.append(time.perf_counter() - start)
            spent = sum(times)
            if (len(times) >= min_steps and spent > budget_s) or (len(times) >= 3 and spent > cap_s):
                break
        fastest[name] = min(times)
    return fastest


EXPORTS: dict[type, tuple[Callable[[Backbone, str | Path], Path], type[StateStream]]] = {
    Aaren: (export_onnx, OnnxStream),
    LinearTransformer: (export_linear_onnx, OnnxLinearStream),
}
"""The backbones whose step exports with its constant-size state: the export and the stream that runs it."""


def exported_stream(model_class: type, path: str | Path, state: State, threads: int = 1) -> StateStream:
    """The onnxruntime stream of a ``model_class`` step exported to ``path``, started from ``state``."""
    return EXPORTS[model_class][1](path, state, threads)


def stream_step(stream: OnnxStream) -> Callable[[np.ndarray, object], tuple[np.ndarray, None]]:
    """``stream.push`` in the ``(x_t, state) -> (y_t, state)`` form the step timers call (the stream
    holds the state, so none is passed). Any stream with ``push`` fits (the exported Transformer's too)."""
    return lambda x_t, _state: (stream.push(x_t), None)


def check_and_time(
    backbone: Backbone, path: str | Path, tokens: int, threads: int = 1, seed: int = 0
) -> dict:
    """Max |exported - eager| over ``tokens`` steps at batch 1 (:func:`exported_stream` of the step
    exported to ``path``, Aaren's or linear attention's; eager:
    :func:`~recurrent_attention.deploy.fast_stepper`'s), and the fastest µs per token of each."""
    backbone = backbone.float().eval()
    eager = fast_stepper(backbone)
    x = torch.randn(tokens, 1, backbone.d_model, generator=torch.Generator().manual_seed(seed))
    state = backbone.init_state(1)
    stream = exported_stream(type(backbone), path, state, threads)
    worst = 0.0
    with torch.no_grad():
        for x_t in x:
            y_t, state = eager.step(x_t, state)
            worst = max(worst, float(np.abs(stream.push(x_t.numpy()) - y_t.numpy()).max()))
        runners = {
            "eager": Runner(eager.step, list(x), backbone.init_state(1)),
            "onnx": Runner(stream_step(stream), [t.numpy() for t in x], None),
        }
        seconds = fastest_seconds_per_step(runners)
    return {"max_abs_diff": worst, "eager_us": seconds["eager"] * 1e6, "onnx_us": seconds["onnx"] * 1e6}


@torch.no_grad()
def step_timings(
    models: dict[str, Backbone],
    contexts: list[int],
    batches: list[int],
    exported: dict[str, tuple[str, Callable[[State], Callable]]] | None = None,
    max_state_bytes: int = 2**32,
    max_steps: int = 1000,
    progress: Callable[[str], None] | None = None,
    rounds: int = 3,
    budget_s: float = 0.7,
    variants: dict[str, tuple[str, Callable[[Backbone], Stepper]]] | None = None,
) -> list[StepTiming]:
    """µs per token (fastest step) of every model's deployed step
    (:func:`~recurrent_attention.deploy.fast_stepper`) and of exported steps, at each (batch, N).

    ``exported`` maps a name to ``(model name, start)``: ``start`` takes that model's state at
    context N (a Transformer's preallocated past the timed steps) and returns a step
    ``(x_t: ndarray, state) -> (y_t, state)`` starting from it (e.g. an
    :class:`~recurrent_attention.deploy.onnx_aaren.OnnxStream` wrapped by :func:`stream_step`), timed by
    :func:`fastest_seconds_per_step`. The whole grid is timed ``rounds`` times, ``budget_s`` per
    runner each time, and the fastest round kept: a disturbance on a shared machine lasting
    seconds then spoils one round of one cell, not the figure (one N once read 35 % slow).
    ``variants`` maps a name to ``(model name, make)``: another deployed step of that model
    (``make(model)``, e.g. :func:`~recurrent_attention.deploy.fast_stepper` with bfloat16 weights),
    timed on the same tokens from the same state.
    """
    fastest: dict[tuple[str, int, int], StepTiming] = {}
    for round_index in range(rounds):
        for timing in _one_round(
            models,
            contexts,
            batches,
            exported,
            max_state_bytes,
            max_steps,
            budget_s,
            round_index,
            progress,
            variants or {},
        ):
            key = (timing.model, timing.batch, timing.n)
            kept = fastest.get(key)
            if kept is None or (timing.us_per_token is not None and timing.us_per_token < kept.us_per_token):
                fastest[key] = timing
    return list(fastest.values())


def _one_round(
    models: dict[str, Backbone],
    contexts: list[int],
    batches: list[int],
    exported: dict[str, tuple[str, Callable[[State], Callable]]] | None,
    max_state_bytes: int,
    max_steps: int,
    budget_s: float,
    round_index: int,
    progress: Callable[[str], None] | None,
    variants: dict[str, tuple[str, Callable[[Backbone], Stepper]]],
) -> list[StepTiming]:
    results = []
    steppers = {name: fast_stepper(model) for name, model in models.items()}
    steppers |= {name: make(models[model_name]) for name, (model_name, make) in variants.items()}
    for batch in batches:
        gen = torch.Generator().manual_seed(batch)
        for n in contexts:
            if progress:
                progress(f"steps round {round_index + 1} B={batch} N={n}")
            runners: dict[str, Runner] = {}
            sizes: dict[str, int] = {}  # the N tokens' state, not a preallocated cache's spare capacity
            for name, model in models.items():
                model.eval()
                tokens = list(torch.randn(max_steps + 2, batch, model.d_model, generator=gen))
                nbytes = state_bytes(model.init_state(batch)) + _bytes_per_token(model, batch) * n
                if nbytes > max_state_bytes:
                    note = f"skipped: state of {nbytes / 2**30:.1f} GiB over the cap"
                    results.append(StepTiming(name, batch, n, None, nbytes, note))
                    continue
                state = state_at_context(model, n, batch)
                if isinstance(model, Transformer):
                    # The baseline is a deployed KV cache: preallocated, so no timed step copies it.
                    # Growing it by concatenation (every token copies the cache) is the extra column.
                    runners[f"{name}_cat"] = Runner(model.step, tokens, state)
                    sizes[f"{name}_cat"] = nbytes
                    state = [with_capacity(*c.tokens(), n + len(tokens)) for c in state]
                # the model's deployed step and its variants, from the same state on the same tokens
                for stepped in (name, *(v for v, (model_name, _) in variants.items() if model_name == name)):
                    runners[stepped], sizes[stepped] = Runner(steppers[stepped].step, tokens, state), nbytes
                for export_name, (model_name, start) in (exported or {}).items():
                    if model_name == name:
                        # An exported cache attends to all its slots (the unused ones masked): its
                        # capacity is just what the timed steps need, so N is what is measured.
                        few = tokens[:EXPORTED_STEPS]
                        if isinstance(model, Transformer):
                            state = [with_capacity(*c.tokens(), n + len(few)) for c in state]
                        runners[export_name] = Runner(start(state), [t.numpy() for t in few], state)
                        sizes[export_name] = nbytes
            for name, seconds in fastest_seconds_per_step(runners, budget_s=budget_s).items():
                results.append(StepTiming(name, batch, n, seconds * 1e6, sizes[name]))
            del runners
    return results


def _bytes_per_token(model: Backbone, batch: int) -> int:
    """What the state grows by per token (0 for a constant-size state)."""
    if isinstance(model, Transformer):
        return state_bytes(state_at_context(model, 1, batch)) - state_bytes(model.init_state(batch))
    return 0


def as_rows(timings: list[StepTiming]) -> list[dict]:
    return [asdict(t) for t in timings]
