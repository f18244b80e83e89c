"""``scripts/ef_stream.py``: a test sequence of a trained event-forecasting run (or of an untrained
demo model) fed one event at a time through :class:`~recurrent_attention.tasks.ef.stream.EventStream`,
printing each next-event prediction beside the event that came."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from hydra.utils import instantiate

from recurrent_attention.data import DataError
from recurrent_attention.finished_run import RunFolderError, load_finished_run
from recurrent_attention.models.aaren import Aaren
from recurrent_attention.tasks.ef.head import EventModel
from recurrent_attention.tasks.ef.sin import generate_sin
from recurrent_attention.tasks.ef.stream import stream_predictions


def _load_run(run_dir: Path) -> tuple[EventModel, list]:
    """The model of a finished event-forecasting run (the checkpoint its summary names) and its test
    sequences; a folder that is not one is one :class:`RunFolderError` line."""
    run = load_finished_run(run_dir)
    if run.family != "ef":
        raise RunFolderError(
            f"{run_dir}: a {run.family} run (task {run.summary.get('task')}); "
            "scripts/ef_stream.py streams event-forecasting runs (task=ef/...)"
        )
    module = run.load_module()
    return module.model, instantiate(run.config.task.datamodule).load_splits()["test"]


def _demo_model() -> tuple[EventModel, list]:
    """An untrained small Aaren on generated ``sin`` sequences: shows the mechanics without any files."""
    torch.manual_seed(0)
    return EventModel(Aaren(d_model=16, n_heads=2, n_layers=1, d_ff=32), n_marks=1), generate_sin(3, seed=0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Stream a test sequence event by event; print next-event predictions."
    )
    parser.add_argument(
        "run", nargs="?", type=Path, help="a train.py run folder (omit for an untrained demo)"
    )
    parser.add_argument("--sequence", type=int, default=0, help="index of the test sequence")
    parser.add_argument("--events", type=int, default=20, help="how many events to show")
    args = parser.parse_args(argv)
    try:
        model, sequences = _load_run(args.run) if args.run else _demo_model()
    except (RunFolderError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not -len(sequences) <= args.sequence < len(sequences):
        print(
            f"error: --sequence {args.sequence}: the test split has {len(sequences)} sequences",
            file=sys.stderr,
        )
        return 2
    seq = sequences[args.sequence]
    n = min(args.events, len(seq))
    header = ("event", "time", "mark", "E[next interval]", "E[next time]", "next mark")
    print("{:>5} {:>10} {:>5} | {:>16} {:>12} {:>9}".format(*header))
    predictions = stream_predictions(model, seq.times[:n], seq.marks[:n])
    for i, pred in enumerate(predictions):
        truth = f"  (true next: {seq.times[i + 1]:.4f}, mark {seq.marks[i + 1]})" if i + 1 < len(seq) else ""
        mark = "-" if pred.mark is None else str(pred.mark)
        observed = f"{i:>5} {seq.times[i]:>10.4f} {seq.marks[i]:>5}"
        print(f"{observed} | {pred.interval_mean:>16.4f} {pred.time_mean:>12.4f} {mark:>9}{truth}")
    return 0
