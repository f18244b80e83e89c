"""Gather every run record (``summary.json``, ``failed.json``) under some folders into one frame.

One row per record found, with a ``status`` that says how tables must treat it:

- ``ok``: a finished run whose test metrics are all finite numbers;
- ``failed``: a ``failed.json``, or a summary with a NaN/inf (or non-numeric) metric, which is an
  error, never a number in a table, or of a model that took no optimiser step (``untrained``);
  ``error`` says what went wrong;
- ``duplicate``: the same run (same ``run_key``) found again, e.g. in ``outputs/`` and in
  ``results/runs/``, or typed with another spelling; it counts once, in the first place found;
- ``superseded``: a failure of a run that also finished (a later attempt succeeded);
- ``no data``: a failure before any data was read (``data_read: false``: the data was not found),
  which is no run of that data's row.

``config_key`` groups seeds of one config (one key for the ``config_id`` s of one description made
at different commits: :func:`merge_resolved`) and ``config`` (JSON) describes it (see ``identity``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from recurrent_attention.results.record_keys import config_key, describe, run_key
from recurrent_attention.results.summary import STEPS_KEY
from recurrent_attention.runs.record import FAILED_NAME, SUMMARY_NAME

# Columns every frame has, whatever its records hold (layouts select and group on them).
COLUMNS = ("task", "family", "dataset", "model", "seed", "preset", "compat", "git_commit", "status", "path")
COLUMNS += ("config_key", "run_key", "config", "error", "duplicate_of")


class RunRecordError(ValueError):
    """A run record that cannot be read; the message names the file and the fix."""


def _flatten(record: Mapping[str, Any]) -> dict[str, Any]:
    row = {k: v for k, v in record.items() if not isinstance(v, (dict, list))}
    row.update({f"setting.{k}": v for k, v in (record.get("setting") or {}).items()})
    row.update({f"metric.{k}": v for k, v in (record.get("metrics") or {}).items()})
    return row


def non_finite_metrics(metrics: Mapping[str, Any]) -> list[str]:
    """``name=value`` for each metric that is not a finite number."""
    bad = []
    for name, value in metrics.items():
        finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not finite:
            bad.append(f"{name}={value}")
    return bad


def untrained(record: Mapping[str, Any]) -> str | None:
    """Why a summary holds a randomly initialised model's metrics, or None when it was trained.

    A record says its optimiser steps (``STEPS_KEY``); one without that count is untrained when it
    ran no epoch and tested no checkpoint (a ``trainer.max_epochs=0`` run's record; such a run is
    refused up front).
    """
    steps = record.get(STEPS_KEY)
    if steps == 0 or (steps is None and record.get("epochs") == 0 and record.get("tested_checkpoint") == ""):
        return "untrained: the run took no optimiser step, its metrics are a random initialisation's"
    return None


def _read(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise RunRecordError(f"{path}: unreadable run record ({err}); delete it or re-run that job") from err
    if not isinstance(record, dict):
        raise RunRecordError(f"{path}: a run record must be a JSON object; delete it or re-run that job")
    return record


def _row(path: Path) -> dict[str, Any]:
    record = _read(path)
    if path.name == FAILED_NAME:
        error = str(record.get("error") or "failed (no error recorded)")
        status = "no data" if record.get("data_read") is False else "failed"
        row = {**_flatten({k: v for k, v in record.items() if k != "traceback"}), "status": status}
    else:
        bad = non_finite_metrics(record.get("metrics") or {})
        error = f"non-finite test metric: {', '.join(bad)}" if bad else untrained(record)
        row = _flatten({**record, "metrics": {} if error else record.get("metrics")})
        row["status"] = "failed" if error else "ok"
    row.update(
        error=error,
        path=str(path),
        config_key=config_key(record),
        run_key=run_key(record, str(path)),
        config=json.dumps(describe(record), sort_keys=True),
    )
    return row


def mark_repeats(frame: pd.DataFrame, same_run: pd.Series) -> pd.DataFrame:
    """Keep the first finished record of each run (records with one ``same_run`` value); later ones
    are duplicates, its failures superseded. Records marked before are left as they are."""
    for _, same in frame.groupby(same_run, sort=False):
        finished = same.index[same["status"] == "ok"]
        failed = same.index[same["status"].isin(["failed", "no data"])]
        if not len(finished) and not len(failed):
            continue
        kept, repeats = (finished[0], finished[1:]) if len(finished) else (failed[0], failed[1:])
        if len(finished):
            frame.loc[failed, "status"] = "superseded"
        frame.loc[repeats, "status"] = "duplicate"
        frame.loc[repeats, "duplicate_of"] = frame.at[kept, "path"]
    return frame


def _fill_from_finished(frame: pd.DataFrame) -> pd.DataFrame:
    """A ``failed.json`` records less than a summary: take its config's setting and description from a
    finished seed of the same config, so the failure lands in that config's row."""
    finished = frame[frame["status"] == "ok"].drop_duplicates("config_key").set_index("config_key")
    from_failed = frame["path"].str.endswith(FAILED_NAME) & frame["config_key"].isin(finished.index)
    for column in [c for c in frame if c.startswith("setting.")] + ["config"]:
        known = frame.loc[from_failed, "config_key"].map(finished[column])
        keep = frame.loc[from_failed, column].notna() & (column != "config")
        frame.loc[from_failed, column] = frame.loc[from_failed, column].where(keep, known)
    return frame


def merge_resolved(frame: pd.DataFrame) -> pd.DataFrame:
    """Give the config keys of one description (``identity.describe``: the values as resolved)
    made at different commits the first one's key: the commit alone (a new identity scheme, a
    config file that gained a key) is no difference in what was run, so it splits no row.

    Keys of one description that share a commit stay apart: one commit and the same recorded values
    under two ``config_id`` s means something the record does not hold differs (an own file's
    contents). A seed found under two merged keys is one run made twice: the first finished record
    counts, the others are duplicates, as for one run found twice.
    """
    keyed = frame[frame["config_key"].notna()]
    commits = {key: set(part["git_commit"].astype(str)) for key, part in keyed.groupby("config_key")}
    keys_of: dict[str, list[str]] = {}
    for key, config in zip(keyed["config_key"], keyed["config"], strict=True):
        if key not in keys_of.setdefault(config, []):
            keys_of[config].append(key)
    merged = {}
    for keys in keys_of.values():
        seen: set[str] = set()
        for key in keys:
            shared, seen = seen & commits[key], seen | commits[key]
            if shared:
                break
        else:
            merged.update({key: keys[0] for key in keys[1:]})
    if not merged:
        return frame
    moved = frame["config_key"].isin([*merged, *merged.values()])
    frame["config_key"] = frame["config_key"].replace(merged)
    same_run = frame["config_key"].astype(str) + "-seed" + frame["seed"].astype(str)
    return mark_repeats(frame, frame["run_key"].where(~moved, same_run))


def load_runs(roots: Iterable[str | Path]) -> pd.DataFrame:
    """Every run record below ``roots`` (searched in order; the first copy of a run is the one kept)."""
    paths = []
    for root in roots:
        found = [*Path(root).rglob(SUMMARY_NAME), *Path(root).rglob(FAILED_NAME)]
        paths += sorted(found)
    frame = pd.DataFrame([_row(p) for p in paths])
    frame = frame.reindex(columns=[*frame.columns, *(c for c in COLUMNS if c not in frame)])
    if not paths:
        return frame
    frame["duplicate_of"] = None
    return merge_resolved(_fill_from_finished(mark_repeats(frame, frame["run_key"])))


def duplicate_lines(runs: pd.DataFrame) -> list[str]:
    """One line per duplicate record: which file was skipped for which."""
    dups = runs[runs["status"] == "duplicate"]
    return [
        f"{p} (same run as {k}, counted once)"
        for p, k in zip(dups["path"], dups["duplicate_of"], strict=True)
    ]
