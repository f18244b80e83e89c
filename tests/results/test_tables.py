"""Tables from run records on disk: one row per config, hand-computed mean ± std, honest counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from recurrent_attention.results.collect import RunRecordError, load_runs
from recurrent_attention.results.layouts.tsf import build
from tests.helpers.run_records import failure, summary


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    folder = tmp_path / "ref"
    folder.mkdir()
    pd.DataFrame(
        [["ETTh1", 96, "MSE", "Aaren", 0.53, 0.04, True], ["ETTh1", 96, "MAE", "Aaren", 0.52, 0.02, True]],
        columns=["dataset", "horizon", "metric", "model", "mean", "std", "bold"],
    ).to_csv(folder / "aaren_tsf.csv", index=False)
    return folder


def rows_of(runs_dir: Path, reference: Path) -> tuple[list[dict], list[str]]:
    (table,) = build(load_runs([runs_dir]), reference)
    return table.frame.to_dict("records"), table.notes


def test_mean_std_by_hand_and_one_seed_alone(tmp_path: Path, reference: Path) -> None:
    runs = tmp_path / "runs"
    for seed, mse in zip((1, 2, 3), (0.40, 0.50, 0.60), strict=True):
        summary(runs / f"aaren{seed}", seed, {"mse": mse, "mae": 0.5}, wall_time_s=10.0 * seed)
    summary(runs / "transformer1", 1, {"mse": 0.45, "mae": 0.44}, model="transformer")

    (table,) = build(load_runs([runs]), reference)
    rows = {r["model"]: r for r in table.frame.to_dict("records")}
    # mean 0.5, sample std sqrt(((0.1)^2 + 0 + (0.1)^2) / 2) = 0.1
    assert rows["aaren"]["mse (ours)"] == "0.500 ± 0.100"
    assert rows["aaren"]["mse (paper)"] == "0.53 ± 0.04" and rows["aaren"]["mae (paper)"] == "0.52 ± 0.02"
    assert rows["aaren"]["n"] == 3 and rows["aaren"]["seeds"] == "1–3" and rows["aaren"]["wall s/run"] == "20"
    # one run has no spread: its value alone, never "± 0.000"
    assert rows["transformer"]["mse (ours)"] == "0.450" and rows["transformer"]["n"] == 1
    assert rows["transformer"]["mse (paper)"] == ""
    # seed 2 and 3 were run for aaren only: the transformer row says they are missing
    assert rows["transformer"]["missing seeds"] == "2, 3" and rows["aaren"]["missing seeds"] == ""
    written = table.write(tmp_path / "out")
    assert "| ETTh1 | 96 | aaren | 0.500 ± 0.100 |" in written[0].read_text()
    assert json.loads(json.dumps(pd.read_csv(written[1]).to_dict("records")))[0]["dataset"] == "ETTh1"


def test_an_overridden_run_gets_its_own_labelled_row(tmp_path: Path, reference: Path) -> None:
    """The bug: a task.lr=0.5 run was averaged into the default row (rows keyed by dataset/model)."""
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5})
    summary(runs / "a2", 2, {"mse": 0.6, "mae": 0.5})
    summary(runs / "lr1", 1, {"mse": 0.9, "mae": 0.7}, extra=["task.lr=0.5"])

    rows, _ = rows_of(runs, reference)
    assert sorted(r["mse (ours)"] for r in rows) == ["0.500 ± 0.141", "0.900"]
    by_label = {r["config"]: r for r in rows}
    assert set(by_label) == {"as configured", "task.lr=0.5"}
    # 0.4 and 0.6: mean 0.5, std sqrt(0.02) = 0.141; the 0.9 run is not in it
    assert by_label["as configured"]["mse (ours)"] == "0.500 ± 0.141"
    assert by_label["task.lr=0.5"]["mse (ours)"] == "0.900" and by_label["task.lr=0.5"]["n"] == 1


def test_config_ids_group_rows_whatever_the_overrides_say(tmp_path: Path, reference: Path) -> None:
    """New summaries carry config_id: same overrides but different resolved configs never share a row."""
    runs = tmp_path / "runs"
    summary(runs / "x1", 1, {"mse": 0.4, "mae": 0.5}, config_id="c0ffee00aa", run_id="r1")
    summary(runs / "x2", 2, {"mse": 0.6, "mae": 0.5}, config_id="c0ffee00aa", run_id="r2")
    summary(runs / "y1", 1, {"mse": 0.9, "mae": 0.5}, config_id="decaf000bb", run_id="r3")

    rows, _ = rows_of(runs, reference)
    assert sorted((r["config"], r["n"]) for r in rows) == [("config c0ffee00", 2), ("config decaf000", 1)]


def test_configs_that_differ_in_several_overrides_are_labelled_in_words(
    tmp_path: Path, reference: Path
) -> None:
    runs = tmp_path / "runs"
    summary(runs / "a", 1, {"mse": 0.4, "mae": 0.5}, extra=["task.lr=0.5"])
    summary(runs / "b", 1, {"mse": 0.6, "mae": 0.5}, extra=["trainer.devices=2"])
    rows, _ = rows_of(runs, reference)
    # each label names what its row set (the bug: every key the other rows set, "as configured")
    assert sorted(r["config"] for r in rows) == ["task.lr=0.5", "trainer.devices=2"]


def test_one_config_under_two_identity_schemes_is_one_row(tmp_path: Path, reference: Path) -> None:
    """The README's first run beside the committed seeds: a config_id of another scheme, overrides
    that say nothing different, only the commit differs. One row; seed 1 made twice counts once."""
    runs = tmp_path / "runs"
    summary(
        runs / "committed1",
        1,
        {"mse": 0.4, "mae": 0.5},
        config_id="0ld0",
        run_id="r0",
        git_commit="978a8bc0ab",
    )
    summary(
        runs / "committed2",
        2,
        {"mse": 0.6, "mae": 0.5},
        config_id="0ld0",
        run_id="r2",
        git_commit="978a8bc0ab",
    )
    summary(
        runs / "readme", 1, {"mse": 0.9, "mae": 0.5}, config_id="new1", run_id="r1", git_commit="52ae2ac1cd"
    )
    rows, notes = rows_of(runs, reference)
    assert [(r["n"], r["seeds"], r["mse (ours)"]) for r in rows] == [(2, "1, 2", "0.500 ± 0.141")]
    assert "config" not in rows[0]  # nothing tells rows apart: no config column
    assert "1 run record(s) found twice (the same run) were counted once." in notes
    assert "commit: 978a8bc0ab" in notes  # the runs counted, not the repeat


def test_a_typed_value_the_row_already_shows_is_no_difference(tmp_path: Path, reference: Path) -> None:
    """The bug: "task.pred_len as configured" beside "task.pred_len=96" in rows of horizon 96, the
    same value; only the commits differed. They are one row, its failures with it."""
    runs = tmp_path / "runs"
    summary(runs / "old", 1, {"mse": 0.4, "mae": 0.5}, config_id="c0", run_id="r0", git_commit="978a8bc0ab")
    typed = {"extra": ["task.pred_len=96"], "config_id": "c1", "git_commit": "52ae2ac1cd"}
    summary(runs / "new", 2, {"mse": 0.6, "mae": 0.5}, run_id="r1", **typed)
    failure(runs / "f", 3, "DataError: bad", config_id="c1", run_id="r3", git_commit="52ae2ac1cd")
    summary(
        runs / "lr", 1, {"mse": 0.4, "mae": 0.5}, extra=["task.pred_len=96", "task.lr=0.5"], config_id="c2"
    )
    rows, notes = rows_of(runs, reference)
    by_label = {r["config"]: (r["seeds"], r["failed seeds"]) for r in rows}
    assert by_label == {"as configured": ("1, 2", "3"), "task.lr=0.5": ("1", "")}
    assert "failed: ETTh1 96 aaren [as configured], seed 3: DataError: bad" in notes


def test_one_commit_two_config_ids_and_the_same_values_stay_apart(tmp_path: Path, reference: Path) -> None:
    """Something the record does not hold differs (an own file's contents): not merged."""
    runs = tmp_path / "runs"
    summary(runs / "x1", 1, {"mse": 0.4, "mae": 0.5}, config_id="c0ffee00aa", run_id="r1")
    summary(runs / "y1", 1, {"mse": 0.9, "mae": 0.5}, config_id="decaf000bb", run_id="r3")
    summary(runs / "y2", 2, {"mse": 0.9, "mae": 0.5}, config_id="decaf000bb", run_id="r4", git_commit="def")
    rows, _ = rows_of(runs, reference)
    assert sorted((r["config"], r["n"]) for r in rows) == [("config c0ffee00", 1), ("config decaf000", 2)]


def test_a_run_whose_data_was_not_found_is_no_seed_of_that_datas_row(tmp_path: Path, reference: Path) -> None:
    runs = tmp_path / "runs"
    summary(runs / "s1", 1, {"mse": 0.4, "mae": 0.5}, config_id="c1", run_id="r1")
    failure(
        runs / "s2", 2, "DataMissingError: ETTh1.csv: not found", config_id="c1", run_id="r2", data_read=False
    )
    failure(
        runs / "s3", 3, "DataMissingError: ETTh1.csv: not found", config_id="c1", run_id="r3", data_read=False
    )
    failure(
        runs / "s3b",
        3,
        "DataMissingError: ETTh1.csv: not found",
        config_id="c1",
        run_id="r3",
        data_read=False,
    )
    rows, notes = rows_of(runs, reference)
    (row,) = rows
    assert (
        row["seeds"] == "1" and "failed seeds" not in row and not any(n.startswith("failed:") for n in notes)
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (["task.lr=0.5", "task.dropout=0.1"], ["task.dropout=1e-1", "+task.lr=5e-1"]),
        (["trainer.max_epochs=4"], ["trainer.max_epochs=4.0", "trainer.enable_progress_bar=false"]),
    ],
)
def test_one_run_spelled_two_ways_counts_once(
    tmp_path: Path, reference: Path, first: list[str], second: list[str]
) -> None:
    """The bug: the same run typed differently (or found under two roots) was averaged in twice."""
    summary(tmp_path / "outputs" / "a", 1, {"mse": 0.4, "mae": 0.5}, extra=first)
    summary(tmp_path / "results" / "b", 1, {"mse": 0.4, "mae": 0.5}, extra=second)
    summary(tmp_path / "outputs" / "c", 2, {"mse": 0.6, "mae": 0.5}, extra=first)

    runs = load_runs([tmp_path / "outputs", tmp_path / "results"])
    (table,) = build(runs, reference)
    ((row),) = table.frame.to_dict("records")
    assert row["mse (ours)"] == "0.500 ± 0.141" and row["n"] == 2  # 0.4 once, not twice
    assert any("found twice" in note and "counted once" in note for note in table.notes)
    assert list(runs["status"]) == ["ok", "ok", "duplicate"]
    assert runs["duplicate_of"].iloc[2] == str(tmp_path / "outputs" / "a" / "summary.json")


def test_same_run_id_under_two_roots_counts_once(tmp_path: Path, reference: Path) -> None:
    order = ["model=aaren", "task=tsf/etth1", "seed=1"]
    summary(tmp_path / "a" / "run", 1, {"mse": 0.4, "mae": 0.5}, run_id="r1", config_id="c1", overrides=order)
    summary(
        tmp_path / "b" / "run",
        1,
        {"mse": 0.4, "mae": 0.5},
        run_id="r1",
        config_id="c1",
        overrides=order[::-1],
    )
    rows, notes = rows_of(tmp_path, reference)
    assert [r["mse (ours)"] for r in rows] == ["0.400"]
    assert [r["n"] for r in rows] == [1]
    assert "1 run record(s) found twice (the same run) were counted once." in notes


def test_non_finite_metrics_and_failures_are_marked_not_dropped(tmp_path: Path, reference: Path) -> None:
    """The bug: a run with a NaN metric vanished from its row without a word."""
    runs = tmp_path / "runs"
    summary(runs / "s1", 1, {"mse": 0.4, "mae": 0.5}, config_id="c1", run_id="r1")
    summary(runs / "s2", 2, {"mse": 0.6, "mae": 0.5}, config_id="c1", run_id="r2")
    summary(runs / "s3", 3, {"mse": float("nan"), "mae": 0.5}, config_id="c1", run_id="r3")
    summary(runs / "s4", 4, {"mse": 0.5, "mae": float("inf")}, config_id="c1", run_id="r4")
    failure(runs / "s5", 5, "RuntimeError: CUDA out of memory", config_id="c1", run_id="r5")
    summary(runs / "t6", 6, {"mse": 0.3, "mae": 0.3}, model="transformer", config_id="c2", run_id="r6")

    runs_frame = load_runs([runs])
    (table,) = build(runs_frame, reference)
    rows = {r["model"]: r for r in table.frame.to_dict("records")}
    assert rows["aaren"]["mse (ours)"] == "0.500 ± 0.141" and rows["aaren"]["n"] == 2
    failed_notes = [n for n in table.notes if n.startswith("failed:")]
    assert any("seed 3" in n and "mse=nan" in n for n in failed_notes)
    assert rows["aaren"]["seeds"] == "1, 2" and rows["aaren"]["failed seeds"] == "3–5"
    assert rows["aaren"]["missing seeds"] == "6" and rows["transformer"]["missing seeds"] == "1–5"
    assert not any("nan" in str(v).lower() or "inf" in str(v) for v in table.frame.to_numpy().ravel())
    assert any("seed 4" in n and "mae=inf" in n for n in failed_notes)
    assert any("seed 5" in n and "CUDA out of memory" in n for n in failed_notes)


def test_an_untrained_record_is_a_failure_never_a_number(tmp_path: Path, reference: Path) -> None:
    """The bug: trainer.max_epochs=0 wrote a random initialisation's test MSE, shown as a result."""
    runs = tmp_path / "runs"
    summary(runs / "s1", 1, {"mse": 0.4, "mae": 0.5}, config_id="c1", run_id="r1", optimizer_steps=12)
    summary(runs / "s2", 2, {"mse": 1.13, "mae": 0.7}, config_id="c1", run_id="r2", optimizer_steps=0)
    # a record from before the step count: no epoch run and no checkpoint tested
    summary(
        runs / "s3", 3, {"mse": 0.93, "mae": 0.6}, config_id="c1", run_id="r3", epochs=0, tested_checkpoint=""
    )
    # an old trained record (no step count, a tested checkpoint) is a result as before
    summary(
        runs / "s4", 4, {"mse": 0.6, "mae": 0.5}, config_id="c1", run_id="r4", tested_checkpoint="best.ckpt"
    )
    rows, notes = rows_of(runs, reference)
    assert rows[0]["mse (ours)"] == "0.500 ± 0.141" and rows[0]["failed seeds"] == "2, 3"
    (failed,) = [n for n in notes if n.startswith("failed:")]
    assert "seed 2, 3: untrained" in failed


def test_a_failure_then_a_success_is_not_a_failure(tmp_path: Path, reference: Path) -> None:
    runs = tmp_path / "runs"
    failure(runs / "s1", 1, "killed", config_id="c1", run_id="r1")
    summary(runs / "s1", 1, {"mse": 0.4, "mae": 0.5}, config_id="c1", run_id="r1")
    rows, notes = rows_of(runs, reference)
    assert "failed seeds" not in rows[0] and not any(n.startswith("failed:") for n in notes)


def test_footer_states_the_seeds_rows_have(tmp_path: Path, reference: Path) -> None:
    runs = tmp_path / "runs"
    for seed in (1, 2, 4):
        summary(runs / f"a{seed}", seed, {"mse": 0.4, "mae": 0.5})
    _, notes = rows_of(runs, reference)
    assert "seeds 1, 2, 4 in every row." in notes
    assert any("seed=1,2,4 " in n for n in notes if n.startswith("command:"))


def test_command_names_every_horizon_and_the_overrides_it_needs(tmp_path: Path, reference: Path) -> None:
    """A table over horizons 96 and 192 with an epoch cap must say so in its command line."""
    runs = tmp_path / "runs"
    for horizon in (96, 192):
        summary(
            runs / f"h{horizon}",
            1,
            {"mse": 0.4, "mae": 0.5},
            extra=[f"task.pred_len={horizon}", "task.train_epochs=1"],
            setting={"horizon": horizon},
        )
    _, notes = rows_of(runs, reference)
    (command,) = [n for n in notes if n.startswith("command:")]
    assert "task.pred_len=96,192 " in command and command.endswith("plus the overrides above")
    assert "ETTh1 overrides: task.train_epochs=1" in notes


def test_notes_and_command_describe_the_rows_shown(tmp_path: Path, reference: Path) -> None:
    """The bugs: the command line carried a failed run's values (a config with no row), and one
    notes line merged the overrides of different rows."""
    runs = tmp_path / "runs"
    summary(runs / "a", 1, {"mse": 0.4, "mae": 0.5}, extra=["task.lr=0.001"], config_id="ca")
    summary(
        runs / "t",
        1,
        {"mse": 0.4, "mae": 0.5},
        model="transformer",
        extra=["task.dropout=0.2"],
        config_id="ct",
    )
    failure(
        runs / "f", 7, "DataError: bad", config_id="cf", setting={"horizon": 336}, overrides=["task.lr=9"]
    )
    rows, notes = rows_of(runs, reference)
    assert len(rows) == 2
    (command,) = [n for n in notes if n.startswith("command:")]
    assert " seed=1 task.pred_len=96 " in command
    assert [n for n in notes if "overrides" in n and not n.startswith("command:")] == [
        "ETTh1 overrides (transformer): task.dropout=0.2",
        "ETTh1 overrides (aaren): task.lr=0.001",
    ]
    assert any(n.startswith("failed:") and "seed 7" in n for n in notes)  # still listed, as a failure


def test_unreadable_record_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "runs" / "x" / "summary.json"
    bad.parent.mkdir(parents=True)
    bad.write_text('{"task": "tsf/etth1", "metr')
    with pytest.raises(RunRecordError, match=r"x/summary\.json: unreadable run record"):
        load_runs([tmp_path / "runs"])


def test_own_data_is_never_beside_a_paper_number(tmp_path: Path, reference: Path) -> None:
    """A file of one's own named like the benchmark (``ETTh1``) is still its own dataset."""
    runs = tmp_path / "runs"
    summary(runs / "registry", 1, {"mse": 0.4, "mae": 0.5}, own_data=False)
    summary(runs / "own", 1, {"mse": 0.1, "mae": 0.2}, own_data=True, extra=["task.datamodule.path=ETTh1"])
    rows, _ = rows_of(runs, reference)
    paper = {row["mse (ours)"]: row["mse (paper)"] for row in rows}
    assert paper == {"0.400": "0.53 ± 0.04", "0.100": ""}


def test_resumed_runs_timed_by_their_last_segment_are_named(tmp_path: Path, reference: Path) -> None:
    """Runs resumed before whole-run timing report their last segment: the table says so and where."""
    runs = tmp_path / "runs"
    summary(runs / "a1", 1, {"mse": 0.4, "mae": 0.5}, resumed=True, wall_time_s=400.0)
    summary(runs / "a2", 2, {"mse": 0.5, "mae": 0.5}, resumed=False, wall_time_s=800.0)
    timed = dict(resumed=True, wall_time_s=800.0, wall_time_segment_s=300.0)
    summary(runs / "t1", 1, {"mse": 0.4, "mae": 0.5}, model="transformer", **timed)
    summary(runs / "t2", 2, {"mse": 0.5, "mae": 0.5}, model="transformer", resumed=False)

    _, notes = rows_of(runs, reference)
    (note,) = [n for n in notes if n.startswith("wall s/run is a lower bound")]
    assert note.endswith(": ETTh1 96 aaren seed 1.")
