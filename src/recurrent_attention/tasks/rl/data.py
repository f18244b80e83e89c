"""Offline trajectories as Decision Transformer training windows; evaluation episodes as the test split.

Training (Chen et al.'s sampler): a trajectory is drawn with probability proportional to its
length (``trajectory_sampling=length``; min-decision-transformer, the code the paper ran, draws
uniformly: ``uniform``, the ``reference`` protocol's), then
a window of ``context_len`` consecutive steps starting uniformly in ``[0, T - K]``; a trajectory
shorter than ``K`` is taken whole and right-padded, with a mask. Right padding never reaches a
valid token through a causal backbone, and the timestep embedding carries each step's position.
One epoch is ``updates_per_epoch`` batches drawn with replacement.

Test: there is no held-out data in offline RL; the test split is one batch holding one evaluation
job per rollout mode (``{"mode", "seeds"}``: every episode's reset seed) that the module plays in
the real environment, so a preset's ``limit_test_batches`` (smoke: 2) never drops a mode or an episode.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler

from recurrent_attention.data import DataError, DataLocation
from recurrent_attention.tasks.base import loader_options, make_loader
from recurrent_attention.tasks.rl.formats import Trajectory, read_trajectories
from recurrent_attention.tasks.rl.protocol import DEFAULT, RLProtocol
from recurrent_attention.tasks.rl.rollout import MODES


def state_statistics(trajectories: list[Trajectory]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of every recorded state (std + 1e-6, as the Decision Transformer)."""
    states = np.concatenate([t.observations for t in trajectories]).astype(np.float64)
    return states.mean(axis=0), states.std(axis=0) + 1e-6


class TrajectoryWindows(Dataset):
    """Item ``i``: a random window of trajectory ``i`` (the sampler decides which trajectories).

    The window's start is drawn from ``generator``, or from torch's global generator without one (as
    training draws it: the runs' batches are the seed's)."""

    def __init__(
        self, trajectories: list[Trajectory], context_len: int, generator: torch.Generator | None = None
    ) -> None:
        self.trajectories, self.context_len, self.generator = trajectories, context_len, generator
        self.returns_to_go = [t.returns_to_go() for t in trajectories]

    def __len__(self) -> int:
        return len(self.trajectories)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        last_start = max(len(self.trajectories[i]) - self.context_len, 0)
        return self.window(i, int(torch.randint(0, last_start + 1, (), generator=self.generator)))

    def window(self, i: int, start: int) -> dict[str, torch.Tensor]:
        """Steps ``start`` to ``start + K`` of trajectory ``i``, zero-padded and masked past its end."""
        traj, K = self.trajectories[i], self.context_len
        end = min(start + K, len(traj))
        n = end - start

        def padded(values: np.ndarray) -> torch.Tensor:
            out = torch.zeros((K, *values.shape[1:]), dtype=torch.float32)
            out[:n] = torch.from_numpy(np.ascontiguousarray(values[start:end]))
            return out

        timesteps = torch.zeros(K, dtype=torch.long)
        timesteps[:n] = torch.arange(start, end)
        return {
            "returns_to_go": padded(self.returns_to_go[i]),
            "states": padded(traj.observations),
            "actions": padded(traj.actions),
            "timesteps": timesteps,
            "mask": torch.arange(K) < n,
        }


def evaluation_jobs(modes: list[str], n_episodes: int, seed: int) -> list[dict]:
    """One job per mode with the same episode seeds (the modes are compared on the same starts)."""
    for mode in modes:
        if mode not in MODES:
            raise ValueError(f"task.eval_modes: {mode!r} is not one of {MODES}")
    return [{"mode": mode, "seeds": [1000 * seed + i for i in range(n_episodes)]} for mode in modes]


class RLDataModule(L.LightningDataModule):
    """A registered D4RL file or an own file/folder (``path``: D4RL-schema hdf5 or Minari dataset)."""

    def __init__(
        self,
        source: str | None,
        state_dim: int,
        act_dim: int,
        context_len: int = 20,
        batch_size: int = 64,
        updates_per_epoch: int = 1000,
        rules: RLProtocol = DEFAULT,
        eval_modes: tuple[str, ...] = MODES,
        eval_episodes: int = 10,
        eval_seed: int = 0,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        data_dir: str = "data",
        mirror: str | None = None,
        download: bool = True,
        path: str | None = None,
    ) -> None:
        super().__init__()
        if source is None and path is None:
            raise ValueError("this task has no registered data: set task.datamodule.path to a file or folder")
        self.source, self.path = source, path
        self.state_dim, self.act_dim, self.context_len = state_dim, act_dim, context_len
        self.batch_size, self.updates_per_epoch, self.rules = batch_size, updates_per_epoch, rules
        self.jobs = evaluation_jobs(list(eval_modes), eval_episodes, eval_seed)
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.location = DataLocation(source, data_dir, mirror, download)
        self.trajectories: list[Trajectory] = []
        self.resolved_path: Path | None = None
        self.state_mean = np.zeros(state_dim)
        self.state_std = np.ones(state_dim)

    def data_path(self) -> Path:
        """An own file or folder wins; otherwise the registry resolves and verifies the D4RL file."""
        return self.location.own_or_registered(self.path, "data")

    def prepare_data(self) -> None:
        self.data_path()

    def setup(self, stage: str | None = None) -> None:
        if self.trajectories:
            return
        path = self.resolved_path = self.data_path()
        trajectories = read_trajectories(path)
        dims = trajectories[0].observations.shape[1], trajectories[0].actions.shape[1]
        if dims != (self.state_dim, self.act_dim):
            raise DataError(
                f"{path}: states/actions have {dims[0]}/{dims[1]} dims but task.state_dim/act_dim are "
                f"{self.state_dim}/{self.act_dim} (pick the task of the environment that recorded it)"
            )
        self.trajectories = trajectories
        self.state_mean, self.state_std = state_statistics(trajectories)

    def describe(self) -> dict[str, float | int | str]:
        """What the policy learnt from: size and episode returns of the offline data."""
        returns = np.array([t.total_return for t in self.trajectories])
        return {
            "path": str(self.resolved_path),
            "episodes": len(returns),
            "steps": int(sum(len(t) for t in self.trajectories)),
            "mean_return": float(returns.mean()),
            "max_return": float(returns.max()),
        }

    def train_dataloader(self) -> DataLoader:
        lengths = torch.tensor([len(t) for t in self.trajectories], dtype=torch.double)
        weights = lengths if self.rules.trajectory_sampling == "length" else torch.ones_like(lengths)
        sampler = WeightedRandomSampler(weights, self.updates_per_epoch * self.batch_size, replacement=True)
        return DataLoader(
            TrajectoryWindows(self.trajectories, self.context_len),
            batch_size=self.batch_size,
            sampler=sampler,
            **self.loader_options,
        )

    def test_dataloader(self) -> DataLoader:
        return make_loader([self.jobs], batch_size=None, shuffle=False)  # one item: the episodes to play
