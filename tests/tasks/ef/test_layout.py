"""The Table 2 layout: our mean ± std beside the paper's numbers, one row per dataset and model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from recurrent_attention.results.layouts.ef import build


def test_table_matches_paper_rows(tmp_path: Path) -> None:
    pd.DataFrame(
        [
            {"dataset": "MIMIC", "metric": "NLL", "model": "Aaren", "mean": 1.21, "std": 0.06, "bold": True},
            {"dataset": "MIMIC", "metric": "Acc", "model": "Aaren", "mean": 84.53, "std": 0.66, "bold": True},
        ]
    ).to_csv(tmp_path / "aaren_ef.csv", index=False)
    runs = pd.DataFrame(
        [
            {
                "family": "ef",
                "dataset": "thp_mimic",
                "setting.format": "thp",
                "model": "aaren",
                "seed": s,
                "preset": "paper",
                "compat": "default",
                "metric.nll": nll,
                "metric.nll_meta_tpp": nll + 0.5,
                "metric.rmse": 0.8,
                "metric.acc": acc,
                "wall_time_s": 10.0,
                "epochs": 30,
            }
            for s, nll, acc in [(1, 1.0, 80.0), (2, 2.0, 90.0)]
        ]
        + [
            {
                "family": "tsf",
                "dataset": "ETTh1",
                "model": "aaren",
                "seed": 1,
                "preset": "paper",
                "compat": "default",
            }
        ]
    )
    (table,) = build(runs, tmp_path)
    row = table.frame.iloc[0]
    assert row["paper dataset"] == "MIMIC" and row["data"] == "thp_mimic" and row["format"] == "thp"
    # The paper's NLL is Meta TPP's: it sits beside our Meta TPP NLL, not beside our per-event NLL.
    assert row["nll per predicted event (ours)"] == "1.500 ± 0.707" and "nll (paper)" not in row
    assert row["nll Meta TPP (ours)"] == "2.000 ± 0.707" and row["nll Meta TPP (paper)"] == "1.21 ± 0.06"
    assert row["acc % (ours)"] == "85.000 ± 7.071" and row["acc % (paper)"] == "84.53 ± 0.66"
    assert row["rmse (paper)"] == "" and row["seeds"] == 2 and row["epochs"] == 30
    assert any("THP pickles" in note for note in table.notes)
