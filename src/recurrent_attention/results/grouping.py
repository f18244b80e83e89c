"""One table row per config: the seeds of one config and nothing else share a row.

Every layout goes through :func:`config_rows`, so the rule "two runs that differ in anything but the
seed never share a row" lives here only. A config is what was run, its values as resolved: the
``config_key`` s of one description made at different commits are one (``collect.merge_resolved``),
since the commit alone is no difference in what was run. A layout names the columns it shows
(``keys`` + model); where two configs would show the same keys, :func:`config_rows` labels each row
with what tells them apart (the differing overrides), so two configs never look like one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from recurrent_attention.results.record_keys import show

COUNTED = ("ok", "failed")  # statuses that are runs of a table (duplicates and superseded are not)


def mean_std(values: Sequence[float]) -> tuple[float, float | None, int]:
    """Mean, sample standard deviation (ddof=1; None for one run, which has no spread) and count."""
    arr = np.asarray(values, dtype=float)
    std = float(arr.std(ddof=1)) if len(arr) > 1 else None
    return float(arr.mean()), std, len(arr)


def seed_ranges(seeds: Iterable[int]) -> str:
    """``1–5``, ``1–3, 5``: consecutive seeds as ranges (three or more), the rest listed."""
    ordered = sorted({int(s) for s in seeds})
    parts, i = [], 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ordered[i]}–{ordered[j]}")
        else:
            parts.extend(str(s) for s in ordered[i : j + 1])
        i = j + 1
    return ", ".join(parts)


def table_seeds(runs: pd.DataFrame) -> list[int]:
    """Every seed run (finished or failed) for any row of a table: what each row is expected to have."""
    counted = runs[runs["status"].isin(COUNTED)]
    return sorted({int(s) for s in counted["seed"].dropna()})


def _short_id(config_key: str) -> str:
    return "legacy summary (no config_id)" if config_key.startswith("legacy-") else f"config {config_key[:8]}"


def _labels(descriptions: list[dict[str, Any]], config_keys: list[str]) -> list[str]:
    """For configs that show the same columns: the overrides that differ between them, as typed
    (``task.lr=0.5``; a config that set none of them is ``as configured``: naming each key it left
    alone told nothing the other labels do not), each compared as resolved (``identity.describe``).

    Configs that differ in no recorded value (one commit, two ``config_id`` s: see
    ``collect.merge_resolved``) are named by their config ids.
    """
    names = sorted({k for d in descriptions for k in d})
    absent = object()
    differing = [
        n for n in names if len({json.dumps(d.get(n, absent), default=id) for d in descriptions}) > 1
    ]
    labels = []
    for description, key in zip(descriptions, config_keys, strict=True):
        words = [f"{n}={show(description[n])}" for n in differing if n in description]
        if differing and not words:
            words.append("as configured")
        labels.append(", ".join(words) if words else _short_id(key))
    return labels


def own_data(record: pd.Series | dict) -> bool:
    """True for a run on own files (``summary.json``'s ``own_data``; records from before it have none)."""
    value = record.get("own_data")
    return value is not None and not pd.isna(value) and bool(value)


def config_rows(
    runs: pd.DataFrame,
    keys: Sequence[str],
    metrics: Sequence[str],
    means: Sequence[str] = (),
) -> pd.DataFrame:
    """One row per config with a finished run: ``keys`` + model, then per metric its mean, std and n.

    Also: ``n`` (finished runs averaged), ``seeds``, ``failed`` and ``missing`` (seeds that other rows
    of the table have but this one does not), ``duplicates`` (records counted once), ``label``
    (what tells the config apart from others with the same keys; "" when none shares them), the mean
    ``wall_time_s`` and the mean of each column in ``means``.
    """
    expected = set(table_seeds(runs))
    failed = runs[runs["status"] == "failed"]
    duplicates = runs[runs["status"] == "duplicate"]
    rows = []
    for config_key, frame in runs[runs["status"] == "ok"].groupby("config_key", sort=False):
        first = frame.iloc[0]
        row: dict[str, Any] = {k: first.get(k) for k in [*keys, "model"]}
        for metric in metrics:
            column = f"metric.{metric}"
            values = frame[column].dropna() if column in frame else []
            if len(values):
                row[f"{metric}_mean"], row[f"{metric}_std"], row[f"{metric}_n"] = mean_std(values)
        seeds = {int(s) for s in frame["seed"]}
        failed_seeds = {int(s) for s in failed.loc[failed["config_key"] == config_key, "seed"]} - seeds
        row.update(
            own_data=own_data(first),
            config_key=config_key,
            config=first["config"],
            n=len(frame),
            seeds=sorted(seeds),
            failed=sorted(failed_seeds),
            missing=sorted(expected - seeds - failed_seeds),
            duplicates=int((duplicates["config_key"] == config_key).sum()),
            wall_time_s=float(frame["wall_time_s"].mean()) if "wall_time_s" in frame else np.nan,
        )
        row.update({m: float(frame[m].mean()) for m in means if m in frame})
        rows.append(row)
    stats = pd.DataFrame(rows)
    if stats.empty:
        return stats
    shown = [*keys, "model"]
    stats["label"] = ""
    for _, same in stats.groupby([stats[k].astype(str) for k in shown], sort=False):
        if len(same) > 1:
            descriptions = [json.loads(c) for c in same["config"]]
            stats.loc[same.index, "label"] = _labels(descriptions, list(same["config_key"]))
    return stats.sort_values([*shown, "label"], kind="stable", na_position="last").reset_index(drop=True)
