"""One module per task family; each defines ``build(runs, reference_dir) -> list[Table]``.

Modules are discovered by name, so adding a family's tables means adding a module here. The
helpers below are the steps the layouts share (a family's runs, Aaren's one table per preset and
protocol and the sweep that remakes it), so that a layout holds only what is its own: its keys,
metrics, paper lookup and notes.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from recurrent_attention.results.tables import Table, load_reference, paper_number, seed_arg

Builder = Callable[[pd.DataFrame, Path | None], list[Table]]
# Our model names -> the model column of Aaren's reference CSVs.
AAREN_MODELS = {"transformer": "Transformer", "aaren": "Aaren"}
# A table's frame and notes from its runs, preset, protocol and the paper's reference table.
Contents = Callable[[pd.DataFrame, str, str, pd.DataFrame | None], tuple[pd.DataFrame, list[str]]]


def builders() -> dict[str, Builder]:
    """Family name -> its table builder, for every module in this package."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[info.name] = module.build
    return found


def family_runs(runs: pd.DataFrame, family: str) -> pd.DataFrame:
    """The runs of one task family; none from a frame without a ``family`` column (no runs at all)."""
    return runs[runs["family"] == family] if "family" in runs else runs.iloc[:0]


def protocol_tables(
    runs: pd.DataFrame,
    family: str,
    subject: str,
    reference_csv: str,
    reference_dir: Path | None,
    contents: Contents,
) -> list[Table]:
    """Aaren's tables of one family: one per preset and protocol (``compat``), since neither may
    share a row, named ``aaren_<family>_<preset>_<compat>`` and titled ``<subject> (<preset> preset,
    <compat> protocol)``. ``contents(part, preset, compat, reference)`` makes each one's frame and
    notes beside the paper's ``reference_csv`` (None where it is absent)."""
    runs = family_runs(runs, family)
    if runs.empty:
        return []
    reference = load_reference(reference_csv, reference_dir)
    tables = []
    for (preset, compat), part in runs.groupby(["preset", "compat"], dropna=False):
        frame, notes = contents(part, preset, compat, reference)
        title = f"{subject} ({preset} preset, {compat} protocol)"
        tables.append(Table(f"aaren_{family}_{preset}_{compat}", title, frame, notes, part))
    return tables


def aaren_paper(
    reference: pd.DataFrame, row: dict, dataset: str, **where: object
) -> tuple[float, float | None] | None:
    """Aaren's number (mean and std over its seeds) for the paper's ``dataset`` and the row's model,
    in the reference rows that also match ``where``; None where the paper has none."""
    model = AAREN_MODELS.get(row["model"], row["model"])
    return paper_number(reference, {"dataset": dataset, "model": model, **where}, "mean", "std")


def sweep_command(family: str, runs: pd.DataFrame, preset: str, compat: str, settings: str = "") -> str:
    """The note naming the sweep that remakes an Aaren table: both models over the table's seeds,
    with ``settings`` (e.g. ``" task.pred_len=96,192"``) after the seeds."""
    return (
        f"command: python train.py -m model=transformer,aaren task={family}/<dataset> "
        f"seed={seed_arg(runs)}{settings} preset={preset} task.compat={compat}"
    )
