#!/usr/bin/env python
"""Per-step inference time of a Decision Transformer in the window, stream and staggered rollout modes.

Both backbones at the same size (default: the paper's embedding 512, 4 heads, 4 blocks) act for
``--steps`` consecutive steps of ``--envs`` episodes at once (synthetic states, no environment), as
the evaluation does; printed: milliseconds per batched step over early, middle and late parts of the
episode, and the window/stream ratio measured in the same run.

python scripts/bench_rl_rollout.py                  # paper size, 1000 steps, 10 episodes
python scripts/bench_rl_rollout.py --d-model 64 --n-layers 2
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.results.summary import device_description
from recurrent_attention.tasks.rl.head import DecisionTransformer
from recurrent_attention.tasks.rl.rollout import MODES, make_policy


def step_times(model: DecisionTransformer, mode: str, steps: int, envs: int, context_len: int) -> list[float]:
    """Seconds of each batched policy step of one synthetic episode."""
    torch.manual_seed(0)
    policy = make_policy(mode, model, context_len)
    times = []
    with torch.no_grad():
        for t in range(steps):
            returns, states = torch.full((envs,), 3600.0 - t), torch.randn(envs, model.state_dim)
            start = time.perf_counter()
            policy.observe(policy.act(returns, states, t))
            times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--envs", type=int, default=10)
    parser.add_argument("--context-len", type=int, default=20)
    args = parser.parse_args(argv)

    size = {"d_model": args.d_model, "n_heads": args.n_heads, "n_layers": args.n_layers}
    parts = {"first 20": slice(0, 20), "middle 100": slice(args.steps // 2 - 50, args.steps // 2 + 50)}
    parts["last 100"] = slice(args.steps - 100, args.steps)
    print(
        f"{device_description()}; {size}, d_ff {4 * args.d_model}, {args.envs} episodes, K={args.context_len}"
    )
    print(f"{'model':12s} {'mode':9s} " + " ".join(f"{p:>11s}" for p in parts) + "   ms per batched step")
    mean_ms = {}
    for name, cls in (("transformer", Transformer), ("aaren", Aaren)):
        backbone = cls(d_ff=4 * args.d_model, dropout=0.0, **size)
        model = DecisionTransformer(backbone, state_dim=11, act_dim=3).eval()
        for mode in MODES:
            times = step_times(model, mode, args.steps, args.envs, args.context_len)
            ms = [1000 * sum(times[s]) / len(times[s]) for s in parts.values()]
            mean_ms[name, mode] = 1000 * sum(times) / len(times)
            print(f"{name:12s} {mode:9s} " + " ".join(f"{v:11.2f}" for v in ms))
    for name in ("transformer", "aaren"):
        ratio = mean_ms[name, "window"] / mean_ms[name, "stream"]
        print(f"{name}: window / stream time per step over the episode = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
