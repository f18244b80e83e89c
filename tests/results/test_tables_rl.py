"""RL tables: D4RL runs beside Aaren Table 1, any other data in its own table without paper numbers."""

from __future__ import annotations

from pathlib import Path

from recurrent_attention.results.collect import load_runs
from recurrent_attention.results.layouts.rl import build
from recurrent_attention.results.summary import write_summary
from tests.helpers.run_records import aaren_rl_reference


def fake_run(
    folder: Path,
    dataset: str,
    model: str,
    seed: int,
    score: float,
    data_mean: float,
    data_path: str | None = None,
    compat: str = "default",
) -> None:
    """A summary as train.py writes it; ``data_path`` is the own data file (None: the registry's)."""
    write_summary(
        folder,
        {
            "task": f"rl/{dataset}",
            "family": "rl",
            "dataset": dataset,
            "model": model,
            "seed": seed,
            "preset": "cpu",
            "setting": {"target_return": 3600, "data_path": data_path},
            "compat": compat,
            "metrics": {"score_window": score, "score_stream": score - 1, "return_window": 10 * score}
            | ({"score_best_periodic": score + 5} if compat == "reference" else {}),
            "data_mean_return": data_mean,
            "wall_time_s": 5.0,
            "git_commit": "abc",
            "overrides": [f"task.datamodule.path={data_path}"] if data_path else [],
        },
    )


def test_d4rl_and_own_data_tables(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for seed, score in ((1, 70.0), (2, 80.0)):
        fake_run(runs / f"d4rl/aaren/seed{seed}", "hopper_medium", "aaren", seed, score, 1400.0)
    # a D4RL task name with an own file: its setting names the file, so it is not D4RL
    fake_run(runs / "own/seed1", "hopper_medium", "aaren", 1, 5.0, 50.0, data_path="x.hdf5")
    fake_run(runs / "self/seed1", "hopper_selfcollected", "transformer", 1, 30.0, 142.3)
    # min-DT's protocol (experiment=aaren/rl): the paper stands beside the best periodic score
    fake_run(runs / "ref/seed1", "hopper_medium", "aaren", 1, 60.0, 1400.0, compat="reference")
    reference = aaren_rl_reference(tmp_path / "ref")

    tables = {t.name: t for t in build(load_runs([runs]), reference)}
    assert sorted(tables) == [
        "aaren_rl_cpu_default",
        "aaren_rl_cpu_reference",
        "rl_hopper_medium_cpu",
        "rl_hopper_selfcollected_cpu",
    ]
    (best_of,) = tables["aaren_rl_cpu_reference"].frame.to_dict("records")
    assert best_of["score_best_periodic (ours)"] == "65.0" and best_of["score_window (ours)"] == "60.0"
    assert best_of["score_best_periodic (paper)"] == "80.86 ± 4.77" and "score_window (paper)" not in best_of
    assert any("beside score_best_periodic" in n for n in tables["aaren_rl_cpu_reference"].notes)
    (d4rl,) = tables["aaren_rl_cpu_default"].frame.to_dict("records")
    # mean 75, sample std sqrt((25 + 25) / 1) = 7.07
    assert d4rl["score_window (ours)"] == "75.0 ± 7.1" and d4rl["score_window (paper)"] == "80.86 ± 4.77"
    assert d4rl["score_stream (ours)"] == "74.0 ± 7.1" and "score_stream (paper)" not in d4rl
    (own,) = tables["rl_hopper_selfcollected_cpu"].frame.to_dict("records")
    assert own["data mean return"] == 142.3 and not any(k.endswith("(paper)") for k in own)
    assert "not D4RL" in tables["rl_hopper_selfcollected_cpu"].title
    assert tables["rl_hopper_medium_cpu"].frame["score_window (ours)"].tolist() == ["5.0"]
