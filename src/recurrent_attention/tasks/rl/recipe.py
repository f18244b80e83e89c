"""D4RL's three locomotion datasets made from one finished SAC run (Fu et al. 2020, section 5 and
appendix), in the D4RL schema, written with the collector's writer and read back with the training
reader before they count as made:

- ``medium``: episodes of the medium policy (the curve's first evaluation reaching a third of the
  final one, ``curve.pick_medium``), played with SAC's stochastic actions as D4RL's were (its files
  record each action's log-probability), from reset seeds no training or evaluation episode used;
- ``medium_replay``: every transition of the replay buffer up to the medium step, in collection order
  (random warm-up steps included); its last episode is the one in progress at that step, cut without
  a flag, as it was cut in training;
- ``medium_expert``: the medium episodes, then as many transitions of the final (expert) policy.

D4RL recorded 1M transitions per policy; here ``n_steps`` is a setting, reached with whole episodes
(a file holds between ``n_steps`` and ``n_steps + max_episode_steps - 1`` transitions), so that in
``medium_expert`` no medium episode runs into an expert one. Ends are flagged as D4RL v2 flags them:
``timeouts`` where the time limit ended an episode, ``terminals`` only where the robot fell.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.save_util import load_from_pkl

from recurrent_attention.tasks.rl.behaviour import (
    BehaviourSettings,
    checkpoint_dir,
    load_policy,
    policy_actions,
    snapshot_path,
)
from recurrent_attention.tasks.rl.collect import play_episodes
from recurrent_attention.tasks.rl.curve import pick_medium, read_curve
from recurrent_attention.tasks.rl.formats import Episode, read_d4rl, reads_back, write_d4rl

# Reset seeds of the collected episodes: COLLECT_SEEDS[policy] + 10**6 * seed + i, apart from training
# (seed + i) and evaluation (10**9 + 1000 * seed + j) episodes.
COLLECT_SEEDS = {"medium": 2 * 10**9, "expert": 3 * 10**9}


def replay_episodes(buffer: ReplayBuffer, steps: int, unscale) -> list[Episode]:
    """The buffer's first ``steps`` transitions as episodes, split where sb3 marked an episode's end.

    sb3 stores ``next_observations`` apart (the terminal observation, not the next reset's) and
    actions scaled to [-1, 1]; ``unscale`` maps them back to the environment's box.
    """
    if buffer.full or buffer.pos < steps:
        raise ValueError(f"the replay buffer holds {buffer.pos} transitions in order, not {steps}")
    observations, next_observations = buffer.observations[:steps, 0], buffer.next_observations[:steps, 0]
    actions, rewards = unscale(buffer.actions[:steps, 0]), buffer.rewards[:steps, 0]
    dones, timeouts = buffer.dones[:steps, 0].astype(bool), buffer.timeouts[:steps, 0].astype(bool)
    ends = list(np.flatnonzero(dones) + 1)
    if not ends or ends[-1] != steps:
        ends.append(steps)
    episodes, start = [], 0
    for end in ends:
        episodes.append(
            Episode(
                observations=np.concatenate([observations[start:end], next_observations[end - 1 : end]]),
                actions=actions[start:end],
                rewards=rewards[start:end],
                terminated=bool(dones[end - 1] and not timeouts[end - 1]),
                truncated=bool(timeouts[end - 1]),
            )
        )
        start = end
    return episodes


def _policy_episodes(
    settings: BehaviourSettings, path: Path, which: str, n_steps: int, deterministic: bool
) -> list[Episode]:
    torch.manual_seed(COLLECT_SEEDS[which] + settings.seed)
    seeds = itertools.count(COLLECT_SEEDS[which] + 10**6 * settings.seed)
    policy = policy_actions(load_policy(path), deterministic)
    return play_episodes(settings.env, policy, seeds, settings.max_episode_steps, max_steps=n_steps)


def _write(path: Path, episodes: list[Episode], names: list[str]) -> Path:
    write_d4rl(path, episodes, names)
    if not reads_back(read_d4rl(path), episodes):
        raise RuntimeError(f"{path} does not read back as the episodes written")
    return path


def run_settings(run: Path) -> BehaviourSettings:
    """The settings ``run`` trained with; a folder without them is no behaviour run."""
    if not (run / "settings.json").is_file():
        raise ValueError(f"{run}: not a behaviour run folder (no settings.json)")
    return BehaviourSettings.from_json(run / "settings.json")


def _replay(run: Path, steps: int) -> list[Episode]:
    """The first ``steps`` transitions of ``run``'s replay buffer as episodes."""
    checkpoint = checkpoint_dir(run)
    if checkpoint is None:
        raise ValueError(f"{run}: no checkpoint, so no replay buffer for medium-replay")
    buffer = load_from_pkl(checkpoint / "replay_buffer.pkl")
    return replay_episodes(buffer, steps, load_policy(snapshot_path(run, steps)).unscale_action)


def build_medium_replay(run: str | Path, out: str | Path, steps: int | None = None) -> Path:
    """``<env>_medium_replay-sac.hdf5`` alone: the first ``steps`` transitions (default: all the run
    trained) of ``run``'s buffer, which needs no finished 1M-step run when the medium step is known.

    SAC's first ``n`` transitions do not depend on how long the run goes on (its learning rate is
    constant, and its buffer, sized to the run, never wraps), so a run trained only to the medium
    step writes the same file as the whole run's :func:`build_datasets` (tested).
    """
    run, out = Path(run), Path(out)
    settings = run_settings(run)
    replay = _replay(run, settings.total_steps if steps is None else steps)
    return _write(Path(f"{out / settings.env}_medium_replay-sac.hdf5"), replay, ["replay"] * len(replay))


def build_datasets(
    run: str | Path,
    out: str | Path,
    n_steps: int = 200_000,
    fraction: float = 1 / 3,
    deterministic: bool = False,
) -> dict[str, Path]:
    """``<env>_{medium,medium_replay,medium_expert}-sac.hdf5`` in ``out`` from the finished run ``run``."""
    run, out = Path(run), Path(out)
    settings = run_settings(run)
    curve = read_curve(run / "curve.csv")
    medium_step, final_step = pick_medium(curve, fraction), int(curve["step"].iloc[-1])
    if final_step != settings.total_steps:
        raise ValueError(f"{run}: trained {final_step} of {settings.total_steps} steps; finish the run first")
    medium = _policy_episodes(settings, snapshot_path(run, medium_step), "medium", n_steps, deterministic)
    expert = _policy_episodes(settings, snapshot_path(run, final_step), "expert", n_steps, deterministic)
    replay = _replay(run, medium_step)
    stem = out / settings.env
    return {
        "medium": _write(Path(f"{stem}_medium-sac.hdf5"), medium, ["medium"] * len(medium)),
        "medium_replay": _write(Path(f"{stem}_medium_replay-sac.hdf5"), replay, ["replay"] * len(replay)),
        "medium_expert": _write(
            Path(f"{stem}_medium_expert-sac.hdf5"),
            medium + expert,
            ["medium"] * len(medium) + ["expert"] * len(expert),
        ),
    }
