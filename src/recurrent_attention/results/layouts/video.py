"""CRT Table 7: mCA on Toyota Smarthome (cross-subject), TimeSformer vs CR-ViT, beside the paper's.

Runs on clips read from a folder (``task.datamodule.path``; the Smarthome release has no registry
checksums to verify it by) are own data: their table is named by the folder and has no paper
numbers; the synthetic motion clips (``task.dataset=synthetic_motion``) are titled as synthetic.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from recurrent_attention.results.layouts import family_runs
from recurrent_attention.results.tables import Table, compare, load_reference, paper_number, provenance

# Our model names -> (paper model, rnn) in crt_smarthome.csv; TimeSformer* is the CRT authors' run.
PAPER_MODELS = {"timesformer": ("TimeSformer", None), "cr_vit": ("CRViT", "GRU")}
PROTOCOL_LABELS = {"cs": "CS", "cv1": "CV1", "cv2": "CV2"}


def _lookup(reference: pd.DataFrame | None) -> Callable[[dict, str], tuple[float, None] | None]:
    """(row, metric) -> (the paper's mCA, None: one run, no std); None where Table 7 has no such row."""
    table7 = None
    if reference is not None:
        table7 = reference[
            (reference["source"] == "Table 7")
            & ~reference["note"].fillna("").str.startswith("first row of the PI-ViT")
        ]

    def lookup(row: dict, metric: str) -> tuple[float, None] | None:
        if metric != "mca" or table7 is None or row["model"] not in PAPER_MODELS:
            return None
        model, rnn = PAPER_MODELS[row["model"]]
        where = {
            "model": model,
            "protocol": PROTOCOL_LABELS.get(row["setting.protocol"], row["setting.protocol"]),
            "rnn": (row.get("setting.rnn") or rnn) if model == "CRViT" else None,
        }
        return paper_number(table7, where, "value")

    return lookup


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    runs = family_runs(runs, "video")
    if runs.empty:
        return []
    reference = load_reference("crt_smarthome.csv", reference_dir)
    tables = []
    for (dataset, protocol, preset), part in runs.groupby(
        ["dataset", "setting.protocol", "preset"], dropna=False
    ):
        lookup = _lookup(reference)
        frame, run_notes = compare(part, ["setting.protocol"], ["mca", "acc"], reference, lookup, digits=1)
        frame = frame.drop(columns=["acc (paper)"]).rename(columns={"setting.protocol": "protocol"})
        frame["order"] = frame["model"].map({m: i for i, m in enumerate(PAPER_MODELS)})
        frame = frame.sort_values("order").drop(columns="order").reset_index(drop=True)
        synthetic = "synthetic_motion" in {dataset, *part.get("task_dataset", pd.Series()).dropna()}
        if synthetic:
            title = f"SYNTHETIC motion clips ({dataset}), {protocol} split rules: test mCA ({preset} preset)"
        elif dataset != "smarthome":
            title = f"Own clips ({dataset}), {protocol} split rules: test mCA ({preset} preset)"
        else:
            title = f"Toyota Smarthome {PROTOCOL_LABELS.get(protocol, protocol)}: test mCA ({preset} preset)"
        notes = [
            "mCA = mean per-class recall over the test clips, top-1 = acc; test = the views of each clip "
            "max-combined (task.test_views); mean ± sample std over seeds.",
            "paper: CRT Table 7 (TimeSformer* 71.5 = the CRT authors' Kinetics-400-initialised run; "
            "CR-ViT with GRU 73.4; Table 13: NCGRU 72.2), Toyota Smarthome cross-subject.",
        ]
        if synthetic:
            notes.insert(
                0,
                "SYNTHETIC data (tasks/video/synthetic.py: the class is a motion over time; balanced "
                "classes, so mCA = top-1): not comparable with the paper's Smarthome numbers.",
            )
        if dataset != "smarthome":
            frame = frame.drop(columns=["mca (paper)"])
            notes.insert(0, f"own data ({dataset}): no paper numbers beside it.")
        tables.append(
            Table(
                f"crt_video_{dataset}_{protocol}_{preset}",
                title,
                frame,
                [*notes, *run_notes, *provenance(part)],
                part,
            )
        )
    return tables
