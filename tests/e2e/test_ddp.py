"""DDP on 2 CPU processes (gloo) reports the same test metrics as one process scoring its checkpoint.

Each process evaluates its share of the test split; the metric is exact only if every item is scored
once (no padding repeats) and the per-process totals are summed before logging. The test splits are
given a small odd number of items: a padded sampler would repeat one, and without the reduction
rank 0 would report its half of the split (or Lightning the mean of two unequal halves' means).
"""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import numpy as np
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import backbone_config, register_resolvers
from tests.conftest import read_summaries, run_train
from tests.tasks.tsc.conftest import random_problem, write_pair
from tests.tasks.tsf.test_data import own_csv_run

pytestmark = pytest.mark.slow

DDP = ["trainer=ddp", "preset=smoke", "trainer.limit_val_batches=1.0", "trainer.limit_test_batches=1.0"]


def one_process_test(summary_path: Path) -> dict[str, float]:
    """Rebuild the run from its saved config and test its best checkpoint on a single process."""
    register_resolvers()
    run_dir = summary_path.parent
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    summary = json.loads(summary_path.read_text())
    module = instantiate(cfg.task.module, backbone=instantiate(backbone_config(cfg.model)))
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    (tested,) = trainer.test(
        module, datamodule=instantiate(cfg.task.datamodule), ckpt_path=summary["best_checkpoint"]
    )
    return {k.removeprefix("test/"): v for k, v in tested.items()}


def assert_same_as_one_process(output_dir: Path) -> None:
    (summary_path,) = output_dir.rglob("summary.json")
    (summary,) = read_summaries(output_dir)
    assert summary["world_size"] == 2
    expected = one_process_test(summary_path)
    assert summary["metrics"].keys() == expected.keys()
    for name, value in expected.items():
        assert summary["metrics"][name] == pytest.approx(value, rel=1e-6), name


def test_forecasting_metrics_under_ddp_equal_one_process(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_train([*own_csv_run(tmp_path), *DDP], out)  # 41 test windows: an odd count
    assert_same_as_one_process(out)
    # every epoch metric, train/lr included, is logged as DDP wants it: no per-rank warning
    assert "sync_dist=True" not in proc.stderr, proc.stderr[-3000:]


def test_classification_metrics_under_ddp_equal_one_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    train, test = write_pair(
        tmp_path,
        "Toy",
        random_problem(rng, 30, 3, (5, 12), 3),
        random_problem(rng, 13, 3, (5, 12), 3),
        list("abc"),
    )
    out = tmp_path / "out"
    run_train(
        [
            "task=tsc/japanesevowels",
            "task.n_channels=3",
            "task.n_classes=3",
            "task.max_len=12",
            "task.batch_size=4",
            f"task.datamodule.train_path={train}",
            f"task.datamodule.test_path={test}",
            *DDP,
        ],
        out,
        env={"RA_DATA_MIRROR": str(tmp_path)},
    )
    assert_same_as_one_process(out)
