"""Run records on disk as ``train.py`` writes them: ``summary.json`` and ``failed.json`` in run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from recurrent_attention.runs.atomic import atomic_write_text
from recurrent_attention.runs.record import SUMMARY_NAME

TSF_RUN = {
    "task": "tsf/etth1",
    "family": "tsf",
    "dataset": "ETTh1",
    "setting": {"horizon": 96},
    "model": "aaren",
    "preset": "cpu",
    "compat": "default",
    "wall_time_s": 10.0,
    "epochs": 3,
    "device": "CPU",
    "git_commit": "abc",
}


def summary(folder: Path, seed: int, metrics: dict[str, float], extra: list[str] = (), **fields: Any) -> Path:
    """A finished run in ``folder``: TSF ETTh1 defaults, ``fields`` replaced, ``extra`` overrides typed.

    Written as plain (lenient) JSON, so a NaN metric can stand for a summary from an older version
    or another tool; ``train.py`` itself refuses to write one.
    """
    record = {**TSF_RUN, **fields, "seed": seed, "metrics": metrics}
    record.setdefault(
        "overrides",
        [
            f"model={record['model']}",
            f"task={record['task']}",
            f"preset={record['preset']}",
            f"seed={seed}",
            *extra,
        ],
    )
    path = folder / SUMMARY_NAME
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path


def failure(folder: Path, seed: int, error: str, **fields: Any) -> Path:
    """A failed run in ``folder`` with the identity fields ``train.py`` records beside the error."""
    identity = ("task", "family", "dataset", "model", "preset", "compat", "git_commit")
    record = (
        {k: TSF_RUN[k] for k in identity} | fields | {"seed": seed, "error": error, "traceback": "Traceback"}
    )
    path = folder / "failed.json"
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    return path


def aaren_rl_reference(folder: Path) -> Path:
    """A reference folder holding one row of the paper's RL table (Aaren, Hopper medium), as
    ``shared/reference/aaren_rl.csv`` writes it."""
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        [["Hopper", "Medium", "Aaren", 80.86, 4.77, True]],
        columns=["env", "dataset", "model", "mean", "std", "bold"],
    ).to_csv(folder / "aaren_rl.csv", index=False)
    return folder
