"""Linear attention's ``step`` as a standalone graph, like Aaren's: the state as explicit inputs and outputs.

The graph is ``(x_t, sz0, sz1, ...) -> (y_t, sz0_out, sz1_out, ...)``, one tensor per layer:
``sz (B, H, d_head, d_head + 1)``, the state's ``S`` with ``z`` as its last column
(:func:`graph_state`, :func:`linear_state` convert). One tensor, because ``S`` and ``z`` are both sums
of ``phi(k_j)`` times something: ``v_j`` for ``S``, 1 for ``z``. So the projection is laid out to give
each head's values with a constant 1 after them (a zero weight column and a bias of 1), each head's
q, k and ``[v, 1]`` side by side (one view makes them per head, no reshape per part), and one
broadcast product ``phi(k) [v, 1]^T`` updates both sums, one batched product ``phi(q)^T sz`` reads
numerator and denominator together (onnxruntime pays ~0.5 µs per node at batch 1, so fewer nodes is
what makes a one-token step fast). The stack around the mixer, the export and the streams are
:mod:`~.onnx_state`'s, shared with Aaren's export.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from recurrent_attention.deploy.mixers import Mixer, attention_weights
from recurrent_attention.deploy.onnx_state import StateStep, StateStream, export_state_step
from recurrent_attention.models.linear_attention import LinearAttention, LinearTransformer, feature_map
from recurrent_attention.ops.linear_forms import EPS, LinearState

PARTS = ("sz",)
"""A layer's state in the graph: one tensor."""


def graph_state(state: list[LinearState]) -> list[Tensor]:
    """One ``LinearState`` per layer -> the exported layout: ``sz (B, H, d_head, d_head + 1)`` per layer."""
    return [torch.cat([layer.s, layer.z.unsqueeze(-1)], dim=-1) for layer in state]


def linear_state(graph: Sequence[Tensor]) -> list[LinearState]:
    """The exported layout -> one ``LinearState`` per layer (the inverse of :func:`graph_state`)."""
    return [LinearState(sz[..., :-1], sz[..., -1]) for sz in graph]


def _augmented_weights(mixer: LinearAttention) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[int, int]]:
    """The fused q/k/v projection (:func:`~recurrent_attention.deploy.mixers.attention_weights`) with its
    columns by head, each head's ``[q, k, v, 1]`` (the 1: zero weights, bias 1), and the output projection."""
    qkv_weight, qkv_bias, out_weight, out_bias, (heads, d_head) = attention_weights(mixer)

    def by_head(columns: Tensor, one: float) -> Tensor:
        """``(..., 3 d_model)`` columns as ``(..., heads * (3 d_head + 1))``: per head q, k, v, ``one``."""
        q, k, v = (part.unflatten(-1, (heads, d_head)) for part in columns.chunk(3, dim=-1))
        ones = columns.new_full((*columns.shape[:-1], heads, 1), one)
        return torch.cat([q, k, v, ones], dim=-1).flatten(-2)

    weight = by_head(qkv_weight, 0.0).contiguous()
    return weight, by_head(qkv_bias, 1.0), out_weight, out_bias, (heads, d_head)


def _augmented_mix(
    weight: Tensor,
    bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    state: tuple[Tensor],
) -> tuple[Tensor, tuple[Tensor]]:
    """:meth:`LinearAttention.step` on :func:`_augmented_weights` and the ``sz`` layout. The projection
    is viewed once as ``(B, H, 1, 3 d_head + 1)``, so q and k come out of one split and one feature
    map, already in the shapes the update and the read take (only k is turned into a column)."""
    (sz,) = state
    heads, d_head = head_shape
    projected = torch.addmm(bias, x, weight).view(-1, heads, 1, 3 * d_head + 1)
    q_k, v = projected.split([2 * d_head, d_head + 1], dim=-1)
    q, k = feature_map(q_k).split(d_head, dim=-1)  # (B, H, 1, d_head) each
    sz = sz + k.reshape(-1, heads, d_head, 1) * v
    numerator, denominator = (q @ sz).split([d_head, 1], dim=-1)  # (B, H, 1, d_head), (B, H, 1, 1)
    out = (numerator / (denominator + EPS)).view(-1, heads * d_head)
    return torch.addmm(out_bias, out, out_weight), (sz,)


def augmented_mixer(mixer: LinearAttention) -> Mixer:
    """``mixer``'s step on the ``sz`` layout (:func:`_augmented_mix`), on its weights laid out now."""
    return partial(_augmented_mix, *_augmented_weights(mixer))


def augmented_step(backbone: LinearTransformer, dtype: torch.dtype = torch.float32) -> StateStep:
    """Linear attention's eval step on the ``sz`` layout, ``(x_t, *state) -> (y_t, *state)``: the
    exported graph's eager form, its weights laid out once in ``dtype`` (fp32 for export)."""
    return StateStep(backbone, augmented_mixer, PARTS, dtype)


def export_linear_onnx(backbone: LinearTransformer, path: str | Path) -> Path:
    """Write the fp32 step of ``backbone`` (in eval mode) to ``path``; the batch size stays free."""
    if not isinstance(backbone, LinearTransformer):
        raise TypeError(
            f"export_linear_onnx exports linear attention's step, not {type(backbone).__name__}'s"
        )
    return export_state_step(augmented_step(backbone), graph_state(backbone.init_state(2)), path)


class OnnxLinearStream(StateStream):
    """Linear attention's exported step streaming with its state in onnxruntime's buffers
    (:class:`~.onnx_state.StateStream`), started from and read back as the eager step's state (one
    ``LinearState`` per layer, whose batch size is the stream's)."""

    def __init__(self, path: str | Path, state: list[LinearState], threads: int = 1) -> None:
        super().__init__(path, graph_state(state), threads)

    @property
    def state(self) -> list[LinearState]:
        """The state after the last push as the eager step holds it (new tensors)."""
        return linear_state(self.graph_state)
