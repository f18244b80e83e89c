"""The Table 4 layout: accuracy mean ± std per dataset beside the paper's, overrides noted."""

from __future__ import annotations

from pathlib import Path

from recurrent_attention.results.collect import load_runs
from recurrent_attention.results.layouts import tsc
from tests.helpers.run_records import summary


def _run(root: Path, dataset: str, seed: int, acc: float, extra: list[str], wall: float = 10.0) -> None:
    fields = {
        "task": f"tsc/{dataset.lower()}",
        "family": "tsc",
        "dataset": dataset,
        "setting": {"head": "flatten"},
    }
    summary(root / f"{dataset}{seed}", seed, {"acc": acc}, extra=extra, wall_time_s=wall, **fields)


def test_table_layout_mean_std_beside_the_paper(tmp_path: Path) -> None:
    (tmp_path / "aaren_tsc.csv").write_text(
        "dataset,model,mean,std,bold\nJapaneseVowels,Aaren,96.65,0.75,True\nArabicDigits,Aaren,98.68,0.20,True\n"
    )
    runs = tmp_path / "runs"
    for seed, acc in zip((1, 2, 3), (90.0, 92.0, 97.0), strict=True):
        _run(
            runs, "JapaneseVowels", seed, acc, ["task.compat=default", "task.max_epochs=15"], wall=10.0 * seed
        )
    _run(runs, "SpokenArabicDigits", 1, 50.0, [])

    (table,) = tsc.build(load_runs([runs]), tmp_path)
    rows = table.frame.set_index("dataset")
    # mean 93, sample std sqrt(((-3)^2 + (-1)^2 + 4^2) / 2) = sqrt(13) = 3.6056
    assert rows.loc["JapaneseVowels", "acc % (ours)"] == "93.00 ± 3.61"
    assert rows.loc["JapaneseVowels", "acc % (paper)"] == "96.65 ± 0.75"
    assert rows.loc["SpokenArabicDigits", "acc % (ours)"] == "50.00"
    assert rows.loc["SpokenArabicDigits", "acc % (paper)"] == "98.68 ± 0.20"
    assert rows.loc["SpokenArabicDigits", "missing seeds"] == "2, 3"
    assert rows.loc["JapaneseVowels", "wall s/run"] == "20"
    assert table.name == "aaren_tsc_cpu_default"
    overrides = [n for n in table.notes if "overrides" in n]
    assert overrides == ["JapaneseVowels overrides: task.max_epochs=15"]
