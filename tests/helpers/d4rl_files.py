"""A tiny Hopper file in D4RL's schema, and its mean episode return worked out by hand.

The hand count reads only the file's ``rewards``, ``terminals`` and ``timeouts`` with h5py, as D4RL
documents them, so that tests comparing it with what the reader, the run summary and the tables
record do not check the code against itself.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

# D4RL's hopper references (d4rl/infos.py), written out: the tests must not reuse the code they check
HOPPER_RANDOM, HOPPER_EXPERT = -20.272305, 3234.3
# steps after which an episode ends: a fall (terminals), the time limit (timeouts); the last 7 steps
# are an episode cut by the end of the file, which the reader keeps as one more trajectory
TERMINALS, TIMEOUTS, N_STEPS = (8, 40), (25,), 48


def write_tiny_d4rl(path: Path) -> Path:
    """A Hopper-shaped file (11 state, 3 action dims) in D4RL's schema, 4 episodes of uneven length."""
    rng = np.random.default_rng(0)
    observations = rng.normal(size=(N_STEPS + 1, 11)).astype(np.float32)
    terminals, timeouts = np.zeros(N_STEPS, bool), np.zeros(N_STEPS, bool)
    terminals[list(TERMINALS)], timeouts[list(TIMEOUTS)] = True, True
    with h5py.File(path, "w") as fh:
        fh["observations"], fh["next_observations"] = observations[:-1], observations[1:]
        fh["actions"] = rng.uniform(-1.0, 1.0, (N_STEPS, 3)).astype(np.float32)
        fh["rewards"] = rng.uniform(0.0, 3.0, N_STEPS).astype(np.float32)
        fh["terminals"], fh["timeouts"] = terminals, timeouts
    return path


def mean_episode_return(path: Path) -> float:
    """Episodes end after every step flagged terminal or timeout; steps after the last flag are one more."""
    with h5py.File(path, "r") as fh:
        rewards = fh["rewards"][()].astype(np.float64)
        ends = fh["terminals"][()] | fh["timeouts"][()]
    returns, current = [], 0.0
    for reward, end in zip(rewards, ends, strict=True):
        current += reward
        if end:
            returns.append(current)
            current = 0.0
    if not ends[-1]:
        returns.append(current)
    return float(np.mean(returns))


def hopper_score(raw_return: float) -> float:
    """D4RL's normalised score of a Hopper return: 0 = random policy, 100 = D4RL's expert."""
    return 100 * (raw_return - HOPPER_RANDOM) / (HOPPER_EXPERT - HOPPER_RANDOM)
