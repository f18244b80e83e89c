"""The Transformer's lean step as ONNX, its KV cache in buffers the caller owns and binds.

Aaren's exported step (:mod:`~recurrent_attention.deploy.onnx_aaren`) is only as fast as what it is
compared with, so the Transformer gets the same treatment a deployed decoder gets: the graph
``(x_t, position, k, v) -> (y_t, k_t, v_t)`` takes the cache ``k, v (layers, B, heads, capacity,
d_head)`` whose first ``position`` slots hold the tokens seen, attends from the new token to those
slots (the rest masked) and to itself, and returns only the new token's keys and values
``(layers, B, heads, d_head)``. :class:`OnnxKVStream` binds numpy buffers of a fixed capacity as
the cache (onnxruntime reads them in place) and writes each new token into slot ``position``: one
token's keys and values of writing per step, never a copy of the cache. The capacity and the batch
size stay free in the graph; a stream's capacity is fixed when it starts.
"""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from recurrent_attention.deploy.lean import final_norm_arguments, lean_block, lean_block_step
from recurrent_attention.deploy.mixers import attention_weights, heads_qkv
from recurrent_attention.deploy.onnx_io import (
    onnx_session,
    run_flushing_denormals,
    write_onnx,
)
from recurrent_attention.models.blocks import LayerStack
from recurrent_attention.models.transformer import KVCache, Transformer

INPUT_NAMES = ("x_t", "position", "k", "v")
OUTPUT_NAMES = ("y_t", "k_t", "v_t")


def _attend_to_slots(
    qkv_weight: Tensor,
    qkv_bias: Tensor,
    out_weight: Tensor,
    out_bias: Tensor,
    head_shape: tuple[int, int],
    x: Tensor,
    state: tuple[Tensor, Tensor, Tensor],
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """One token attending to the visible cache slots and itself; returns its keys and values too.

    ``state = (k (B, H, C, d_head), v, visible (C,) bool)``. The softmax runs over the slots and the
    token's own score together, so the output equals attention over the cache with the token appended.
    """
    k_cache, v_cache, visible = state
    batch = x.shape[0]
    q, k, v = heads_qkv(qkv_bias, x, qkv_weight, head_shape)
    scale = head_shape[1] ** -0.5
    cached = (k_cache @ q.unsqueeze(-1)).squeeze(-1).masked_fill(~visible, float("-inf"))
    own = (k * q).sum(-1, keepdim=True)
    weights = torch.softmax(torch.cat([cached, own], dim=-1) * scale, dim=-1)
    out = (weights[..., :-1].unsqueeze(-2) @ v_cache).squeeze(-2) + weights[..., -1:] * v
    return torch.addmm(out_bias, out.reshape(batch, -1), out_weight), (k, v)


class SlotCacheStep(nn.Module):
    """The Transformer's eval step with its cache as explicit slot tensors (the exported graph).

    The weights are laid out once, in ``dtype`` (fp32 for export), as the eager lean step lays them out.
    """

    def __init__(self, backbone: Transformer, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        backbone = copy.deepcopy(backbone).to(dtype).eval()
        with torch.no_grad():
            self.blocks = [
                lean_block(block, partial(_attend_to_slots, *attention_weights(block.mixer)))
                for block in backbone.blocks
            ]
        self.final_norm = final_norm_arguments(backbone)

    def forward(self, x_t: Tensor, position: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        visible = torch.arange(k.shape[-2], device=k.device) < position
        new_k, new_v = [], []
        for layer, weights in enumerate(self.blocks):
            x_t, (k_t, v_t) = lean_block_step(weights, x_t, (k[layer], v[layer], visible))
            new_k.append(k_t)
            new_v.append(v_t)
        if self.final_norm is not None:
            x_t = torch.nn.functional.layer_norm(x_t, *self.final_norm)
        return x_t, torch.stack(new_k), torch.stack(new_v)


def export_transformer_onnx(backbone: LayerStack, path: str | Path) -> Path:
    """Write the fp32 eval step of a :class:`Transformer` to ``path``; batch and capacity stay free."""
    if not isinstance(backbone, Transformer):
        raise TypeError(f"export_transformer_onnx exports a Transformer, not {type(backbone).__name__}")
    step = SlotCacheStep(backbone)
    layers, (heads, d_head) = (
        len(backbone.blocks),
        (backbone.blocks[0].mixer.proj.n_heads, backbone.blocks[0].mixer.proj.d_head),
    )
    cache = torch.zeros(layers, 2, heads, 8, d_head)
    example = (torch.zeros(2, backbone.d_model), torch.tensor(3), cache, cache.clone())
    batch, capacity = torch.export.Dim("batch"), torch.export.Dim("capacity")
    dynamic = {
        "x_t": {0: batch},
        "position": None,
        "k": {1: batch, 3: capacity},
        "v": {1: batch, 3: capacity},
    }
    return write_onnx(step, example, path, INPUT_NAMES, OUTPUT_NAMES, dynamic)


class OnnxKVStream:
    """An exported Transformer step streaming from ``state`` into a cache of ``capacity`` slots.

    ``push(x_t) -> y_t`` token after token, like :class:`~recurrent_attention.deploy.onnx_aaren.OnnxStream`:
    the token, the output, the position and the cache are bound once (IO binding over numpy
    buffers that onnxruntime reads in place), and each push writes the new keys and values into
    their slot. A push past ``capacity`` tokens raises instead of growing.
    """

    def __init__(self, path: str | Path, state: list[KVCache], capacity: int, threads: int = 1) -> None:
        import onnxruntime as ort

        keys, values = zip(*(layer.tokens() for layer in state), strict=True)
        self.session = onnx_session(path, threads, batch=keys[0].shape[0])
        layers, (batch, heads, n, d_head) = len(state), keys[0].shape
        if capacity < n:
            raise ValueError(f"capacity {capacity} is below the {n} tokens already in the state")
        self.capacity, self.position = capacity, n
        d_model = self.session.get_inputs()[0].shape[1]
        self._k = np.zeros((layers, batch, heads, capacity, d_head), np.float32)
        self._v = np.zeros_like(self._k)
        self._k[..., :n, :] = torch.stack(keys).numpy()
        self._v[..., :n, :] = torch.stack(values).numpy()
        self._position = np.array(n, np.int64)
        self._x = np.zeros((batch, d_model), np.float32)
        outputs = (
            np.zeros((batch, d_model), np.float32),
            *(np.zeros((layers, batch, heads, d_head), np.float32),) * 2,
        )
        self._outputs = [ort.OrtValue.ortvalue_from_numpy(np.array(o)) for o in outputs]
        self._inputs = [
            ort.OrtValue.ortvalue_from_numpy(buffer) for buffer in (self._x, self._position, self._k, self._v)
        ]
        self._binding = self.session.io_binding()
        for name, value in zip(INPUT_NAMES, self._inputs, strict=True):
            self._binding.bind_ortvalue_input(name, value)
        for name, value in zip(OUTPUT_NAMES, self._outputs, strict=True):
            self._binding.bind_ortvalue_output(name, value)

    @property
    def cache_bytes(self) -> int:
        """Bytes of the key and value buffers: the whole capacity, allocated when the stream starts."""
        return self._k.nbytes + self._v.nbytes

    def push(self, x_t: np.ndarray) -> np.ndarray:
        """The output for token ``x_t (batch, d_model)`` (a new array); the token joins the cache."""
        if self.position >= self.capacity:
            raise ValueError(
                f"the stream's KV cache is full ({self.capacity} tokens): start one with more capacity"
            )
        self._x[...] = x_t
        run_flushing_denormals(lambda: self.session.run_with_iobinding(self._binding))
        y_t, k_t, v_t = (value.numpy() for value in self._outputs)
        self._k[..., self.position, :] = k_t
        self._v[..., self.position, :] = v_t
        self.position += 1
        self._position[...] = self.position
        return y_t
