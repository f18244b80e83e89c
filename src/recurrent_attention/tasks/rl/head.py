"""The Decision Transformer around any backbone (Chen et al. 2021; min-decision-transformer's layout).

Each timestep t contributes three tokens, in this order: return-to-go ``R_t``, state ``s_t``,
action ``a_t``. Each token is a linear embedding of its value plus a learned embedding of the
episode timestep ``t`` (the only position signal: the backbone adds none), and the interleaved
sequence goes through a LayerNorm and the causal backbone. The action ``a_t`` is predicted (tanh)
from the output at the *state* token ``s_t``, which has seen ``R_{≤t}``, ``s_{≤t}`` and ``a_{<t}``
but never ``a_t``.

States are normalised with the dataset's mean/std and returns-to-go divided by ``rtg_scale``
inside the head; the statistics are buffers, so a checkpoint carries them to evaluation.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from recurrent_attention.deploy import Stepper
from recurrent_attention.models.base import Backbone, State

TOKENS_PER_STEP = 3
STATE_TOKEN = 1


class DecisionTransformer(nn.Module):
    def __init__(
        self,
        backbone: Backbone,
        state_dim: int,
        act_dim: int,
        max_timestep: int = 1000,
        rtg_scale: float = 1000.0,
    ) -> None:
        super().__init__()
        d_model = backbone.d_model
        self.backbone, self.state_dim, self.act_dim = backbone, state_dim, act_dim
        self.max_timestep, self.rtg_scale = max_timestep, rtg_scale
        self.embed_timestep = nn.Embedding(max_timestep, d_model)
        self.embed_return = nn.Linear(1, d_model)
        self.embed_state = nn.Linear(state_dim, d_model)
        self.embed_action = nn.Linear(act_dim, d_model)
        self.embed_norm = nn.LayerNorm(d_model)
        self.predict_action = nn.Sequential(nn.Linear(d_model, act_dim), nn.Tanh())
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))

    def set_state_statistics(self, mean: np.ndarray, std: np.ndarray) -> None:
        """Dataset statistics used to normalise every state the head sees (training and evaluation)."""
        self.state_mean.copy_(torch.as_tensor(mean, dtype=self.state_mean.dtype))
        self.state_std.copy_(torch.as_tensor(std, dtype=self.state_std.dtype))

    def tokens(self, returns_to_go: Tensor, states: Tensor, actions: Tensor, timesteps: Tensor) -> Tensor:
        """Returns ``(B, T)``, states ``(B, T, S)``, actions ``(B, T, A)``, steps ``(B, T)``: ``(B, 3T, d)``.

        Token ``3t`` is ``R_t``, ``3t + 1`` is ``s_t``, ``3t + 2`` is ``a_t``.
        """
        time = self.embed_timestep(timesteps.clamp(0, self.max_timestep - 1))
        r = self.embed_return(returns_to_go.unsqueeze(-1) / self.rtg_scale) + time
        s = self.embed_state((states - self.state_mean) / self.state_std) + time
        a = self.embed_action(actions) + time
        return self.embed_norm(torch.stack([r, s, a], dim=2).flatten(1, 2))

    def action_from_state_outputs(self, hidden: Tensor) -> Tensor:
        """Actions in [-1, 1] from backbone outputs at state tokens."""
        return self.predict_action(hidden)

    def forward(self, returns_to_go: Tensor, states: Tensor, actions: Tensor, timesteps: Tensor) -> Tensor:
        """Predicted ``a_t`` for every step ``(B, T, A)``; each sees only tokens before ``a_t``."""
        hidden, _ = self.backbone(self.tokens(returns_to_go, states, actions, timesteps))
        return self.action_from_state_outputs(hidden[:, STATE_TOKEN::TOKENS_PER_STEP])

    def continue_stream(
        self, tokens: Tensor, state: State | None, stepper: Stepper | None = None
    ) -> tuple[Tensor, State]:
        """Feed ``tokens (B, n, d)`` after ``state``; the output at the last token and the new state.

        With a ``stepper`` (:func:`~recurrent_attention.deploy.fast_stepper` of the backbone) the
        tokens go one by one through the deployed step, as a deployed agent runs; without one,
        through the backbone's parallel forward. The two are equal (tests)."""
        if stepper is None:
            hidden, state = self.backbone(tokens, state)
            return hidden[:, -1], state
        if state is None:  # at the weights' dtype, as the deployed step runs (under autocast too)
            state = stepper.init_state(tokens.shape[0], tokens.device, next(self.backbone.parameters()).dtype)
        for i in range(tokens.shape[1]):
            out, state = stepper.step(tokens[:, i], state)
        return out, state
