"""The residual block and layer stack shared by every attention backbone.

Only the token mixer (the attention) differs between backbones, so parameter counts differ only
by what the mixer adds (Aaren: one learned query per layer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from recurrent_attention.models.base import Backbone, State

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


class FeedForward(nn.Sequential):
    """Position-wise two-layer MLP (TSLib's kernel-1 convolutions are the same map)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, activation: str) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"model.activation={activation!r}: choose one of {sorted(ACTIVATIONS)}")
        super().__init__(
            nn.Linear(d_model, d_ff), ACTIVATIONS[activation](), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )

    def forward(self, x: Tensor) -> Tensor:
        expand, activation, dropout, contract = self
        hidden = activation(expand(x))
        # In eval mode dropout is the identity: skipping the call matters for one-token steps.
        return contract(dropout(hidden) if self.training else hidden)


def _identity(x: Tensor) -> Tensor:
    return x


class ResidualBlock(nn.Module):
    """Mixer + feed-forward, each with dropout and a residual, post-norm (TSLib) or pre-norm (GPT).

    ``norm_eps`` is the LayerNorms' epsilon (PyTorch's 1e-5; THP's encoder uses 1e-6).
    """

    def __init__(
        self,
        mixer: nn.Module,
        d_model: int,
        d_ff: int,
        dropout: float,
        activation: str,
        norm_first: bool,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.mixer = mixer
        self.ff = FeedForward(d_model, d_ff, dropout, activation)
        self.norm_mix, self.norm_ff = nn.LayerNorm(d_model, norm_eps), nn.LayerNorm(d_model, norm_eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def _residual(
        self, x: Tensor, mixed_fn: Callable[[Tensor], tuple[Tensor, State]]
    ) -> tuple[Tensor, State]:
        # In eval mode dropout is the identity: skipping the call matters for one-token steps.
        dropout = self.dropout if self.training else _identity
        if self.norm_first:
            mixed, state = mixed_fn(self.norm_mix(x))
            x = x + dropout(mixed)
            return x + dropout(self.ff(self.norm_ff(x))), state
        mixed, state = mixed_fn(x)
        x = self.norm_mix(x + dropout(mixed))
        return self.norm_ff(x + dropout(self.ff(x))), state

    def forward(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        return self._residual(x, lambda h: self.mixer(h, state))

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        return self._residual(x_t, lambda h: self.mixer.step(h, state))


class LayerStack(Backbone):
    """A stack of residual blocks around token mixers; the state is one mixer state per layer."""

    def __init__(
        self,
        mixers: Sequence[nn.Module],
        d_model: int,
        d_ff: int,
        dropout: float,
        activation: str = "gelu",
        norm_first: bool = False,
        final_norm: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.blocks = nn.ModuleList(
            ResidualBlock(mixer, d_model, d_ff, dropout, activation, norm_first, norm_eps) for mixer in mixers
        )
        self.norm = nn.LayerNorm(d_model, norm_eps) if final_norm else nn.Identity()

    def forward(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        states = state if state is not None else [None] * len(self.blocks)
        new_states = []
        for block, layer_state in zip(self.blocks, states, strict=True):
            x, layer_state = block(x, layer_state)
            new_states.append(layer_state)
        return self.norm(x), new_states

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State:
        return [block.mixer.init_state(batch_size, device, dtype) for block in self.blocks]

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        new_states = []
        for block, layer_state in zip(self.blocks, state, strict=True):
            x_t, layer_state = block.step(x_t, layer_state)
            new_states.append(layer_state)
        return self.norm(x_t), new_states


class HeadProjections(nn.Module):
    """Query/key/value/output projections shared by softmax attention and Aaren.

    ``qkv_bias=False`` drops the query/key/value biases (THP's encoder); the output keeps its bias.
    """

    def __init__(self, d_model: int, n_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"model.d_model={d_model} must be divisible by model.n_heads={n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=qkv_bias)
        self.out_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x: Tensor) -> Tensor:
        """``(..., N, d_model)`` -> ``(..., H, N, d_head)``."""
        return x.unflatten(-1, (self.n_heads, self.d_head)).transpose(-3, -2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(..., H, N, d_head)`` -> ``(..., N, d_model)``."""
        return self.out_proj(x.transpose(-3, -2).flatten(-2))
