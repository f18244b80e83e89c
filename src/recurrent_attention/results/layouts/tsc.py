"""Aaren Table 4: test accuracy (%) per UEA dataset, Transformer vs Aaren, beside the paper's."""

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

# Our dataset names (registry sources) -> the paper's row labels where they differ.
PAPER_NAMES = {"SpokenArabicDigits": "ArabicDigits", "UWaveGestureLibrary": "UWaveGesture"}
PAPER_MODELS = {"transformer": "Transformer", "aaren": "Aaren"}
PROTOCOL_NOTES = {
    "default": "validation part carved from TRAIN (stratified), normalisation fitted on the training part; "
    "the epoch with the best validation accuracy is tested.",
    "reference": "TSLib @a23cfce710d4: trained on all of TRAIN, each split normalised with its own "
    "statistics, lr 1e-3 for epochs 1-5, 6.25e-5 for 6-10, 1.95e-6 from 11 (docs/tsc.md), "
    "the epoch with the best TEST accuracy (an equal one counts as better) is reported.",
}


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    runs = runs[runs["family"] == "tsc"]
    if runs.empty:
        return []
    reference = load_reference("aaren_tsc.csv", reference_dir)

    def lookup(row: dict, metric: str) -> tuple[float, float] | None:
        if row.get("setting.head", "flatten") != "flatten":
            return None  # the paper used TSLib's flatten head only
        hit = reference[
            (reference["dataset"] == PAPER_NAMES.get(row["dataset"], row["dataset"]))
            & (reference["model"] == PAPER_MODELS.get(row["model"], row["model"]))
        ]
        return (float(hit["mean"].iloc[0]), float(hit["std"].iloc[0])) if len(hit) else None

    keys = ["dataset", "setting.head"] if "setting.head" in runs else ["dataset"]
    tables = []
    for (preset, compat), part in runs.groupby(["preset", "compat"], dropna=False):
        frame, run_notes = compare(part, keys, ["acc"], reference, lookup, digits=2)
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
            f"command: python train.py -m model=transformer,aaren task=tsc/<dataset> seed={seed_arg(part)} "
            f"preset={preset} task.compat={compat}",
        ]
        title = f"Time-series classification ({preset} preset, {compat} protocol)"
        tables.append(Table(f"aaren_tsc_{preset}_{compat}", title, frame, notes, part))
    return tables
