"""The Table 2 layout: our mean ± std beside the paper's numbers, one row per dataset and model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR
from recurrent_attention.results.collect import load_runs
from recurrent_attention.results.layouts.ef import PAPER_NAMES, build
from tests.helpers.run_records import summary

MIMIC = {
    "task": "ef/mimic",
    "family": "ef",
    "dataset": "thp_mimic",
    "setting": {"format": "thp"},
    "preset": "paper",
    "epochs": 30,
}


def test_table_matches_paper_rows_and_states_the_seeds_run(tmp_path: Path) -> None:
    pd.DataFrame(
        [
            {"dataset": "MIMIC", "metric": "NLL", "model": "Aaren", "mean": 1.21, "std": 0.06, "bold": True},
            {"dataset": "MIMIC", "metric": "Acc", "model": "Aaren", "mean": 84.53, "std": 0.66, "bold": True},
        ]
    ).to_csv(tmp_path / "aaren_ef.csv", index=False)
    runs = tmp_path / "runs"
    for seed, nll, acc in [(1, 1.0, 80.0), (2, 2.0, 90.0)]:
        metrics = {"nll": nll, "nll_meta_tpp": nll + 0.5, "rmse": 0.8, "acc": acc}
        summary(runs / f"mimic{seed}", seed, metrics, extra=["task.max_epochs=30"], **MIMIC)
    summary(runs / "tsf", 1, {"mse": 0.5, "mae": 0.5}, preset="paper")

    (table,) = build(load_runs([runs]), tmp_path)
    (row,) = table.frame.to_dict("records")
    assert row["paper dataset"] == "MIMIC" and row["data"] == "thp_mimic" and row["format"] == "thp"
    # The paper's NLL is Meta TPP's: it sits beside our Meta TPP NLL, not beside our per-event NLL.
    assert row["nll per predicted event (ours)"] == "1.500 ± 0.707" and "nll (paper)" not in row
    assert row["nll Meta TPP (ours)"] == "2.000 ± 0.707" and row["nll Meta TPP (paper)"] == "1.21 ± 0.06"
    assert row["acc % (ours)"] == "85.000 ± 7.071" and row["acc % (paper)"] == "84.53 ± 0.66"
    assert row["rmse (paper)"] == "" and row["epochs"] == 30
    assert any("THP pickles" in note for note in table.notes)
    # the footer names the seeds these rows have (two), not the paper's five
    (command,) = [n for n in table.notes if n.startswith("command:")]
    assert "seed=1,2 " in command and "seeds 1, 2 in every row." in table.notes
    assert row["n"] == 2 and row["seeds"] == "1, 2"
    assert "thp_mimic overrides: task.max_epochs=30" in table.notes


def test_every_ef_task_is_set_beside_its_paper_dataset() -> None:
    """Each dataset a task config reads maps to one of the paper's EF datasets (Aaren Table 2), so
    its rows get the paper's columns; an unmapped or mangled name would leave them empty."""
    paper = {"MIMIC", "Wiki", "Reddit", "Mooc", "StackOverflow", "Sin", "Uber", "Taxi"}
    configs = sorted((CONFIG_DIR / "task" / "ef").glob("[!_]*.yaml"))
    datasets = {OmegaConf.load(path).task.dataset for path in configs}
    assert len(datasets) == len(configs) == 11
    assert {
        dataset: PAPER_NAMES.get(dataset) for dataset in datasets if PAPER_NAMES.get(dataset) not in paper
    } == {}
