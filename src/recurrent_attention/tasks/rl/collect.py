"""Offline data made here: behaviour policies rolled out in a gymnasium environment, kept as episodes.

The D4RL files cannot be downloaded from every machine, and a D4RL-like "medium" policy (SAC) costs
hours of CPU per environment, so the collector mixes cheap behaviours of different quality:

- ``random``: uniform actions in the action box.
- ``scripted`` (Hopper only): a PD controller that holds the joints straight and the torso upright
  (it balances in place for the whole episode: about 1000 reward over 1000 steps).
- ``noisy:<sigma>``: the scripted controller plus Gaussian action noise of std ``sigma`` (it falls
  after a random number of steps, so returns spread between random and scripted).

Each behaviour is named in the ``infos/behaviour`` dataset of the written D4RL file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from recurrent_attention.tasks.rl.env import make_env
from recurrent_attention.tasks.rl.formats import Episode

Policy = Callable[[np.ndarray, np.random.Generator], np.ndarray]

# PD gains on Hopper's three joints (thigh, leg, foot); the thigh target leans against the torso angle.
HOPPER_KP, HOPPER_KD, HOPPER_TORSO_GAIN = 3.0, 0.3, 0.5


def hopper_balance(observation: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Hopper observation (v4 = v5): z, torso angle, thigh, leg, foot angles, then 6 velocities."""
    torso, joints, joint_velocities = observation[1], observation[2:5], observation[8:11]
    targets = np.array([HOPPER_TORSO_GAIN * torso, 0.0, 0.0])
    return -HOPPER_KP * (joints - targets) - HOPPER_KD * joint_velocities


def behaviour_policy(name: str, env: str, action_dim: int) -> Policy:
    """The policy a behaviour name stands for (see the module docstring)."""
    if name == "random":
        return lambda observation, rng: rng.uniform(-1.0, 1.0, action_dim)
    if env != "hopper" and (name == "scripted" or name.startswith("noisy:")):
        raise ValueError(f"behaviour {name!r} is scripted for hopper only; use random for {env}")
    if name == "scripted":
        return hopper_balance
    if name.startswith("noisy:"):
        sigma = float(name.split(":", 1)[1])
        return lambda observation, rng: hopper_balance(observation, rng) + sigma * rng.normal(size=action_dim)
    raise ValueError(f"unknown behaviour {name!r}: random, scripted or noisy:<sigma>")


def play_episodes(
    env: str,
    policy: Policy,
    seeds: Iterable[int],
    max_episode_steps: int = 1000,
    rng: np.random.Generator | None = None,
    max_steps: int | None = None,
) -> list[Episode]:
    """Episodes of ``policy`` in one environment, episode ``i`` reset with the ``i``-th seed.

    With ``max_steps`` no episode starts once that many steps are collected; every episode is played
    to its end, so a file of them never runs one episode into the next. A finite ``seeds`` stops them too.
    """
    environment = make_env(env, max_episode_steps)
    low, high = environment.action_space.low, environment.action_space.high
    rng = rng if rng is not None else np.random.default_rng()
    episodes, steps = [], 0
    for seed in seeds:
        if max_steps is not None and steps >= max_steps:
            break
        observation, _ = environment.reset(seed=seed)
        observations, actions, rewards = [observation], [], []
        terminated = truncated = False
        while not (terminated or truncated):
            action = np.clip(policy(observation, rng), low, high).astype(np.float32)
            observation, reward, terminated, truncated, _ = environment.step(action)
            observations.append(observation)
            actions.append(action)
            rewards.append(reward)
            steps += 1
        episodes.append(
            Episode(np.array(observations), np.array(actions), np.array(rewards), terminated, truncated)
        )
    environment.close()
    return episodes


def collect_episodes(
    env: str, behaviour: str, n_episodes: int, seed: int, max_episode_steps: int = 1000
) -> list[Episode]:
    """``n_episodes`` episodes of one behaviour; episode ``i`` resets the environment with ``seed + i``."""
    probe = make_env(env, max_episode_steps)
    policy = behaviour_policy(behaviour, env, probe.action_space.shape[0])
    probe.close()
    seeds = range(seed, seed + n_episodes)
    return play_episodes(env, policy, seeds, max_episode_steps, np.random.default_rng(seed))
