"""Episodes of a Decision Transformer in the real environment, in three rollout modes.

- ``window`` (the Decision Transformer's own evaluation): at every step the last ``K`` timesteps
  (``3K - 1`` tokens, up to the current state) are run through the whole model again.
- ``stream``: the backbone's state is carried from the episode's first step, and each step feeds only
  the new tokens (the previous action, the return-to-go, the state). Aaren keeps constant memory;
  the Transformer's KV cache grows with every token. The model then conditions on the whole
  episode, not only the last ``K`` steps it was trained on, so the two modes agree only while ``t < K``.
- ``staggered``: two streams, each restarted every ``K`` steps, the second started ``K/2`` steps
  after the first; the one restarted longer ago acts. After the first ``K/2`` steps the acting
  context always spans ``K/2 + 1`` to ``K`` steps, as training windows do, at twice the stream's
  memory and cost per step (constant for Aaren). A restarted stream's first token is ``R_t`` at its
  absolute timestep, as a training window's, so its action equals the window model's on the same steps.

Every episode of a call is its own environment, stepped only until it ends (no reset, no
autoreset); the policy sees all of them in one batched model call per step. The return-to-go fed
at step ``t`` is the target return minus the reward collected before ``t``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from recurrent_attention.deploy import fast_stepper
from recurrent_attention.models.base import State
from recurrent_attention.tasks.rl.env import make_env
from recurrent_attention.tasks.rl.head import DecisionTransformer

MODES = ("window", "stream", "staggered")


class Policy(Protocol):
    def act(self, returns_to_go: Tensor, states: Tensor, timestep: int) -> Tensor: ...

    def observe(self, actions: Tensor) -> None: ...


class WindowPolicy:
    """Re-runs the last ``context_len`` timesteps through the model at every step."""

    def __init__(self, model: DecisionTransformer, context_len: int) -> None:
        self.model, self.context_len = model, context_len
        self.returns: list[Tensor] = []
        self.states: list[Tensor] = []
        self.actions: list[Tensor] = []

    def act(self, returns_to_go: Tensor, states: Tensor, timestep: int) -> Tensor:
        """Action for step ``timestep`` given its return-to-go ``(n,)`` and state ``(n, S)``."""
        self.returns.append(returns_to_go)
        self.states.append(states)
        first = max(0, timestep + 1 - self.context_len)
        placeholder = states.new_zeros(len(states), self.model.act_dim)  # a_t: dropped before the backbone
        tokens = self.model.tokens(
            torch.stack(self.returns[first:], 1),
            torch.stack(self.states[first:], 1),
            torch.stack([*self.actions[first:], placeholder], 1),
            torch.arange(first, timestep + 1, device=states.device).expand(len(states), -1),
        )[:, :-1]
        hidden, _ = self.model.backbone(tokens)
        return self.model.action_from_state_outputs(hidden[:, -1])

    def observe(self, actions: Tensor) -> None:
        self.actions.append(actions)


class StreamPolicy:
    """Carries the backbone state from its (re)start; each step feeds ``a_{t-1}, R_t, s_t``.

    The tokens go through the backbone's deployed step (:func:`~recurrent_attention.deploy.fast_stepper`:
    Aaren's compiled step, the lean Transformer and linear attention steps) where it has one; a
    backbone that is its own deployed form (CRT, Transformer-XL) takes its parallel forward over
    the step's two or three tokens, which equals its steps (CRT's step recomputes its open segment
    at every token)."""

    def __init__(self, model: DecisionTransformer) -> None:
        self.model = model
        stepper = fast_stepper(model.backbone)
        self.stepper = None if stepper is model.backbone else stepper
        self.restart()

    def restart(self) -> None:
        """Forget everything: the next step is the first token of a new context (``R_t``)."""
        self.state: State | None = None
        self.pending_action_token: Tensor | None = None
        self.last_inputs: tuple[Tensor, Tensor, Tensor] | None = None

    def act(self, returns_to_go: Tensor, states: Tensor, timestep: int) -> Tensor:
        steps = torch.full((len(states), 1), timestep, device=states.device)
        placeholder = states.new_zeros(len(states), 1, self.model.act_dim)
        tokens = self.model.tokens(returns_to_go[:, None], states[:, None], placeholder, steps)[:, :2]
        if self.pending_action_token is not None:
            tokens = torch.cat([self.pending_action_token, tokens], dim=1)
        self.last_inputs = (returns_to_go, states, steps)
        hidden, self.state = self.model.continue_stream(tokens, self.state, self.stepper)
        return self.model.action_from_state_outputs(hidden)

    def observe(self, actions: Tensor) -> None:
        """The action token of the step just taken, fed at the start of the next step."""
        returns_to_go, states, steps = self.last_inputs
        self.pending_action_token = self.model.tokens(
            returns_to_go[:, None], states[:, None], actions[:, None], steps
        )[:, 2:]


class StaggeredPolicy:
    """Two streams restarted every ``period`` steps, ``period // 2`` apart; the older one acts."""

    def __init__(self, model: DecisionTransformer, period: int) -> None:
        if period < 2:
            raise ValueError(
                f"staggered rollout: the restart period (task.context_len) is {period}, need >= 2"
            )
        self.period = period
        self.offsets = (0, period // 2)
        self.streams = (StreamPolicy(model), StreamPolicy(model))
        self.started: list[StreamPolicy] = []

    def act(self, returns_to_go: Tensor, states: Tensor, timestep: int) -> Tensor:
        for stream, offset in zip(self.streams, self.offsets, strict=True):
            if timestep >= offset and (timestep - offset) % self.period == 0:
                stream.restart()
        ages = [(timestep - offset) % self.period for offset in self.offsets]
        self.started = [s for s, o in zip(self.streams, self.offsets, strict=True) if timestep >= o]
        actions = [stream.act(returns_to_go, states, timestep) for stream in self.started]
        return actions[int(np.argmax(ages[: len(actions)]))]

    def observe(self, actions: Tensor) -> None:
        for stream in self.started:
            stream.observe(actions)


def make_policy(mode: str, model: DecisionTransformer, context_len: int) -> Policy:
    if mode == "window":
        return WindowPolicy(model, context_len)
    if mode == "stream":
        return StreamPolicy(model)
    if mode == "staggered":
        return StaggeredPolicy(model, context_len)
    raise ValueError(f"rollout mode {mode!r}: choose one of {MODES}")


@dataclass
class RolloutResult:
    """Raw returns and lengths of each episode, and where the time went."""

    returns: list[float]
    lengths: list[int]
    env_seconds: float
    policy_seconds: float
    policy_calls: int


def play(
    policy: Policy,
    envs: list,
    seeds: list[int],
    target_return: float,
    device: torch.device,
    progress_label: str | None = None,
) -> RolloutResult:
    """One episode per environment, all at once; an environment is stepped only until it ends."""
    observations = np.stack([e.reset(seed=s)[0] for e, s in zip(envs, seeds, strict=True)])
    returns, lengths = np.zeros(len(envs)), np.zeros(len(envs), dtype=int)
    running = np.ones(len(envs), dtype=bool)
    env_seconds = policy_seconds = 0.0
    calls = 0
    bar = tqdm(desc=progress_label, disable=progress_label is None, leave=False)
    with torch.no_grad():
        while running.any():
            started = time.perf_counter()
            returns_to_go = torch.as_tensor(target_return - returns, dtype=torch.float32, device=device)
            states = torch.as_tensor(observations, dtype=torch.float32, device=device)
            actions = policy.act(returns_to_go, states, calls)
            policy.observe(actions)
            actions_np = actions.float().cpu().numpy()  # bf16 under autocast: numpy has no bf16
            policy_seconds += time.perf_counter() - started
            calls += 1
            started = time.perf_counter()
            for i in np.flatnonzero(running):
                observations[i], reward, terminated, truncated, _ = envs[i].step(actions_np[i])
                returns[i] += reward
                lengths[i] += 1
                running[i] = not (terminated or truncated)
            env_seconds += time.perf_counter() - started
            bar.update(1)
            bar.set_postfix(running=int(running.sum()))
    bar.close()
    return RolloutResult(returns.tolist(), lengths.tolist(), env_seconds, policy_seconds, calls)


def run_episodes(
    model: DecisionTransformer,
    env: str,
    mode: str,
    seeds: list[int],
    target_return: float,
    context_len: int,
    max_episode_steps: int,
    progress: bool = True,
) -> RolloutResult:
    """Play one episode per seed at once; the model is run without gradients in its current mode."""
    policy = make_policy(mode, model, context_len)
    envs = [make_env(env, max_episode_steps) for _ in seeds]
    try:
        label = f"{env} {mode}" if progress else None
        return play(policy, envs, seeds, target_return, model.state_mean.device, label)
    finally:
        for environment in envs:
            environment.close()
