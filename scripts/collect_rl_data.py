#!/usr/bin/env python
"""Roll behaviour policies out in a gymnasium MuJoCo environment and write the D4RL schema (or Minari).

python scripts/collect_rl_data.py --env hopper --out data/rl/hopper_selfcollected.hdf5 \
    --mix random=100 scripted=5 noisy:0.3=10 noisy:0.5=50 noisy:0.8=50
python scripts/collect_rl_data.py --env hopper --format minari --out data/rl/hopper_minari

The file is read back with the training reader and compared with what was collected before the
script reports success; it prints each behaviour's episode count, steps and mean return.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from recurrent_attention.tasks.rl.collect import collect_episodes
from recurrent_attention.tasks.rl.formats import read_trajectories, reads_back, write_d4rl, write_minari

DEFAULT_MIX = ["random=100", "scripted=5", "noisy:0.3=10", "noisy:0.5=50", "noisy:0.8=50"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env", default="hopper", help="hopper, halfcheetah, walker2d or ant")
    parser.add_argument("--out", required=True, help="hdf5 file (d4rl) or dataset folder (minari)")
    parser.add_argument("--format", choices=("d4rl", "minari"), default="d4rl")
    parser.add_argument("--mix", nargs="+", default=DEFAULT_MIX, help="behaviour=episodes pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-episode-steps", type=int, default=1000)
    args = parser.parse_args(argv)

    episodes, names = [], []
    for k, item in enumerate(args.mix):
        behaviour, _, count = item.rpartition("=")
        batch = collect_episodes(
            args.env, behaviour, int(count), args.seed + 100_000 * k, args.max_episode_steps
        )
        returns = [float(ep.rewards.sum()) for ep in batch]
        steps = sum(len(ep.rewards) for ep in batch)
        print(
            f"{behaviour:12s} {len(batch):4d} episodes {steps:7d} steps  return {np.mean(returns):8.1f} "
            f"± {np.std(returns):6.1f}  (min {min(returns):.1f}, max {max(returns):.1f})"
        )
        episodes.extend(batch)
        names.extend([behaviour] * len(batch))
    written = (
        write_d4rl(args.out, episodes, names) if args.format == "d4rl" else write_minari(args.out, episodes)
    )
    back = read_trajectories(written)
    if not reads_back(back, episodes):
        print(f"error: {written} does not read back as the collected episodes", file=sys.stderr)
        return 1
    returns = [t.total_return for t in back]
    print(
        f"wrote {written}: {len(back)} episodes, {sum(map(len, back))} steps, "
        f"mean episode return {np.mean(returns):.1f} (read back identically)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
