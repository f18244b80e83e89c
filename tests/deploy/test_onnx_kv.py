"""The Transformer's exported step with its cache in bound slots equals the eager step, token after token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recurrent_attention.deploy.onnx_kv import OnnxKVStream, SlotCacheStep, export_transformer_onnx
from recurrent_attention.models import Aaren, Transformer

pytest.importorskip("onnxruntime")
D_MODEL, HEADS = 16, 4


def model(**options: object) -> Transformer:
    torch.manual_seed(0)
    return Transformer(D_MODEL, HEADS, 2, 32, dropout=0.0, **options).eval()


@pytest.mark.parametrize("options", [{}, {"norm_first": True, "final_norm": False}])
def test_slot_cache_step_equals_the_eager_step(options: dict) -> None:
    """The graph's eager form against the model's step, continuing a 5-token state in a 12-slot cache."""
    m = model(**options).double()
    graph = SlotCacheStep(m, torch.float64)
    x = torch.randn(7, 3, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        _, state = m(torch.randn(3, 5, D_MODEL, dtype=torch.float64))
        k = torch.zeros(2, 3, HEADS, 12, D_MODEL // HEADS, dtype=torch.float64)
        v = torch.zeros_like(k)
        for layer, cache in enumerate(state):
            k[layer, :, :, :5], v[layer, :, :, :5] = cache.tokens()
        for position, x_t in enumerate(x, start=5):
            expected, state = m.step(x_t, state)
            y, k_t, v_t = graph(x_t, torch.tensor(position), k, v)
            torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
            k[:, :, :, position], v[:, :, :, position] = k_t, v_t


@pytest.mark.slow
def test_onnx_stream_equals_the_eager_step(tmp_path) -> None:
    m = model()
    path = export_transformer_onnx(m, tmp_path / "transformer.onnx")
    x = torch.randn(20, 2, D_MODEL)
    with torch.no_grad():
        _, state = m(torch.randn(2, 6, D_MODEL))
        stream = OnnxKVStream(path, state, capacity=26)
        for x_t in x:
            expected, state = m.step(x_t, state)
            np.testing.assert_allclose(stream.push(x_t.numpy()), expected.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="full"):
        stream.push(x[0].numpy())


def test_only_a_transformer_exports_with_a_kv_cache(tmp_path) -> None:
    with pytest.raises(TypeError, match="Aaren"):
        export_transformer_onnx(Aaren(D_MODEL, HEADS, 1, 32), tmp_path / "x.onnx")
