"""Bad values in a ``.ts`` file stop the datamodule with one DataError line naming file, line, place.

``?`` is the format's only missing value. Before these checks a written ``inf`` or ``NaN`` was read
as a number (an ``inf`` in TEST gave a plausible accuracy) and a 1e308 value overflowed the scaler's
std, silently zeroing its channel.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recurrent_attention.data import DataError
from tests.helpers.protocols import protocol
from tests.tasks.tsc.conftest import random_problem, write_pair
from tests.tasks.tsc.test_data import datamodule


def replace_value(path: Path, case: int, channel: int, position: int, token: str) -> int:
    """Write ``token`` as value ``position`` of ``channel`` of ``case`` (all 0-based); returns its line."""
    lines = path.read_text().splitlines()
    line = lines.index("@data") + 1 + case
    channels = lines[line].split(":")
    values = channels[channel].split(",")
    values[position] = token
    channels[channel] = ",".join(values)
    lines[line] = ":".join(channels)
    path.write_text("\n".join(lines) + "\n")
    return line + 1


@pytest.mark.parametrize("token", ["inf", "-inf", "NaN", "nan", "1e400", "Infinity"])
def test_non_finite_value_names_file_line_channel_and_position(toy_pair, token: str) -> None:
    train_path, test_path = toy_pair
    line = replace_value(test_path, case=3, channel=1, position=2, token=token)
    with pytest.raises(DataError) as info:
        datamodule(train_path, test_path)
    message = str(info.value)
    assert "\n" not in message
    assert (
        message.startswith(f"{test_path}:{line}: channel 2, value 3: ") and "not a finite number" in message
    )


def test_question_mark_stays_the_missing_value(toy_pair) -> None:
    train_path, test_path = toy_pair
    replace_value(test_path, case=0, channel=0, position=1, token="?")
    assert datamodule(train_path, test_path).datasets["test"].x.isfinite().all()


def test_std_overflow_is_refused_not_a_zeroed_channel(toy_pair) -> None:
    train_path, test_path = toy_pair
    replace_value(train_path, case=5, channel=0, position=0, token="1e308")
    with pytest.raises(DataError, match=rf"^{train_path}: channel 1: values too large to standardise"):
        datamodule(train_path, test_path)


@pytest.mark.parametrize(
    ("cut", "problem"),
    [
        (lambda text: "", "no @data line"),
        (lambda text: text[: text.index("@data")], "no @data line"),
        (lambda text: text[: len(text) - 25], ":"),  # the last case cut mid-line
        (lambda text: "date,OT\n2016-07-01,1\n", "expected a @tag line"),
    ],
    ids=["empty", "header-only", "truncated", "csv"],
)
def test_empty_truncated_or_wrong_format_file_is_one_line(toy_pair, cut, problem: str) -> None:
    train_path, test_path = toy_pair
    test_path.write_text(cut(test_path.read_text()))
    with pytest.raises(DataError) as info:
        datamodule(train_path, test_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(test_path)) and problem in message


@pytest.mark.slow
def test_train_py_stops_on_inf_in_test_with_one_line(train_runner, toy_pair, tmp_path: Path) -> None:
    """The user's case: an ``inf`` in a TEST file ran to exit 0 with an accuracy in the summary."""
    train_path, test_path = toy_pair
    line = replace_value(test_path, case=7, channel=0, position=0, token="inf")
    proc = train_runner(
        [
            "model=aaren",
            "task=tsc/japanesevowels",
            "preset=smoke",
            "task.n_channels=3",
            "task.n_classes=3",
            "task.max_len=12",
            f"task.datamodule.train_path={train_path}",
            f"task.datamodule.test_path={test_path}",
        ],
        tmp_path / "out",
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (error,) = [text for text in proc.stderr.splitlines() if text.startswith("error:")]
    assert error.startswith(f"error: {test_path}:{line}: channel 1, value 1: inf is not a finite number")
    assert not list((tmp_path / "out").rglob("summary.json"))


def test_a_training_file_with_no_case_to_hold_out_is_one_line(tmp_path: Path) -> None:
    """The bug: a TRAIN file of one case stopped in a ValueError traceback from the split."""
    rng = np.random.default_rng(0)
    names = ["a", "b", "c"]
    train, test = write_pair(
        tmp_path, "One", random_problem(rng, 1, 3, (5, 12), 3), random_problem(rng, 6, 3, (5, 12), 3), names
    )
    with pytest.raises(DataError) as info:
        datamodule(train, test)
    assert str(info.value) == (
        f"{train}: its 1 training case(s) leave none for validation at task.val_fraction=0.2 (each class "
        "keeps one case for training); add cases, raise task.val_fraction, or train on all of them with "
        "task.compat=reference"
    )
    assert (
        len(datamodule(train, test, rules=protocol("tsc", "reference")).datasets["train"]) == 1
    )  # the fix it names works
