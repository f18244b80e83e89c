"""Playing episodes in the real environment: very different episode ends, the return-to-go, Ant's states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.models.aaren import Aaren
from recurrent_attention.tasks.rl.collect import hopper_balance
from recurrent_attention.tasks.rl.data import RLDataModule
from recurrent_attention.tasks.rl.env import make_env
from recurrent_attention.tasks.rl.formats import Episode, write_d4rl
from recurrent_attention.tasks.rl.head import DecisionTransformer
from recurrent_attention.tasks.rl.rollout import play, run_episodes

MAX_STEPS, TARGET = 150, 1000.0


class KickOrBalance:
    """Kicked episodes push every joint to +1 (Hopper falls in ~20 steps); the others balance to the limit.

    Records what it is fed and does, so tests can check the return-to-go.
    """

    def __init__(self, kicked: list[bool]) -> None:
        self.kicked = np.array(kicked)
        self.returns_to_go: list[np.ndarray] = []
        self.actions: list[np.ndarray] = []

    def act(self, returns_to_go: torch.Tensor, states: torch.Tensor, timestep: int) -> torch.Tensor:
        self.returns_to_go.append(returns_to_go.numpy().copy())
        actions = np.stack([hopper_balance(s, np.random.default_rng(0)) for s in states.numpy()])
        actions[self.kicked] = 1.0
        return torch.as_tensor(actions, dtype=torch.float32)

    def observe(self, actions: torch.Tensor) -> None:
        self.actions.append(actions.numpy().copy())


def play_hopper(seeds: list[int], policy: KickOrBalance):
    return play(policy, [make_env("hopper", MAX_STEPS) for _ in seeds], seeds, TARGET, torch.device("cpu"))


def test_episodes_ending_at_very_different_times_equal_each_played_alone() -> None:
    """An episode that ends after ~20 steps beside ones that run to the limit: no crash, nothing mixed.

    gymnasium 1.x's vector env, reset to keep the batch stepping, refused to step a copy that had
    ended a second time (``AssertionError: self._autoreset_envs``).
    """
    kicked = [True, False, False]
    result = play_hopper([0, 1, 2], KickOrBalance(kicked))
    assert result.lengths[0] < MAX_STEPS / 4 and result.lengths[1:] == [MAX_STEPS, MAX_STEPS]
    assert result.policy_calls == MAX_STEPS
    for i, seed in enumerate([0, 1, 2]):
        single = play_hopper([seed], KickOrBalance([kicked[i]]))
        assert single.lengths == [result.lengths[i]]
        assert single.returns[0] == result.returns[i]


def test_return_to_go_is_target_minus_rewards_collected_before_each_step() -> None:
    policy = KickOrBalance([False])
    result = play_hopper([3], policy)
    # replay the same actions in a fresh copy to read the rewards step by step
    env = make_env("hopper", MAX_STEPS)
    env.reset(seed=3)
    rewards = [env.step(a[0])[1] for a in policy.actions[: result.lengths[0]]]
    fed = np.array([r[0] for r in policy.returns_to_go])
    np.testing.assert_allclose(fed, TARGET - np.concatenate([[0.0], np.cumsum(rewards)[:-1]]), rtol=1e-6)
    assert fed[-1] < TARGET - 10  # the check bites: the return-to-go did go down


def d4rl_like_ant_file(path: Path) -> Path:
    """Ant data as D4RL recorded it: gym's Ant, 27 numbers observed, 84 contact-force dims left at zero."""
    import gymnasium as gym

    env = gym.make("Ant-v4", use_contact_forces=False, max_episode_steps=40)
    rng = np.random.default_rng(0)
    episodes = []
    for seed in range(3):
        observation, _ = env.reset(seed=seed)
        observations, actions, rewards, done = [observation], [], [], False
        while not done:
            action = rng.uniform(-1, 1, 8).astype(np.float32)
            observation, reward, terminated, truncated, _ = env.step(action)
            observations.append(observation)
            actions.append(action)
            rewards.append(reward)
            done = terminated or truncated
        padded = np.concatenate([np.array(observations), np.zeros((len(observations), 84))], axis=1)
        episodes.append(Episode(padded, np.array(actions), np.array(rewards), terminated, truncated))
    return write_d4rl(path, episodes)


def test_ant_evaluation_states_stay_bounded_after_normalisation(tmp_path: Path) -> None:
    """The model sees evaluation states normalised with the data's std, which is 1e-6 in dims 27–110."""
    data = RLDataModule(source=None, state_dim=111, act_dim=8, path=str(d4rl_like_ant_file(tmp_path / "a")))
    data.setup("fit")
    assert data.state_std[27:].max() == pytest.approx(1e-6)
    torch.manual_seed(0)
    model = DecisionTransformer(Aaren(d_model=16, n_heads=2, n_layers=1, d_ff=32, dropout=0.0), 111, 8)
    model.set_state_statistics(data.state_mean, data.state_std)
    seen = []
    model.embed_state.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    run_episodes(model.eval(), "ant", "stream", [0, 1], 6000.0, 20, 30, progress=False)
    normalised = torch.cat([s.reshape(-1, 111) for s in seen])
    assert len(normalised) >= 2 * 20
    assert normalised[:, 27:].abs().max() == 0 and normalised.abs().max() < 100
