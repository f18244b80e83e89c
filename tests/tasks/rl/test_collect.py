"""The collector: behaviours of different quality, written in both schemas and read back unchanged."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from recurrent_attention.tasks.rl.collect import collect_episodes
from recurrent_attention.tasks.rl.formats import read_d4rl, read_minari, write_d4rl, write_minari


@pytest.fixture(scope="module")
def episodes():
    return collect_episodes("hopper", "random", 3, seed=0, max_episode_steps=200) + collect_episodes(
        "hopper", "scripted", 1, seed=5, max_episode_steps=200
    )


def test_behaviours_differ_in_quality(episodes) -> None:
    random_returns = [ep.rewards.sum() for ep in episodes[:3]]
    scripted = episodes[3]
    # the balancing controller survives to the time limit; random actions topple Hopper much sooner
    assert len(scripted.rewards) == 200 and scripted.truncated and not scripted.terminated
    assert scripted.rewards.sum() > 3 * np.mean(random_returns)


@pytest.mark.parametrize("schema", ["d4rl", "minari"])
def test_written_episodes_read_back_identically(tmp_path: Path, episodes, schema: str) -> None:
    if schema == "d4rl":
        trajectories = read_d4rl(write_d4rl(tmp_path / "h.hdf5", episodes, ["random"] * 3 + ["scripted"]))
        with h5py.File(tmp_path / "h.hdf5") as fh:
            np.testing.assert_array_equal(
                fh["next_observations"][:5], episodes[0].observations[1:6].astype(np.float32)
            )
            assert fh["infos/behaviour"][-1] == b"scripted"
    else:
        trajectories = read_minari(write_minari(tmp_path / "ds", episodes))
    assert len(trajectories) == len(episodes)
    for trajectory, episode in zip(trajectories, episodes, strict=True):
        np.testing.assert_array_equal(trajectory.observations, episode.observations[:-1].astype(np.float32))
        np.testing.assert_array_equal(trajectory.actions, episode.actions)
        np.testing.assert_array_equal(trajectory.rewards, episode.rewards.astype(np.float32))
        assert trajectory.terminal == episode.terminated
