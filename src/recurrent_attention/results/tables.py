"""Mean ± std over seeds beside the paper's numbers, written as markdown and CSV.

A family's layout (in ``layouts/``) says which summary columns it shows, which metrics and how to
match the paper's reference CSV; rows are configs (``grouping.config_rows``) and :func:`compare`
formats them: ``n`` runs per row, the value alone when n = 1, failed and missing seeds marked.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np
import pandas as pd

from recurrent_attention.results.grouping import COUNTED, config_rows, seed_ranges, table_seeds
from recurrent_attention.results.record_keys import DESCRIPTION_FIELDS, show
from recurrent_attention.runs.atomic import atomic_write_text

# The papers' numbers as CSV ship inside the package (results/reference/, read through
# importlib.resources, so any clone or installed wheel has them); RA_REFERENCE_DIR points elsewhere.
REFERENCE_ENV = "RA_REFERENCE_DIR"
REFERENCE_PACKAGE = "recurrent_attention.results"


class MissingReferenceWarning(UserWarning):
    """A paper's reference CSV was not found: its table's paper columns stay empty."""


@dataclass
class Table:
    """One results table: its name (file stem), a title, the frame and notes printed under it."""

    name: str
    title: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    runs: pd.DataFrame | None = None  # the run records it was built from, for provenance checks

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


def _tidy(value: object) -> object:
    """Integral floats (pandas turns integer columns with gaps into floats) print as integers."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def format_pm(mean: float, std: float | None, digits: int) -> str:
    """``mean ± std``, or the mean alone where there is no spread to report (one run, or none given)."""
    if std is None or pd.isna(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _ours(row: dict, metric: str, digits: int) -> str:
    if pd.isna(row.get(f"{metric}_mean", np.nan)):
        return ""
    text = format_pm(row[f"{metric}_mean"], row[f"{metric}_std"], digits)
    count = int(row[f"{metric}_n"])
    return text if count == row["n"] else f"{text} (n={count})"


def _row_name(row: dict, keys: Sequence[str]) -> str:
    words = [str(_tidy(row[k])) for k in [*keys, "model"] if not pd.isna(row[k])]
    return " ".join(words + ([f"[{row['label']}]"] if row["label"] else []))


def _first_line(text: str, limit: int = 160) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else "no error recorded"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def run_notes(runs: pd.DataFrame, stats: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """What the numbers rest on: seeds per row, failed runs with their errors, duplicates skipped."""
    notes = ["n = finished runs averaged in the row; with n = 1 the value stands alone (no spread)."]
    seed_sets = {tuple(s) for s in stats["seeds"]} if len(stats) else set()
    clean = len(stats) and not any(
        len(f) or len(m) for f, m in zip(stats["failed"], stats["missing"], strict=True)
    )
    if len(seed_sets) == 1 and clean:
        (seeds,) = seed_sets
        notes.append(f"{'seed' if len(seeds) == 1 else 'seeds'} {seed_ranges(seeds)} in every row.")
    elif len(stats):
        notes.append("seeds differ between rows (seeds column); failed and missing seeds are marked.")
    shown = {
        key: _row_name(row, keys)
        for key, row in zip(stats.get("config_key", []), stats.to_dict("records"), strict=True)
    }
    failed = runs[runs["status"] == "failed"]
    for (config_key, error), part in failed.groupby(
        [failed["config_key"], failed["error"].map(_first_line)], sort=True
    ):
        first = part.iloc[0]
        name = (
            shown.get(config_key)
            or f"{first.get('task')} {first.get('model')} ({config_key[:8]}, no finished seed)"
        )
        notes.append(f"failed: {name}, seed {seed_ranges(part['seed'].dropna())}: {error}")
    n_duplicates = int((runs["status"] == "duplicate").sum())
    if n_duplicates:
        notes.append(f"{n_duplicates} run record(s) found twice (the same run) were counted once.")
    return notes + _last_segment_timing_notes(runs, shown)


def _last_segment_timing_notes(runs: pd.DataFrame, shown: dict[str, str]) -> list[str]:
    """Resumed runs from before ``wall_time_segment_s`` was recorded timed only their last segment."""
    finished = runs[runs["status"] == "ok"]
    resumed = finished.get("resumed", pd.Series(False, index=finished.index)).eq(True)
    untimed = finished.get("wall_time_segment_s", pd.Series(np.nan, index=finished.index)).isna()
    part = finished[resumed & untimed]
    if part.empty:
        return []
    where = "; ".join(
        f"{shown[key]} seed {seed_ranges(runs_of_row['seed'])}"
        for key, runs_of_row in part.groupby("config_key", sort=True)
    )
    return [
        f"wall s/run is a lower bound for rows with resumed runs made before whole-run timing "
        f"(they timed their last segment only): {where}."
    ]


def compare(
    runs: pd.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[str],
    reference: pd.DataFrame | None,
    reference_lookup: Callable[[dict, str], tuple[float, float | None] | None],
    digits: int = 3,
    means: Sequence[str] = (),
) -> tuple[pd.DataFrame, list[str]]:
    """Our numbers per metric beside the paper's, one row per config; and the notes that go with them.

    A row of own data (``own_data``) gets no paper number. Columns: ``keys``, model, ``config``
    (only where two configs share keys + model), for each metric
    ours and the paper's, ``n``, ``seeds``, ``failed seeds`` / ``missing seeds`` (only where some
    row has them), wall time per run and the mean of each column in ``means`` (one decimal).
    """
    stats = config_rows(runs, keys, metrics, means)
    out = []
    for row in stats.to_dict("records"):
        line = {k: _tidy(row[k]) for k in [*keys, "model"]}
        line["config"] = row["label"]
        for metric in metrics:
            line[f"{metric} (ours)"] = _ours(row, metric, digits)
            # own data is never set beside a paper's number, whatever its file is called
            paper = reference_lookup(row, metric) if reference is not None and not row["own_data"] else None
            line[f"{metric} (paper)"] = format_pm(*paper, 2) if paper is not None else ""
        line["n"] = row["n"]
        line["seeds"] = seed_ranges(row["seeds"])
        line["failed seeds"] = seed_ranges(row["failed"])
        line["missing seeds"] = seed_ranges(row["missing"])
        line["wall s/run"] = f"{row['wall_time_s']:.0f}"
        line.update({m: round(row[m], 1) for m in means if m in row})
        out.append(line)
    columns = [
        *keys,
        "model",
        "config",
        *(f"{m} ({who})" for m in metrics for who in ("ours", "paper")),
        "n",
        "seeds",
        "failed seeds",
        "missing seeds",
        "wall s/run",
        *means,
    ]
    frame = pd.DataFrame(out, columns=columns)
    optional = [c for c in ("config", "failed seeds", "missing seeds") if not frame[c].any()]
    return frame.drop(columns=optional), run_notes(runs, stats, keys)


def shown_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs (finished or failed) of the configs that have a row, i.e. a finished run: what the
    notes and the ``command:`` line describe. A config whose every run failed has no row; its
    failures are listed, but its values are not the table's."""
    counted = runs[runs["status"].isin(COUNTED)]
    with_row = counted.loc[counted["status"] == "ok", "config_key"]
    return counted[counted["config_key"].isin(with_row)]


def seed_arg(runs: pd.DataFrame) -> str:
    """The seeds of a table's rows, as the ``seed=`` of the command that reproduces them."""
    return ",".join(map(str, table_seeds(shown_runs(runs))))


def override_notes(runs: pd.DataFrame, by: str, hide: Sequence[str] = ()) -> list[str]:
    """Per value of ``by`` (e.g. dataset): the overrides its rows were started with, ``hide`` left out.

    One line per value where all its rows share the overrides; else one line per set, naming the
    models of the rows that have it (a set is never merged with another row's). Overrides that only
    name the model, task, preset, seed or protocol are never listed (the table shows those); see
    ``identity.normalise_overrides``.
    """
    shown = shown_runs(runs)
    shown = shown[shown["config"].notna()]
    notes = []
    for value, part in shown.groupby(by, sort=True):
        models_of: dict[tuple[str, ...], set[str]] = {}
        for config, model in zip(part["config"], part["model"], strict=True):
            described = json.loads(config)
            words = (f"{k}={show(v)}" for k, v in described.items() if _is_override(k) and k not in hide)
            models_of.setdefault(tuple(sorted(words)), set()).add(str(model))
        sets = [words for words in sorted(models_of) if words]
        if len(models_of) == 1 and sets:
            notes.append(f"{value} overrides: {' '.join(sets[0])}")
        else:
            notes += [f"{value} overrides ({', '.join(sorted(models_of[w]))}): {' '.join(w)}" for w in sets]
    return notes


def _is_override(name: str) -> bool:
    return name not in DESCRIPTION_FIELDS and not name.startswith("setting.")


def provenance(runs: pd.DataFrame) -> list[str]:
    """Notes naming the presets, devices and commits that produced a table."""
    counted = runs[runs["status"].isin(COUNTED)]
    notes = []
    for col, label in (("preset", "preset"), ("device", "hardware"), ("git_commit", "commit")):
        if col in counted:
            values = sorted({str(v) for v in counted[col].dropna()})
            notes.append(f"{label}: {', '.join(values)}")
    return notes


def paper_number(
    reference: pd.DataFrame, where: dict[str, object], value: str, std: str | None = None
) -> tuple[float, float | None] | None:
    """The paper's ``value`` (and ``std``) in the first reference row whose columns equal ``where``
    (None: the column is empty); None where no row matches, which leaves the paper's column blank."""
    match = pd.Series(True, index=reference.index)
    for column, wanted in where.items():
        match &= reference[column].isna() if wanted is None else reference[column] == wanted
    hit = reference[match]
    if hit.empty:
        return None
    return float(hit[value].iloc[0]), None if std is None else float(hit[std].iloc[0])


def reference_folder(reference_dir: str | Path | None = None) -> Path | Traversable:
    """Where the papers' CSVs are read: ``reference_dir``, else ``$RA_REFERENCE_DIR``, else the package's."""
    chosen = reference_dir or os.environ.get(REFERENCE_ENV)
    return Path(chosen) if chosen else resources.files(REFERENCE_PACKAGE) / "reference"


def load_reference(name: str, reference_dir: str | Path | None = None) -> pd.DataFrame | None:
    """The paper's numbers in ``name``; None, with a :class:`MissingReferenceWarning` naming the file
    (``make tables`` prints it as one line), where it is not there."""
    path = reference_folder(reference_dir) / name
    if not path.is_file():
        overridden = reference_dir or os.environ.get(REFERENCE_ENV)
        fix = (
            f"--reference or {REFERENCE_ENV} points there; leave both unset for the package's numbers"
            if overridden
            else "the package's copy is missing; reinstall recurrent-attention"
        )
        warnings.warn(
            f"no paper reference {path}: the paper columns of its tables stay empty ({fix})",
            MissingReferenceWarning,
            stacklevel=2,
        )
        return None
    return pd.read_csv(io.StringIO(path.read_text(encoding="utf-8")))
