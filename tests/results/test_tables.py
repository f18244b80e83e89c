"""make_tables on fake summaries gives hand-computed mean ± std beside the paper's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from recurrent_attention.results.collect import load_summaries
from recurrent_attention.results.layouts.tsf import build
from recurrent_attention.results.summary import write_summary


def fake_run(root: Path, model: str, seed: int, mse: float, mae: float) -> None:
    write_summary(
        root / f"{model}{seed}",
        {
            "task": "tsf/etth1",
            "family": "tsf",
            "dataset": "ETTh1",
            "setting": {"horizon": 96},
            "model": model,
            "seed": seed,
            "preset": "cpu",
            "compat": "default",
            "metrics": {"mse": mse, "mae": mae},
            "wall_time_s": 10.0 * seed,
            "device": "CPU",
            "git_commit": "abc",
        },
    )


def test_tsf_table_mean_std_by_hand(tmp_path: Path) -> None:
    for seed, mse in zip((1, 2, 3), (0.40, 0.50, 0.60), strict=True):
        fake_run(tmp_path / "runs", "aaren", seed, mse, 0.5)
    fake_run(tmp_path / "runs", "transformer", 1, 0.45, 0.44)
    reference = tmp_path / "ref"
    reference.mkdir()
    pd.DataFrame(
        [["ETTh1", 96, "MSE", "Aaren", 0.53, 0.04, True], ["ETTh1", 96, "MAE", "Aaren", 0.52, 0.02, True]],
        columns=["dataset", "horizon", "metric", "model", "mean", "std", "bold"],
    ).to_csv(reference / "aaren_tsf.csv", index=False)

    (table,) = build(load_summaries([tmp_path / "runs"]), reference)
    rows = {r["model"]: r for r in table.frame.to_dict("records")}
    # mean 0.5, sample std sqrt(((0.1)^2 + 0 + (0.1)^2) / 2) = 0.1
    assert rows["aaren"]["mse (ours)"] == "0.500 ± 0.100"
    assert rows["aaren"]["mse (paper)"] == "0.53 ± 0.04" and rows["aaren"]["mae (paper)"] == "0.52 ± 0.02"
    assert rows["aaren"]["seeds"] == 3 and rows["aaren"]["wall s/run"] == "20"
    assert rows["transformer"]["mse (ours)"] == "0.450 ± 0.000" and rows["transformer"]["mse (paper)"] == ""
    written = table.write(tmp_path / "out")
    assert "| ETTh1 | 96 | aaren | 0.500 ± 0.100 |" in written[0].read_text()
    assert json.loads(json.dumps(pd.read_csv(written[1]).to_dict("records")))[0]["dataset"] == "ETTh1"
