"""A residual stack's one-token eval step as a flat list of ``addmm``, layer norms and mixer steps.

Per-token latency is what streaming is for, and at one token most of the cost of
:meth:`~recurrent_attention.models.blocks.LayerStack.step` is per-operation overhead (module calls,
attribute reads, dropout in eval mode). :class:`LeanStepper` wraps a trained stack whose every mixer
has a lean step (:mod:`~recurrent_attention.deploy.mixers`) and runs the same step on weights laid
out once: the feed-forward's ``addmm`` operands, the layer norms' arguments, each mixer's own
laid-out step. Tests hold it equal to the model's ``step``.

The layout follows the model: it is rebuilt when a parameter changes in place (an optimiser step,
``load_state_dict``: the parameters' version counters), when a parameter's storage moves (``.to``,
``.double``: their data pointers), and after any ``load_state_dict`` (a hook the stepper puts on the
model, which also catches ``assign=True``, where the parameters themselves are replaced).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.deploy.mixers import Mixer, addmm_weights, has_lean_mixer, lean_mixer
from recurrent_attention.models.base import State
from recurrent_attention.models.blocks import LayerStack, ResidualBlock


class LeanBlock(NamedTuple):
    """One residual block laid out for :func:`lean_block_step`: the mixer's one-token function,
    ``addmm`` weights for the feed-forward (transposed, biases never None) and layer-norm arguments."""

    mix: Mixer
    ff_in_weight: Tensor
    ff_in_bias: Tensor
    ff_out_weight: Tensor
    ff_out_bias: Tensor
    norm_mix: tuple
    norm_ff: tuple
    activation: Callable[[Tensor], Tensor]
    norm_first: bool


def layer_norm_arguments(norm: nn.LayerNorm) -> tuple:
    """The arguments of ``F.layer_norm`` after the input, read once."""
    return (norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def final_norm_arguments(model: LayerStack) -> tuple | None:
    """The stack's final layer norm's arguments, or None where it has none."""
    return layer_norm_arguments(model.norm) if isinstance(model.norm, nn.LayerNorm) else None


def lean_block(block: ResidualBlock, mix: Mixer) -> LeanBlock:
    """``block`` laid out for :func:`lean_block_step`, mixing with ``mix`` (:func:`lean_mixer`, or
    an exporter's graph-friendly step)."""
    expand, activation, _, contract = block.ff
    return LeanBlock(
        mix,
        *addmm_weights(expand.weight, expand.bias),
        *addmm_weights(contract.weight, contract.bias),
        layer_norm_arguments(block.norm_mix),
        layer_norm_arguments(block.norm_ff),
        activation.forward,  # the module's hooks are not run on this path; it has none
        block.norm_first,
    )


def lean_block_step(w: LeanBlock, x: Tensor, state: State) -> tuple[Tensor, State]:
    """:meth:`ResidualBlock.step` in eval mode (no dropout) on laid-out weights."""
    if w.norm_first:
        mixed, state = w.mix(F.layer_norm(x, *w.norm_mix), state)
        x = x + mixed
        hidden = w.activation(torch.addmm(w.ff_in_bias, F.layer_norm(x, *w.norm_ff), w.ff_in_weight))
        return torch.addmm(w.ff_out_bias, hidden, w.ff_out_weight).add_(x), state
    mixed, state = w.mix(x, state)
    x = F.layer_norm(mixed.add_(x), *w.norm_mix)
    hidden = w.activation(torch.addmm(w.ff_in_bias, x, w.ff_in_weight))
    return F.layer_norm(torch.addmm(w.ff_out_bias, hidden, w.ff_out_weight).add_(x), *w.norm_ff), state


def outside_autocast(step: Callable[..., tuple[Tensor, State]]) -> Callable[..., tuple[Tensor, State]]:
    """A deployed step runs at its weights' dtype. Under autocast (a ``bf16-mixed`` run's evaluation
    streams through it) its layout would be built in bf16 beside a float32 state, which the compiled
    step refuses and the lean step would mix; so autocast is switched off for the step and the token
    (and any reinjected encoding) cast to the weights' dtype. Outside autocast: the step as it is."""

    @functools.wraps(step)
    def wrapped(self: LeanStepper | LeanMixerStepper, x_t: Tensor, state: State, *args, **kwargs):
        device = x_t.device.type
        if not torch.is_autocast_enabled(device):
            return step(self, x_t, state, *args, **kwargs)
        dtype = next(self.module.parameters()).dtype

        def cast(extra: Tensor | None) -> Tensor | None:
            return extra if extra is None else extra.to(dtype)

        args, kwargs = [cast(a) for a in args], {name: cast(k) for name, k in kwargs.items()}
        with torch.autocast(device, enabled=False):
            return step(self, x_t.to(dtype), state, *args, **kwargs)

    return wrapped


def has_lean_step(model: nn.Module) -> bool:
    """Whether :class:`LeanStepper` can wrap ``model``: a layer stack whose every mixer has a lean step."""
    return isinstance(model, LayerStack) and all(has_lean_mixer(block.mixer) for block in model.blocks)


class Layout(NamedTuple):
    """The laid-out blocks and final norm, and what they were built from (to notice a change)."""

    parameters: tuple[nn.Parameter, ...]
    stamps: list[tuple[int, int]]
    blocks: list[LeanBlock]
    final_norm: tuple | None


def _stamps(parameters: tuple[nn.Parameter, ...]) -> list[tuple[int, int]]:
    return [(p._version, p.data_ptr()) for p in parameters]


def _clearing_hook(stepper: LeanStepper | LeanMixerStepper) -> Callable[..., None]:
    """A load hook that clears ``stepper``'s layout, holding it weakly (the model must not keep it alive)."""
    ref = weakref.ref(stepper)

    def clear(*_: object) -> None:
        alive = ref()
        if alive is not None:
            alive.clear()

    return clear


class LeanStepper:
    """``model.step`` for ``(B, d_model)`` tokens in eval mode without gradients, on a flat layout;
    any other call (training, autograd, another token shape) is the model's own step.

    ``reinject`` is :meth:`LayerStack.step`'s (THP's temporal encoding added before every block
    after the first). The state is the model's (a Transformer's KV cache grows in place here,
    :mod:`~recurrent_attention.deploy.kv_cache`), so the two steps continue each other's states.
    """

    def __init__(self, model: LayerStack) -> None:
        if not has_lean_step(model):
            raise TypeError(f"{type(model).__name__} has a mixer without a lean step")
        self.model = self.module = model
        self._layout: Layout | None = None
        handle = model.register_load_state_dict_post_hook(_clearing_hook(self))
        weakref.finalize(self, handle.remove)

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State:
        return self.model.init_state(batch_size, device, dtype)

    def clear(self) -> None:
        """Drop the layout: the next step builds it again from the model's parameters."""
        self._layout = None

    def layout(self) -> Layout:
        """The layout, rebuilt where a parameter changed since it was built (see the module's docstring)."""
        layout = self._layout
        if layout is None or layout.stamps != _stamps(layout.parameters):
            parameters = tuple(self.model.parameters())
            blocks = [lean_block(block, lean_mixer(block.mixer)) for block in self.model.blocks]
            final_norm = final_norm_arguments(self.model)
            layout = self._layout = Layout(parameters, _stamps(parameters), blocks, final_norm)
        return layout

    @outside_autocast
    def step(self, x_t: Tensor, state: State, reinject: Tensor | None = None) -> tuple[Tensor, State]:
        if self.model.training or torch.is_grad_enabled() or x_t.dim() != 2:
            return self.model.step(x_t, state, reinject)
        layout = self.layout()
        new_states = []
        for i, (weights, layer_state) in enumerate(zip(layout.blocks, state, strict=True)):
            if i and reinject is not None:
                x_t = x_t + reinject
            x_t, layer_state = lean_block_step(weights, x_t, layer_state)
            new_states.append(layer_state)
        return (x_t if layout.final_norm is None else F.layer_norm(x_t, *layout.final_norm)), new_states


class LeanMixerStepper:
    """One token mixer's eval step (:func:`lean_mixer`) on weights laid out once, for a model that
    steps a mixer outside a :class:`LayerStack` (video's causal time attention). The layout follows
    the mixer's parameters as :class:`LeanStepper`'s follows a stack's; any other call (training,
    autograd, another token shape) is the mixer's own step."""

    def __init__(self, mixer: nn.Module) -> None:
        if not has_lean_mixer(mixer):
            raise TypeError(f"{type(mixer).__name__} has no lean step")
        self.mixer = self.module = mixer
        self._mix: Mixer | None = None
        self._parameters: tuple[nn.Parameter, ...] = ()
        self._stamps: list[tuple[int, int]] = []
        handle = mixer.register_load_state_dict_post_hook(_clearing_hook(self))
        weakref.finalize(self, handle.remove)

    def clear(self) -> None:
        """Drop the layout: the next step builds it again from the mixer's parameters."""
        self._mix = None

    @outside_autocast
    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]:
        if self.mixer.training or torch.is_grad_enabled() or x_t.dim() != 2:
            return self.mixer.step(x_t, state)
        if self._mix is None or self._stamps != _stamps(self._parameters):
            self._parameters = tuple(self.mixer.parameters())
            self._stamps = _stamps(self._parameters)
            self._mix = lean_mixer(self.mixer)
        return self._mix(x_t, state)
