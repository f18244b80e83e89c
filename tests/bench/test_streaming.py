"""The benchmark's stand-in states have exactly the shapes a real stream of N tokens leaves behind."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.bench.streaming import state_at_context, step_timings, stream_step
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.linear_attention import LinearTransformer


@pytest.mark.parametrize("cls", [Transformer, Aaren, LinearTransformer])
def test_state_at_context_has_the_shapes_of_a_real_state(cls: type) -> None:
    torch.manual_seed(0)
    model = cls(16, 4, 2, 32, dropout=0.0).eval()
    with torch.no_grad():
        _, real = model(torch.randn(3, 11, 16))
    fake = state_at_context(model, 11, 3)
    real_leaves, fake_leaves = (
        [t for t in torch.utils._pytree.tree_leaves(state) if isinstance(t, torch.Tensor)]
        for state in (real, fake)
    )
    assert [t.shape for t in fake_leaves] == [t.shape for t in real_leaves]
    assert [t.dtype for t in fake_leaves] == [t.dtype for t in real_leaves]
    with torch.no_grad():
        model.step(torch.randn(3, 16), fake)  # a state the step accepts


def test_step_timings_skip_states_over_the_cap() -> None:
    models = {
        "transformer": Transformer(16, 4, 1, 32, dropout=0.0),
        "aaren": Aaren(16, 4, 1, 32, dropout=0.0),
        "linear_attention": LinearTransformer(16, 4, 1, 32, dropout=0.0),
    }
    rows = step_timings(
        models, contexts=[8, 4096], batches=[1], max_state_bytes=2**16, max_steps=60, rounds=2, budget_s=0.05
    )
    by_key = {(r.model, r.n): r for r in rows}
    # one row per cell, whatever the number of rounds; the torch.cat Transformer only where it ran
    assert len(rows) == len(by_key) == 7
    assert by_key[("transformer", 4096)].us_per_token is None
    assert "skipped" in by_key[("transformer", 4096)].note
    assert all(
        by_key[(name, n)].us_per_token > 0 for name in ("aaren", "linear_attention") for n in (8, 4096)
    )
    assert by_key[("transformer", 8)].us_per_token > 0
    assert by_key[("transformer_cat", 8)].us_per_token > 0
    # linear attention's (S, z): 4 heads of d_head x d_head plus d_head float32s, whatever N
    assert {by_key[("linear_attention", n)].state_bytes for n in (8, 4096)} == {4 * (4 * 4 + 4) * 4}


@pytest.mark.slow
def test_exported_steps_start_from_their_models_state(tmp_path) -> None:
    """An exported Transformer step is timed from the Transformer's state at N, reported with its size."""
    pytest.importorskip("onnxruntime")
    from recurrent_attention.deploy.onnx_kv import OnnxKVStream, export_transformer_onnx

    models = {
        "transformer": Transformer(16, 4, 1, 32, dropout=0.0),
        "aaren": Aaren(16, 4, 1, 32, dropout=0.0),
    }
    path = export_transformer_onnx(models["transformer"], tmp_path / "t.onnx")
    exported = {
        "transformer_onnx": (
            "transformer",
            lambda state: stream_step(OnnxKVStream(path, state, capacity=state[0].k.shape[-2])),
        )
    }
    rows = step_timings(
        models, contexts=[8], batches=[2], exported=exported, max_steps=60, rounds=1, budget_s=0.05
    )
    by_model = {r.model: r for r in rows}
    assert set(by_model) == {"transformer", "transformer_cat", "transformer_onnx", "aaren"}
    assert by_model["transformer_onnx"].us_per_token > 0
    assert (
        by_model["transformer_onnx"].state_bytes == by_model["transformer"].state_bytes == 2 * 2 * 8 * 16 * 4
    )


def test_a_variant_is_timed_on_its_models_tokens_and_state() -> None:
    """Another deployed step of a model (bfloat16 matrices in ``make bench``) gets a row per cell
    beside the model's, with the model's state size, and runs the step it was made with."""
    models = {
        "transformer": Transformer(16, 4, 1, 32, dropout=0.0),
        "aaren": Aaren(16, 4, 1, 32, dropout=0.0),
    }
    made = []

    def make(model):
        made.append(model)
        return model

    rows = step_timings(
        models,
        contexts=[8],
        batches=[2],
        max_steps=60,
        rounds=1,
        budget_s=0.05,
        variants={"aaren_own_step": ("aaren", make)},
    )
    by_model = {r.model: r for r in rows}
    assert set(by_model) == {"transformer", "transformer_cat", "aaren", "aaren_own_step"}
    assert made == [models["aaren"]]
    assert by_model["aaren_own_step"].us_per_token > 0
    assert by_model["aaren_own_step"].state_bytes == by_model["aaren"].state_bytes
