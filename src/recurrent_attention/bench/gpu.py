"""``make bench``'s GPU section, measured in a ``verify`` window (every figure a ratio to a baseline
timed in the same run, on the same GPU, which the output names).

1. Operator: forward+backward of Aaren's prefix attention paths against causal
   ``scaled_dot_product_attention`` (flash on a Hopper GPU in bf16), B=32, H=8, d_head 64,
   N = 512 ... 16384.
2. Training steps/s of Aaren and the Transformer at the paper's sizes of TSF (ETTh1@96) and LM (PTB,
   3 layers): the task module's step on real batches in bf16 autocast, backward, clipping, Adam.
3. Per-token step at batch 1 and 64 with N tokens in the state: Aaren's constant-size state against
   the Transformer's KV cache, eval mode, no gradients.
Each part that fails is recorded with its error and the next one runs; after each part the report
so far goes to ``on_part`` (``scripts/bench_gpu.py`` writes it), so a window's timeout in the middle
of a part keeps the parts before it.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from recurrent_attention.bench.attention import as_rows as operator_rows
from recurrent_attention.bench.attention import operator_timings
from recurrent_attention.bench.timing import time_call
from recurrent_attention.bench.training import AAREN_PAIR, family_timings
from recurrent_attention.bench.training import as_rows as training_rows
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.runs.atomic import atomic_write_text

OPERATOR_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
TRAINING_TASKS = {
    "tsf": ("tsf/etth1", ("preset=paper",)),
    "lm": ("lm/ptb", ("preset=paper", "model.n_layers=3")),
}


def guarded(name: str, part: Callable[[], list[dict]], errors: list[dict]) -> list[dict]:
    """``part()``, or nothing with its error noted: one broken part leaves the others measured."""
    try:
        return part()
    except Exception as err:  # a GPU window must not lose the other parts to one
        errors.append(
            {"part": name, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        )
        return []


def operator_part(
    device: str, dtype: torch.dtype, lengths: tuple[int, ...], heads: int, d_head: int
) -> list[dict]:
    timings = operator_timings(
        list(lengths),
        batch=32 if device == "cuda" else 2,
        heads=heads,
        d_head=d_head,
        device=device,
        dtype=dtype,
        max_recurrent_n=512,
    )
    return operator_rows(timings)


def training_part(device: str, steps: int, overrides_extra: tuple[str, ...] = ()) -> list[dict]:
    """Median steps/s of both models on shared real batches of each task (``bench.training``'s loop)."""
    rows = []
    for family, (task, overrides) in TRAINING_TASKS.items():
        timings = family_timings(
            family,
            task,
            steps,
            overrides=(*overrides, *overrides_extra),
            warmup=3,
            device=device,
            models=AAREN_PAIR,
        )
        rows += training_rows(timings)
    return rows


def step_part(device: str, contexts: tuple[int, ...], batches: tuple[int, ...], d_model: int) -> list[dict]:
    """µs per token of ``step`` with N tokens already in the state (the fastest of repeated calls)."""
    arguments = {"d_model": d_model, "n_heads": 4, "n_layers": 2, "d_ff": 4 * d_model, "dropout": 0.0}
    rows = []
    dev = torch.device(device)
    for name, cls in (("transformer", Transformer), ("aaren", Aaren)):
        torch.manual_seed(0)
        model = cls(**arguments).to(dev).eval()
        for batch in batches:
            for n in contexts:
                with torch.no_grad():
                    _, state = model(torch.randn(batch, n, d_model, device=dev), state=None)
                    token = torch.randn(batch, d_model, device=dev)
                    seconds = time_call(partial(model.step, token, state), dev, budget_s=0.5)
                rows.append({"model": name, "batch": batch, "n": n, "us_per_token": seconds * 1e6})
    return rows


PARTS = ("operator", "training", "steps")


def bench_parts(device: str, smoke: bool) -> dict[str, Callable[[], list[dict]]]:
    """Each part as a call, in :data:`PARTS`' order (``smoke``: tiny sizes)."""
    if smoke:
        return {
            "operator": partial(operator_part, device, torch.float32, (64, 128), 2, 8),
            "training": partial(training_part, device, 2, ("preset=smoke",)),
            "steps": partial(step_part, device, (16,), (1,), 16),
        }
    return {
        "operator": partial(operator_part, device, torch.bfloat16, OPERATOR_LENGTHS, 8, 64),
        "training": partial(training_part, device, 50),
        "steps": partial(step_part, device, (128, 1024, 8192), (1, 64), 512),
    }


def gpu_bench(smoke: bool = False, on_part: Callable[[dict], None] | None = None) -> dict:
    """Every part on the GPU (``smoke``: tiny sizes on whatever device there is, for tests).

    ``parts_done`` names the parts measured (or failed) so far; ``on_part`` gets the report after each.
    """
    device = "cuda" if torch.cuda.is_available() else "cpu"
    report: dict = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "CPU (no CUDA device)",
        "torch": torch.__version__,
        "smoke": smoke,
        **{name: [] for name in PARTS},
        "errors": [],
        "parts_done": [],
    }
    for name, part in bench_parts(device, smoke).items():
        report[name] = guarded(name, part, report["errors"])
        report["parts_done"].append(name)
        if on_part is not None:
            on_part(report)
    return report


def write_report(out: Path, report: dict) -> None:
    """The report so far as ``bench_gpu.json`` and ``bench_gpu.md`` in ``out``, each replaced whole
    (a reader, or an archive made at a timeout, never sees half a file)."""
    atomic_write_text(out / "bench_gpu.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(out / "bench_gpu.md", markdown(report))
    print(f"bench_gpu: {report['parts_done'][-1]} done", flush=True)


def markdown(report: dict) -> str:
    """The three tables as ratios to their baselines, headed by the GPU that measured them."""
    lines = [f"# GPU benchmark on {report['device']} (torch {report['torch']})", ""]
    sdpa = {r["n"]: r["seconds"] for r in report["operator"] if r["path"] == "sdpa"}
    lines += [
        "## Operator fwd+bwd: path time / SDPA time",
        "",
        "| N | path | ms | SDPA ms | ratio |",
        "|---|---|---|---|---|",
    ]
    for r in report["operator"]:
        if r["path"] != "sdpa" and r["seconds"] is not None and sdpa.get(r["n"]):
            lines.append(
                f"| {r['n']} | {r['path']} | {r['seconds'] * 1e3:.3f} | {sdpa[r['n']] * 1e3:.3f} | "
                f"{r['seconds'] / sdpa[r['n']]:.2f} |"
            )
    rates = {(r["family"], r["model"]): r for r in report["training"]}
    lines += [
        "",
        "## Training steps/s at the paper's sizes",
        "",
        "| family | shape | Transformer | Aaren | Aaren / Transformer |",
        "|---|---|---|---|---|",
    ]
    for family in dict.fromkeys(f for f, _ in rates):
        t, a = rates.get((family, "transformer")), rates.get((family, "aaren"))
        if t and a:
            lines.append(
                f"| {family} | {a['shape']} | {t['steps_per_s']:.1f} | {a['steps_per_s']:.1f} | "
                f"{a['steps_per_s'] / t['steps_per_s']:.2f} |"
            )
    steps = {(r["model"], r["batch"], r["n"]): r["us_per_token"] for r in report["steps"]}
    lines += [
        "",
        "## Per-token step, µs (eval, no gradients)",
        "",
        "| batch | N | Transformer | Aaren | Aaren / Transformer |",
        "|---|---|---|---|---|",
    ]
    for (model, batch, n), us in steps.items():
        if model == "aaren" and ("transformer", batch, n) in steps:
            t = steps[("transformer", batch, n)]
            lines.append(f"| {batch} | {n} | {t:.0f} | {us:.0f} | {us / t:.2f} |")
    lines += [f"\n- failed: {e['part']}: {e['error']}" for e in report["errors"]]
    missing = [name for name in PARTS if name not in report.get("parts_done", PARTS)]
    lines += [f"\n- not reached (the run stopped first): {', '.join(missing)}"] if missing else []
    return "\n".join(lines) + "\n"
