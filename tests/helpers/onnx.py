"""The mark for tests that run an exported step (they need the deploy extra: onnxruntime, onnxscript),
and the check that an exported graph's eager form follows the model's own step."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import pytest
import torch

from tests.helpers.backbones import assert_states_close

needs_onnx = pytest.mark.skipif(
    any(importlib.util.find_spec(name) is None for name in ("onnxruntime", "onnxscript")),
    reason="the deploy extra (onnxruntime, onnxscript) is not installed",
)


def assert_graph_follows_the_step(
    model: torch.nn.Module, graph: Callable, to_graph: Callable, from_graph: Callable, d_model: int
) -> None:
    """``graph`` (the exported step's eager form, ``(x_t, *layout) -> (y_t, *layout)``) against
    ``model.step`` over 20 tokens of batch 3 from an empty state, in float64; ``to_graph`` and
    ``from_graph`` carry a state to and from the graph's layout."""
    x = torch.randn(20, 3, d_model, dtype=torch.float64) * 3.0
    state = model.init_state(3, dtype=torch.float64)
    layout = to_graph(state)
    with torch.no_grad():
        for x_t in x:
            expected, state = model.step(x_t, state)
            y, *layout = graph(x_t, *layout)
            torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    assert_states_close(from_graph(layout), state, rtol=1e-12, atol=1e-12)
