"""A layer stack's lean step as one compiled C++ call (``StackStepper`` in
:mod:`~recurrent_attention.ops.native`), for the mixers whose state has a constant size: Aaren's
``(m, u, w)`` and linear attention's ``(S, z)``.

At batch 1 the Python lean step (:mod:`~recurrent_attention.deploy.lean`) is ~25 small ops per layer
whose dispatch is the cost; the compiled step runs the same arithmetic on the same laid-out weights
in one call, as loops on weights it packs once for a few rows and with ATen's sgemm for more
(``ops/csrc/stack_step.cpp``). It computes the feed-forward's activation itself and implements
exactly two, ReLU and the exact (erf) GELU: :class:`CompiledStepper` refuses a model with any other
activation instead of running it as one of those (:func:`fast_stepper` then takes the Python lean
step, which calls the model's own activation).

The compiled step checks the token, the state, grad mode and its weights' version counters itself
(``try_step``: at one token each Python operation costs a µs or so of a ~30 µs step); where it
declines, the layout is checked (and the compiled step rebuilt) here, and where it still does not
apply (no kernels, another dtype, gradients on) the Python lean step runs.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from recurrent_attention.deploy.lean import LeanStepper, outside_autocast
from recurrent_attention.models.aaren import AarenAttention
from recurrent_attention.models.base import State
from recurrent_attention.models.blocks import LayerStack
from recurrent_attention.models.linear_attention import LinearAttention
from recurrent_attention.ops import ScanState, native
from recurrent_attention.ops.linear_forms import EPS, LinearState


class CompiledMixer(NamedTuple):
    """What the compiled step needs to know of a mixer: its name there, its state's type (whose
    fields are the state's tensors in the order the C++ step takes them) and its normaliser's eps."""

    name: str
    state: type
    eps: float


COMPILED_MIXERS: dict[type, CompiledMixer] = {
    AarenAttention: CompiledMixer("aaren", ScanState, 0.0),
    LinearAttention: CompiledMixer("linear", LinearState, EPS),
}
"""The mixers the compiled step implements (by exact type, as :data:`~.mixers.LEAN_MIXERS`)."""

RAW_ROWS = 2
"""Rows up to which the compiled step's matrix products are its own loops rather than ATen's sgemm.
Measured (Aaren, d_model 128, 2 layers, one thread, µs a step, loops / sgemm): 1 row 23 / 38, 2 rows
37 / 45, 3 rows 48 / 48, 4 rows 61 / 51, 8 rows 106 / 71: the loops read every weight once per row."""


def compiled_mixer(model: LayerStack) -> CompiledMixer:
    """The compiled step's view of ``model``'s mixer; a ``ValueError`` naming it where the compiled
    step does not implement it (or the blocks mix differently)."""
    kinds = {type(block.mixer) for block in model.blocks}
    if len(kinds) != 1 or not kinds <= COMPILED_MIXERS.keys():
        raise ValueError(
            f"the compiled step implements one mixer of {', '.join(k.__name__ for k in COMPILED_MIXERS)} "
            f"in every block, not {', '.join(sorted(k.__name__ for k in kinds))}: "
            "step this model with deploy.LeanStepper (or its own step)"
        )
    return COMPILED_MIXERS[kinds.pop()]


def compiled_gelu(model: LayerStack) -> bool:
    """Whether the compiled step computes GELU (True) or ReLU (False) for ``model``'s feed-forwards;
    a ``ValueError`` naming it for any activation it does not implement."""
    kinds = set()
    for block in model.blocks:
        activation = block.ff[1]
        if type(activation) is nn.GELU and activation.approximate == "none":
            kinds.add(True)
        elif type(activation) is nn.ReLU:
            kinds.add(False)
        else:
            raise ValueError(
                f"the compiled step implements ReLU and the exact GELU only, not {activation!r}: "
                "step this model with deploy.LeanStepper (or its own step)"
            )
    if len(kinds) != 1:
        raise ValueError("the compiled step runs one activation in every block")
    return kinds.pop()


def has_compiled_step(model: nn.Module) -> bool:
    """Whether :class:`CompiledStepper` takes ``model``: a layer stack of one mixer and one activation
    that the compiled step implements."""
    if not isinstance(model, LayerStack):
        return False
    try:
        compiled_mixer(model)
        compiled_gelu(model)
    except ValueError:
        return False
    return True


class CompiledStepper(LeanStepper):
    """:class:`LeanStepper` for a stack of Aaren or linear-attention layers, taking the compiled step
    where it applies (CPU float32/float64 ``(B, d_model)`` tokens in eval mode without gradients, the
    kernels built, no ``reinject``). ``raw_rows``: see :data:`RAW_ROWS` (tests set it to reach both forms).

    ``bf16_weights`` (float32 models): the compiled step's matrices rounded to bfloat16, half the
    bytes a token reads, which is what a one-row step waits for; activations, layer norms, biases and
    the state stay float32, so the step is the model's with its matrices rounded (within 1e-2 of the
    float32 step, relative, in tests/deploy/test_compiled.py). An option beside float32, never the
    default: where the compiled step does not apply, the Python lean step runs on the float32 weights."""

    def __init__(self, model: LayerStack, raw_rows: int = RAW_ROWS, bf16_weights: bool = False) -> None:
        self.mixer = compiled_mixer(model)
        self.gelu = compiled_gelu(model)
        self.raw_rows = raw_rows
        self.bf16_weights = bf16_weights
        super().__init__(model)
        self._compiled: object | None = None

    def clear(self) -> None:
        """Also drop the compiled step: it holds the parameters it was built from, and a conversion or
        a load with ``assign=True`` replaces them without changing their version counters."""
        super().clear()
        self._compiled = None

    def step(self, x_t: Tensor, state: State, reinject: Tensor | None = None) -> tuple[Tensor, State]:
        # The compiled step as built, where it applies (it checks the rest itself, autocast too): at
        # one token each Python operation around it (a decorator, reshaping the state) is measurable.
        compiled = self._compiled
        if compiled is not None and reinject is None and not self.model.training:
            stepped = (
                None if torch.compiler.is_compiling() else compiled.try_step(x_t, state, self.mixer.state)
            )
            if stepped is not None:
                return stepped
        return self._step_otherwise(x_t, state, reinject)

    @outside_autocast
    def _step_otherwise(self, x_t: Tensor, state: State, reinject: Tensor | None) -> tuple[Tensor, State]:
        """Outside autocast, the compiled step (built again where the layout changed) where it
        applies, else the Python lean step (the compiled step has no reinjection)."""
        stepped = None
        if reinject is None and not self.model.training and not torch.compiler.is_compiling():
            compiled = self._compiled
            stepped = None if compiled is None else compiled.try_step(x_t, state, self.mixer.state)
            if stepped is None and (compiled := self._rebuilt(x_t, state)) is not None:
                stepped = compiled.try_step(x_t, state, self.mixer.state)
        return super().step(x_t, state, reinject) if stepped is None else stepped

    def _rebuilt(self, x_t: Tensor, state: State) -> object | None:
        """The compiled step for this token and state, built (again) from the lean layout; None
        where the lean step would not run, the kernels are unavailable, or dtypes differ."""
        model = self.model
        dtype = model.blocks[0].mixer.proj.out_proj.weight.dtype
        if (
            model.training
            or torch.is_grad_enabled()
            or torch.jit.is_tracing()
            or x_t.dim() != 2
            or x_t.dtype != dtype
            or (self.bf16_weights and dtype != torch.float32)  # bfloat16 matrices for float32 models only
        ):
            return None
        if any(part.dtype != dtype for layer in state for part in layer):
            return None
        stepper_class = native.stack_stepper(x_t)
        if stepper_class is None:
            return None
        self._compiled = self._build(stepper_class)
        return self._compiled

    def _build(self, stepper_class: type) -> object:
        """A ``StackStepper`` on the weights the Python lean step lays out (weights read by position:
        per layer the mixer's four, the feed-forward's four, then each norm's weight and bias)."""
        layout = self.layout()
        weights, eps = [], []
        for lean in layout.blocks:
            weights += lean.mix.args[:4]  # the mixer's laid-out weights (deploy.mixers)
            weights += [lean.ff_in_weight, lean.ff_in_bias, lean.ff_out_weight, lean.ff_out_bias]
            for norm in (lean.norm_mix, lean.norm_ff):
                _, weight, bias, norm_eps = norm
                weights += [weight, bias]
                eps.append(norm_eps)
        _, final_weight, final_bias, final_eps = layout.final_norm or (None, None, None, 0.0)
        proj = self.model.blocks[0].mixer.proj
        return stepper_class(
            self.mixer.name,
            [w.detach() for w in weights],
            eps,
            self.model.blocks[0].norm_first,
            self.gelu,
            final_weight if final_weight is None else final_weight.detach(),
            final_bias if final_bias is None else final_bias.detach(),
            final_eps,
            proj.n_heads,
            proj.d_head,
            self.mixer.eps,
            list(layout.parameters),
            self.raw_rows,
            "bfloat16" if self.bf16_weights else "float32",
        )
