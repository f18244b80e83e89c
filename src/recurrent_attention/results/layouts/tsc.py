"""Aaren Table 4: test accuracy (%) per UEA dataset, Transformer vs Aaren, beside the paper's."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pandas as pd

from recurrent_attention.results.layouts import aaren_paper, protocol_tables, sweep_command
from recurrent_attention.results.tables import Table, compare, override_notes, provenance

# Our dataset names (registry sources) -> the paper's row labels where they differ.
PAPER_NAMES = {"SpokenArabicDigits": "ArabicDigits", "UWaveGestureLibrary": "UWaveGesture"}
PROTOCOL_NOTES = {
    "default": "validation part carved from TRAIN (stratified), normalisation fitted on the training part; "
    "the epoch with the best validation accuracy is tested.",
    "reference": "TSLib @a23cfce710d4: trained on all of TRAIN, each split normalised with its own "
    "statistics, lr 1e-3 for epochs 1-5, 6.25e-5 for 6-10, 1.95e-6 from 11 (docs/tsc.md), "
    "the epoch with the best TEST accuracy (an equal one counts as better) is reported.",
}


def _paper(reference: pd.DataFrame, row: dict, metric: str) -> tuple[float, float] | None:
    if row.get("setting.head", "flatten") != "flatten":
        return None  # the paper used TSLib's flatten head only
    return aaren_paper(reference, row, PAPER_NAMES.get(row["dataset"], row["dataset"]))


def _contents(
    part: pd.DataFrame, preset: str, compat: str, reference: pd.DataFrame | None
) -> tuple[pd.DataFrame, list[str]]:
    keys = ["dataset", "setting.head"] if "setting.head" in part else ["dataset"]
    frame, run_notes = compare(part, keys, ["acc"], reference, partial(_paper, reference), digits=2)
    frame = frame.rename(
        columns={"setting.head": "head", "acc (ours)": "acc % (ours)", "acc (paper)": "acc % (paper)"}
    )
    notes = [
        "Test accuracy in %; mean ± sample std over seeds.",
        f"protocol {compat}: {PROTOCOL_NOTES.get(compat, compat)}",
        "paper: Aaren Table 4 (TSLib settings, flatten head, 5 seeds).",
        *run_notes,
        *provenance(part),
        *override_notes(part, by="dataset"),
        sweep_command("tsc", part, preset, compat),
    ]
    return frame, notes


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    return protocol_tables(
        runs, "tsc", "Time-series classification", "aaren_tsc.csv", reference_dir, _contents
    )
