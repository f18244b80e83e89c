"""Behaviour policies trained online with stable-baselines3's SAC, as D4RL trained the policies behind
its locomotion data (Fu et al. 2020: SAC, 256x256 networks; medium = an early-stopped policy).

A run lives in one folder and can be killed at any time:

- ``settings.json``: what the run trains (a rerun with other settings is refused);
- ``checkpoint/``: ``model.zip`` (networks, optimisers, entropy coefficient, step and episode
  counters), ``replay_buffer.pkl`` (every transition so far, in collection order: the buffer is never
  allowed to wrap), ``rng.pkl`` (torch, numpy, python and action-space generators), ``state.json``.
  It is written at the first episode end after every ``checkpoint_every`` steps, into a new folder
  renamed over the old one, so a kill leaves the previous checkpoint whole;
- ``policies/step_<n>.zip``: the policy at every evaluation (the medium candidates; the last is the
  expert);
- ``curve.csv`` / ``curve.png``: mean deterministic return over ``eval_episodes`` fixed start states
  every ``eval_every`` steps, and at the end.

Why checkpoints wait for an episode end: the environment's own state (MuJoCo's positions, its
generator) is not saved, so the run resumes from a fresh reset. Training episode ``i`` always starts
from reset seed ``seed + i`` (:class:`SeededResets`), so the resumed run's next episode is the one the
killed run had just started, and every generator is where it was: on one machine and thread count
the resumed run repeats the unkilled one transition for transition (tested). Not restored: wall time
(``wall_s`` continues from the checkpoint's), the work done after the checkpoint (redone), and
sb3's logging buffers.
"""

from __future__ import annotations

import json
import pickle
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import gymnasium as gym
import numpy as np
import pandas as pd
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.sac.policies import SACPolicy
from tqdm import tqdm

from recurrent_attention.runs.atomic import atomic_write_text
from recurrent_attention.tasks.rl.collect import Policy, play_episodes
from recurrent_attention.tasks.rl.curve import COLUMNS, read_curve, write_curve
from recurrent_attention.tasks.rl.env import make_env, normalized_score

BEHAVIOUR_ENVS = ("hopper", "walker2d", "halfcheetah")
# Evaluation episode j of every evaluation starts from reset seed EVAL_SEED + 1000 * seed + j: the
# same start states at every point of the curve, none shared with training episodes (seed + i).
EVAL_SEED = 10**9


@dataclass(frozen=True)
class BehaviourSettings:
    """One SAC run. Defaults: stable-baselines3's SAC with RL Zoo's MuJoCo choices (10k random steps
    first) on D4RL's networks; 1M steps as D4RL's and RL Zoo's Hopper."""

    env: str = "hopper"
    seed: int = 0
    total_steps: int = 1_000_000
    eval_every: int = 10_000
    eval_episodes: int = 5
    checkpoint_every: int = 50_000
    learning_starts: int = 10_000
    batch_size: int = 256
    hidden: tuple[int, ...] = (256, 256)
    learning_rate: float = 3e-4
    max_episode_steps: int = 1000

    def __post_init__(self) -> None:
        if self.env not in BEHAVIOUR_ENVS:
            raise ValueError(f"env={self.env!r}: choose one of {', '.join(BEHAVIOUR_ENVS)}")
        for name in ("total_steps", "eval_every", "eval_episodes", "checkpoint_every", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def from_json(cls, path: Path) -> BehaviourSettings:
        values = json.loads(path.read_text())
        known = {f.name for f in fields(cls)}
        if set(values) != known:
            raise ValueError(f"{path}: not behaviour settings (keys {sorted(values)})")
        return cls(**{**values, "hidden": tuple(values["hidden"])})


class SeededResets(gym.Wrapper):
    """Episode ``i`` starts from reset seed ``seed + i`` whoever asks for the reset (sb3's vector env
    resets without a seed after an episode ends), so a run resumed at an episode boundary starts the
    same episode the killed run had started."""

    def __init__(self, env: gym.Env, seed: int, episode: int = 0) -> None:
        super().__init__(env)
        self.base_seed, self.episode = seed, episode

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        result = self.env.reset(seed=self.base_seed + self.episode, options=options)
        self.episode += 1
        return result


def _train_env(settings: BehaviourSettings, episode: int) -> DummyVecEnv:
    def build() -> gym.Env:
        return Monitor(
            SeededResets(make_env(settings.env, settings.max_episode_steps), settings.seed, episode)
        )

    return DummyVecEnv([build])


def policy_actions(policy: SACPolicy, deterministic: bool) -> Policy:
    """A trained policy as the collector's ``Policy``; its stochastic actions draw on torch's generator."""
    return lambda observation, rng: policy.predict(observation, deterministic=deterministic)[0]


def load_policy(path: str | Path) -> SACPolicy:
    """A policy snapshot written by the trainer (``policies/step_<n>.zip``)."""
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such policy snapshot")
    return SACPolicy.load(str(path), device="cpu")


def evaluate(policy: SACPolicy, settings: BehaviourSettings) -> dict[str, float]:
    """Mean, std, min and max return of deterministic episodes from the fixed evaluation start states."""
    seeds = [EVAL_SEED + 1000 * settings.seed + j for j in range(settings.eval_episodes)]
    episodes = play_episodes(settings.env, policy_actions(policy, True), seeds, settings.max_episode_steps)
    returns = np.array([ep.rewards.sum() for ep in episodes])
    return {
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "length_mean": float(np.mean([len(ep.rewards) for ep in episodes])),
        "score": float(normalized_score(returns.mean(), settings.env)),
    }


def snapshot_path(folder: Path, step: int) -> Path:
    return folder / "policies" / f"step_{step:09d}.zip"


class _Run(BaseCallback):
    """Evaluations, policy snapshots, checkpoints and the progress bar of one training run.

    Both happen at the start of a rollout, where sb3 has stored the last transition and trained on it.
    """

    def __init__(self, settings: BehaviourSettings, folder: Path, rows: list[dict], wall_s: float):
        super().__init__()
        self.settings, self.folder, self.rows = settings, folder, rows
        self.wall_before, self.started = wall_s, time.perf_counter()
        self.bar: tqdm | None = None

    def wall_s(self) -> float:
        return self.wall_before + time.perf_counter() - self.started

    def _on_training_start(self) -> None:
        step, s = self.model.num_timesteps, self.settings
        self.next_eval = (step // s.eval_every + 1) * s.eval_every
        self.next_checkpoint = (step // s.checkpoint_every + 1) * s.checkpoint_every
        self.bar = tqdm(total=s.total_steps, initial=step, unit="step", desc=f"SAC {s.env} seed {s.seed}")

    def _on_rollout_start(self) -> None:
        step, buffer = self.model.num_timesteps, self.model.replay_buffer
        if step >= self.next_eval:
            self.evaluate()
            self.next_eval += self.settings.eval_every
        if step >= self.next_checkpoint and buffer.pos and buffer.dones[buffer.pos - 1, 0]:
            self.checkpoint()
            self.next_checkpoint = (
                step // self.settings.checkpoint_every + 1
            ) * self.settings.checkpoint_every

    def _on_step(self) -> bool:
        self.bar.update(1)
        return True

    def evaluate(self) -> None:
        step = self.model.num_timesteps
        self.model.policy.save(str(snapshot_path(self.folder, step)))
        row = {"step": step, **evaluate(self.model.policy, self.settings), "wall_s": self.wall_s()}
        self.rows = [r for r in self.rows if r["step"] < step] + [row]
        write_curve(pd.DataFrame(self.rows, columns=COLUMNS), self.folder / "curve.csv")
        self.bar.set_postfix(eval_return=f"{row['return_mean']:.0f}", refresh=False)

    def checkpoint(self) -> None:
        save_checkpoint(self.model, self.folder, self.wall_s())


def _rng_state(model: SAC) -> dict:
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "action_space": model.action_space.np_random.bit_generator.state,
    }


def _set_rng_state(model: SAC, state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    model.action_space.np_random.bit_generator.state = state["action_space"]


def checkpoint_dir(folder: Path) -> Path | None:
    """The newest whole checkpoint (``checkpoint.old`` when a kill fell between the two renames)."""
    for name in ("checkpoint", "checkpoint.old"):
        if (folder / name / "state.json").is_file():
            return folder / name
    return None


def save_checkpoint(model: SAC, folder: Path, wall_s: float) -> None:
    """Model, replay buffer, generators and counters, swapped in whole for the previous checkpoint."""
    new, current, old = folder / "checkpoint.new", folder / "checkpoint", folder / "checkpoint.old"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir()
    model.save(new / "model.zip")
    model.save_replay_buffer(new / "replay_buffer.pkl")
    (new / "rng.pkl").write_bytes(pickle.dumps(_rng_state(model)))
    state = {"step": model.num_timesteps, "episodes": model._episode_num, "wall_s": wall_s}
    (new / "state.json").write_text(json.dumps(state))
    if current.exists():
        shutil.rmtree(old, ignore_errors=True)
        current.rename(old)
    new.rename(current)
    shutil.rmtree(old, ignore_errors=True)


def _new_model(settings: BehaviourSettings) -> SAC:
    return SAC(
        "MlpPolicy",
        _train_env(settings, episode=0),
        learning_rate=settings.learning_rate,
        buffer_size=settings.total_steps + 1,  # never full, never wraps: medium-replay in order
        learning_starts=settings.learning_starts,
        batch_size=settings.batch_size,
        policy_kwargs={"net_arch": list(settings.hidden)},
        seed=settings.seed,
        device="cpu",
    )


def load_checkpoint(settings: BehaviourSettings, folder: Path) -> tuple[SAC, dict]:
    """The model of the run's newest checkpoint with its replay buffer and generators restored."""
    where = checkpoint_dir(folder)
    if where is None:
        raise ValueError(f"{folder}: no checkpoint to resume from")
    state = json.loads((where / "state.json").read_text())
    model = SAC.load(where / "model.zip", env=_train_env(settings, state["episodes"]), device="cpu")
    model.load_replay_buffer(where / "replay_buffer.pkl")
    _set_rng_state(model, pickle.loads((where / "rng.pkl").read_bytes()))
    return model, state


def train_behaviour(
    settings: BehaviourSettings, folder: str | Path, callbacks: Sequence[BaseCallback] = ()
) -> SAC:
    """Train (or resume) the run in ``folder`` to ``settings.total_steps``; returns the final model.

    The end of the run is evaluated, snapshotted and checkpointed whatever the episode's state, so a
    finished run answers a second call at once.
    """
    folder = Path(folder)
    saved = folder / "settings.json"
    if saved.is_file() and BehaviourSettings.from_json(saved) != settings:
        raise ValueError(f"{saved}: this folder trains other settings ({saved.read_text().strip()})")
    (folder / "policies").mkdir(parents=True, exist_ok=True)
    atomic_write_text(saved, json.dumps(asdict(settings)))
    if checkpoint_dir(folder) is None:
        model, state = _new_model(settings), {"step": 0, "wall_s": 0.0}
    else:
        model, state = load_checkpoint(settings, folder)
    rows = read_curve(folder / "curve.csv").to_dict("records") if (folder / "curve.csv").is_file() else []
    if state["step"] >= settings.total_steps:
        return model
    # evaluations after the checkpoint are redone by the resumed run
    run = _Run(settings, folder, [r for r in rows if r["step"] <= state["step"]], state["wall_s"])
    try:
        model.learn(
            settings.total_steps - state["step"], callback=[run, *callbacks], reset_num_timesteps=False
        )
        if not run.rows or run.rows[-1]["step"] != model.num_timesteps:
            run.evaluate()
        run.checkpoint()
    finally:
        if run.bar is not None:
            run.bar.close()
    return model
