"""CRT Tables 2–5 and 9–12: test perplexity per segment length, Transformer vs Transformer-XL vs CRT."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from recurrent_attention.results.layouts import family_runs
from recurrent_attention.results.tables import (
    Table,
    compare,
    load_reference,
    override_notes,
    paper_number,
    provenance,
)

# Our source names -> the paper's dataset labels.
PAPER_DATASETS = {"ptb": "Word PTB", "wikitext103": "WikiText-103"}
# Our model names -> (paper model, recurrent cell); crt is the NCGRU CRT of Tables 2–5.
PAPER_MODELS = {
    "transformer": ("Transformer", None),
    "transformer_xl": ("Transformer-XL", None),
    "crt": ("CRT", "NCGRU"),
    "crt_gru": ("CRT", "GRU"),
}
MODEL_ORDER = list(PAPER_MODELS)
# experiment=crt/ptb_ablation records CRT's switches in the setting; those runs make Table 8
# (lm_ablation.py), not these tables.
ABLATION_KEYS = ["setting.memory_token", "setting.recurrent_positions", "setting.reset_positions"]
PAPER_TABLES = {
    ("ptb", 3): "2 and 9",
    ("ptb", 16): "3 and 10",
    ("wikitext103", 3): "4 and 11",
    ("wikitext103", 16): "5 and 12",
}

# task.compat -> which models a table's rows are (docs/lm.md, "Two readings"); a reference table's
# name ends in _reference, so the two readings never share a row.
READINGS = {
    "default": "models as read here (task.compat=default): transformer = sinusoidal absolute positions "
    "added to the input, no memory; GRU = nn.GRU; CRT's positional RNN a GRU.",
    "reference": "models as the CRT paper writes them (task.compat=reference): transformer = "
    "Transformer-XL's relative attention with no memory; GRU = its equation (4); CRT's positional "
    "RNN of the memory RNN's type (NCGRU in crt, equation (4)'s GRU in crt_gru).",
}


def reading_suffix(compat: str) -> str:
    """``''`` for the default reading (the committed tables' names), ``_<compat>`` otherwise."""
    return "" if compat == "default" else f"_{compat}"


def reading_title(compat: str) -> str:
    """What a table's title adds to say its models are the paper's (nothing for the default)."""
    return "" if compat == "default" else f", CRT's models: task.compat={compat}"


def is_ablation(runs: pd.DataFrame) -> pd.Series:
    """True for the runs of CRT's ablation (they carry its switches in their setting)."""
    key = ABLATION_KEYS[0]
    return runs[key].notna() if key in runs else pd.Series(False, index=runs.index)


def _memory(model: str, seg_len: int) -> str:
    """The paper's 'memory / segment length' column."""
    return {"transformer": f"0 / {seg_len}", "transformer_xl": f"{seg_len} / {seg_len}"}.get(
        model, f"1 / {seg_len}"
    )


def _paper_lookup(
    reference: pd.DataFrame | None, dataset: str
) -> Callable[[dict, str], tuple[float, None] | None]:
    """(row, metric) -> (paper perplexity, None: one run, no std); None where the paper has no such row."""

    def lookup(row: dict, metric: str) -> tuple[float, None] | None:
        model, rnn = PAPER_MODELS.get(row["model"], (row["model"], None))
        where = {
            "dataset": dataset,
            "layers": row["setting.n_layers"],
            "seg_len": row["setting.seg_len"],
            "model": model,
            "rnn": rnn,
        }
        return paper_number(reference, where, "ppl")

    return lookup


def build(runs: pd.DataFrame, reference_dir: Path | None = None) -> list[Table]:
    runs = family_runs(runs, "lm")
    runs = runs[~is_ablation(runs)]
    if runs.empty:
        return []
    reference = load_reference("crt_lm.csv", reference_dir)

    tables = []
    # A failure with no finished seed records no depth: it is in no table (make_tables lists it).
    groups = runs.groupby(["dataset", "setting.n_layers", "preset", "compat"])
    for (dataset, layers, preset, compat), part in groups:
        lookup = _paper_lookup(reference, PAPER_DATASETS.get(dataset, dataset))
        frame, run_notes = compare(
            part, ["setting.n_layers", "setting.seg_len"], ["ppl"], reference, lookup, digits=2
        )
        frame["order"] = frame["model"].map({m: i for i, m in enumerate(MODEL_ORDER)})
        frame = frame.sort_values(["setting.seg_len", "order"], ascending=[False, True], kind="stable")
        frame = frame.drop(columns="order")
        frame.insert(
            2,
            "memory / seg",
            [_memory(m, int(s)) for m, s in zip(frame["model"], frame["setting.seg_len"], strict=True)],
        )
        frame = frame.drop(columns="setting.n_layers").rename(columns={"setting.seg_len": "seg_len"})
        label = PAPER_DATASETS.get(dataset, dataset)
        tables.append(
            Table(
                f"crt_lm_{dataset}_{int(layers)}layer_{preset}{reading_suffix(compat)}",
                f"{label}, {int(layers)} layers: test perplexity ({preset} preset{reading_title(compat)})",
                frame.reset_index(drop=True),
                [
                    "perplexity = exp(mean token NLL) over the whole test split, segment after segment "
                    "with the state carried (Transformer: none); mean ± sample std over seeds.",
                    f"paper: CRT Tables {PAPER_TABLES.get((dataset, int(layers)), '2–5, 9–12')} "
                    "(crt = CRT with NCGRU, crt_gru = CRT with GRU; one run each, no std).",
                    READINGS.get(compat, f"task.compat={compat}"),
                    *run_notes,
                    *provenance(part),
                    *override_notes(part, by="dataset", hide=("model.n_layers", "task.seg_len")),
                    "sizes and schedule: docs/lm.md; "
                    "command: python train.py -m experiment=crt/<dataset>_<L>layer[_cpu]",
                ],
                part,
            )
        )
    return tables
