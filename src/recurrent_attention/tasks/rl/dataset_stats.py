"""What a D4RL-schema file holds, as one row of docs/rl.md's dataset table: size, episodes by how they
ended, returns, sha256. Episodes and returns are the training reader's, so the row counts what a run
trains on."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from recurrent_attention.data.download import sha256sum
from recurrent_attention.tasks.rl.formats import read_d4rl

HEADER = (
    "| file | MiB | transitions | episodes (fell / time limit / cut) | return mean | min | max | sha256 |\n"
    "|---|---|---|---|---|---|---|---|"
)


def dataset_stats(path: str | Path) -> dict:
    """Size, transitions, episode counts by how they ended, episode returns and the file's sha256."""
    path = Path(path)
    trajectories = read_d4rl(path)  # checks the file (one-line DataError) before the flags are read
    with h5py.File(path, "r") as fh:
        terminals, timeouts = fh["terminals"][()].astype(bool), fh["timeouts"][()].astype(bool)
    returns = np.array([t.total_return for t in trajectories])
    return {
        "file": path.name,
        "mib": path.stat().st_size / 2**20,
        "transitions": len(terminals),
        "episodes": len(trajectories),
        "fell": int(terminals.sum()),
        "time_limit": int(timeouts.sum()),
        "cut": int(not (terminals[-1] or timeouts[-1])),
        "return_mean": float(returns.mean()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "sha256": sha256sum(path),
    }


def markdown_row(stats: dict) -> str:
    return (
        f"| {stats['file']} | {stats['mib']:.1f} | {stats['transitions']:,} | {stats['episodes']} "
        f"({stats['fell']} / {stats['time_limit']} / {stats['cut']}) | {stats['return_mean']:.1f} "
        f"| {stats['return_min']:.1f} | {stats['return_max']:.1f} | `{stats['sha256']}` |"
    )
