#!/usr/bin/env python
"""Seconds per Decision Transformer update (forward, backward, clipping, AdamW) of both backbones.

Composed as ``train.py`` composes a run (``task=<task> model=<m>`` + the overrides given), on real
batches of the run's data, the two backbones taking turns on the same batches
(``bench.training.family_timings``); printed: the median seconds per update after the warm-up ones,
to size an RL sweep on the machine at hand.

python scripts/bench_rl_update.py --data data/rl/hopper_medium-sac.hdf5                  # paper size
python scripts/bench_rl_update.py --data data/rl/hopper_medium-sac.hdf5 experiment=aaren/rl_hopper_sac
"""

from __future__ import annotations

import argparse
import sys
import time

from recurrent_attention.bench.training import AAREN_PAIR, family_timings
from recurrent_attention.results.summary import device_description


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", required=True, help="a D4RL-schema file of the task's environment")
    parser.add_argument("--task", default="rl/hopper_medium_sac")
    parser.add_argument("--updates", type=int, default=30, help="timed updates per backbone")
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates first")
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time each update by this thread's CPU time, not wall time (a machine shared with other jobs)",
    )
    parser.add_argument(
        "overrides", nargs="*", help="train.py overrides (default: preset=paper, the paper's sizes)"
    )
    args = parser.parse_args(argv)

    overrides = [f"task.datamodule.path={args.data}", *(args.overrides or ["preset=paper"])]
    clock = time.thread_time if args.cpu_time else time.perf_counter
    timings = family_timings(
        "rl", args.task, args.updates, overrides=overrides, warmup=args.warmup, clock=clock, models=AAREN_PAIR
    )
    print(f"{device_description()}; {timings[0].shape}; {'CPU' if args.cpu_time else 'wall'} time")
    for timing in timings:
        print(f"{timing.model:12s} {1.0 / timing.steps_per_s:8.3f} s per update (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
