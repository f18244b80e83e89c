"""Aaren Tables 3 and 5: MSE and MAE per dataset and horizon, Transformer vs Aaren."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recurrent_attention.results.tables import (
    Table,
    compare,
    load_reference,
    override_notes,
    provenance,
    seed_arg,
)

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
PAPER_MODELS = {"transformer": "Transformer", "aaren": "Aaren"}


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    runs = runs[runs["family"] == "tsf"]
    if runs.empty:
        return []
    reference = load_reference("aaren_tsf.csv", reference_dir)

    def lookup(row: dict, metric: str) -> tuple[float, float] | None:
        hit = reference[
            (reference["dataset"] == PAPER_NAMES.get(row["dataset"], row["dataset"]))
            & (reference["horizon"] == row["setting.horizon"])
            & (reference["metric"] == metric.upper())
            & (reference["model"] == PAPER_MODELS.get(row["model"], row["model"]))
        ]
        return (float(hit["mean"].iloc[0]), float(hit["std"].iloc[0])) if len(hit) else None

    tables = []
    for (preset, compat), part in runs.groupby(["preset", "compat"], dropna=False):
        frame, run_notes = compare(part, ["dataset", "setting.horizon"], ["mse", "mae"], reference, lookup)
        frame = frame.rename(columns={"setting.horizon": "horizon"})
        overrides = override_notes(part, by="dataset", hide=("task.pred_len",))
        horizons = ",".join(str(h) for h in sorted(part["setting.horizon"].dropna().astype(int).unique()))
        notes = [
            "MSE/MAE on the standardised scale over every test window (input 96); "
            "mean ± sample std over seeds.",
            "paper: Aaren Table 5 (TSLib settings, 5 seeds).",
            *run_notes,
            *overrides,
            *provenance(part),
            f"command: python train.py -m model=transformer,aaren task=tsf/<dataset> seed={seed_arg(part)} "
            f"task.pred_len={horizons} preset={preset} task.compat={compat}"
            + (" plus the overrides above" if overrides else ""),
        ]
        tables.append(
            Table(
                f"aaren_tsf_{preset}_{compat}",
                f"Time-series forecasting ({preset} preset, {compat} protocol)",
                frame,
                notes,
                part,
            )
        )
    return tables
