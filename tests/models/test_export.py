"""The exported ONNX step (run by onnxruntime) equals the eager step token after token."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.export import OnnxStep, OnnxStream, export_onnx, pack_state

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Aaren, Path]:
    """An Aaren and its exported step, exported once (seconds) for the tests that only read them."""
    torch.manual_seed(0)
    model = Aaren(16, 4, 2, 32, dropout=0.0).eval()
    return model, export_onnx(model, tmp_path_factory.mktemp("export") / "step.onnx")


@pytest.mark.slow
def test_onnx_step_equals_eager_step_over_100_tokens(exported) -> None:
    model, path = exported
    onnx_step = OnnxStep(path)
    batch = 3  # exported with batch 2: the batch size must stay free
    torch.manual_seed(1)
    x = torch.randn(100, batch, 16) * 3.0
    state = model.init_state(batch)
    onnx_state = tuple(t.numpy() for t in pack_state(state))
    with torch.no_grad():
        for x_t in x:
            y_t, state = model.step(x_t, state)
            onnx_y, onnx_state = onnx_step(x_t.numpy(), onnx_state)
            np.testing.assert_allclose(onnx_y, y_t.numpy(), rtol=1e-4, atol=1e-5)
    for eager, exported in zip(pack_state(state), onnx_state, strict=True):
        np.testing.assert_allclose(exported, eager.numpy(), rtol=1e-4, atol=1e-5)
    assert onnx_state[2].shape == (2, batch, 4, 4)


@pytest.mark.slow
def test_onnx_stream_keeps_the_state_and_equals_eager_step_over_100_tokens(exported) -> None:
    """The IO-bound stream swaps two state buffers: every token must read the state the last one wrote."""
    model, path = exported
    batch = 3
    torch.manual_seed(1)
    x = torch.randn(100, batch, 16) * 3.0
    state = model.init_state(batch)
    stream = OnnxStream(path, tuple(t.numpy() for t in pack_state(state)))
    with torch.no_grad():
        for x_t in x:
            y_t, state = model.step(x_t, state)
            np.testing.assert_allclose(stream.push(x_t.numpy()), y_t.numpy(), rtol=1e-4, atol=1e-5)
    for eager, exported in zip(pack_state(state), stream.state, strict=True):
        np.testing.assert_allclose(exported, eager.numpy(), rtol=1e-4, atol=1e-5)


def test_only_aaren_exports(tmp_path) -> None:
    with pytest.raises(TypeError, match="only Aaren's step"):
        export_onnx(Transformer(16, 4, 1, 32), tmp_path / "step.onnx")
