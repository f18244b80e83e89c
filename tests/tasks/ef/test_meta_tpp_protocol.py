"""The reference protocol selects and encodes as Meta TPP does; ``default`` keeps its own choices.

Transcribed from BorealisAI/meta-tpp: ``configs/callbacks/default.yaml`` (ModelCheckpoint
``monitor: val/rmse``, EarlyStopping ``monitor: val/nll``, patience 500) and ``src/models/tpp/thp/
models.py`` ``TransformerEncoder.forward`` (``enc_output += tem_enc`` before every encoder layer).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.errors import ConfigError
from recurrent_attention.models import Aaren, Transformer
from recurrent_attention.models.crt import CompactRecurrentTransformer
from recurrent_attention.tasks.ef.head import EventModel, temporal_encoding
from recurrent_attention.tasks.ef.stream import parallel_predictions, stream_predictions
from recurrent_attention.train import training_callbacks
from tests.conftest import read_summaries, run_train
from tests.tasks.ef.test_e2e import write_thp_mirror
from tests.tasks.ef.test_thp_encoder import thp_encoder_layer

THP = {"d_model": 8, "n_heads": 2, "n_layers": 3, "d_ff": 16, "dropout": 0.0}


def ef_config(compat: str):
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose(
            "train", overrides=["task=ef/mimic", "model=aaren", "preset=paper", f"task.compat={compat}"]
        )


@pytest.mark.parametrize(("compat", "checkpoint_metric"), [("reference", "val/rmse"), ("default", "val/nll")])
def test_checkpoint_and_early_stopping_monitors(tmp_path: Path, compat: str, checkpoint_metric: str) -> None:
    callbacks = training_callbacks(ef_config(compat), tmp_path)
    (best,) = (c for c in callbacks if isinstance(c, ModelCheckpoint) and c.filename == "best")
    (stop,) = (c for c in callbacks if isinstance(c, EarlyStopping))
    assert (best.monitor, best.mode) == (checkpoint_metric, "min")
    assert (stop.monitor, stop.mode, stop.patience) == ("val/nll", "min", 500)


@pytest.mark.parametrize(("compat", "every_layer"), [("reference", True), ("default", False)])
def test_protocol_sets_where_the_temporal_encoding_is_added(compat: str, every_layer: bool) -> None:
    assert ef_config(compat).task.module.rules.time_every_layer is every_layer


def meta_tpp_encoder(model: EventModel, intervals: torch.Tensor, marks: torch.Tensor) -> torch.Tensor:
    """Meta TPP's ``TransformerEncoder.forward`` on our weights (no padding; ``base_l: 0``, causal)."""
    tem_enc = temporal_encoding(intervals, model.backbone.d_model)
    enc_output = model.mark_embedding(marks)
    for block in model.backbone.blocks:
        enc_output = enc_output + tem_enc
        enc_output = thp_encoder_layer(block, enc_output, n_head=THP["n_heads"])
    return enc_output


def test_every_layer_encoding_equals_meta_tpp_thp_encoder() -> None:
    torch.manual_seed(0)
    backbone = Transformer(**THP, qkv_bias=False, norm_eps=1e-6, final_norm=False)
    model = EventModel(backbone, n_marks=4, time_every_layer=True).double().eval()
    intervals = torch.rand(2, 6, dtype=torch.float64) * 3
    marks = torch.randint(0, 4, (2, 6))
    expected = meta_tpp_encoder(model, intervals, marks)
    with torch.no_grad():
        torch.testing.assert_close(model(intervals, marks), expected, rtol=1e-9, atol=1e-12)
        model.time_every_layer = False  # the default protocol: the encoding once, at the input
        assert not torch.allclose(model(intervals, marks), expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backbone", [Aaren, Transformer])
def test_every_layer_encoding_streams_as_the_parallel_pass(backbone) -> None:
    torch.manual_seed(1)
    model = EventModel(backbone(**THP), n_marks=3, time_every_layer=True).double()
    times = torch.cumsum(torch.rand(12, dtype=torch.float64) * 2, 0).tolist()
    marks = torch.randint(0, 3, (12,)).tolist()
    for s, p in zip(
        stream_predictions(model, times, marks), parallel_predictions(model, times, marks), strict=True
    ):
        torch.testing.assert_close(s.mixture.mu, p.mixture.mu, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(s.mark_logits, p.mark_logits, rtol=1e-10, atol=1e-12)


def test_every_layer_encoding_needs_a_layer_stack() -> None:
    crt = CompactRecurrentTransformer(d_model=8, n_heads=2, n_layers=1, d_ff=16, dropout=0.0, seg_len=4)
    with pytest.raises(ConfigError, match=r"task\.rules\.time_every_layer=true"):
        EventModel(crt, n_marks=3, time_every_layer=True)


def read_epochs(path: Path) -> dict[int, dict[str, float]]:
    """The validation metrics of each epoch in Lightning's ``metrics.csv``."""
    epochs: dict[int, dict[str, float]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            if row.get("val/rmse"):
                epochs[int(row["epoch"])] = {
                    "val/rmse": float(row["val/rmse"]),
                    "val/nll": float(row["val/nll"]),
                }
    return epochs


@pytest.mark.slow
def test_reference_run_tests_the_epoch_of_the_best_validation_rmse(tmp_path: Path) -> None:
    """A run whose best-RMSE epoch is not its best-NLL epoch tests the former's weights."""
    folder = write_thp_mirror(tmp_path / "mirror", n=16, seed=3)
    overrides = ["model=transformer", "task=ef/mimic", "preset=smoke", "task.n_marks=4", "task.max_epochs=8"]
    overrides += [f"task.datamodule.path={folder}", "task.compat=reference", "task.lr=0.02", "seed=2"]
    run_train(overrides, tmp_path / "out", env={"RA_DATA_MIRROR": str(tmp_path / "mirror")})
    (summary,) = read_summaries(tmp_path / "out")
    (metrics_csv,) = (tmp_path / "out").rglob("metrics.csv")
    epochs = read_epochs(metrics_csv)
    best_rmse = min(epochs, key=lambda e: epochs[e]["val/rmse"])
    best_nll = min(epochs, key=lambda e: epochs[e]["val/nll"])
    assert len(epochs) == 8 and best_rmse != best_nll  # the case that tells the two rules apart
    tested = torch.load(summary["tested_checkpoint"], map_location="cpu", weights_only=False)
    assert tested["epoch"] == best_rmse
    assert math.isfinite(summary["metrics"]["rmse"])


@pytest.mark.parametrize("backbone", [Aaren, Transformer])
def test_every_layer_encoding_step_equals_forward(backbone) -> None:
    """With gradients on, ``step`` takes each block's own step (the training-mode path)."""
    torch.manual_seed(2)
    model = EventModel(backbone(**THP), n_marks=3, time_every_layer=True).double().eval()
    intervals = torch.rand(2, 5, dtype=torch.float64)
    marks = torch.randint(0, 3, (2, 5))
    state = model.backbone.init_state(2, dtype=torch.float64)
    steps = []
    for t in range(5):
        hidden, state = model.step(intervals[:, t], marks[:, t], state)
        steps.append(hidden)
    torch.testing.assert_close(torch.stack(steps, 1), model(intervals, marks), rtol=1e-10, atol=1e-12)
