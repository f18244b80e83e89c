"""The MuJoCo environments D4RL recorded its locomotion data in, as gymnasium builds them; their score.

D4RL v2 recorded gym's ``-v3`` classes on mujoco-py 2.x. Gymnasium keeps those physics in ``-v4``:

- ``Hopper-v4`` and ``Walker2d-v4``: ``-v5`` is a different robot (Walker2d-v5's right foot has
  friction 1.9 instead of 0.9; Hopper-v5 pays no healthy reward on the falling step).
- ``HalfCheetah-v5``: the same physics and rewards as ``-v4`` on the same seed and actions.
- ``Ant-v4`` without contact forces, padded with 84 zeros to D4RL's 111 dims: mujoco-py 2.x never
  filled ``cfrc_ext``, so D4RL's ant data has zeros in observation dims 27–110 and no contact cost in
  its rewards (D4RL issue #143). ``use_contact_forces=True`` would fill them (up to 1.0), and the
  data's std there (0 + 1e-6) would turn them into ~1e6 after normalisation.

The D4RL-normalised score is ``100 * (R - random) / (expert - random)`` with the reference returns
of ``d4rl/infos.py`` (the ``-random-v0`` entries every v2 task uses).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Headless rendering: MuJoCo picks an OpenGL backend only if asked to render; EGL needs no display.
os.environ.setdefault("MUJOCO_GL", "egl")


@dataclass(frozen=True)
class EnvSpec:
    """A gymnasium id, its arguments, D4RL's (random, expert) returns and zero dims D4RL appended."""

    env_id: str
    random_return: float
    expert_return: float
    kwargs: dict[str, Any] = field(default_factory=dict)
    zero_dims: int = 0


ENVS = {
    "hopper": EnvSpec("Hopper-v4", -20.272305, 3234.3),
    "halfcheetah": EnvSpec("HalfCheetah-v5", -280.178953, 12135.0),
    "walker2d": EnvSpec("Walker2d-v4", 1.629008, 4592.3),
    "ant": EnvSpec("Ant-v4", -325.6, 3879.7, {"use_contact_forces": False}, zero_dims=84),
}


def env_spec(name: str) -> EnvSpec:
    if name not in ENVS:
        raise ValueError(f"task.env={name!r}: choose one of {sorted(ENVS)}")
    return ENVS[name]


def normalized_score(raw_return: float | np.ndarray, env: str) -> float | np.ndarray:
    """D4RL's normalised score (0 = random policy, 100 = D4RL's expert) of raw episode returns."""
    spec = env_spec(env)
    return 100.0 * (raw_return - spec.random_return) / (spec.expert_return - spec.random_return)


def make_env(env: str, max_episode_steps: int):
    """One environment as D4RL recorded it (observations padded with D4RL's zero dims)."""
    import gymnasium as gym  # the rl extra; imported here so configs and tables load without it

    spec = env_spec(env)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is out of date.*")
        environment = gym.make(spec.env_id, max_episode_steps=max_episode_steps, **spec.kwargs)
    if not spec.zero_dims:
        return environment
    inner = environment.observation_space
    space = gym.spaces.Box(
        np.concatenate([inner.low, np.zeros(spec.zero_dims, inner.dtype)]),
        np.concatenate([inner.high, np.zeros(spec.zero_dims, inner.dtype)]),
        dtype=inner.dtype,
    )
    pad = np.zeros(spec.zero_dims, inner.dtype)
    return gym.wrappers.TransformObservation(environment, lambda obs: np.concatenate([obs, pad]), space)
