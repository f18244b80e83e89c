"""D4RL's normalised score and the environments D4RL's files were recorded in, physics included."""

from __future__ import annotations

import numpy as np
import pytest

from recurrent_attention.tasks.rl.env import make_env, normalized_score

# d4rl/infos.py REF_MIN_SCORE / REF_MAX_SCORE of the -random-v0 entries every v2 task uses
D4RL_REFERENCES = {
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
}


@pytest.mark.parametrize("env", sorted(D4RL_REFERENCES))
def test_normalised_score_against_d4rl_constants(env: str) -> None:
    low, high = D4RL_REFERENCES[env]
    assert normalized_score(low, env) == pytest.approx(0.0, abs=1e-9)
    assert normalized_score(high, env) == pytest.approx(100.0)
    assert normalized_score(1000.0, env) == pytest.approx(100 * (1000.0 - low) / (high - low))


def test_hopper_score_by_hand() -> None:
    # 100 * (3000 + 20.272305) / (3234.3 + 20.272305) = 92.8009...
    assert normalized_score(np.array([3000.0]), "hopper")[0] == pytest.approx(92.80090, abs=1e-4)


@pytest.mark.parametrize(("env", "obs", "act"), [("hopper", 11, 3), ("walker2d", 17, 6), ("ant", 111, 8)])
def test_environment_spaces_match_d4rl(env: str, obs: int, act: int) -> None:
    environment = make_env(env, max_episode_steps=5)
    observation, _ = environment.reset(seed=0)
    assert observation.shape == (obs,) == environment.observation_space.shape
    assert environment.action_space.shape == (act,)


def friction(env: str, geom: str) -> float:
    """Sliding friction of one geom of the MuJoCo model the environment simulates."""
    return float(make_env(env, 5).unwrapped.model.geom(geom).friction[0])


def test_walker_feet_frictions_are_gym_v3s() -> None:
    """gym v3/v4 (and so D4RL): right foot 0.9, left foot 1.9; Walker2d-v5 gives the right foot 1.9."""
    assert friction("walker2d", "foot_geom") == pytest.approx(0.9)
    assert friction("walker2d", "foot_left_geom") == pytest.approx(1.9)


def test_hopper_pays_the_healthy_reward_on_the_falling_step() -> None:
    """gym v3/v4 pay 1 for being alive on the step that terminates; Hopper-v5 pays 0 there."""
    environment = make_env("hopper", 1000)
    environment.reset(seed=0)
    action, terminated, steps = np.ones(3, np.float32), False, 0
    while not terminated:
        _, reward, terminated, _, info = environment.step(action)
        steps += 1
    assert 1 < steps < 100
    # forward velocity + healthy reward 1 - control cost 1e-3 |a|^2, on the step that fell too
    assert reward == pytest.approx(info["x_velocity"] + 1.0 - 1e-3 * 3, rel=1e-6)


def test_ant_observes_and_is_rewarded_as_d4rl_recorded() -> None:
    """D4RL's ant-v2: contact forces (dims 27–110) zero throughout, no contact cost in the reward."""
    environment = make_env("ant", 1000)
    observation, _ = environment.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        action = rng.uniform(-1, 1, 8).astype(np.float32)
        observation, reward, terminated, _, info = environment.step(action)
        assert (observation[27:] == 0).all() and np.abs(observation[:27]).max() > 0
        # reward = forward + healthy - 0.5 |a|^2 (gym v3 with cfrc_ext never filled)
        expected = info["x_velocity"] + 1.0 - 0.5 * float(np.square(action).sum())
        assert reward == pytest.approx(expected, rel=1e-5) and not terminated
