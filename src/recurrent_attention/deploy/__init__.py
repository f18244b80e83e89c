"""Deployment forms of a trained backbone's step, each tested equal to the model's own ``step``.

``models/`` holds the math: each backbone's ``forward``, ``init_state`` and ``step`` in plain
PyTorch. What makes a step fast, or portable, wraps a trained backbone from here and keeps its
caches here, never in the model:

- :mod:`~.lean`: :class:`LeanStepper`, a residual stack's eval step on weights laid out once, and
  :class:`LeanMixerStepper`, one mixer's, for a model that steps a mixer alone (:mod:`~.mixers`
  lays out each attention's: softmax, Aaren, linear; :mod:`~.kv_cache` grows a Transformer's cache
  in place);
- :mod:`~.compiled`: :class:`CompiledStepper`, Aaren's and linear attention's lean steps as one C++ call;
- :mod:`~.onnx_aaren`, :mod:`~.onnx_linear` and :mod:`~.onnx_kv`: Aaren's, linear attention's and
  the Transformer's steps as ONNX graphs with onnxruntime streams (:mod:`~.onnx_state` holds what
  the two constant-state exports share, :mod:`~.onnx_io` writes and opens the files).

:func:`fast_stepper` picks the fastest wrapper for a backbone. The import direction is one way:
this package imports ``models`` and ``ops``; neither imports it.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from recurrent_attention.deploy.compiled import CompiledStepper, has_compiled_step
from recurrent_attention.deploy.lean import LeanMixerStepper, LeanStepper, has_lean_step
from recurrent_attention.models.base import Backbone, State


class Stepper(Protocol):
    """What :func:`fast_stepper` returns: a backbone's ``init_state`` and ``step``."""

    def init_state(
        self, batch_size: int, device: torch.device | None = None, dtype: torch.dtype | None = None
    ) -> State: ...

    def step(self, x_t: Tensor, state: State) -> tuple[Tensor, State]: ...


def fast_stepper(model: Backbone, bf16_weights: bool = False) -> Stepper:
    """``model``'s fastest eager step: the compiled one for Aaren and linear attention (where their
    activation is one the compiled step implements), the lean one for a stack of attention mixers
    that have one, and otherwise the model itself. Each falls back to the model's own step outside
    eval/no-grad. ``bf16_weights``: the compiled step's matrices in bfloat16 (:class:`CompiledStepper`);
    a ``ValueError`` for a model without a compiled step, rather than float32 weights unasked."""
    if bf16_weights and not has_compiled_step(model):
        raise ValueError(
            f"bf16_weights: only the compiled step (Aaren, linear attention) has bfloat16 weights, "
            f"not {type(model).__name__}'s: call fast_stepper without it"
        )
    if not has_lean_step(model):
        return model
    return (
        CompiledStepper(model, bf16_weights=bf16_weights) if has_compiled_step(model) else LeanStepper(model)
    )


__all__ = ["CompiledStepper", "LeanMixerStepper", "LeanStepper", "Stepper", "fast_stepper"]
