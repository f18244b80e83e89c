"""The roofline bound of a deployed step: FLOPs counted against a hand count, the bound the larger
of its two times, and rates that measure what they say."""

from __future__ import annotations

import pytest
import torch

from recurrent_attention.bench.roofline import Roofline, bound_rows, measure, step_flops, weight_bytes
from recurrent_attention.bench.streaming import state_at_context
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.linear_attention import LinearTransformer

D, HEADS, LAYERS, D_FF, BATCH = 32, 4, 2, 64, 3
SIZES = {"d_model": D, "n_heads": HEADS, "n_layers": LAYERS, "d_ff": D_FF, "dropout": 0.0}
# Per token and layer: q/k/v (d -> 3d), output (d -> d), feed-forward (d -> d_ff -> d); 2 FLOPs a
# multiply-add.
PROJECTIONS = LAYERS * (2 * D * 3 * D + 2 * D * D + 2 * 2 * D * D_FF)


def test_a_transformer_step_counts_its_projections_and_four_d_flops_per_cached_token() -> None:
    model = Transformer(**SIZES).eval()
    x_t = torch.randn(BATCH, D)
    for n in (1, 7):
        # the step attends over the n cached tokens and itself: q·k and p·v, 2 d FLOPs each
        attention = LAYERS * 2 * (2 * D * (n + 1))
        assert step_flops(model, x_t, state_at_context(model, n, BATCH)) == BATCH * (PROJECTIONS + attention)


# Aaren's step projects values and scores as one matrix (d -> d + n_heads: its query is learned, so
# no keys), then output and feed-forward; its (m, u, w) update is element-wise (no matmul FLOPs).
AAREN = LAYERS * (2 * D * (D + HEADS) + 2 * D * D + 2 * 2 * D * D_FF)
# Linear attention: the Transformer's projections and, per head, phi(q) S (a d_head^2 product).
LINEAR = PROJECTIONS + LAYERS * HEADS * 2 * (D // HEADS) ** 2


@pytest.mark.parametrize(("cls", "flops"), [(Aaren, AAREN), (LinearTransformer, LINEAR)])
def test_a_constant_state_step_costs_the_same_at_every_context(cls, flops: int) -> None:
    model = cls(**SIZES).eval()
    x_t = torch.randn(BATCH, D)
    for n in (1, 100, 10_000):
        assert step_flops(model, x_t, state_at_context(model, n, BATCH)) == BATCH * flops


def test_weight_bytes_are_every_parameter_once() -> None:
    model = Aaren(**SIZES)
    assert weight_bytes(model) == 4 * sum(p.numel() for p in model.parameters())
    assert weight_bytes(model.double()) == 8 * sum(p.numel() for p in model.parameters())


def test_the_bound_is_the_larger_of_compute_and_read_time() -> None:
    line = Roofline(flops_per_s=1e9, read_bytes_per_s=1e8)
    assert line.bound_seconds(flops=2_000_000, nbytes=100_000) == pytest.approx(2e-3)  # compute-bound
    assert line.bound_seconds(flops=1_000, nbytes=1_000_000) == pytest.approx(1e-2)  # read-bound


def test_measured_rates_are_plausible_and_sizes_share_a_read_measurement() -> None:
    """A rate is FLOPs or bytes over the fastest time: finite and positive; a matmul of a cache-sized
    block reaches at least 0.1 GFLOP/s on any machine that runs this suite, and no buffer is read
    faster than 10 TB/s. Sizes in one power of two share one measurement."""
    lines = measure([5_000, 6_000, 3_000_000], reps=3)
    assert lines[5_000] is not lines[3_000_000]
    assert lines[5_000].read_bytes_per_s == lines[6_000].read_bytes_per_s
    for line in lines.values():
        assert 1e8 < line.flops_per_s < 1e14
        assert 1e6 < line.read_bytes_per_s < 1e13


def test_bound_rows_hold_each_timed_step_and_its_forms_to_their_models_bound() -> None:
    models = {"transformer": Transformer(**SIZES).eval(), "aaren": Aaren(**SIZES).eval()}
    cache_bytes = 2 * LAYERS * BATCH * 5 * D * 4  # k and v of 5 tokens per layer, fp32
    steps = [
        {"model": "transformer", "batch": BATCH, "n": 5, "us_per_token": 50.0, "state_bytes": cache_bytes},
        {
            "model": "transformer_cat",
            "batch": BATCH,
            "n": 5,
            "us_per_token": 80.0,
            "state_bytes": cache_bytes,
        },
        {"model": "aaren_onnx", "batch": BATCH, "n": 5, "us_per_token": 20.0, "state_bytes": 1000},
        {"model": "aaren", "batch": BATCH, "n": 9, "us_per_token": None, "state_bytes": 1000},  # skipped
    ]
    rows = {row["model"]: row for row in bound_rows(models, steps, reps=3)}
    assert sorted(rows) == ["aaren_onnx", "transformer", "transformer_cat"]
    assert rows["aaren_onnx"]["flops"] == BATCH * AAREN
    assert (
        rows["transformer"]["flops"]
        == rows["transformer_cat"]["flops"]
        == BATCH * (PROJECTIONS + LAYERS * 2 * 2 * D * 6)
    )
    assert rows["transformer"]["read_bytes"] == weight_bytes(models["transformer"]) + cache_bytes
    for row in rows.values():
        line = Roofline(row["gflops_per_s"] * 1e9, row["read_gb_per_s"] * 1e9)
        assert row["bound_us"] == pytest.approx(line.bound_seconds(row["flops"], row["read_bytes"]) * 1e6)
        assert row["multiple"] == pytest.approx(row["us_per_token"] / row["bound_us"])
