"""The gymnasium MuJoCo environments that D4RL's locomotion datasets were recorded in, and their score.

D4RL recorded Hopper/HalfCheetah/Walker2d/Ant with gym's ``-v2``/``-v3`` mujoco-py environments;
gymnasium's ``-v5`` versions of the first three observe and act in the same spaces. Ant is the
exception: D4RL's Ant observes 111 numbers (27 positions/velocities + 84 clipped contact forces),
which ``Ant-v5`` no longer offers, so Ant runs as ``Ant-v4`` with ``use_contact_forces=True``.

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
    """A gymnasium id, its constructor arguments and D4RL's (random, expert) reference returns."""

    env_id: str
    random_return: float
    expert_return: float
    kwargs: dict[str, Any] = field(default_factory=dict)


ENVS = {
    "hopper": EnvSpec("Hopper-v5", -20.272305, 3234.3),
    "halfcheetah": EnvSpec("HalfCheetah-v5", -280.178953, 12135.0),
    "walker2d": EnvSpec("Walker2d-v5", 1.629008, 4592.3),
    "ant": EnvSpec("Ant-v4", -325.6, 3879.7, {"use_contact_forces": True}),
}


def env_spec(name: str) -> EnvSpec:
    if name not in ENVS:
        raise ValueError(f"task.env={name!r}: choose one of {sorted(ENVS)}")
    return ENVS[name]


def normalized_score(raw_return: float | np.ndarray, env: str) -> float | np.ndarray:
    """D4RL's normalised score (0 = random policy, 100 = D4RL's expert) of raw episode returns."""
    spec = env_spec(env)
    return 100.0 * (raw_return - spec.random_return) / (spec.expert_return - spec.random_return)


def make_vector_env(env: str, n_envs: int, max_episode_steps: int):
    """``n_envs`` copies in one synchronous vector env, without autoreset (each copy plays one episode)."""
    import gymnasium as gym  # the rl extra; imported here so configs and tables load without it

    spec = env_spec(env)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is out of date.*")
        return gym.make_vec(
            spec.env_id,
            num_envs=n_envs,
            vectorization_mode="sync",
            vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
            max_episode_steps=max_episode_steps,
            **spec.kwargs,
        )
