"""Training windows and the length-proportional trajectory sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recurrent_attention.tasks.rl.data import (
    RLDataModule,
    TrajectoryWindows,
    evaluation_jobs,
    state_statistics,
)
from recurrent_attention.tasks.rl.formats import Trajectory
from tests.helpers.protocols import protocol


def trajectory(length: int, offset: float = 0.0) -> Trajectory:
    return Trajectory(
        observations=np.arange(length, dtype=np.float32)[:, None] + offset,
        actions=np.zeros((length, 1), np.float32),
        rewards=np.ones(length, np.float32),
        terminal=True,
    )


def test_windows_are_consecutive_steps_with_returns_to_go() -> None:
    torch.manual_seed(0)
    windows = TrajectoryWindows([trajectory(30)], context_len=4)
    for _ in range(20):
        item = windows[0]
        start = int(item["timesteps"][0])
        assert 0 <= start <= 26 and item["mask"].all()
        torch.testing.assert_close(item["timesteps"], torch.arange(start, start + 4))
        torch.testing.assert_close(item["states"][:, 0], torch.arange(start, start + 4, dtype=torch.float32))
        # all rewards 1: the return-to-go at step t of 30 is 30 - t
        torch.testing.assert_close(item["returns_to_go"], 30.0 - torch.arange(start, start + 4).float())


def test_short_trajectory_is_right_padded_and_masked() -> None:
    item = TrajectoryWindows([trajectory(2)], context_len=4)[0]
    assert item["mask"].tolist() == [True, True, False, False]
    assert item["returns_to_go"].tolist() == [2.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(("compat", "long_share"), [("default", 0.99), ("reference", 0.5)])
def test_trajectories_drawn_in_proportion_to_length(tmp_path, compat: str, long_share: float) -> None:
    rules = protocol("rl", compat)
    module = RLDataModule(source=None, state_dim=1, act_dim=1, path=str(tmp_path), rules=rules)
    module.trajectories = [trajectory(1), trajectory(99)]
    torch.manual_seed(0)
    drawn = torch.tensor(list(module.train_dataloader().sampler))
    assert len(drawn) == 1000 * 64
    assert (drawn == 1).float().mean().item() == pytest.approx(long_share, abs=0.01)


def test_state_statistics_over_every_step() -> None:
    mean, std = state_statistics([trajectory(3), trajectory(1, offset=10.0)])
    np.testing.assert_allclose(mean, [(0 + 1 + 2 + 10) / 4])
    np.testing.assert_allclose(std, [np.std([0, 1, 2, 10]) + 1e-6])


def test_evaluation_jobs_cover_every_episode_in_each_mode() -> None:
    jobs = evaluation_jobs(["window", "stream"], n_episodes=3, seed=3)
    assert jobs == [{"mode": m, "seeds": [3000, 3001, 3002]} for m in ("window", "stream")]
    with pytest.raises(ValueError, match=r"task\.eval_modes"):
        evaluation_jobs(["sliding"], 1, 0)
