"""Linear attention's ``step`` as a standalone graph, like Aaren's: the state as explicit inputs and outputs.

The graph is ``(x_t, sz0, sz1, ...) -> (y_t, sz0_out, sz1_out, ...)``, one tensor per layer:
``sz (B, H, d_head, d_head + 1)``, the state's ``S`` with ``z`` as its last column
(:func:`graph_state`, :func:`linear_state` convert). One tensor, because ``S`` and ``z`` are both sums
of ``phi(k_j)`` times something: ``v_j`` for ``S``, 1 for ``z``. So the projection is laid out to give
each head's values with a constant 1 after them (a zero weight column and a bias of 1), and one
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
    """The fused q/k/v projection (:func:`~recurrent_attention.deploy.mixers.attention_weights`) with a
    column after each head's values that is always 1 (zero weights, bias 1), and the output projection."""
    qkv_weight, qkv_bias, out_weight, out_bias, (heads, d_head) = attention_weights(mixer)
    d_model = heads * d_head
    q_k_weight, v_weight = qkv_weight[:, : 2 * d_model], qkv_weight[:, 2 * d_model :]
    ones_weight = v_weight.new_zeros(d_model, heads, 1)
    v_weight = torch.cat([v_weight.unflatten(-1, (heads, d_head)), ones_weight], dim=-1).flatten(-2)
    q_k_bias, v_bias = qkv_bias[: 2 * d_model], qkv_bias[2 * d_model :]
    ones_bias = v_bias.new_ones(heads, 1)
    v_bias = torch.cat([v_bias.unflatten(-1, (heads, d_head)), ones_bias], dim=-1).flatten()
    weight = torch.cat([q_k_weight, v_weight], dim=-1).contiguous()
    return weight, torch.cat([q_k_bias, v_bias]), out_weight, out_bias, (heads, d_head)


def _augmented_mix(
    weight: Tensor,
    bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    state: tuple[Tensor],
) -> tuple[Tensor, tuple[Tensor]]:
    """:meth:`LinearAttention.step` on :func:`_augmented_weights` and the ``sz`` layout."""
    (sz,) = state
    heads, d_head = head_shape
    d_model = heads * d_head
    q, k, v = torch.addmm(bias, x, weight).split([d_model, d_model, heads * (d_head + 1)], dim=-1)
    q = feature_map(q).view(-1, heads, 1, d_head)
    k = feature_map(k).view(-1, heads, d_head, 1)
    sz = sz + k * v.view(-1, heads, 1, d_head + 1)
    numerator, denominator = (q @ sz).split([d_head, 1], dim=-1)  # (B, H, 1, d_head), (B, H, 1, 1)
    out = (numerator / (denominator + EPS)).view(-1, d_model)
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
