"""Offline-RL datasets on disk: the D4RL hdf5 schema and Minari dataset folders, read and written.

- D4RL (``*-v2.hdf5``): flat arrays over every step of every episode: ``observations (N, S)``,
  ``actions (N, A)``, ``rewards (N,)``, ``terminals (N,)``, ``timeouts (N,)`` (and
  ``next_observations``, ``infos/*``, which a Decision Transformer does not need). An episode ends at
  a step whose ``terminals`` or ``timeouts`` flag is set; steps after the last flag form one more
  trajectory, cut by the end of the file.
- Minari (``<dataset>/data/main_data.hdf5``): one group ``episode_<i>`` per episode with
  ``observations (T + 1, S)`` (the last row is the observation after the final step),
  ``actions (T, A)``, ``rewards``, ``terminations``, ``truncations`` ``(T,)``.

Both readers return :class:`Trajectory` objects and stop on a bad file with a
:class:`~recurrent_attention.data.DataError` whose one line names the file and the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from recurrent_attention.data import DataError

D4RL_KEYS = ("observations", "actions", "rewards", "terminals", "timeouts")
MINARI_KEYS = ("observations", "actions", "rewards", "terminations", "truncations")
MINARI_FILE = Path("data") / "main_data.hdf5"


@dataclass
class Trajectory:
    """One episode: observations ``(T, S)``, actions ``(T, A)``, rewards ``(T,)``; ended by failure?"""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminal: bool

    def __len__(self) -> int:
        return len(self.rewards)

    def returns_to_go(self) -> np.ndarray:
        """Undiscounted reward still to come from each step on (the step's own reward included)."""
        return np.cumsum(self.rewards[::-1])[::-1].copy()

    @property
    def total_return(self) -> float:
        return float(self.rewards.sum())


def _read_arrays(group: h5py.Group, keys: tuple[str, ...], where: str) -> dict[str, np.ndarray]:
    missing = [k for k in keys if k not in group or not isinstance(group[k], h5py.Dataset)]
    if missing:
        raise DataError(f"{where}: missing dataset(s) {', '.join(missing)} (found: {', '.join(group)})")
    return {k: np.asarray(group[k][()]) for k in keys}


def _check_arrays(arrays: dict[str, np.ndarray], n_steps: int, where: str) -> None:
    """Matching lengths, 2-d observations/actions, finite numbers, at least one step."""
    if n_steps == 0:
        raise DataError(f"{where}: empty (0 steps)")
    for key, value in arrays.items():
        expected = n_steps + 1 if key == "observations" and "terminations" in arrays else n_steps
        if len(value) != expected:
            raise DataError(f"{where}: {key} has {len(value)} rows but {expected} were expected")
        if key in ("observations", "actions") and value.ndim != 2:
            raise DataError(f"{where}: {key} must be 2-d (steps, dims), got shape {value.shape}")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise DataError(f"{where}: {key} holds NaN or inf values")
        # the model reads float32, and a return-to-go sums the rewards: both must stay finite there
        size = float(np.abs(value).sum() if key == "rewards" else np.abs(value).max(initial=0.0))
        if value.dtype.kind == "f" and size > float(np.finfo(np.float32).max):
            what = "the sum of |rewards|" if key == "rewards" else "the largest |value|"
            raise DataError(f"{where}: {key}: {what} is {size:.3g}, beyond float32 (3.4e38); rescale it")


def read_d4rl(path: str | Path) -> list[Trajectory]:
    """Trajectories of a D4RL-schema hdf5 file, split after every terminal or timeout step."""
    path = Path(path)
    try:
        with h5py.File(path, "r") as fh:
            arrays = _read_arrays(fh, D4RL_KEYS, str(path))
    except OSError as err:
        raise DataError(f"{path}: not a readable hdf5 file ({err})") from None
    _check_arrays(arrays, len(arrays["rewards"]), str(path))
    ends = np.flatnonzero(arrays["terminals"].astype(bool) | arrays["timeouts"].astype(bool)) + 1
    if not len(ends) or ends[-1] != len(arrays["rewards"]):
        ends = np.append(ends, len(arrays["rewards"]))
    trajectories, start = [], 0
    for end in ends:
        trajectories.append(
            Trajectory(
                observations=arrays["observations"][start:end].astype(np.float32),
                actions=arrays["actions"][start:end].astype(np.float32),
                rewards=arrays["rewards"][start:end].astype(np.float32),
                terminal=bool(arrays["terminals"][end - 1]),
            )
        )
        start = end
    return trajectories


def _episode_index(name: str) -> int:
    match = re.fullmatch(r"episode_(\d+)", name)
    return int(match.group(1)) if match else -1


def read_minari(folder: str | Path) -> list[Trajectory]:
    """Trajectories of a Minari dataset folder (``data/main_data.hdf5``), in episode order."""
    folder = Path(folder)
    path = folder / MINARI_FILE
    if not path.is_file():
        raise DataError(f"{folder}: not a Minari dataset folder (no {MINARI_FILE})")
    trajectories = []
    try:
        with h5py.File(path, "r") as fh:
            names = sorted((n for n in fh if _episode_index(n) >= 0), key=_episode_index)
            if not names:
                raise DataError(f"{path}: no episode_<i> groups")
            for name in names:
                where = f"{path} {name}"
                if isinstance(fh[name].get("observations"), h5py.Group):
                    raise DataError(f"{where}: dictionary observations are not supported (flat Box only)")
                arrays = _read_arrays(fh[name], MINARI_KEYS, where)
                _check_arrays(arrays, len(arrays["rewards"]), where)
                trajectories.append(
                    Trajectory(
                        observations=arrays["observations"][:-1].astype(np.float32),
                        actions=arrays["actions"].astype(np.float32),
                        rewards=arrays["rewards"].astype(np.float32),
                        terminal=bool(arrays["terminations"][-1]),
                    )
                )
    except OSError as err:
        raise DataError(f"{path}: not a readable hdf5 file ({err})") from None
    return trajectories


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """A D4RL-schema file or a Minari dataset folder, told apart by what ``path`` is."""
    path = Path(path)
    if path.is_dir():
        return read_minari(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file or Minari dataset folder (task.datamodule.path)")
    return read_d4rl(path)


@dataclass
class Episode:
    """A recorded episode as a collector sees it: the observation after the last step included."""

    observations: np.ndarray  # (T + 1, S)
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool  # a true termination (the robot fell)
    truncated: bool  # the time limit ended it; neither flag: cut by the end of the data


def write_d4rl(path: str | Path, episodes: list[Episode], behaviours: list[str] | None = None) -> Path:
    """Episodes concatenated in the D4RL schema; ``infos/behaviour`` records each step's policy name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = []
    for ep in episodes:
        terminals, timeouts = np.zeros(len(ep.rewards), bool), np.zeros(len(ep.rewards), bool)
        # as D4RL: a timeout only where the time limit ended the episode; a cut episode has neither
        terminals[-1], timeouts[-1] = ep.terminated, ep.truncated and not ep.terminated
        flags.append((terminals, timeouts))
    with h5py.File(path, "w") as fh:
        fh["observations"] = np.concatenate([ep.observations[:-1] for ep in episodes]).astype(np.float32)
        fh["next_observations"] = np.concatenate([ep.observations[1:] for ep in episodes]).astype(np.float32)
        fh["actions"] = np.concatenate([ep.actions for ep in episodes]).astype(np.float32)
        fh["rewards"] = np.concatenate([ep.rewards for ep in episodes]).astype(np.float32)
        fh["terminals"] = np.concatenate([t for t, _ in flags])
        fh["timeouts"] = np.concatenate([t for _, t in flags])
        if behaviours is not None:
            steps = [np.full(len(ep.rewards), name) for ep, name in zip(episodes, behaviours, strict=True)]
            fh["infos/behaviour"] = np.concatenate(steps).astype("S")
    return path


def reads_back(trajectories: list[Trajectory], episodes: list[Episode]) -> bool:
    """Whether a file's trajectories are exactly the episodes written (float32, the same end flags)."""
    return len(trajectories) == len(episodes) and all(
        np.array_equal(t.observations, ep.observations[:-1].astype(np.float32))
        and np.array_equal(t.actions, ep.actions.astype(np.float32))
        and np.array_equal(t.rewards, ep.rewards.astype(np.float32))
        and t.terminal == ep.terminated
        for t, ep in zip(trajectories, episodes, strict=True)
    )


def write_minari(folder: str | Path, episodes: list[Episode]) -> Path:
    """Episodes as a Minari dataset folder (``data/main_data.hdf5``, one group per episode)."""
    path = Path(folder) / MINARI_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as fh:
        for i, ep in enumerate(episodes):
            group = fh.create_group(f"episode_{i}")
            group.attrs.update({"id": i, "total_steps": len(ep.rewards)})
            group["observations"] = ep.observations.astype(np.float32)
            group["actions"] = ep.actions.astype(np.float32)
            group["rewards"] = ep.rewards.astype(np.float32)
            last = np.arange(len(ep.rewards)) == len(ep.rewards) - 1
            group["terminations"] = last & ep.terminated
            group["truncations"] = last & ep.truncated
            group.create_group("infos")
    return Path(folder)
