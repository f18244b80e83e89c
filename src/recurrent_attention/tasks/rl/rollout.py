"""Episodes of a Decision Transformer in the real environment, in two rollout modes.

- ``window`` (the Decision Transformer's own evaluation): at every step the last ``K`` timesteps
  (``3K - 1`` tokens, up to the current state) are run through the whole model again.
- ``stream``: the backbone's state is carried from the episode's first step, and each step feeds only
  the new tokens (the previous action, the return-to-go, the state). Aaren keeps constant memory;
  the Transformer's KV cache grows with every token. The model then conditions on the whole
  episode, not only the last ``K`` steps, so the two modes agree only while ``t < K``.

All episodes of a call run together in one vector env (one batched model call per step). The
return-to-go fed at step t is the target return minus the reward collected before t.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from recurrent_attention.models.base import State
from recurrent_attention.tasks.rl.env import make_vector_env
from recurrent_attention.tasks.rl.head import DecisionTransformer

MODES = ("window", "stream")


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
    """Carries the backbone state from the first step; each step feeds ``a_{t-1}, R_t, s_t``."""

    def __init__(self, model: DecisionTransformer) -> None:
        self.model = model
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
        hidden, self.state = self.model.continue_stream(tokens, self.state)
        return self.model.action_from_state_outputs(hidden)

    def observe(self, actions: Tensor) -> None:
        """The action token of the step just taken, fed at the start of the next step."""
        returns_to_go, states, steps = self.last_inputs
        self.pending_action_token = self.model.tokens(
            returns_to_go[:, None], states[:, None], actions[:, None], steps
        )[:, 2:]


def make_policy(mode: str, model: DecisionTransformer, context_len: int) -> WindowPolicy | StreamPolicy:
    if mode == "window":
        return WindowPolicy(model, context_len)
    if mode == "stream":
        return StreamPolicy(model)
    raise ValueError(f"rollout mode {mode!r}: choose one of {MODES}")


@dataclass
class RolloutResult:
    """Raw returns and lengths of each episode, and where the time went."""

    returns: list[float]
    lengths: list[int]
    env_seconds: float
    policy_seconds: float
    policy_calls: int


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
    device = model.state_mean.device
    policy = make_policy(mode, model, context_len)
    envs = make_vector_env(env, len(seeds), max_episode_steps)
    observations, _ = envs.reset(seed=seeds)
    returns, lengths = np.zeros(len(seeds)), np.zeros(len(seeds), dtype=int)
    done = np.zeros(len(seeds), dtype=bool)
    env_seconds = policy_seconds = 0.0
    calls = 0
    bar = tqdm(total=max_episode_steps, desc=f"{env} {mode}", disable=not progress, leave=False)
    with torch.no_grad():
        for t in range(max_episode_steps):
            started = time.perf_counter()
            returns_to_go = torch.as_tensor(target_return - returns, dtype=torch.float32, device=device)
            states = torch.as_tensor(observations, dtype=torch.float32, device=device)
            actions = policy.act(returns_to_go, states, t)
            policy.observe(actions)
            actions_np = actions.cpu().numpy()
            policy_seconds += time.perf_counter() - started
            calls += 1
            started = time.perf_counter()
            observations, rewards, terminated, truncated, _ = envs.step(actions_np)
            env_seconds += time.perf_counter() - started
            alive = ~done
            returns[alive] += rewards[alive]
            lengths[alive] += 1
            finished = (terminated | truncated) & alive
            done |= finished
            bar.update(1)
            bar.set_postfix(running=int((~done).sum()))
            if done.all():
                break
            if finished.any():  # the vector env refuses to step a finished copy until it is reset
                observations, _ = envs.reset(options={"reset_mask": finished})
    bar.close()
    envs.close()
    return RolloutResult(returns.tolist(), lengths.tolist(), env_seconds, policy_seconds, calls)
