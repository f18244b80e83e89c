"""``scripts/export_step.py``: export a trained run's Aaren or linear-attention step to ONNX, check it
against the eager step token after token, and print both per-token latencies.

The three layers it joins stay apart: the run comes from ``finished_run`` (the one loader of a
finished run), the export from ``deploy.onnx_aaren`` or ``deploy.onnx_linear`` (by way of
``bench.streaming.EXPORTS``), the check and timing from ``bench.streaming``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from recurrent_attention.bench.streaming import EXPORTS, check_and_time
from recurrent_attention.finished_run import RunFolderError, load_finished_run
from recurrent_attention.models.aaren import Aaren


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Export Aaren's or linear attention's step (state as explicit inputs/outputs) "
        "to ONNX and check it."
    )
    parser.add_argument("run", nargs="?", type=Path, help="a train.py run folder (omit: an untrained demo)")
    parser.add_argument("--out", type=Path, default=Path("aaren_step.onnx"))
    parser.add_argument("--tokens", type=int, default=100, help="tokens compared against the eager step")
    parser.add_argument("--threads", type=int, default=1, help="torch and onnxruntime threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.run is None:
        torch.manual_seed(0)
        backbone = Aaren(d_model=128, n_heads=4, n_layers=2, d_ff=512, dropout=0.0)
    else:
        try:
            backbone = load_finished_run(args.run).load_module().backbone
        except RunFolderError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if type(backbone) not in EXPORTS:
            exporting = " and ".join(cls.__name__ for cls in EXPORTS)
            print(
                f"error: {args.run} trained {type(backbone).__name__}; only {exporting} export",
                file=sys.stderr,
            )
            return 2
    path = EXPORTS[type(backbone)][0](backbone, args.out)
    result = check_and_time(backbone, path, args.tokens, args.threads)
    print(
        f"wrote {path}; {args.tokens} tokens: max |onnx - eager| = {result['max_abs_diff']:.2e}; "
        f"per token at batch 1: eager {result['eager_us']:.0f} µs, onnxruntime {result['onnx_us']:.0f} µs"
    )
    return 0 if result["max_abs_diff"] < 1e-4 else 1
