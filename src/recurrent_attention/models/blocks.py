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

    def forward(self, x: Tensor, state: State | None = None, **mixer_inputs: Tensor) -> tuple[Tensor, State]:
        """``mixer_inputs`` go to the mixer beside ``(x, state)`` (Transformer-XL's position encodings,
        drawn once for the whole stack)."""
        return self._residual(x, lambda h: self.mixer(h, state, **mixer_inputs))

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        return self._residual(x_t, lambda h: self.mixer.step(h, state))


class LayerStack(Backbone):
    """A stack of residual blocks around token mixers; the state is one mixer state per layer.

    ``reinject`` (``forward``, ``step``), shaped as the input, is added to the input of every block
    after the first: THP re-adds its temporal encoding before each encoder layer, and the first
    block's input already holds it. A faster eval step on the same weights for deployment:
    :class:`recurrent_attention.deploy.LeanStepper`.
    """

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

    def forward(
        self, x: Tensor, state: State | None = None, reinject: Tensor | None = None, **mixer_inputs: Tensor
    ) -> tuple[Tensor, State]:
        """``mixer_inputs``: tensors every block's mixer receives beside its input and state."""
        states = state if state is not None else [None] * len(self.blocks)
        new_states = []
        for i, (block, layer_state) in enumerate(zip(self.blocks, states, strict=True)):
            if i and reinject is not None:
                x = x + reinject
            x, layer_state = block(x, layer_state, **mixer_inputs)
            new_states.append(layer_state)
        return self.norm(x), new_states

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State:
        return [block.mixer.init_state(batch_size, device, dtype) for block in self.blocks]

    def step(self, x_t: Tensor, state: State, reinject: Tensor | None = None) -> tuple[Tensor, State]:
        """One token through each block's own ``step`` (any mode, autograd, any batch shape)."""
        new_states = []
        for i, (block, layer_state) in enumerate(zip(self.blocks, state, strict=True)):
            if i and reinject is not None:
                x_t = x_t + reinject
            x_t, layer_state = block.step(x_t, layer_state)
            new_states.append(layer_state)
        return self.norm(x_t), new_states


class QKVLinear(nn.Linear):
    """The query, key and value projections as one ``(3 d_model, d_model)`` linear layer (rows:
    query, then key, then value), so attention projects its tokens with one matrix product.

    Its initial values are those of three ``d_model x d_model`` :class:`~torch.nn.Linear` layers
    built in turn (query weight and bias, then key, then value), which is how the projections were
    held before they were fused: a seed gives the same initial model as it did then.
    """

    def __init__(self, d_model: int, bias: bool = True) -> None:
        super().__init__(d_model, 3 * d_model, bias)

    def reset_parameters(self) -> None:
        d_model, bias = self.in_features, self.bias is not None
        factory = {"device": self.weight.device, "dtype": self.weight.dtype}
        parts = [nn.Linear(d_model, d_model, bias, **factory) for _ in range(3)]
        with torch.no_grad():
            self.weight.copy_(torch.cat([part.weight for part in parts]))
            if bias:
                self.bias.copy_(torch.cat([part.bias for part in parts]))


class HeadProjections(nn.Module):
    """Query/key/value/output projections shared by softmax attention and Aaren.

    The query, key and value projections are one :class:`QKVLinear` (``qkv``), so the Transformer
    projects its tokens in one matrix product and Aaren builds its fused values-and-scores matrix
    from one parameter. ``qkv_bias=False`` drops the query/key/value biases (THP's encoder); the
    output keeps its bias. Checkpoints in the older layout (three separate layers) are brought to
    this one where they are loaded (:mod:`~recurrent_attention.migration`).
    """

    def __init__(self, d_model: int, n_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"model.d_model={d_model} must be divisible by model.n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.qkv = QKVLinear(d_model, qkv_bias)
        self.out_proj = nn.Linear(d_model, d_model)

    def parts(self) -> tuple[tuple[Tensor, Tensor | None], ...]:
        """``((W_q, b_q), (W_k, b_k), (W_v, b_v))``: views of the fused weight and bias (biases None
        without ``qkv_bias``), for the code that reads one projection alone."""
        weights = self.qkv.weight.chunk(3)
        biases = (None,) * 3 if self.qkv.bias is None else self.qkv.bias.chunk(3)
        return tuple(zip(weights, biases, strict=True))

    def heads_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values ``(..., H, N, d_head)`` of tokens ``x (..., N, d_model)``, from one
        matrix product."""
        return tuple(self.split_heads(part) for part in self.qkv(x).chunk(3, dim=-1))  # type: ignore[return-value]

    def split_heads(self, x: Tensor) -> Tensor:
        """``(..., N, d_model)`` -> ``(..., H, N, d_head)``."""
        return x.unflatten(-1, (self.n_heads, self.d_head)).transpose(-3, -2)

    def merge_heads(self, x: Tensor) -> Tensor:
        """``(..., H, N, d_head)`` -> ``(..., N, d_model)``."""
        return self.out_proj(x.transpose(-3, -2).flatten(-2))
