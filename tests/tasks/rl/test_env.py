"""D4RL's normalised score and the environments D4RL's files were recorded in."""

from __future__ import annotations

import numpy as np
import pytest

from recurrent_attention.tasks.rl.env import make_vector_env, normalized_score

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
    envs = make_vector_env(env, 2, max_episode_steps=5)
    observations, _ = envs.reset(seed=[0, 1])
    assert observations.shape == (2, obs) and envs.single_action_space.shape == (act,)
    envs.close()
