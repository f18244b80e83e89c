#!/usr/bin/env python
"""Efficiency benchmark (Aaren §4.5): every figure is a ratio to a baseline measured in the same run.

1. Operator: fwd+bwd time of each prefix-attention path (chunked, scan, recurrent) and of linear
   attention's chunked form against causal SDPA (B=32, 4 heads, d_head 32), as path time / SDPA time.
2. Per-token inference: µs per ``step`` at batch 1 and 64 with N tokens already in the state, for
   the lean Transformer step (fused q/k/v, a preallocated KV cache written in place, no mask: the
   baseline), Aaren (eager), causal linear attention (its lean step) and the three exported to ONNX
   in onnxruntime (d_model 128, 4 heads, 2 layers); the Transformer whose cache grows by
   torch.cat is an extra, labelled column. Then each family's stream (backbone, RL, EF, video)
   through its deployment path, µs per unit and per token (bench/family_streams.py).
3. Figure 5 (Aaren §4.5): cumulative time, state bytes and peak memory growth of N token-by-token
   steps from an empty state, N up to 16384, each model, eager and exported (batch 1).
4. Training steps/s of Aaren and linear attention vs the Transformer on one dataset per task family
   at the CPU preset
   (tsf, tsc, ef, lm: real data from the mirror; rl: the Hopper data `make rl-data` collects, which
   `make bench` runs first when the file is missing; a family whose files are missing is reported
   as skipped; video trains other models). ``--families`` measures some of them only. Each model
   also trains with its backbone through ``torch.compile`` (``model.compile=true``: inductor): its
   compiled / eager steps/s per family (``--skip compile`` leaves it out; ``--quick`` does).
Outputs: <out>/bench.json, <out>/bench.md, <out>/bench.png, <out>/figure5.png. ``--plot-only``
redraws the PNGs from the JSON. ``--quick`` (``make bench-quick``) is a first look: a few sizes, one
round, no Figure 5, short training timings, into outputs/bench-quick (the full grid's ~7.8 GB and 5+
minutes are for the committed figures); flags given beside it still win.
Targets (``targets_table``: Aaren's step against the lean Transformer's, flat in N and within 2x of
this machine's bound, the exported step's µs, the operator against SDPA, linear attention's step and
chunked path against Aaren's and SDPA, training steps/s); the markdown says which are met.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from recurrent_attention.bench.attention import as_rows as operator_rows
from recurrent_attention.bench.attention import operator_timings
from recurrent_attention.bench.family_streams import as_rows as family_stream_rows
from recurrent_attention.bench.family_streams import family_stream_timings
from recurrent_attention.bench.plot import plot_bench, plot_stream_costs
from recurrent_attention.bench.roofline import bound_rows
from recurrent_attention.bench.stream_cost import StreamSpec, stream_costs
from recurrent_attention.bench.stream_cost import as_rows as stream_rows
from recurrent_attention.bench.streaming import EXPORTS, exported_stream, step_timings, stream_step
from recurrent_attention.bench.streaming import as_rows as step_rows
from recurrent_attention.bench.training import (
    FAMILY_TASKS,
    NO_MIXING,
    TARGET_SPEEDUP,
    aaren_speedups,
    compile_speedups,
    training_timings,
)
from recurrent_attention.bench.training import as_rows as training_rows
from recurrent_attention.deploy import fast_stepper
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.linear_attention import LinearTransformer
from recurrent_attention.ops import native
from recurrent_attention.results.summary import device_description, git_commit
from recurrent_attention.runs.atomic import atomic_write_text


def operator_table(rows: list[dict]) -> str:
    sdpa = {r["n"]: r["seconds"] for r in rows if r["path"] == "sdpa"}
    lines = ["| N | path | fwd+bwd ms | SDPA ms | path time / SDPA time |", "|---|---|---|---|---|"]
    for r in rows:
        if r["path"] == "sdpa":
            continue
        if r["seconds"] is None:
            lines.append(f"| {r['n']} | {r['path']} | {r['note']} | {sdpa[r['n']] * 1e3:.1f} | |")
        else:
            ms, sdpa_ms = r["seconds"] * 1e3, sdpa[r["n"]] * 1e3
            lines.append(f"| {r['n']} | {r['path']} | {ms:.1f} | {sdpa_ms:.1f} | {ms / sdpa_ms:.3f}x |")
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "skipped" if value is None else f"{value:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None else f"{a / b:.3f}x"


def _kib(row: dict | None) -> str:
    return "" if row is None else f"{row['state_bytes'] / 1024:.1f}"


def step_table(rows: list[dict]) -> str:
    """One row per (batch, N); a model a report lacks (an older one: no linear attention) is blank."""
    cell = {(r["model"], r["batch"], r["n"]): r for r in rows}
    lines = [
        "| batch | N | Transformer µs | Aaren µs | Aaren / Transformer | Transformer ONNX µs "
        "| Aaren ONNX µs | ONNX: Aaren / Transformer | Transformer (torch.cat cache) µs "
        "| Transformer state MiB | Aaren state KiB | linear attention µs "
        "| linear attention / Transformer | linear attention state KiB | linear attention / Aaren "
        "| linear attention ONNX µs | ONNX: linear attention / Aaren |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for batch, n in sorted({(r["batch"], r["n"]) for r in rows}):
        t, a = cell[("transformer", batch, n)], cell[("aaren", batch, n)]
        linear = cell.get(("linear_attention", batch, n))
        linear_us = None if linear is None else linear["us_per_token"]
        us = {name: cell.get((name, batch, n), {}).get("us_per_token") for name in _EXTRA_STEPS}
        lines.append(
            f"| {batch} | {n} | {_us(t['us_per_token'])} | {_us(a['us_per_token'])} | "
            f"{_ratio(a['us_per_token'], t['us_per_token'])} | {_us(us['transformer_onnx'])} | "
            f"{_us(us['aaren_onnx'])} | {_ratio(us['aaren_onnx'], us['transformer_onnx'])} | "
            f"{_us(us['transformer_cat'])} | {t['state_bytes'] / 2**20:.1f} | {_kib(a)} | "
            f"{'' if linear is None else _us(linear_us)} | {_ratio(linear_us, t['us_per_token'])} | "
            f"{_kib(linear)} | {_ratio(linear_us, a['us_per_token'])} | "
            f"{'' if us['linear_attention_onnx'] is None else _us(us['linear_attention_onnx'])} | "
            f"{_ratio(us['linear_attention_onnx'], us['aaren_onnx'])} |"
        )
    return "\n".join(lines)


_EXTRA_STEPS = ("transformer_onnx", "aaren_onnx", "linear_attention_onnx", "transformer_cat")

BF16 = "_bf16"
"""The suffix of a step timed with bfloat16 matrices (``fast_stepper(model, bf16_weights=True)``)."""


def bf16_variants(models: dict) -> dict:
    """Aaren's and linear attention's compiled steps with bfloat16 matrices, an option beside float32:
    ``step_timings``'s variants (timed on the same tokens and states as the float32 steps)."""
    return {
        f"{name}{BF16}": (name, partial(fast_stepper, bf16_weights=True))
        for name in ("aaren", "linear_attention")
        if name in models
    }


def bf16_table(rows: list[dict]) -> str:
    """Each model's step with float32 and with bfloat16 matrices, by batch and N; empty without them."""
    cell = {(r["model"], r["batch"], r["n"]): r["us_per_token"] for r in rows}
    keys = sorted({(b, n) for (m, b, n) in cell if m.endswith(BF16)})
    if not keys:
        return ""
    lines = [
        "| batch | N | Aaren µs | Aaren bf16 µs | bf16 / float32 | linear attention µs "
        "| linear attention bf16 µs | bf16 / float32 | bf16: linear attention / Aaren |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for batch, n in keys:
        a, a16 = cell.get(("aaren", batch, n)), cell.get((f"aaren{BF16}", batch, n))
        lin, lin16 = cell.get(("linear_attention", batch, n)), cell.get((f"linear_attention{BF16}", batch, n))
        lines.append(
            f"| {batch} | {n} | {_us(a)} | {_us(a16)} | {_ratio(a16, a)} | {_us(lin)} | {_us(lin16)} | "
            f"{_ratio(lin16, lin)} | {_ratio(lin16, a16)} |"
        )
    return "\n".join(lines)


def _rates(rows: list[dict]) -> str:
    if not rows:
        return "not measured"
    reads = sorted({r["read_gb_per_s"] for r in rows})
    return f"{rows[0]['gflops_per_s']:.0f} GFLOP/s; reads {reads[0]:.1f}-{reads[-1]:.1f} GB/s"


def roofline_table(rows: list[dict]) -> str:
    """Each deployed step against this machine's bound (bench/roofline.py), by batch, N and model."""
    lines = [
        "| batch | N | step | µs | MFLOP | MB read | bound µs | multiple of the bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["batch"], r["n"], r["model"])):
        lines.append(
            f"| {r['batch']} | {r['n']} | {r['model']} | {r['us_per_token']:.1f} | {r['flops'] / 1e6:.2f} | "
            f"{r['read_bytes'] / 1e6:.2f} | {r['bound_us']:.1f} | {r['multiple']:.2f}x |"
        )
    return "\n".join(lines)


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def training_table(rows: list[dict]) -> str:
    """One row per task; linear attention's columns are blank where a report lacks it (an older one)."""
    lines = [
        "| family | task | shape | Transformer steps/s | Aaren steps/s | Aaren / Transformer "
        "| Aaren without token mixing steps/s | ceiling: without mixing / Transformer "
        "| linear attention steps/s | linear attention / Transformer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_task: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_task.setdefault(r["task"], {})[r["model"]] = r
    for task, m in by_task.items():
        t, a = m["transformer"], m["aaren"]
        if t["steps_per_s"] is None or a["steps_per_s"] is None:
            lines.append(f"| {t['family']} | {task} | {t['note'] or a['note']} | | | | | | | |")
            continue
        unmixed = (m.get(NO_MIXING) or {}).get("steps_per_s")
        linear = (m.get("linear_attention") or {}).get("steps_per_s")
        lines.append(
            f"| {t['family']} | {task} | {t['shape']} | {t['steps_per_s']:.2f} | {a['steps_per_s']:.2f} | "
            f"{_ratio(a['steps_per_s'], t['steps_per_s'])} | "
            f"{_rate(unmixed)} | {_ratio(unmixed, t['steps_per_s'])} | "
            f"{_rate(linear)} | {_ratio(linear, t['steps_per_s'])} |"
        )
    return "\n".join(lines)


def compiled_table(rows: list[dict]) -> str:
    """One row per task: each model's compiled / eager training steps/s (blank where not timed)."""
    speedups = compile_speedups(rows)
    models = sorted({model for family in speedups.values() for model in family})
    lines = [
        "| family | task | " + " | ".join(f"{m} compiled / eager" for m in models) + " |",
        "|---|---|" + "---|" * len(models),
    ]
    tasks = {r["family"]: r["task"] for r in rows}
    for family, ratios in speedups.items():
        cells = " | ".join("" if ratios.get(m) is None else f"{ratios[m]:.3f}x" for m in models)
        lines.append(f"| {family} | {tasks[family]} | {cells} |")
    return "\n".join(lines)


def _target(
    name: str, measured: float | None, limit: float, at_most: bool, unit: str = "x", why_missed: str = ""
) -> str:
    """A targets-table row; ``why_missed`` follows the verdict when the target is missed."""
    if measured is None:
        return f"| {name} | not measured | |"
    met = measured <= limit if at_most else measured >= limit
    sign = "<=" if at_most else ">="
    verdict = "met" if met else f"MISSED{why_missed}"
    return f"| {name} {sign} {limit:g}{unit} | {measured:.3f}{unit} | {verdict} |"


def _out_of_reach(ceiling: float | None) -> str:
    """Why a training target is missed, when no attention could have met it."""
    if ceiling is None or ceiling >= TARGET_SPEEDUP:
        return ""
    return f" (out of reach of any attention: with no token mixing at all, {ceiling:.3f}x)"


def targets_table(report: dict) -> str:
    steps = {(r["model"], r["batch"], r["n"]): r["us_per_token"] for r in report["steps"]}
    op = {(r["path"], r["n"]): r["seconds"] for r in report["operator"]}

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a / b

    aaren_ns = sorted(n for (m, b, n) in steps if m == "aaren" and b == 1)
    aaren_b1 = [steps[("aaren", 1, n)] for n in aaren_ns]
    flat = max(aaren_b1) / min(aaren_b1) - 1 if aaren_b1 else None
    fastest = [steps.get(("aaren_onnx", 1, n)) for n in aaren_ns]
    fastest = [v for v in fastest if v is not None]
    rows = ["| target | measured | |", "|---|---|---|"]
    for label, aaren, transformer in (
        ("", "aaren", "transformer"),
        (" ONNX", "aaren_onnx", "transformer_onnx"),
    ):
        for batch in (1, 64):
            for n, limit in ((128, 0.5), (8192, 0.1)):
                rows.append(
                    _target(
                        f"Aaren{label} step / lean Transformer{label} step, N={n}, batch {batch}",
                        ratio(steps.get((aaren, batch, n)), steps.get((transformer, batch, n))),
                        limit,
                        True,
                    )
                )
    rows.append(_target("Aaren step spread (max/min - 1) over N, batch 1", flat, 0.10, True, ""))
    rows.append(
        _target(
            "Aaren exported (ONNX) step µs, batch 1 (median over the N)",
            sorted(fastest)[len(fastest) // 2] if fastest else None,
            60,
            True,
            " µs",
        )
    )
    rows.append(
        _target(
            "chunked / SDPA fwd+bwd, N=2048",
            ratio(op.get(("chunked", 2048)), op.get(("sdpa", 2048))),
            0.15,
            True,
        )
    )
    rows.append(
        _target(
            "chunked / SDPA fwd+bwd, N=8192",
            ratio(op.get(("chunked", 8192)), op.get(("sdpa", 8192))),
            0.04,
            True,
        )
    )
    rows += bound_targets(report.get("roofline", []))
    rows += linear_targets(steps, op, report)
    ceilings = aaren_speedups(report["training"], NO_MIXING)
    for family, speedup in aaren_speedups(report["training"]).items():
        rows.append(
            _target(
                f"Aaren / Transformer training steps/s, {family}",
                speedup,
                TARGET_SPEEDUP,
                False,
                why_missed=_out_of_reach(ceilings[family]),
            )
        )
    return "\n".join(rows)


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


BOUND_TARGET = 2.0
"""Aaren's deployed step at most this multiple of this machine's bound (bench/roofline.py)."""


def bound_targets(roofline: list[dict]) -> list[str]:
    """Aaren's deployed (compiled) step within :data:`BOUND_TARGET` times this machine's bound at
    batch 1 and 64: the median multiple over the N (a constant state makes the N alike)."""
    rows = []
    for batch in (1, 64):
        multiples = [r["multiple"] for r in roofline if r["model"] == "aaren" and r["batch"] == batch]
        rows.append(
            _target(
                f"Aaren step / this machine's bound, batch {batch} (median over the N)",
                _median(multiples),
                BOUND_TARGET,
                True,
            )
        )
    return rows


LINEAR_STEP_TARGET = 1.2
"""Linear attention's deployed and exported steps at most this multiple of Aaren's."""


def _linear_floor(report: dict, batch: int) -> str:
    """Why linear attention's step ratio is missed where its own work is already past the target:
    the ratio of the two models' matmul FLOPs (the roofline's count of each model's step; at batch 1
    it is also the ratio of the weights each step reads) and of their states, which a step reads and
    writes whole. Empty where the work is under the target or was not counted."""
    flops = {r["model"]: r["flops"] for r in report.get("roofline", []) if r["batch"] == batch}
    states = {r["model"]: r["state_bytes"] for r in report["steps"] if r["batch"] == batch}
    names = ("linear_attention", "aaren")
    if not all(flops.get(m) and states.get(m) for m in names):
        return ""
    work = flops["linear_attention"] / flops["aaren"]
    if work < LINEAR_STEP_TARGET:
        return ""
    state = states["linear_attention"] / states["aaren"]
    return (
        f" (under its floor: linear attention's step does {work:.3f}x Aaren's matmul work, the query "
        f"projection that Aaren's learned query folds away, and carries a {state:.0f}x larger state, "
        "read and written every token)"
    )


def linear_targets(
    steps: dict[tuple[str, int, int], float | None],
    op: dict[tuple[str, int], float],
    report: dict | None = None,
) -> list[str]:
    """Linear attention's targets: its chunked training path no slower than the
    Transformer's attention (SDPA) at every N >= 512 (the worst N is the figure), and its deployed
    and exported steps within 1.2x of Aaren's at batch 1 and 64, each its own row (the median over
    the N; a state of constant size makes the N alike). A missed step row says when the target is
    under the two models' ratio of work (:func:`_linear_floor`), which no implementation can beat."""
    chunked = [
        op[("linear_chunked", n)] / op[("sdpa", n)]
        for path, n in op
        if path == "linear_chunked" and n >= 512 and op.get((path, n)) and op.get(("sdpa", n))
    ]
    rows = [
        _target(
            "linear attention chunked / Transformer (SDPA) fwd+bwd, worst N >= 512",
            max(chunked) if chunked else None,
            1.0,
            True,
        )
    ]
    for label, linear, aaren in (
        ("", "linear_attention", "aaren"),
        (" ONNX", "linear_attention_onnx", "aaren_onnx"),
    ):
        for batch in (1, 64):
            ratios = [
                steps[(linear, b, n)] / steps[(aaren, b, n)]
                for (model, b, n) in steps
                if model == linear and b == batch and steps.get((linear, b, n)) and steps.get((aaren, b, n))
            ]
            rows.append(
                _target(
                    f"linear attention{label} step / Aaren{label} step, batch {batch} (median over the N)",
                    _median(ratios),
                    LINEAR_STEP_TARGET,
                    True,
                    why_missed="" if report is None else _linear_floor(report, batch),
                )
            )
    return rows


def exported_steps(models: dict, folder: Path) -> tuple[dict, dict[str, Path]]:
    """Every model's step exported to ONNX: each started from that model's state (see
    ``step_timings``), and the files they were written to."""
    from recurrent_attention.deploy.onnx_kv import OnnxKVStream, export_transformer_onnx

    files, steps = {}, {}
    for name in ("aaren", "linear_attention"):
        model_class = type(models[name])
        path = files[f"{name}_onnx"] = EXPORTS[model_class][0](models[name], folder / f"{name}.onnx")
        steps[f"{name}_onnx"] = (
            name,
            lambda state, model_class=model_class, path=path: stream_step(
                exported_stream(model_class, path, state)
            ),
        )
    transformer = files["transformer_onnx"] = export_transformer_onnx(
        models["transformer"], folder / "transformer.onnx"
    )
    steps["transformer_onnx"] = (
        "transformer",
        lambda state: stream_step(OnnxKVStream(transformer, state, capacity=state[0].k.shape[-2])),
    )
    return steps, files


def stream_specs(
    models: dict, arguments: dict, files: dict[str, Path], capacity: int
) -> dict[str, StreamSpec]:
    """Figure 5's streams from an empty state: each model's step, then each exported step (an
    exported Transformer's cache is allocated at ``capacity`` slots up front, so its state is that)."""
    specs = {name: StreamSpec.of(model, arguments) for name, model in models.items()}
    for name in ("aaren", "linear_attention"):
        if f"{name}_onnx" in files:
            specs[f"{name}_onnx"] = StreamSpec.of(models[name], arguments, files[f"{name}_onnx"])
    if "transformer_onnx" in files:
        specs["transformer_onnx"] = StreamSpec.of(
            models["transformer"], arguments, files["transformer_onnx"], capacity
        )
    return specs


def stream_table(rows: list[dict]) -> str:
    """Cumulative seconds, state KiB and peak MiB of each stream at each power of two from 128."""
    cell = {(r["model"], r["n"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    lines = [
        "| N | " + " | ".join(f"{m} s / state KiB / peak MiB" for m in models) + " |",
        "|---|" + "---|" * len(models),
    ]
    for n in sorted({r["n"] for r in rows if r["n"] >= 128}):
        cells = []
        for m in models:
            r = cell[(m, n)]
            peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.1f}"
            cells.append(f"{r['seconds']:.2f} / {r['state_bytes'] / 1024:.1f} / {peak}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


_FAMILY_MODELS = ("transformer", "aaren", "linear_attention")


def family_stream_table(rows: list[dict]) -> str:
    """One row per family: each model's µs per unit and per token, and the ratios to the Transformer
    and linear attention's to Aaren (blank where a model has no stream in the family)."""
    cell = {(r["family"], r["model"]): r for r in rows}
    lines = [
        "| family | unit (tokens) | Transformer µs/unit | Aaren µs/unit | linear attention µs/unit "
        "| Transformer µs/token | Aaren µs/token | linear attention µs/token | Aaren / Transformer "
        "| linear attention / Transformer | linear attention / Aaren |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for family in dict.fromkeys(r["family"] for r in rows):
        got = {m: cell.get((family, m), {}) for m in _FAMILY_MODELS}
        unit = next(r for r in got.values() if r)
        per_unit = [got[m].get("us_per_unit") for m in _FAMILY_MODELS]
        per_token = [got[m].get("us_per_token") for m in _FAMILY_MODELS]
        t, a, lin = per_unit
        cells = [
            f"{unit['unit']} ({unit['tokens_per_unit']})",
            *("n/a" if v is None else f"{v:.0f}" for v in per_unit),
            *("n/a" if v is None else f"{v:.1f}" for v in per_token),
            _ratio(a, t),
            _ratio(lin, t),
            _ratio(lin, a),
        ]
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def invocation(argv: list[str]) -> str:
    """This run's command line with what else sets its speed: the thread count the environment asks
    for and the process's nice level (a figure means something only beside how it was measured)."""
    threads = os.environ.get("OMP_NUM_THREADS")
    level = os.nice(0)
    prefix = [*([f"OMP_NUM_THREADS={threads}"] if threads else []), *([f"nice -n {level}"] if level else [])]
    return " ".join([*prefix, "python scripts/bench.py", shlex.join(argv)]).strip()


# --quick: a small grid that fills every table but Figure 5's (each stream a fresh process, and
# short streams say nothing about growth), with each family's training rate.
QUICK = {
    "skip": ["stream", "compile"],
    "out": "outputs/bench-quick",
    "lengths": [96, 512],
    "contexts": [128, 512],
    "batches": [1],
    "stream_tokens": 1024,
    "family_units": 16,
    "rounds": 1,
    "train_steps": 5,
    "train_seconds": 1.0,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; with ``--quick``, :data:`QUICK` replaces the defaults it names."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="a first look in about a minute (make bench-quick)"
    )
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--device", default="cpu", help="operator benchmark device (cpu or cuda)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[96, 512, 2048, 8192], help="operator N")
    parser.add_argument(
        "--max-recurrent-n", type=int, default=512, help="time the python-loop path up to here"
    )
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 2048, 8192, 16384])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    parser.add_argument(
        "--rounds", type=int, default=3, help="times the per-token grid is timed (fastest kept)"
    )
    parser.add_argument("--stream-d-model", type=int, default=128)
    parser.add_argument("--stream-layers", type=int, default=2)
    parser.add_argument(
        "--train-steps", type=int, default=30, help="least timed optimiser steps per family and model"
    )
    parser.add_argument(
        "--train-seconds",
        type=float,
        default=10.0,
        help="keep stepping a family until its timed steps (both models) add up to this",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        choices=sorted(FAMILY_TASKS),
        default=sorted(FAMILY_TASKS),
        help="the families whose training steps/s are measured",
    )
    parser.add_argument(
        "--stream-tokens", type=int, default=16384, help="Figure 5: tokens each model streams from empty"
    )
    parser.add_argument(
        "--family-units",
        type=int,
        default=256,
        help="units (tokens, environment steps, events) each family's stream runs; video runs 1/8 of them",
    )
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["operator", "steps", "export", "stream", "families", "training", "compile"],
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (1: stable on a shared machine; tiny ops gain nothing)",
    )
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from an existing bench.json")
    if parser.parse_known_args(argv)[0].quick:
        parser.set_defaults(**QUICK)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)

    if args.plot_only:
        report = json.loads((out / "bench.json").read_text())
        print(plot_bench(report, out / "bench.png"))
        if report.get("stream"):
            print(plot_stream_costs(report, out / "figure5.png"))
        return 0

    commit = git_commit(Path(__file__).parent)  # before measuring: what was measured, not what is there after
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    bar = tqdm(desc="bench", unit="part")

    def progress(msg: str) -> None:
        bar.set_postfix_str(msg)
        bar.update()

    operator = []
    if "operator" not in args.skip:
        timings = operator_timings(
            args.lengths, device=args.device, max_recurrent_n=args.max_recurrent_n, progress=progress
        )
        operator = operator_rows(timings)
    d = args.stream_d_model
    arguments = {"d_model": d, "n_heads": 4, "n_layers": args.stream_layers, "d_ff": 4 * d, "dropout": 0.0}
    backbones = (("transformer", Transformer), ("aaren", Aaren), ("linear_attention", LinearTransformer))
    models = {name: cls(**arguments).eval() for name, cls in backbones}
    with tempfile.TemporaryDirectory() as tmp:
        exported, files = {}, {}
        if "export" not in args.skip:
            exported, files = exported_steps(models, Path(tmp))
        steps, roofline = [], []
        if "steps" not in args.skip:
            timings = step_timings(
                models,
                args.contexts,
                args.batches,
                exported,
                progress=progress,
                rounds=args.rounds,
                variants=bf16_variants(models),
            )
            steps = step_rows(timings)
            progress("roofline: sgemm rate, read rates, FLOPs per step")
            # the bound counts float32 weights: the bfloat16 steps have a table of their own
            roofline = bound_rows(models, [r for r in steps if not r["model"].endswith(BF16)])
        stream = []
        if "stream" not in args.skip:
            specs = stream_specs(models, arguments, files, args.stream_tokens)
            tokens = torch.randn(args.stream_tokens, 1, d)
            stream = stream_rows(stream_costs(specs, tokens, progress=progress, threads=args.threads))
        families = []
        if "families" not in args.skip:
            families = family_stream_rows(
                family_stream_timings(
                    d, 4, args.stream_layers, args.family_units, args.rounds, progress=progress
                )
            )
        training = []
        if "training" not in args.skip:
            training = training_rows(
                training_timings(
                    args.train_steps,
                    progress,
                    args.train_seconds,
                    args.families,
                    compile_backend=None if "compile" in args.skip else "inductor",
                )
            )
    bar.close()

    report = {
        "commit": commit,
        "kernels": "C++ (ops/native.py)" if native.extension() else "PyTorch (compiled kernels unavailable)",
        "device": device_description(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "command": invocation(sys.argv[1:] if argv is None else argv),
        "operator_shape": "B=32, H=4, d_head=32, fp32",
        "stream_model": f"d_model {d}, 4 heads, {args.stream_layers} layers",
        "params": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()},
        "operator": operator,
        "steps": steps,
        "roofline": roofline,
        "stream": stream,
        "families": families,
        "training": training,
    }
    markdown = "\n\n".join(
        [
            "# Efficiency benchmark",
            f"Commit {report['commit']}; hardware: {report['device']}; torch {report['torch']}, "
            f"{report['threads']} thread(s); Aaren's kernels: {report['kernels']}; "
            f"command: `{report['command']}`. Every ratio compares two figures measured in this run.",
            "## Targets",
            targets_table(report) if operator and steps and training else "(partial run: see the tables)",
            f"## Per-token step cost ({report['stream_model']}, eval, no grad)",
            f"Fastest µs per `step` over {args.rounds} round(s) of the whole grid (each round: 50 or "
            "more steps over 0.7 s where a step is fast, state carried) with N tokens already in the state "
            "(random contents of the right "
            "shape; the cost depends on shapes only). The Transformer is the lean step (fused q/k/v, "
            "a KV cache preallocated past the timed steps and written in place, one query with no "
            "mask); the torch.cat column grows the cache by concatenation every token (the "
            "block-by-block step under autograd). Linear attention (Katharopoulos et al. 2020) is its "
            "lean step (fused q/k/v, `(S, z)` updated by one batched outer product) and its "
            "exported step (`deploy/onnx_linear.py`: `S` and `z` one tensor per layer), with a "
            f"constant state `(S, z)` per layer like Aaren's `(m, u, w)`. Parameters: {report['params']}.",
            step_table(steps) if steps else "(skipped)",
            "## bfloat16 weights (an option)",
            "The compiled steps with their matrices rounded to bfloat16 (`fast_stepper(model, "
            "bf16_weights=True)`: half the bytes a token reads; activations, layer norms, biases and the "
            "state in float32; tested equal to the model's step with its matrices rounded, "
            "tests/deploy/test_compiled.py), timed beside the float32 steps above. Not the default and "
            "not in the targets.",
            bf16_table(steps) or "(skipped)",
            "## Each step against this machine's bound",
            "The least time a step could take here: the larger of its FLOPs (matmul FLOPs the model's "
            "own `step` runs, counted by PyTorch's FlopCounterMode) at this run's fp32 sgemm rate "
            f"({_rates(roofline)}) and the bytes it reads (weights and the N tokens' state) at this "
            "run's rate of reading a buffer of that size (rounded down to a power of two); "
            "the multiple is µs / bound (1.0: the machine's limit). docs/bench.md explains it.",
            roofline_table(roofline) if roofline else "(skipped)",
            "## Each family's stream, per token (batch 1)",
            "Where a family streams, one unit at a time through its deployment path "
            "(bench/family_streams.py; each stream tested equal to the model's own step): the bare "
            "backbone step (`deploy.fast_stepper`), RL's stream mode (`StreamPolicy`: one environment "
            "step is 3 tokens and the action), EF's `EventStream` (one event), video's causal "
            "TimeSformer `step` (one 64x64 frame: 16 patch rows through the time mixer's lean step, "
            "and the class token; the softmax time mixer has no per-frame step). The stream model "
            f"({report['stream_model']}) with the family's head; a stream of {args.family_units} "
            f"units ({max(args.family_units // 8, 8)} frames) from empty, run {args.rounds} time(s): "
            "the mean over the units of each unit's fastest µs; per token: per unit / the unit's tokens.",
            family_stream_table(families) if families else "(skipped)",
            f"## Aaren operator vs causal SDPA ({report['operator_shape']})",
            "Fastest of at least 3 forward+backward calls (after one warm-up) of each. "
            "`linear_chunked`: linear attention's chunked training form on SDPA's queries, keys and "
            "values (feature map included, chunks of 64, the model's default).",
            operator_table(operator) if operator else "(skipped)",
            f"## Figure 5: streaming {args.stream_tokens} tokens from an empty state (batch 1)",
            "Cumulative seconds of all N steps, the bytes the state holds after N tokens (a KV "
            "cache: its allocated capacity; the exported Transformer's is fixed at the stream's "
            "length), and the peak growth of resident memory over the stream (`VmHWM` after a "
            "reset, over the resident size the stream started from; each stream runs in a fresh "
            "process, so no memory kept from earlier work hides the growth). Plotted in figure5.png.",
            stream_table(stream) if stream else "(skipped)",
            "## Training steps/s on each family's CPU preset",
            "Real data; the models take turns on the same batches (alternating the order). "
            "Linear attention's ratio is reported beside Aaren's; it has no target. "
            "The ceiling is Aaren with its token mixing taken out (each token's output is its own values; "
            "projections, feed-forward blocks, head and optimiser as in Aaren): no attention can make a "
            "step cheaper, so its rate over the Transformer's is the most any attention could gain.",
            training_table(training) if training else "(skipped)",
            "## Compiled / eager training steps/s (model.compile=true, inductor)",
            "Each model's backbone through torch.compile, taking its turn on the same batches as the "
            "eager models above (its compilation in the untimed first steps); head, loss and "
            "optimiser eager, as train.py runs them.",
            compiled_table(training) if compile_speedups(training) else "(skipped)",
        ]
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "bench.json", json.dumps(report, indent=2) + "\n")
    atomic_write_text(out / "bench.md", markdown + "\n")
    plot_bench(report, out / "bench.png")
    if stream:
        plot_stream_costs(report, out / "figure5.png")
    print(markdown)
    print(f"wrote {out}/bench.json, bench.md, bench.png" + (", figure5.png" if stream else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
