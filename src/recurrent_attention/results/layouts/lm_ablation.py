"""CRT Table 8: word PTB perplexity with each of CRT's two parts switched off, beside the paper's.

The runs are ``model=crt`` with ``model.memory_token`` and ``model.recurrent_positions`` set
(experiment=crt/ptb_ablation, which records both in ``setting``), so the four rows are four
configs of one model; the row name is the paper's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recurrent_attention.results.layouts import family_runs
from recurrent_attention.results.layouts.lm import (
    ABLATION_KEYS,
    PAPER_DATASETS,
    READINGS,
    is_ablation,
    reading_suffix,
    reading_title,
)
from recurrent_attention.results.tables import Table, compare, load_reference, paper_number, provenance

# (memory token, recurrent positions) -> CRT Table 8's row, in the paper's order.
PAPER_ROWS = {
    (False, False): "Transformer",
    (True, False): "Transformer + RNN memory",
    (False, True): "Transformer + RNN pos enc",
    (True, True): "CRT (Transformer + RNN memory + RNN pos enc)",
}
KEYS = ["setting.n_layers", "setting.seg_len", *ABLATION_KEYS]


def _row_name(memory_token: bool, recurrent_positions: bool, reset_positions: bool) -> str:
    name = PAPER_ROWS[(bool(memory_token), bool(recurrent_positions))]
    return name if reset_positions or not recurrent_positions else f"{name}, positional state carried"


def _per_seed(part: pd.DataFrame) -> dict[tuple, tuple[str, int]]:
    """Row key -> ('seed: ppl, ...', backbone parameters), so a table shows every seed's number."""
    out = {}
    for key, runs in part.groupby([*KEYS, "model"], sort=True):
        runs = runs.sort_values("seed")
        seeds = ", ".join(f"{int(s)}: {p:.2f}" for s, p in zip(runs["seed"], runs["metric.ppl"], strict=True))
        out[tuple(int(k) if isinstance(k, float) else k for k in key)] = (
            seeds,
            int(runs["backbone_params"].max()),
        )
    return out


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    runs = family_runs(runs, "lm")
    runs = runs[is_ablation(runs)]
    if runs.empty:
        return []
    reference = load_reference("crt_table8_ablation.csv", reference_dir)

    tables = []
    groups = runs.groupby(["dataset", "setting.n_layers", "preset", "compat"])
    for (dataset, layers, preset, compat), part in groups:
        label = PAPER_DATASETS.get(dataset, dataset)

        def lookup(row: dict, metric: str, label: str = label) -> tuple[float, float] | None:
            name = PAPER_ROWS[(bool(row["setting.memory_token"]), bool(row["setting.recurrent_positions"]))]
            where = {
                "dataset": label,
                "layers": row["setting.n_layers"],
                "seg_len": row["setting.seg_len"],
                "model": name,
            }
            return paper_number(reference, where, "ppl")

        frame, run_notes = compare(part, KEYS, ["ppl"], reference, lookup, digits=2)
        seeds = _per_seed(part)
        extra = [seeds[tuple(row)] for row in frame[[*KEYS, "model"]].itertuples(index=False)]
        frame.insert(0, "row", [_row_name(*r) for r in frame[ABLATION_KEYS].itertuples(index=False)])
        frame["order"] = [
            list(PAPER_ROWS).index((bool(m), bool(p))) for m, p in frame[ABLATION_KEYS[:2]].values
        ]
        frame["backbone params"] = [params for _, params in extra]
        frame.insert(frame.columns.get_loc("ppl (ours)") + 1, "ppl per seed", [s for s, _ in extra])
        frame = frame.sort_values(
            ["setting.seg_len", "order", "setting.reset_positions"], ascending=[False, True, False]
        )
        frame = frame.drop(columns=["order", "setting.n_layers"]).rename(
            columns={
                "setting.seg_len": "seg_len",
                "setting.memory_token": "memory token",
                "setting.recurrent_positions": "RNN positions",
                "setting.reset_positions": "reset positions",
            }
        )
        name = (
            "crt_table8_ablation"
            if (dataset, int(layers)) == ("ptb", 3)
            else f"crt_ablation_{dataset}_{int(layers)}layer"
        )
        tables.append(
            Table(
                f"{name}_{preset}{reading_suffix(compat)}",
                f"{label}, {int(layers)} layers: CRT's parts switched off, test perplexity "
                f"({preset} preset{reading_title(compat)})",
                frame.reset_index(drop=True),
                [
                    "four configs of one model (model=crt, equal sizes): memory token = the memory token "
                    "and its RNN; RNN positions = the positional RNN, else the Transformer's sinusoidal "
                    "positions; reset positions = the positional RNN restarts in every segment (a switch of "
                    "this project's: the paper's Table 8 has no such row or column; docs/lm.md).",
                    READINGS.get(compat, f"task.compat={compat}"),
                    "perplexity = exp(mean token NLL) over the whole test split, segment after segment "
                    "with the state carried; mean ± sample std over seeds.",
                    "paper: CRT Table 8 (one run each, no std).",
                    *run_notes,
                    *provenance(part),
                    "sizes and schedule: docs/lm.md; command: python train.py -m experiment=crt/ptb_ablation",
                ],
                part,
            )
        )
    return tables
