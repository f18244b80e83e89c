"""D4RL's recipe at toy scale: a SAC run of a few hundred steps (tiny networks, 30-step episodes so
that the time limit ends some), killed and resumed, then its three datasets, read back as written."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from recurrent_attention.cli.d4rl_recipe import main
from recurrent_attention.tasks.rl.behaviour import (
    BehaviourSettings,
    checkpoint_dir,
    load_checkpoint,
    load_policy,
    policy_actions,
    snapshot_path,
    train_behaviour,
)
from recurrent_attention.tasks.rl.collect import play_episodes
from recurrent_attention.tasks.rl.curve import pick_medium, read_curve
from recurrent_attention.tasks.rl.formats import read_d4rl
from recurrent_attention.tasks.rl.recipe import COLLECT_SEEDS, build_datasets, build_medium_replay

SETTINGS = BehaviourSettings(
    total_steps=300,
    eval_every=100,
    eval_episodes=2,
    checkpoint_every=90,  # due at 180 in the middle of an episode (it ends at 185 with seed 0)
    learning_starts=100,
    batch_size=16,
    hidden=(16, 16),
    max_episode_steps=30,
)
N_STEPS = 200  # transitions per policy in the datasets


class KilledError(Exception):
    pass


class KillAt(BaseCallback):
    """Stops the run mid-way as a kill would: nothing after ``step`` reaches the folder."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def _on_step(self) -> bool:
        if self.model.num_timesteps >= self.step:
            raise KilledError
        return True


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, object]:
    folder = tmp_path_factory.mktemp("straight")
    return folder, train_behaviour(SETTINGS, folder)


@pytest.fixture(scope="module")
def datasets(straight, tmp_path_factory) -> dict[str, Path]:
    return build_datasets(straight[0], tmp_path_factory.mktemp("data"), n_steps=N_STEPS)


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as fh:
        return {k: fh[k][()] for k in fh if isinstance(fh[k], h5py.Dataset)} | {
            "behaviour": fh["infos/behaviour"][()]
        }


def test_killed_run_resumes_from_its_checkpoint_to_the_same_transitions(straight, tmp_path: Path) -> None:
    folder = tmp_path / "killed"
    with pytest.raises(KilledError):
        train_behaviour(SETTINGS, folder, callbacks=[KillAt(250)])
    model, state = load_checkpoint(SETTINGS, folder)
    # the last checkpoint waited for an episode end after step 180 and came before the kill at 250
    assert 2 * SETTINGS.checkpoint_every <= state["step"] < 250
    assert model.num_timesteps == state["step"] and model.replay_buffer.pos == state["step"]
    assert model._episode_num == state["episodes"] and model.replay_buffer.dones[state["step"] - 1, 0]
    # the evaluation at 300 is redone, the ones up to the checkpoint kept
    resumed = train_behaviour(SETTINGS, folder)
    straight_model = straight[1]
    assert resumed.num_timesteps == straight_model.num_timesteps == 300
    for key in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(
            getattr(resumed.replay_buffer, key), getattr(straight_model.replay_buffer, key)
        )
    for name, value in straight_model.policy.state_dict().items():
        torch.testing.assert_close(resumed.policy.state_dict()[name], value, rtol=0, atol=0)
    assert list(read_curve(folder / "curve.csv")["step"]) == [100, 200, 300]


def test_a_finished_run_is_not_trained_again_and_other_settings_are_refused(straight) -> None:
    folder, _ = straight
    assert train_behaviour(SETTINGS, folder).num_timesteps == 300
    with pytest.raises(ValueError, match=r"settings\.json: this folder trains other settings"):
        train_behaviour(BehaviourSettings(total_steps=400), folder)


def test_medium_replay_is_the_buffer_up_to_the_medium_step_in_order(straight, datasets) -> None:
    folder, model = straight
    medium_step = pick_medium(read_curve(folder / "curve.csv"))
    arrays, buffer = read_arrays(datasets["medium_replay"]), model.replay_buffer
    assert len(arrays["rewards"]) == medium_step
    # D4RL's files hold float32; Hopper's box is [-1, 1], so the buffer's scaled actions are the actions
    for key in ("observations", "next_observations", "actions", "rewards"):
        np.testing.assert_array_equal(arrays[key], getattr(buffer, key)[:medium_step, 0].astype(np.float32))
    dones, timeouts = (
        buffer.dones[:medium_step, 0].astype(bool),
        buffer.timeouts[:medium_step, 0].astype(bool),
    )
    np.testing.assert_array_equal(arrays["terminals"], dones & ~timeouts)
    np.testing.assert_array_equal(arrays["timeouts"], timeouts)


def test_a_run_trained_only_to_the_medium_step_writes_the_same_medium_replay(
    straight, datasets, tmp_path: Path
) -> None:
    """SAC's first n transitions do not depend on the run's length: the shortcut is exact."""
    medium_step = pick_medium(read_curve(straight[0] / "curve.csv"))
    assert medium_step < SETTINGS.total_steps, "the toy run must go on past its medium step"
    short = tmp_path / "short"
    train_behaviour(dataclasses.replace(SETTINGS, total_steps=medium_step), short)
    path = build_medium_replay(short, tmp_path / "data")
    assert path.name == "hopper_medium_replay-sac.hdf5"
    full, alone = read_arrays(datasets["medium_replay"]), read_arrays(path)
    assert full.keys() == alone.keys()
    for key in full:
        np.testing.assert_array_equal(alone[key], full[key], err_msg=key)


def test_medium_expert_is_medium_then_as_many_expert_transitions(straight, datasets) -> None:
    medium, both = read_arrays(datasets["medium"]), read_arrays(datasets["medium_expert"])
    n = len(medium["rewards"])
    assert N_STEPS <= n < N_STEPS + SETTINGS.max_episode_steps
    for key, value in medium.items():
        np.testing.assert_array_equal(both[key][:n], value)
    assert set(both["behaviour"][:n]) == {b"medium"} and set(both["behaviour"][n:]) == {b"expert"}
    # the rest: the final policy's episodes, collected again here from the recipe's seeds
    torch.manual_seed(COLLECT_SEEDS["expert"] + SETTINGS.seed)
    expert = play_episodes(
        "hopper",
        policy_actions(load_policy(snapshot_path(straight[0], 300)), deterministic=False),
        itertools.count(COLLECT_SEEDS["expert"] + 10**6 * SETTINGS.seed),
        SETTINGS.max_episode_steps,
        max_steps=N_STEPS,
    )
    for key in ("rewards", "actions"):
        collected = np.concatenate([getattr(ep, key) for ep in expert]).astype(np.float32)
        np.testing.assert_array_equal(both[key][n:], collected)


@pytest.mark.parametrize("name", ["medium", "medium_replay", "medium_expert"])
def test_time_limit_is_a_timeout_and_a_fall_a_terminal(datasets, name: str) -> None:
    arrays = read_arrays(datasets[name])
    assert not (arrays["terminals"] & arrays["timeouts"]).any()
    ends = np.flatnonzero(arrays["terminals"] | arrays["timeouts"]) + 1
    lengths = np.diff(np.concatenate([[0], ends]))
    at_limit = lengths == SETTINGS.max_episode_steps
    # Hopper falls here both before and at the time limit; the limit is a timeout unless it fell then
    np.testing.assert_array_equal(arrays["timeouts"][ends - 1], at_limit & ~arrays["terminals"][ends - 1])
    # a fall is Hopper's own end: the observation after it is unhealthy (z <= 0.7 or |angle| >= 0.2, or
    # a state beyond 100); before the time limit only falls end an episode
    fell = arrays["next_observations"][arrays["terminals"]]
    unhealthy = (fell[:, 0] <= 0.7) | (np.abs(fell[:, 1]) >= 0.2) | (np.abs(fell[:, 1:]) >= 100).any(1)
    assert unhealthy.all()
    assert arrays["terminals"][ends - 1][~at_limit].all()


def test_the_toy_run_has_both_ends(datasets) -> None:
    """Else the test above proves nothing: 30-step episodes of a barely trained Hopper end both ways."""
    arrays = read_arrays(datasets["medium_expert"])
    assert arrays["timeouts"].any() and arrays["terminals"].any()


def test_files_read_back_with_the_training_reader(datasets) -> None:
    for path in datasets.values():
        arrays, trajectories = read_arrays(path), read_d4rl(path)
        assert set(arrays) >= {
            "observations",
            "actions",
            "rewards",
            "terminals",
            "timeouts",
            "next_observations",
        }
        assert arrays["observations"].dtype == np.float32 and arrays["observations"].shape[1] == 11
        np.testing.assert_array_equal(np.concatenate([t.rewards for t in trajectories]), arrays["rewards"])
        np.testing.assert_array_equal(
            np.concatenate([t.observations for t in trajectories]), arrays["observations"]
        )


def test_stats_row_and_one_line_errors(straight, datasets, tmp_path: Path, capsys) -> None:
    assert main(["stats", str(datasets["medium_replay"])]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    rewards = read_arrays(datasets["medium_replay"])["rewards"]
    assert row.startswith(f"| {datasets['medium_replay'].name} |") and f"| {len(rewards):,} |" in row
    # the episode in progress at the medium step is cut (unless the step ended one)
    cut = int(not straight[1].replay_buffer.dones[len(rewards) - 1, 0])
    assert f"/ {cut}) |" in row
    assert main(["datasets", "--run", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip() == f"error: {tmp_path}: not a behaviour run folder (no settings.json)"
    )
    assert main(["stats", str(tmp_path / "none.hdf5")]) == 2
    assert "none.hdf5" in capsys.readouterr().err
    assert checkpoint_dir(tmp_path) is None
