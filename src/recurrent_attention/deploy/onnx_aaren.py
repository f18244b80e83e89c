"""Aaren's ``step`` as a standalone graph for small devices: the state as explicit inputs and outputs.

A device that streams tokens needs only the step: ``(x_t, m0, u0, w0, m1, ...) -> (y_t, m0_out,
u0_out, w0_out, m1_out, ...)``, three ``(B, d_model)`` tensors per layer, a few KiB whatever the
number of tokens seen. :func:`export_onnx` writes that graph as ONNX (torch's ``torch.export``-based
exporter, batch size left dynamic); :class:`~.onnx_state.OnnxStep` runs it with onnxruntime,
:class:`OnnxStream` too with the state kept in onnxruntime's buffers (the fast way to stream). What
is not Aaren's own (the stack around the mixer, the export, the streams) is shared with linear
attention's export in :mod:`~.onnx_state`.

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

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from recurrent_attention.deploy.mixers import Mixer, aaren_weights
from recurrent_attention.deploy.onnx_state import StateStep, StateStream, export_state_step
from recurrent_attention.models.aaren import Aaren, AarenAttention
from recurrent_attention.ops import ScanState


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


def lane_mixer(mixer: AarenAttention) -> Mixer:
    """``mixer``'s step on lanes (:func:`_lane_mix`), on its weights laid out now."""
    return partial(_lane_mix, *_lane_weights(mixer))


def lane_step(backbone: Aaren, dtype: torch.dtype = torch.float32) -> StateStep:
    """Aaren's eval step on lanes, ``(x_t, *state) -> (y_t, *state)``: the exported graph's eager form,
    its weights laid out once in ``dtype`` (fp32 for export) as the eager lean step lays them out."""
    return StateStep(backbone, lane_mixer, ScanState._fields, dtype)


def export_onnx(backbone: Aaren, path: str | Path) -> Path:
    """Write the fp32 step of ``backbone`` (in eval mode) to ``path``; the batch size stays free."""
    if not isinstance(backbone, Aaren):
        raise TypeError(
            f"only Aaren's step has a constant-size state to export, not {type(backbone).__name__}"
        )
    return export_state_step(lane_step(backbone), lane_state(backbone.init_state(2)), path)


class OnnxStream(StateStream):
    """Aaren's exported step streaming with its state in onnxruntime's buffers
    (:class:`~.onnx_state.StateStream`), started from and read back as the eager step's state (one
    ``ScanState`` per layer, whose batch size is the stream's). This is the exported step
    ``make bench`` times (results/bench/bench.md, "Aaren ONNX")."""

    def __init__(self, path: str | Path, state: list[ScanState], threads: int = 1) -> None:
        super().__init__(path, lane_state(state), threads)
        self._heads = state[0].m.shape[-1]

    @property
    def state(self) -> list[ScanState]:
        """The state after the last push as the eager step holds it (new tensors)."""
        return scan_state(self.graph_state, self._heads)
