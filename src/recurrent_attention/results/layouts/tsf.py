"""Aaren Tables 3 and 5: MSE and MAE per dataset and horizon, Transformer vs Aaren."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from recurrent_attention.results.layouts import aaren_paper, protocol_tables, sweep_command
from recurrent_attention.results.tables import Table, compare, override_notes, provenance, shown_runs

# Our dataset names (registry sources) -> the paper's row labels.
PAPER_NAMES = {
    "ETTh1": "ETTh1",
    "ETTh2": "ETTh2",
    "ETTm1": "ETTm1",
    "ETTm2": "ETTm2",
    "exchange_rate": "Exchange",
    "weather": "Weather",
    "electricity": "ECL",
    "traffic": "Traffic",
}


def _paper(reference: pd.DataFrame, row: dict, metric: str) -> tuple[float, float] | None:
    dataset = PAPER_NAMES.get(row["dataset"], row["dataset"])
    return aaren_paper(reference, row, dataset, horizon=row["setting.horizon"], metric=metric.upper())


def _contents(
    part: pd.DataFrame, preset: str, compat: str, reference: pd.DataFrame | None
) -> tuple[pd.DataFrame, list[str]]:
    lookup = partial(_paper, reference)
    frame, run_notes = compare(part, ["dataset", "setting.horizon"], ["mse", "mae"], reference, lookup)
    frame = frame.rename(columns={"setting.horizon": "horizon"})
    overrides = override_notes(part, by="dataset")
    shown = shown_runs(part)["setting.horizon"]  # the rows' horizons, not a failed config's
    horizons = ",".join(str(h) for h in sorted(shown.dropna().astype(int).unique()))
    notes = [
        "MSE/MAE on the standardised scale over every test window (input 96); mean ± sample std over seeds.",
        "paper: Aaren Table 5 (TSLib settings, 5 seeds).",
        *run_notes,
        *overrides,
        *provenance(part),
        sweep_command("tsf", part, preset, compat, f" task.pred_len={horizons}")
        + (" plus the overrides above" if overrides else ""),
    ]
    return frame, notes


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    return protocol_tables(runs, "tsf", "Time-series forecasting", "aaren_tsf.csv", reference_dir, _contents)
