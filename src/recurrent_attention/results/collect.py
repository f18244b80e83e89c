"""Gather every ``summary.json`` under some folders into one flat table (one row per run)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from recurrent_attention.results.summary import SUMMARY_NAME


def _flatten(record: dict) -> dict:
    row = {k: v for k, v in record.items() if not isinstance(v, (dict, list))}
    row.update({f"setting.{k}": v for k, v in (record.get("setting") or {}).items()})
    row.update({f"metric.{k}": v for k, v in (record.get("metrics") or {}).items()})
    return row


def load_summaries(roots: Iterable[str | Path]) -> pd.DataFrame:
    """All summaries below ``roots``; a summary found twice (same run folder name) counts once."""
    rows, seen = [], set()
    for root in roots:
        for path in sorted(Path(root).rglob(SUMMARY_NAME)):
            record = json.loads(path.read_text())
            key = (
                record.get("task"),
                record.get("model"),
                record.get("preset"),
                record.get("seed"),
                json.dumps(record.get("setting"), sort_keys=True),
                record.get("compat"),
                tuple(record.get("overrides") or []),
            )
            if key in seen:
                continue
            seen.add(key)
            rows.append({**_flatten(record), "path": str(path)})
    return pd.DataFrame(rows)
