"""``train.py`` end to end on tiny generated files in the real formats, one smoke run per model."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import read_summaries, run_train
from tests.tasks.ef.test_formats import write_easytpp
from tests.tasks.ef.test_ifl_tpp import write_ifl

pytestmark = pytest.mark.slow


def write_thp_mirror(root: Path, n: int = 24, seed: int = 0) -> Path:
    """A THP-format MIMIC-like set (random sequences, 4 types) at the mirror's relative path."""
    rng = np.random.default_rng(seed)
    folder = root / "tpp" / "data_mimic"
    folder.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        sequences = []
        for _ in range(n):
            times = np.concatenate([[0.0], np.cumsum(rng.exponential(0.5, rng.integers(2, 12)))])
            sequences.append(
                [
                    {"time_since_start": float(t), "time_since_last_event": float(d), "type_event": int(k)}
                    for t, d, k in zip(
                        times, np.diff(times, prepend=0.0), rng.integers(0, 4, len(times)), strict=True
                    )
                ]
            )
        (folder / f"{split}.pkl").write_bytes(pickle.dumps({"dim_process": 4, split: sequences}, protocol=2))
    return folder


@pytest.mark.parametrize("model", ["transformer", "aaren"])
def test_smoke_thp_pickle(tmp_path: Path, model: str) -> None:
    folder = write_thp_mirror(tmp_path / "mirror")
    run_train(
        [
            f"model={model}",
            "task=ef/mimic",
            "preset=smoke",
            "task.n_marks=4",
            f"task.datamodule.path={folder}",
        ],
        tmp_path / "out",
        env={"RA_DATA_MIRROR": str(tmp_path / "mirror")},
    )
    (summary,) = read_summaries(tmp_path / "out")
    assert summary["family"] == "ef" and summary["model"] == model
    assert summary["dataset"] == "data_mimic" and summary["own_data"]  # own files: named by their folder
    assert set(summary["metrics"]) == {"nll", "nll_meta_tpp", "rmse", "acc"}
    assert all(math.isfinite(v) for v in summary["metrics"].values())


def test_smoke_easytpp_reference_compat(tmp_path: Path) -> None:
    folder = tmp_path / "mirror" / "tpp" / "easytpp" / "taxi"
    write_easytpp(folder, dim=10)
    run_train(
        [
            "model=aaren",
            "task=ef/taxi_easytpp",
            "preset=smoke",
            "task.compat=reference",
            f"task.datamodule.path={folder}",
        ],
        tmp_path / "out",
        env={"RA_DATA_MIRROR": str(tmp_path / "mirror")},
    )
    (summary,) = read_summaries(tmp_path / "out")
    assert summary["compat"] == "reference" and math.isfinite(summary["metrics"]["rmse"])
    assert summary["metrics"]["nll"] == summary["metrics"]["nll_meta_tpp"]


def test_smoke_ifl_tpp_npz(tmp_path: Path) -> None:
    seqs = [([0.0, 1.0 + i, 2.5 + i], [i % 4, 1, 3]) for i in range(10)]
    path = write_ifl(tmp_path / "wikipedia.npz", seqs=seqs)
    run_train(
        [
            "model=aaren",
            "task=ef/wiki_ifltpp",
            "preset=smoke",
            "task.n_marks=4",
            f"task.datamodule.path={path}",
        ],
        tmp_path / "out",
    )
    (summary,) = read_summaries(tmp_path / "out")
    assert summary["setting"] == {"format": "ifl_tpp"} and summary["own_data"]
    assert set(summary["metrics"]) == {"nll", "nll_meta_tpp", "rmse", "acc"}
    assert all(math.isfinite(v) for v in summary["metrics"].values())


def test_smoke_sin_generator_unmarked(tmp_path: Path) -> None:
    run_train(
        ["model=transformer", "task=ef/sin", "preset=smoke", "task.datamodule.sin.n_sequences=20"],
        tmp_path / "out",
    )
    (summary,) = read_summaries(tmp_path / "out")
    assert set(summary["metrics"]) == {"nll", "nll_meta_tpp", "rmse"}
