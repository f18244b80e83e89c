"""Readers of both on-disk schemas, on files written here with h5py in the real layouts."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from recurrent_attention.data import DataError
from recurrent_attention.tasks.rl.formats import read_d4rl, read_minari, read_trajectories

# 9 steps: a terminal after step 2, a timeout after step 5, then 3 steps cut by the end of the file.
REWARDS = np.arange(1, 10, dtype=np.float32)
TERMINALS = np.array([0, 0, 1, 0, 0, 0, 0, 0, 0], bool)
TIMEOUTS = np.array([0, 0, 0, 0, 0, 1, 0, 0, 0], bool)


def write_d4rl_file(path: Path, **replace: np.ndarray) -> Path:
    n = len(REWARDS)
    arrays = {
        "observations": np.arange(n * 2, dtype=np.float32).reshape(n, 2),
        "next_observations": np.arange(2, n * 2 + 2, dtype=np.float32).reshape(n, 2),
        "actions": np.linspace(-1, 1, n, dtype=np.float32)[:, None],
        "rewards": REWARDS,
        "terminals": TERMINALS,
        "timeouts": TIMEOUTS,
        **replace,
    }
    with h5py.File(path, "w") as fh:
        for key, value in arrays.items():
            if value is not None:
                fh[key] = value
        fh["infos/qpos"] = np.zeros((n, 3), np.float32)
    return path


def test_d4rl_splits_at_terminals_and_timeouts(tmp_path: Path) -> None:
    trajectories = read_d4rl(write_d4rl_file(tmp_path / "toy-v2.hdf5"))
    assert [len(t) for t in trajectories] == [3, 3, 3]
    assert [t.terminal for t in trajectories] == [True, False, False]
    np.testing.assert_array_equal(trajectories[1].rewards, [4, 5, 6])
    np.testing.assert_array_equal(trajectories[2].observations, [[12, 13], [14, 15], [16, 17]])
    # returns-to-go by hand: [1+2+3, 2+3, 3], [4+5+6, 5+6, 6], [7+8+9, 8+9, 9]
    np.testing.assert_array_equal(trajectories[0].returns_to_go(), [6, 5, 3])
    np.testing.assert_array_equal(trajectories[1].returns_to_go(), [15, 11, 6])
    np.testing.assert_array_equal(trajectories[2].returns_to_go(), [24, 17, 9])


def write_minari_folder(folder: Path, lengths: list[int], terminated: list[bool]) -> Path:
    """Minari's layout: data/main_data.hdf5 with episode_<i> groups, one more observation than steps."""
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "metadata.json").write_text("{}")
    with h5py.File(folder / "data" / "main_data.hdf5", "w") as fh:
        # written out of numeric order (episode_10 before episode_2) on purpose
        for i in sorted(range(len(lengths)), key=str):
            n, start, group = lengths[i], 100 * i, fh.create_group(f"episode_{i}")
            group.attrs.update({"id": i, "seed": i, "total_steps": n})
            group["observations"] = np.arange(start, start + n + 1, dtype=np.float32)[:, None].repeat(4, 1)
            group["actions"] = np.full((n, 2), i, np.float32)
            group["rewards"] = np.arange(1, n + 1, dtype=np.float64)
            group["terminations"] = np.arange(n) == n - 1 if terminated[i] else np.zeros(n, bool)
            group["truncations"] = np.zeros(n, bool) if terminated[i] else np.arange(n) == n - 1
            group.create_group("infos")
    return folder


def test_minari_episodes_in_order_with_returns_to_go(tmp_path: Path) -> None:
    lengths = [3, 1, 2, 4, 2, 2, 2, 2, 2, 2, 5]
    terminated = [i % 2 == 0 for i in range(len(lengths))]
    trajectories = read_trajectories(write_minari_folder(tmp_path / "hopper-medium-v0", lengths, terminated))
    assert [len(t) for t in trajectories] == lengths
    assert [t.terminal for t in trajectories] == terminated
    assert [t.actions[0, 0] for t in trajectories] == list(range(len(lengths)))
    # the observation after the last step is not a state the policy acted in
    np.testing.assert_array_equal(trajectories[10].observations[:, 0], [1000, 1001, 1002, 1003, 1004])
    np.testing.assert_array_equal(trajectories[10].returns_to_go(), [15, 14, 12, 9, 5])


@pytest.mark.parametrize(
    ("replace", "message"),
    [
        ({"timeouts": None}, "missing dataset.*timeouts"),
        ({"actions": np.zeros((8, 1), np.float32)}, "actions has 8 rows but 9"),
        ({"rewards": np.where(np.arange(9) == 4, np.nan, REWARDS).astype(np.float32)}, "rewards holds NaN"),
        ({"observations": np.full((9, 2), np.inf, np.float32)}, "observations holds NaN or inf"),
        # finite in float64, infinite in the model's float32 (the bug: "the run diverged")
        ({"rewards": np.full(9, 1e300)}, "rewards: the sum of .rewards. is 9e.300, beyond float32"),
        ({"rewards": np.full(9, 1e38)}, "rewards: the sum of .rewards. is 9e.38, beyond float32"),
        (
            {"observations": np.full((9, 2), -1e39)},
            "observations: the largest .value. is 1e.39, beyond float32",
        ),
        (
            {k: np.zeros((0, 2) if k.endswith("observations") else (0,)) for k in ("observations", "rewards")}
            | {"actions": np.zeros((0, 1)), "terminals": np.zeros(0, bool), "timeouts": np.zeros(0, bool)},
            "empty",
        ),
    ],
)
def test_bad_d4rl_file_names_file_and_problem(tmp_path: Path, replace: dict, message: str) -> None:
    path = write_d4rl_file(tmp_path / "bad-v2.hdf5", **replace)
    with pytest.raises(DataError, match=message) as err:
        read_d4rl(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_bad_minari_episode_names_group(tmp_path: Path) -> None:
    folder = write_minari_folder(tmp_path / "ds", [3, 2], [True, False])
    with h5py.File(folder / "data" / "main_data.hdf5", "a") as fh:
        del fh["episode_1/observations"]
        fh["episode_1/observations"] = np.zeros((2, 4), np.float32)  # one row short
    with pytest.raises(DataError, match="episode_1: observations has 2 rows but 3"):
        read_minari(folder)


def test_not_a_file_or_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"task\.datamodule\.path"):
        read_trajectories(tmp_path / "missing.hdf5")
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataError, match="not a Minari dataset folder"):
        read_trajectories(tmp_path / "folder")
    (tmp_path / "text.hdf5").write_text("not hdf5")
    with pytest.raises(DataError, match="not a readable hdf5 file"):
        read_trajectories(tmp_path / "text.hdf5")
