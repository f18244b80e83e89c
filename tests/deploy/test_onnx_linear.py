"""Linear attention's exported ONNX step (in onnxruntime) equals the model's own step token after token."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.deploy.onnx_linear import (
    OnnxLinearStream,
    augmented_step,
    export_linear_onnx,
    graph_state,
    linear_state,
)
from recurrent_attention.deploy.onnx_state import OnnxStep
from recurrent_attention.models import Aaren
from recurrent_attention.models.linear_attention import LinearTransformer
from tests.helpers.backbones import assert_states_close
from tests.helpers.onnx import assert_graph_follows_the_step, needs_onnx

D_MODEL, HEADS, LAYERS = 16, 4, 2
D_HEAD = D_MODEL // HEADS


def model(**options: object) -> LinearTransformer:
    torch.manual_seed(0)
    return LinearTransformer(D_MODEL, HEADS, LAYERS, 32, dropout=0.0, **options).eval()


def test_graph_state_holds_z_as_the_last_column_of_s_and_round_trips() -> None:
    torch.manual_seed(2)
    state = [type(layer)(*(torch.randn_like(part) for part in layer)) for layer in model().init_state(3)]
    graph = graph_state(state)
    assert [t.shape for t in graph] == [(3, HEADS, D_HEAD, D_HEAD + 1)] * LAYERS
    torch.testing.assert_close(graph[1][..., :D_HEAD], state[1].s, rtol=0, atol=0)
    torch.testing.assert_close(graph[1][..., D_HEAD], state[1].z, rtol=0, atol=0)
    assert_states_close(linear_state(graph), state, rtol=0, atol=0)


@pytest.mark.parametrize(
    "options", [{}, {"norm_first": True, "final_norm": False, "qkv_bias": False}], ids=["post", "pre"]
)
def test_augmented_step_equals_the_model_step(options: dict) -> None:
    """The graph's eager form against the model's step over 20 tokens from an empty state (float64)."""
    m = model(**options).double()
    graph = augmented_step(m, torch.float64)
    assert_graph_follows_the_step(m, graph, graph_state, linear_state, D_MODEL)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[LinearTransformer, Path]:
    """A linear attention stack and its step, exported once (seconds) for the tests that read them."""
    m = model()
    return m, export_linear_onnx(m, tmp_path_factory.mktemp("export") / "linear.onnx")


@needs_onnx
@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 3])
def test_onnx_stream_equals_the_model_step_over_100_tokens(exported, batch: int) -> None:
    """Batch 1 (a session without prepacking) and 3 (exported at 2: the batch stays free); the stream
    swaps two state buffers, so every token must read the state the last one wrote."""
    m, path = exported
    torch.manual_seed(1)
    x = torch.randn(100, batch, D_MODEL) * 3.0
    state = m.init_state(batch)
    stream = OnnxLinearStream(path, state)
    with torch.no_grad():
        for x_t in x:
            y_t, state = m.step(x_t, state)
            np.testing.assert_allclose(stream.push(x_t.numpy()), y_t.numpy(), rtol=1e-4, atol=1e-5)
    assert_states_close(stream.state, state, rtol=1e-4, atol=1e-4)
    assert stream.state_bytes == LAYERS * batch * HEADS * D_HEAD * (D_HEAD + 1) * 4


@needs_onnx
@pytest.mark.slow
def test_onnx_step_through_numpy_continues_a_carried_state(exported) -> None:
    """The state after 30 tokens of the model's own forward, passed in and out as numpy arrays."""
    m, path = exported
    step = OnnxStep(path)
    torch.manual_seed(3)
    with torch.no_grad():
        _, state = m(torch.randn(2, 30, D_MODEL))
        layout = [t.numpy() for t in graph_state(state)]
        for x_t in torch.randn(10, 2, D_MODEL):
            y_t, state = m.step(x_t, state)
            y, layout = step(x_t.numpy(), layout)
            np.testing.assert_allclose(y, y_t.numpy(), rtol=1e-4, atol=1e-5)


def test_only_linear_attention_exports(tmp_path) -> None:
    with pytest.raises(TypeError, match="linear attention's step, not Aaren's"):
        export_linear_onnx(Aaren(D_MODEL, HEADS, 1, 32), tmp_path / "step.onnx")
