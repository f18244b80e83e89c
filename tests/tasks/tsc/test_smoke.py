"""End to end: train.py on a generated TRAIN/TEST pair in the mirror layout, for each backbone."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from tests.conftest import read_summaries

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("model", "extra"),
    [("transformer", []), ("aaren", []), ("aaren", ["task.compat=reference", "task.head=last"])],
)
def test_smoke_run(
    train_runner, toy_pair: tuple[Path, Path], tmp_path: Path, model: str, extra: list[str]
) -> None:
    train_path, test_path = toy_pair
    out = tmp_path / "out"
    train_runner(
        [
            f"model={model}",
            "task=tsc/japanesevowels",
            "preset=smoke",
            "task.n_channels=3",
            "task.n_classes=3",
            "task.max_len=12",
            f"task.datamodule.train_path={train_path}",
            f"task.datamodule.test_path={test_path}",
            *extra,
        ],
        out,
        env={"RA_DATA_MIRROR": str(tmp_path)},
    )
    (summary,) = read_summaries(out)
    assert summary["family"] == "tsc" and summary["model"] == model
    assert summary["compat"] == ("reference" if extra else "default")
    assert summary["setting"] == {"head": "last" if extra else "flatten"}
    # smoke tests 2 batches of 16 of the 12 TEST cases: every case, so the accuracy is a multiple of 100/12
    acc = summary["metrics"]["acc"]
    assert 0.0 <= acc <= 100.0 and round(acc * 12 / 100, 6).is_integer()
    assert summary["metrics"]["loss"] > 0


def tslib_early_stopping(scores: list[float], patience: int) -> tuple[int, int]:
    """TSLib's ``EarlyStopping`` as its classification loop drives it: ``early_stopping(-val_accuracy)``,
    ``score = -val_loss``; ``score < best_score + delta`` (delta 0) counts towards patience, anything
    else saves the checkpoint. Returns (epochs trained, 0-based epoch of the saved checkpoint)."""
    best_score, counter, saved = None, 0, 0
    for epoch, val_accuracy in enumerate(scores):
        val_loss = -val_accuracy
        score = -val_loss
        if best_score is None:
            best_score, saved = score, epoch
        elif score < best_score + 0:
            counter += 1
            if counter >= patience:
                return epoch + 1, saved
        else:
            best_score, saved, counter = score, epoch, 0
    return len(scores), saved


def test_reference_counts_an_equal_accuracy_as_an_improvement(
    train_runner, toy_pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """With a zero learning rate every epoch scores the same: TSLib never stops and keeps the last
    epoch; a strict rule would stop after ``patience`` epochs and keep the first."""
    train_path, test_path = toy_pair
    out = tmp_path / "out"
    epochs, patience = 5, 2
    train_runner(
        [
            "model=transformer",
            "task=tsc/japanesevowels",
            "preset=smoke",
            "task.compat=reference",
            "task.lr=0.0",
            f"task.max_epochs={epochs}",
            f"task.monitor.patience={patience}",
            "task.n_channels=3",
            "task.n_classes=3",
            "task.max_len=12",
            f"task.datamodule.train_path={train_path}",
            f"task.datamodule.test_path={test_path}",
        ],
        out,
        env={"RA_DATA_MIRROR": str(tmp_path)},
    )
    (summary,) = read_summaries(out)
    (metrics,) = out.rglob("metrics.csv")
    accuracies = pd.read_csv(metrics)["val/acc"].dropna().tolist()
    assert len(set(accuracies)) == 1
    trained, saved = tslib_early_stopping(accuracies, patience)
    assert summary["epochs"] == trained == epochs
    assert torch.load(summary["best_checkpoint"], weights_only=False)["epoch"] == saved == epochs - 1
