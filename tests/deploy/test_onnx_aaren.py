"""The exported ONNX step (run by onnxruntime) equals the model's own step token after token."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.deploy.onnx_aaren import OnnxStream, export_onnx, lane_state, lane_step, scan_state
from recurrent_attention.deploy.onnx_io import denormals_flushed, onnx_session
from recurrent_attention.deploy.onnx_state import OnnxStep, state_names
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.ops import ScanState
from tests.helpers.backbones import assert_states_close
from tests.helpers.onnx import assert_graph_follows_the_step, needs_onnx

D_MODEL, HEADS, LAYERS = 16, 4, 2


def model(**options: object) -> Aaren:
    torch.manual_seed(0)
    return Aaren(D_MODEL, HEADS, LAYERS, 32, dropout=0.0, **options).eval()


def test_lane_state_round_trips_and_repeats_each_head_over_its_lanes() -> None:
    torch.manual_seed(2)
    state = model().init_state(3)
    state = [type(layer)(*(torch.randn_like(part) for part in layer)) for layer in state]
    lanes = lane_state(state)
    assert [t.shape for t in lanes] == [(3, D_MODEL)] * 3 * LAYERS
    d_head = D_MODEL // HEADS
    torch.testing.assert_close(lanes[0][:, d_head : 2 * d_head], state[0].m[:, 1:2].expand(3, d_head))
    assert_states_close(scan_state(lanes, HEADS), state, rtol=0, atol=0)
    assert state_names(LAYERS, ScanState._fields) == ["m0", "u0", "w0", "m1", "u1", "w1"]


@pytest.mark.parametrize("options", [{}, {"norm_first": True, "final_norm": False}])
def test_lane_step_equals_the_eager_step(options: dict) -> None:
    """The graph's eager form against the model's step over 20 tokens from an empty state (float64)."""
    m = model(**options).double()
    graph = lane_step(m, torch.float64)
    assert_graph_follows_the_step(m, graph, lane_state, lambda lanes: scan_state(lanes, HEADS), D_MODEL)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Aaren, Path]:
    """An Aaren and its exported step, exported once (seconds) for the tests that only read them."""
    m = model()
    return m, export_onnx(m, tmp_path_factory.mktemp("export") / "step.onnx")


@needs_onnx
@pytest.mark.slow
def test_onnx_step_equals_eager_step_over_100_tokens(exported) -> None:
    model, path = exported
    onnx_step = OnnxStep(path)
    batch = 3  # exported with batch 2: the batch size must stay free
    torch.manual_seed(1)
    x = torch.randn(100, batch, D_MODEL) * 3.0
    state = model.init_state(batch)
    onnx_state = [t.numpy() for t in lane_state(state)]
    with torch.no_grad():
        for x_t in x:
            y_t, state = model.step(x_t, state)
            onnx_y, onnx_state = onnx_step(x_t.numpy(), onnx_state)
            np.testing.assert_allclose(onnx_y, y_t.numpy(), rtol=1e-4, atol=1e-5)
    assert_states_close(
        scan_state([torch.from_numpy(a) for a in onnx_state], HEADS), state, rtol=1e-4, atol=1e-5
    )
    assert [a.shape for a in onnx_state] == [(batch, D_MODEL)] * 3 * LAYERS


@needs_onnx
@pytest.mark.slow
def test_onnx_stream_keeps_the_state_and_equals_eager_step_over_100_tokens(exported) -> None:
    """The IO-bound stream swaps two state buffers: every token must read the state the last one wrote."""
    model, path = exported
    batch = 3
    torch.manual_seed(1)
    x = torch.randn(100, batch, D_MODEL) * 3.0
    state = model.init_state(batch)
    stream = OnnxStream(path, state)
    with torch.no_grad():
        for x_t in x:
            y_t, state = model.step(x_t, state)
            np.testing.assert_allclose(stream.push(x_t.numpy()), y_t.numpy(), rtol=1e-4, atol=1e-5)
    assert_states_close(stream.state, state, rtol=1e-4, atol=1e-5)
    assert stream.state_bytes == 3 * LAYERS * batch * D_MODEL * 4


@needs_onnx
@pytest.mark.slow
def test_exported_graph_slices_and_stacks_no_state(exported) -> None:
    """Per-layer state inputs and constant weights: the graph holds none of the nodes that cut a
    joint state apart, stack it again or lay out weights (each a fixed cost per token at runtime)."""
    import onnx

    ops = {node.op_type for node in onnx.load(exported[1]).graph.node}
    assert not ops & {"Slice", "Concat", "Squeeze", "Unsqueeze", "Transpose", "ReduceSum", "Reshape"}


def test_only_aaren_exports(tmp_path) -> None:
    with pytest.raises(TypeError, match="only Aaren's step"):
        export_onnx(Transformer(16, 4, 1, 32), tmp_path / "step.onnx")


@needs_onnx
def test_one_row_streams_run_without_prepacking_or_memory_reuse(exported) -> None:
    """What made the batch-1 step faster, kept to batch 1 (at batch 64 it made it slower)."""
    one, many = (onnx_session(exported[1], 1, batch).get_session_options() for batch in (1, 64))
    assert one.get_session_config_entry("session.disable_prepacking") == "1"
    assert not one.enable_mem_reuse
    assert many.enable_mem_reuse


@needs_onnx
@pytest.mark.parametrize("flushed_before", [False, True])
def test_a_push_flushes_denormals_while_onnxruntime_runs_and_then_leaves_the_flag_as_it_was(
    exported, flushed_before: bool
) -> None:
    """Denormals met in a session's thrown-away lanes made some sessions ~1.5x slower
    (deploy.onnx_io.run_flushing_denormals); flushing them must not leak into the thread's later
    torch and numpy work, nor switch off a flag the caller had set."""
    model, path = exported
    torch.set_flush_denormal(flushed_before)
    try:
        stream = OnnxStream(path, model.init_state(1))
        during = []
        run = stream.session.run_with_iobinding

        class Recording:  # onnxruntime's session does not take new attributes: a stand-in around it
            def __getattr__(self, name: str) -> object:
                return getattr(stream.session, name)

            def run_with_iobinding(self, binding: object) -> None:
                during.append(denormals_flushed())
                run(binding)

        stream.session = Recording()
        stream.push(np.ones((1, D_MODEL), np.float32))
        assert during == [True]
        assert denormals_flushed() == flushed_before
        assert (torch.tensor([1e-39]) * 1.0).item() == (0.0 if flushed_before else pytest.approx(1e-39))
    finally:
        torch.set_flush_denormal(False)


@needs_onnx
def test_a_push_leaves_the_flag_as_the_thread_has_it_now_not_as_it_was_when_the_stream_was_made(
    exported,
) -> None:
    """The flag is read at each push: a caller that turns flushing on after making the stream keeps it
    on, and one that turns it off again keeps it off."""
    model, path = exported
    try:
        torch.set_flush_denormal(False)
        stream = OnnxStream(path, model.init_state(1))
        for flushed in (True, False):
            torch.set_flush_denormal(flushed)
            stream.push(np.ones((1, D_MODEL), np.float32))
            assert denormals_flushed() == flushed
    finally:
        torch.set_flush_denormal(False)
