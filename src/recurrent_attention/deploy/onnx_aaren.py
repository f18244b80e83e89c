"""Aaren's ``step`` as a standalone graph for small devices: the state as explicit inputs and outputs.

A device that streams tokens needs only the step: ``(x_t, m0, u0, w0, m1, ...) -> (y_t, m0_out,
u0_out, w0_out, m1_out, ...)``, three ``(B, d_model)`` tensors per layer, a few KiB whatever the
number of tokens seen. :func:`export_onnx` writes that graph as ONNX (torch's ``torch.export``-based
exporter, batch size left dynamic); :class:`OnnxStep` runs it with onnxruntime, :class:`OnnxStream`
too with the state kept in onnxruntime's buffers (the fast way to stream).

The graph is built for a runtime that pays a fixed cost per node (about 0.5 µs in onnxruntime at
batch 1, where the step's arithmetic is a few µs): the weights are laid out before tracing, as
constants (values and scores from one matrix), and each layer's state is its own inputs and outputs,
so nothing is sliced out of or stacked into a joint tensor. The state is held in *lanes*
(:func:`lane_state`): ``w (B, H, d_head)`` flat as ``(B, d_model)``, and each head's ``m`` and ``u``
repeated over that head's ``d_head`` lanes, the score column likewise repeated by the projection
matrix. Every update is then one element-wise op over ``d_model`` lanes, with no reshape between the
projection, the state and the output projection; the cost is ``2 (d_model - H)`` more floats of
state per layer (1 KiB at d_model 128, 2 layers, batch 1), still constant in the tokens seen.
This module is the export only: loading a trained run is ``finished_run``'s, timing the exported
step ``bench.streaming``'s, and the command line ``cli.export_step``'s.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from recurrent_attention.deploy.lean import final_norm_arguments, lean_block, lean_block_step
from recurrent_attention.deploy.mixers import aaren_weights
from recurrent_attention.deploy.onnx_io import onnx_session, write_onnx
from recurrent_attention.models.aaren import Aaren, AarenAttention
from recurrent_attention.ops import ScanState


def state_names(layers: int) -> list[str]:
    """The graph's state inputs, ``m0, u0, w0, m1, ...``; each output is the name with ``_out``."""
    return [f"{part}{layer}" for layer in range(layers) for part in ScanState._fields]


def lane_state(state: list[ScanState]) -> list[Tensor]:
    """One ``ScanState`` per layer -> the exported layout: ``(m, u, w)`` per layer, each ``(B, d_model)``."""
    lanes = []
    for layer in state:
        d_head = layer.w.shape[-1]
        lanes += [
            layer.m.repeat_interleave(d_head, -1),
            layer.u.repeat_interleave(d_head, -1),
            layer.w.flatten(-2),
        ]
    return lanes


def scan_state(lanes: Sequence[Tensor], heads: int) -> list[ScanState]:
    """The exported layout -> one ``ScanState`` per layer (the inverse of :func:`lane_state`)."""
    state = []
    for m, u, w in zip(lanes[0::3], lanes[1::3], lanes[2::3], strict=True):
        d_head = w.shape[-1] // heads
        state.append(ScanState(m[..., ::d_head], u[..., ::d_head], w.unflatten(-1, (heads, d_head))))
    return state


def _lane_weights(mixer: AarenAttention) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The mixer's laid-out weights (:func:`~recurrent_attention.deploy.mixers.aaren_weights`) with
    each head's score column repeated over the head's ``d_head`` lanes: the projection gives values,
    then scores, each ``(B, d_model)``."""
    mix_weight, mix_bias, out_weight, out_bias, (heads, d_head) = aaren_weights(mixer)
    d_model = heads * d_head
    columns = torch.cat([torch.arange(d_model), d_model + torch.arange(d_model) // d_head])
    return mix_weight[:, columns].contiguous(), mix_bias[columns].contiguous(), out_weight, out_bias


def _lane_mix(
    mix_weight: Tensor,
    mix_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    x: Tensor,
    state: tuple[Tensor, Tensor, Tensor],
) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
    """:func:`~recurrent_attention.ops.attention_step` (finite scores) and the output projection, on lanes."""
    m, u, w = state
    values, scores = torch.addmm(mix_bias, x, mix_weight).chunk(2, dim=-1)
    top = torch.maximum(m, scores)
    old_scale, new_scale = torch.exp(m - top), torch.exp(scores - top)
    u = u * old_scale + new_scale
    w = w * old_scale + values * new_scale
    return torch.addmm(out_bias, w / u, out_weight), (top, u, w)


class LaneStep(nn.Module):
    """Aaren's eval step on lanes, ``(x_t, *state) -> (y_t, *state)``: the exported graph's eager form.

    The weights are laid out once, in ``dtype`` (fp32 for export), as the eager lean step lays them
    out, so the exporter sees them as constants.
    """

    def __init__(self, backbone: Aaren, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        backbone = copy.deepcopy(backbone).to(dtype).eval()
        with torch.no_grad():
            self.blocks = [
                lean_block(block, partial(_lane_mix, *_lane_weights(block.mixer)))
                for block in backbone.blocks
            ]
        self.final_norm = final_norm_arguments(backbone)

    def forward(self, x_t: Tensor, *state: Tensor) -> tuple[Tensor, ...]:
        new_state: list[Tensor] = []
        for layer, weights in enumerate(self.blocks):
            x_t, layer_state = lean_block_step(weights, x_t, state[3 * layer : 3 * layer + 3])
            new_state += layer_state
        if self.final_norm is not None:
            x_t = F.layer_norm(x_t, *self.final_norm)
        return (x_t, *new_state)


def export_onnx(backbone: Aaren, path: str | Path) -> Path:
    """Write the fp32 step of ``backbone`` (in eval mode) to ``path``; the batch size stays free."""
    if not isinstance(backbone, Aaren):
        raise TypeError(
            f"only Aaren's step has a constant-size state to export, not {type(backbone).__name__}"
        )
    names = state_names(len(backbone.blocks))
    example = (torch.zeros(2, backbone.d_model), *lane_state(backbone.init_state(2)))
    batch = torch.export.Dim("batch")
    dynamic = {"x_t": {0: batch}, "state": tuple({0: batch} for _ in names)}
    outputs = ["y_t", *(f"{name}_out" for name in names)]
    return write_onnx(LaneStep(backbone), example, path, ["x_t", *names], outputs, dynamic)


class OnnxStep:
    """An exported step in onnxruntime, called like ``backbone.step`` on numpy arrays in the exported
    layout (:func:`lane_state`)."""

    def __init__(self, path: str | Path, threads: int = 1) -> None:
        self.session = onnx_session(path, threads)
        self._inputs = [node.name for node in self.session.get_inputs()]
        self._outputs = [node.name for node in self.session.get_outputs()]

    def __call__(self, x_t: np.ndarray, state: Sequence[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        y_t, *state = self.session.run(self._outputs, dict(zip(self._inputs, (x_t, *state), strict=True)))
        return y_t, state


class OnnxStream:
    """An exported step that keeps the state inside onnxruntime: ``push(x_t) -> y_t``, token after token.

    :class:`OnnxStep` passes the state through numpy on every token (inputs converted, outputs
    allocated and converted). Here every buffer is allocated once and bound (IO binding): a push
    copies the token in, reads one of two state buffers and writes the other, and the two swap.
    This is the exported step ``make bench`` times (results/bench/bench.md, "Aaren ONNX").
    The batch size is the starting ``state``'s (one ``ScanState`` per layer, as the eager step's).
    """

    def __init__(self, path: str | Path, state: list[ScanState], threads: int = 1) -> None:
        import onnxruntime as ort

        self.session = onnx_session(path, threads, batch=state[0].m.shape[0])
        self._heads = state[0].m.shape[-1]
        lanes = [np.array(t.detach().cpu(), np.float32) for t in lane_state(state)]
        self._x = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(lanes[-1]))
        self._y = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(lanes[-1]))
        self._states = [[ort.OrtValue.ortvalue_from_numpy(part.copy()) for part in lanes] for _ in range(2)]
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
        self.session.run_with_iobinding(self._bindings[self._current])
        self._current ^= 1
        return self._y.numpy()

    @property
    def state(self) -> list[ScanState]:
        """The state after the last push as the eager step holds it (new tensors)."""
        return scan_state(
            [torch.from_numpy(value.numpy()) for value in self._states[self._current]], self._heads
        )

    @property
    def state_bytes(self) -> int:
        """Bytes of the state the stream holds (one buffer set, in the exported layout)."""
        return sum(value.numpy().nbytes for value in self._states[self._current])
