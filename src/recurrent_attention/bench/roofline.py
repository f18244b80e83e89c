"""The machine's own limit for a deployed step: a roofline of two rates measured in the same run.

A step can go no faster than the larger of two times: its floating-point work at this machine's
matrix-multiply rate, and the bytes it must read (its weights, and its state: a KV cache of N
tokens, or Aaren's constant ``(m, u, w)``) at this machine's rate of reading a buffer of that size.
Both rates are measured in the same process and thread count as the step timings, so
``step time / bound`` (the *multiple* ``make bench`` reports) says how far a step is from what this
machine allows, whatever the machine: 1.0 is the limit, 2.0 twice it.

What the bound leaves out, on purpose: element-wise work (layer norms, exponentials, the
``(m, u, w)`` update) counts no FLOPs, since a matmul-shaped bound is what a step of these sizes
is measured against; and bytes written: one token's outputs and a constant state, few for Aaren;
linear attention's ``(S, z)`` is 2.1 MB at batch 64 (d_model 128), where its FLOP time is the larger.
FLOPs are counted, not assumed: :func:`step_flops` runs the model's own ``step`` (the math, in
``models/``) under PyTorch's :class:`~torch.utils.flop_counter.FlopCounterMode`, so a deployed
form of the same step (lean, compiled, ONNX) is held to the same work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from recurrent_attention.bench.streaming import state_at_context
from recurrent_attention.models.base import Backbone, State

aten = torch.ops.aten


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *_, out_shape=None, **__) -> int:
    """PyTorch counts SDPA's CUDA kernels but not the CPU one a Transformer's step runs: same count."""
    return sdpa_flop_count(query_shape, key_shape, value_shape)


CPU_SDPA_FLOPS = {aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops}
SGEMM_SIZE = 256  # a square fp32 matmul that fits in cache: the rate a step's small products can reach


@dataclass(frozen=True)
class Roofline:
    """A machine's two rates: FLOP/s of fp32 matmul and bytes/s of reading (for one buffer size)."""

    flops_per_s: float
    read_bytes_per_s: float

    def bound_seconds(self, flops: int, nbytes: int) -> float:
        """The least time a step of ``flops`` FLOPs that reads ``nbytes`` bytes can take here."""
        return max(flops / self.flops_per_s, nbytes / self.read_bytes_per_s)


def _fastest(fn, reps: int) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def sgemm_flops_per_second(size: int = SGEMM_SIZE, reps: int = 30) -> float:
    """FLOP/s of the fastest ``size x size`` fp32 matmul (``2 size^3`` FLOPs) on torch's threads."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=gen) for _ in range(2))
    out = torch.empty(size, size)
    return 2 * size**3 / _fastest(lambda: torch.mm(a, b, out=out), reps)


def read_bytes_per_second(nbytes: int, reps: int = 30) -> float:
    """Bytes/s of the fastest full read of an fp32 buffer of ``nbytes`` (a sum touches every byte
    once): cache-resident for a small step's weights, memory bandwidth for a large KV cache."""
    buffer = torch.ones(max(nbytes // 4, 1024))
    return buffer.numel() * 4 / _fastest(buffer.sum, reps)


def step_flops(model: Backbone, x_t: torch.Tensor, state: State) -> int:
    """FLOPs of one ``model.step(x_t, state)`` in eval without gradients, as counted by PyTorch."""
    counter = FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS)
    with torch.no_grad(), counter:
        model.step(x_t, state)
    return counter.get_total_flops()


def weight_bytes(model: Backbone) -> int:
    """Bytes of every parameter: a step reads them all once per token."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def measure(step_bytes: list[int], reps: int = 30) -> dict[int, Roofline]:
    """One :class:`Roofline` per buffer size in ``step_bytes`` (the matmul rate measured once).
    Sizes are rounded down to a power of two, so a grid of contexts shares a few read measurements
    and no bound is read from a larger (slower, so more lenient) buffer than the step's own."""
    flops_per_s = sgemm_flops_per_second(reps=reps)
    rates: dict[int, float] = {}
    lines = {}
    for nbytes in step_bytes:
        bucket = 1 << (max(nbytes, 4096).bit_length() - 1)
        if bucket not in rates:
            rates[bucket] = read_bytes_per_second(bucket, reps=max(3, reps * 2**20 // bucket))
        lines[nbytes] = Roofline(flops_per_s, rates[bucket])
    return lines


def _base_model(name: str, models: dict[str, Backbone]) -> str | None:
    """The model a timed step belongs to: itself, or the model an extra column (``aaren_onnx``,
    ``transformer_cat``) is a form of."""
    return next((m for m in models if name == m or name.startswith(f"{m}_")), None)


@torch.no_grad()
def bound_rows(models: dict[str, Backbone], steps: list[dict], reps: int = 30) -> list[dict]:
    """Each timed step of ``steps`` (:func:`~recurrent_attention.bench.streaming.step_timings`'s rows)
    with its FLOPs, the bytes it reads (weights + the N tokens' state), this machine's bound for
    them and ``multiple = µs / bound``; the rates are measured here, in the caller's thread count."""
    timed = [(row, _base_model(row["model"], models)) for row in steps if row["us_per_token"] is not None]
    timed = [(row, base) for row, base in timed if base is not None]
    read = {id(row): weight_bytes(models[base]) + row["state_bytes"] for row, base in timed}
    lines = measure(sorted(set(read.values())), reps=reps)
    flops: dict[tuple[str, int, int], int] = {}
    rows = []
    for row, base in timed:
        key = (base, row["batch"], row["n"])
        if key not in flops:
            model = models[key[0]].eval()
            x_t = torch.randn(row["batch"], model.d_model)
            flops[key] = step_flops(model, x_t, state_at_context(model, row["n"], row["batch"]))
        nbytes = read[id(row)]
        line = lines[nbytes]
        bound_us = line.bound_seconds(flops[key], nbytes) * 1e6
        rows.append(
            {
                "model": row["model"],
                "batch": row["batch"],
                "n": row["n"],
                "us_per_token": row["us_per_token"],
                "flops": flops[key],
                "read_bytes": nbytes,
                "gflops_per_s": line.flops_per_s / 1e9,
                "read_gb_per_s": line.read_bytes_per_s / 1e9,
                "bound_us": bound_us,
                "multiple": row["us_per_token"] / bound_us,
            }
        )
    return rows
