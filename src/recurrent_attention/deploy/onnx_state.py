"""A stack's step with a constant-size state as an ONNX graph, the state its explicit inputs and outputs.

A device that streams tokens needs only the step: ``(x_t, *state) -> (y_t, *state_out)``, a few
tensors per layer whatever the number of tokens seen. Aaren's export (:mod:`~.onnx_aaren`) and linear
attention's (:mod:`~.onnx_linear`) differ only in how a layer's state is laid out in the graph and
how their mixer updates it; the rest is here, shared:

- :class:`StateStep`: the residual stack's eval step on weights laid out once (the lean step's blocks,
  :func:`~recurrent_attention.deploy.lean.lean_block`), each layer's state its own inputs and outputs,
  so nothing is sliced out of or stacked into a joint tensor (onnxruntime pays ~0.5 µs per node);
- :func:`export_state_step`: that module written as ONNX, batch size left free;
- :class:`OnnxStep`: the graph in onnxruntime, the state passed through numpy on every call;
- :class:`StateStream`: the graph with its state kept in onnxruntime's buffers (IO binding), the fast
  way to stream; each export's stream converts its graph layout to the model's state and back.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.deploy.lean import final_norm_arguments, lean_block, lean_block_step
from recurrent_attention.deploy.mixers import Mixer
from recurrent_attention.deploy.onnx_io import (
    onnx_session,
    run_flushing_denormals,
    write_onnx,
)
from recurrent_attention.models.blocks import LayerStack


def state_names(layers: int, parts: Sequence[str]) -> list[str]:
    """The graph's state inputs, each of a layer's ``parts`` numbered by layer (``m0, u0, w0, m1, ...``);
    each output is the name with ``_out``."""
    return [f"{part}{layer}" for layer in range(layers) for part in parts]


class StateStep(nn.Module):
    """A stack's eval step ``(x_t, *state) -> (y_t, *state)`` with ``len(parts)`` state tensors per layer:
    the exported graph's eager form.

    ``mix_of(mixer)`` gives a layer's graph-friendly mixer step on its weights laid out now, taking
    and returning the layer's state parts. The backbone is copied in ``dtype`` (fp32 for export) and
    laid out once, so the exporter sees the weights as constants.
    """

    def __init__(
        self,
        backbone: LayerStack,
        mix_of: Callable[[nn.Module], Mixer],
        parts: Sequence[str],
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        backbone = copy.deepcopy(backbone).to(dtype).eval()
        with torch.no_grad():
            self.blocks = [lean_block(block, mix_of(block.mixer)) for block in backbone.blocks]
        self.final_norm = final_norm_arguments(backbone)
        self.parts, self.d_model = tuple(parts), backbone.d_model

    def forward(self, x_t: Tensor, *state: Tensor) -> tuple[Tensor, ...]:
        width = len(self.parts)
        new_state: list[Tensor] = []
        for layer, weights in enumerate(self.blocks):
            x_t, layer_state = lean_block_step(weights, x_t, state[width * layer : width * (layer + 1)])
            new_state += layer_state
        if self.final_norm is not None:
            x_t = F.layer_norm(x_t, *self.final_norm)
        return (x_t, *new_state)


def export_state_step(step: StateStep, example_state: Sequence[Tensor], path: str | Path) -> Path:
    """Write ``step`` to ``path``, traced on ``example_state`` (a state of batch 2 in the graph's
    layout); the inputs are ``x_t`` and :func:`state_names`, the batch size stays free."""
    names = state_names(len(step.blocks), step.parts)
    example = (torch.zeros(example_state[0].shape[0], step.d_model), *example_state)
    batch = torch.export.Dim("batch")
    dynamic = {"x_t": {0: batch}, "state": tuple({0: batch} for _ in names)}
    outputs = ["y_t", *(f"{name}_out" for name in names)]
    return write_onnx(step, example, path, ["x_t", *names], outputs, dynamic)


class OnnxStep:
    """An exported step in onnxruntime, called like ``backbone.step`` on numpy arrays in the graph's
    state layout."""

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        self.session = onnx_session(path, threads)
        self._inputs = [node.name for node in self.session.get_inputs()]
        self._outputs = [node.name for node in self.session.get_outputs()]

    def __call__(self, x_t: np.ndarray, state: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        y_t, *state = self.session.run(self._outputs, dict(zip(self._inputs, (x_t, *state), strict=True)))
        return y_t, state


class StateStream:
    """An exported step that keeps the state inside onnxruntime: ``push(x_t) -> y_t``, token after token.

    :class:`OnnxStep` passes the state through numpy on every token (inputs converted, outputs
    allocated and converted). Here every buffer is allocated once and bound (IO binding): a push
    copies the token in, reads one of two state buffers and writes the other, and the two swap.
    ``graph_state`` is the starting state in the graph's layout; its batch size is the stream's.
    """

    def __init__(self, path: str | Path, graph_state: Sequence[Tensor], threads: int = 1) -> None:
        import onnxruntime as ort

        parts = [np.array(t.detach().cpu(), np.float32) for t in graph_state]
        batch = parts[0].shape[0]
        self.session = onnx_session(path, threads, batch=batch)
        d_model = self.session.get_inputs()[0].shape[-1]
        self._x = ort.OrtValue.ortvalue_from_numpy(np.zeros((batch, d_model), np.float32))
        self._y = ort.OrtValue.ortvalue_from_numpy(np.zeros((batch, d_model), np.float32))
        self._states = [[ort.OrtValue.ortvalue_from_numpy(part.copy()) for part in parts] for _ in range(2)]
        self._bindings = [self._binding(reads=k) for k in range(2)]
        self._current = 0

    def _binding(self, reads: int) -> object:
        """Token and output bound once; state read from buffer set ``reads``, written to the other."""
        binding = self.session.io_binding()
        (x_t, *inputs), (y_t, *outputs) = self.session.get_inputs(), self.session.get_outputs()
        binding.bind_ortvalue_input(x_t.name, self._x)
        binding.bind_ortvalue_output(y_t.name, self._y)
        for name_in, name_out, read, write in zip(
            inputs, outputs, self._states[reads], self._states[1 - reads], strict=True
        ):
            binding.bind_ortvalue_input(name_in.name, read)
            binding.bind_ortvalue_output(name_out.name, write)
        return binding

    def push(self, x_t: np.ndarray) -> np.ndarray:
        """The output for token ``x_t (batch, d_model)`` (a new array); the state moves on."""
        self._x.update_inplace(np.ascontiguousarray(x_t, dtype=np.float32))
        binding = self._bindings[self._current]
        run_flushing_denormals(lambda: self.session.run_with_iobinding(binding))
        self._current ^= 1
        return self._y.numpy()

    @property
    def graph_state(self) -> list[Tensor]:
        """The state after the last push in the graph's layout (new tensors)."""
        return [torch.from_numpy(value.numpy()) for value in self._states[self._current]]

    @property
    def state_bytes(self) -> int:
        """Bytes of the state the stream holds (one buffer set, in the graph's layout)."""
        return sum(value.numpy().nbytes for value in self._states[self._current])
