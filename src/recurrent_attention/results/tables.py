"""Mean ± std over seeds beside the paper's numbers, written as markdown and CSV.

A family's layout (in ``layouts/``) says which summary columns identify a table row, which metrics
to show and how to match the paper's reference CSV; :func:`compare` does the rest.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from recurrent_attention.results.summary import atomic_write_text

# The papers' numbers as CSV (the steering checkout's shared/reference beside this repository);
# RA_REFERENCE_DIR points elsewhere.
REFERENCE_DIR = Path(
    os.environ.get("RA_REFERENCE_DIR", Path(__file__).resolve().parents[3].parent / "shared" / "reference")
)


@dataclass
class Table:
    """One results table: its name (file stem), a title, the frame and notes printed under it."""

    name: str
    title: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def to_markdown(self) -> str:
        header = "| " + " | ".join(map(str, self.frame.columns)) + " |"
        rule = "|" + "|".join("---" for _ in self.frame.columns) + "|"
        body = [
            "| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |" for row in self.frame.values
        ]
        notes = "".join(f"\n- {n}" for n in self.notes)
        return (
            f"# {self.title}\n\n"
            + "\n".join([header, rule, *body])
            + "\n"
            + (f"\n{notes.strip()}\n" if notes else "")
        )

    def write(self, out_dir: str | Path) -> list[Path]:
        out_dir = Path(out_dir)
        md, csv = out_dir / f"{self.name}.md", out_dir / f"{self.name}.csv"
        atomic_write_text(md, self.to_markdown())
        atomic_write_text(csv, self.frame.to_csv(index=False))
        return [md, csv]


def mean_std(values: Sequence[float]) -> tuple[float, float, int]:
    """Mean, sample standard deviation (ddof=1; 0 for one run) and count."""
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
    return float(arr.mean()), std, len(arr)


def _tidy(value: object) -> object:
    """Integral floats (pandas turns integer columns with gaps into floats) print as integers."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def format_pm(mean: float, std: float, digits: int) -> str:
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def aggregate(runs: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str]) -> pd.DataFrame:
    """One row per ``keys`` + model: mean, std and seed count of each metric."""
    rows = []
    for group, frame in runs.groupby([*keys, "model"], dropna=False, sort=True):
        row = dict(zip([*keys, "model"], group, strict=True))
        for metric in metrics:
            col = f"metric.{metric}"
            values = frame[col].dropna() if col in frame else []
            if len(values):
                row[f"{metric}_mean"], row[f"{metric}_std"], row[f"{metric}_n"] = mean_std(values)
        row["seeds"] = frame["seed"].nunique()
        row["wall_time_s"] = float(frame["wall_time_s"].mean()) if "wall_time_s" in frame else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def compare(
    runs: pd.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[str],
    reference: pd.DataFrame | None,
    reference_lookup,
    digits: int = 3,
) -> pd.DataFrame:
    """Our mean ± std per metric beside the paper's, one row per keys + model."""
    stats = aggregate(runs, keys, metrics)
    out = []
    for row in stats.to_dict("records"):
        line = {k: _tidy(row[k]) for k in [*keys, "model"]}
        for metric in metrics:
            if f"{metric}_mean" in row and not pd.isna(row[f"{metric}_mean"]):
                line[f"{metric} (ours)"] = format_pm(row[f"{metric}_mean"], row[f"{metric}_std"], digits)
            else:
                line[f"{metric} (ours)"] = ""
            paper = reference_lookup(row, metric) if reference is not None else None
            line[f"{metric} (paper)"] = format_pm(*paper, 2) if paper is not None else ""
        line["seeds"] = row["seeds"]
        line["wall s/run"] = f"{row['wall_time_s']:.0f}"
        out.append(line)
    return pd.DataFrame(out)


def provenance(runs: pd.DataFrame) -> list[str]:
    """Notes naming the presets, devices and commits that produced a table."""
    notes = []
    for col, label in (("preset", "preset"), ("device", "hardware"), ("git_commit", "commit")):
        if col in runs:
            values = sorted({str(v) for v in runs[col].dropna()})
            notes.append(f"{label}: {', '.join(values)}")
    return notes


def load_reference(name: str, reference_dir: str | Path | None = None) -> pd.DataFrame | None:
    path = Path(reference_dir or REFERENCE_DIR) / name
    return pd.read_csv(path) if path.is_file() else None
