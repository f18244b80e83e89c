"""End to end: train.py on a generated TRAIN/TEST pair in the mirror layout, for each backbone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import read_summaries


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
