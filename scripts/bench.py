#!/usr/bin/env python
"""Efficiency benchmark (Aaren §4.5): prints ratios measured in this run and writes a PNG.

1. Aaren operator fwd+bwd time for each path (chunked, scan, recurrent) vs causal SDPA at
   N = 96, 512, 2048, 8192 (B=32, 4 heads, d_head 32).
2. Token-by-token inference to N=16384 for Transformer (KV cache) and Aaren ((m, u, w) state):
   state bytes and cumulative time.
Outputs: <out>/bench.json, <out>/bench.md, <out>/bench.png. ``--plot-only`` redraws from the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

from recurrent_attention.bench.attention import as_rows as operator_rows
from recurrent_attention.bench.attention import operator_timings
from recurrent_attention.bench.plot import plot_bench
from recurrent_attention.bench.streaming import as_rows as stream_rows
from recurrent_attention.bench.streaming import stream
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.results.summary import atomic_write_text, device_description


def operator_table(rows: list[dict]) -> str:
    sdpa = {r["n"]: r["seconds"] for r in rows if r["path"] == "sdpa"}
    lines = ["| N | path | fwd+bwd ms | SDPA ms | SDPA time / path time |", "|---|---|---|---|---|"]
    for r in rows:
        if r["path"] == "sdpa":
            continue
        if r["seconds"] is None:
            lines.append(f"| {r['n']} | {r['path']} | {r['note']} | {sdpa[r['n']] * 1e3:.1f} | |")
        else:
            ratio = sdpa[r["n"]] / r["seconds"]
            ms, sdpa_ms = r["seconds"] * 1e3, sdpa[r["n"]] * 1e3
            lines.append(f"| {r['n']} | {r['path']} | {ms:.1f} | {sdpa_ms:.1f} | {ratio:.2f}x |")
    return "\n".join(lines)


def streaming_table(rows: list[dict]) -> str:
    by_n: dict[int, dict[str, dict]] = {}
    for r in rows:
        by_n.setdefault(r["n"], {})[r["model"]] = r
    lines = [
        "| N | Transformer state KiB | Aaren state KiB | state ratio "
        "| Transformer s | Aaren s | time ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, m in sorted(by_n.items()):
        t, a = m["transformer"], m["aaren"]
        lines.append(
            f"| {n} | {t['state_bytes'] / 1024:.0f} | {a['state_bytes'] / 1024:.1f} | "
            f"{t['state_bytes'] / a['state_bytes']:.0f}x | {t['cumulative_s']:.2f} | "
            f"{a['cumulative_s']:.2f} | {t['cumulative_s'] / a['cumulative_s']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[96, 512, 2048, 8192])
    parser.add_argument("--stream-tokens", type=int, default=16384)
    parser.add_argument("--stream-d-model", type=int, default=128)
    parser.add_argument("--stream-layers", type=int, default=2)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (1: stable on a shared machine; tiny ops gain nothing)",
    )
    parser.add_argument("--plot-only", action="store_true", help="redraw the PNG from an existing bench.json")
    args = parser.parse_args(argv)
    out = Path(args.out)

    if args.plot_only:
        report = json.loads((out / "bench.json").read_text())
        print(plot_bench(report, out / "bench.png"))
        return 0

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    bar = tqdm(desc="bench", unit="step")

    def progress(msg: str) -> None:
        bar.set_postfix_str(msg)
        bar.update()

    operator = operator_rows(operator_timings(args.lengths, device=args.device, progress=progress))
    models = {
        name: cls(args.stream_d_model, 4, args.stream_layers, 4 * args.stream_d_model, dropout=0.0).to(
            args.device
        )
        for name, cls in (("transformer", Transformer), ("aaren", Aaren))
    }
    streaming = []
    for name, model in models.items():
        streaming += stream_rows(stream(model, name, args.stream_tokens, progress=progress))
    bar.close()

    report = {
        "device": args.device if args.device != "cpu" else device_description(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "operator_shape": "B=32, H=4, d_head=32, fp32",
        "stream_model": f"d_model {args.stream_d_model}, 4 heads, {args.stream_layers} layers, batch 1",
        "params": {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()},
        "operator": operator,
        "streaming": streaming,
    }
    markdown = (
        f"# Efficiency benchmark\n\nHardware: {report['device']}; torch {report['torch']}; "
        f"command: `make bench`.\n\n## Aaren operator vs causal SDPA ({report['operator_shape']})\n\n"
        f"{operator_table(operator)}\n\n## Token-by-token inference ({report['stream_model']})\n\n"
        f"Parameters: {report['params']}\n\n{streaming_table(streaming)}\n"
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "bench.json", json.dumps(report, indent=2) + "\n")
    atomic_write_text(out / "bench.md", markdown)
    plot_bench(report, out / "bench.png")
    print(markdown)
    print(f"wrote {out}/bench.json, bench.md, bench.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
