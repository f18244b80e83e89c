"""The table of D4RL's recipe made here: its ``data mean return`` is the mean episode return of the very
file a run trained on, carried there by the run's summary (no data file is read to build the table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recurrent_attention.results.collect import load_runs
from recurrent_attention.results.commits import commit_problems
from recurrent_attention.results.layouts.rl import build
from recurrent_attention.results.summary import write_summary
from tests.helpers.d4rl_files import hopper_score, mean_episode_return, write_tiny_d4rl
from tests.helpers.run_records import aaren_rl_reference


@pytest.mark.slow
def test_data_mean_return_comes_from_the_trained_file_through_the_summary(
    train_runner, tmp_path: Path
) -> None:
    data = tmp_path / "hopper_medium-sac.hdf5"
    write_tiny_d4rl(data)
    expected = mean_episode_return(data)
    out = tmp_path / "out"
    train_runner(
        [
            "model=aaren",
            "task=rl/hopper_medium_sac",
            "preset=smoke",
            f"task.datamodule.path={data}",
            "task.eval_modes=[window]",
            "task.eval_episodes=1",
            "task.eval_envs=1",
            "task.max_episode_steps=5",
        ],
        out,
    )
    data.unlink()  # the table is built from the summary alone

    tables = {t.name: t for t in build(load_runs([out]), tmp_path / "no_reference")}
    table = tables["rl_sac_smoke_default"]
    (row,) = table.frame.to_dict("records")
    assert row["task"] == "rl/hopper_medium_sac" and row["dataset"] == data.name and row["model"] == "aaren"
    assert row["data mean return"] == pytest.approx(expected, abs=0.05)  # the table shows one decimal
    assert row["data mean score"] == pytest.approx(hopper_score(expected), abs=0.05)
    assert row["score_window (ours)"] != "" and row["score_stream (ours)"] == ""  # a mode not played
    assert table.runs is not None and len(table.runs) == 1  # what `make results` checks the commit of
    # a preset the experiment does not run: the sweep that makes this table, by hand
    assert table.notes[-1].endswith(
        "python train.py -m task=rl/hopper_medium_sac model=transformer,aaren seed=1,2,3 "
        "preset=smoke task.compat=default"
    )


def test_recipe_table_rows_notes_and_mixed_commits(tmp_path: Path) -> None:
    """Every recipe dataset in one table, D4RL's and the Aaren paper's numbers only in notes marked as
    different data, `make results`'s commit check sees runs of two commits, and another protocol
    gets a table of its own."""
    for i, (dataset, model, compat) in enumerate(
        [
            ("hopper_medium_sac", "aaren", "reference"),
            ("hopper_medium_replay_sac", "transformer", "reference"),
            ("hopper_medium_sac", "aaren", "default"),
        ]
    ):
        write_summary(
            tmp_path / "runs" / str(i),
            {
                "task": f"rl/{dataset}",
                "family": "rl",
                "dataset": f"{dataset.removesuffix('_sac')}-sac.hdf5",
                "model": model,
                "seed": 1,
                "preset": "cpu",
                "compat": compat,
                "setting": {"target_return": 3600, "data_path": f"data/rl/{dataset}.hdf5"},
                "metrics": {"score_best_periodic": 50.0, "score_window": 40.0, "score_stream": 30.0},
                "data_mean_return": 1000.0 + 100 * i,
                "data_mean_score": 30.0 + i,
                "wall_time_s": 5.0,
                "git_commit": f"commit{i}",
                "overrides": [],
            },
        )
    reference = aaren_rl_reference(tmp_path / "ref")

    tables = {t.name: t for t in build(load_runs([tmp_path / "runs"]), reference)}
    assert sorted(tables) == ["rl_sac_cpu_default", "rl_sac_cpu_reference"]
    table = tables["rl_sac_cpu_reference"]
    assert table.frame["task"].tolist() == ["rl/hopper_medium_replay_sac", "rl/hopper_medium_sac"]
    assert not any(c.endswith("(paper)") for c in table.frame)
    assert table.frame["score_best_periodic (ours)"].tolist() == ["50.0", "50.0"]
    assert table.frame["data mean return"].tolist() == [1100.0, 1000.0]
    assert table.frame["data mean score"].tolist() == [31.0, 30.0]
    medium = next(n for n in table.notes if n.startswith("rl/hopper_medium_sac, DIFFERENT DATA"))
    assert "67.6 ± 1.0" in medium and "Aaren 80.86 ± 4.77" in medium
    replay = next(n for n in table.notes if n.startswith("rl/hopper_medium_replay_sac, DIFFERENT DATA"))
    assert "82.7 ± 7.0" in replay
    # the medium-replay gap's diagnosis is pointed to where medium-replay is a row, and only there
    assert any(n.startswith("rl/hopper_medium_replay_sac, Aaren below") for n in table.notes)
    assert not any("Aaren below" in n for n in tables["rl_sac_cpu_default"].notes)
    assert table.notes[-1].endswith(
        "then make rl-sac (experiment=aaren/rl_hopper_sac: its cpu budget, docs/rl.md)"
    )
    assert any("runs from 2 commits" in p for p in commit_problems(table.runs))
    # `make rl-sac` runs the reference protocol only: the other one's sweep is spelled out
    assert (
        tables["rl_sac_cpu_default"]
        .notes[-1]
        .endswith(
            "python train.py -m task=rl/hopper_medium_sac model=transformer,aaren seed=1,2,3 "
            "preset=cpu task.compat=default"
        )
    )
