"""Bad cells in a TSLib CSV stop the datamodule with one DataError line naming file, line and column.

Before these checks a blank, NaN or inf cell ran to NaN metrics and a 1e308 cell overflowed the
scaler's std, which silently turned its channel into zeros.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recurrent_attention.data import DataError
from recurrent_attention.tasks.tsf.data import TSFDataModule
from tests.tasks.tsf.test_data import write_ett_csv

ROWS = 14400  # the shortest file the ett_hour layout accepts


@pytest.fixture(scope="module")
def good_lines(tmp_path_factory) -> list[str]:
    path = tmp_path_factory.mktemp("ett") / "good.csv"
    write_ett_csv(path, ROWS)
    return path.read_text().splitlines()


def setup_with(path: Path, lines: list[str]) -> TSFDataModule:
    path.write_text("\n".join(lines) + "\n")
    dm = TSFDataModule("ETTh1", "ett_hour", seq_len=16, pred_len=8, path=str(path))
    dm.setup()
    return dm


def with_cell(lines: list[str], line: int, column: int, text: str) -> list[str]:
    """``lines`` with the cell at 1-based ``line`` and 0-based ``column`` replaced by ``text``."""
    cells = lines[line - 1].split(",")
    cells[column] = text
    return [*lines[: line - 1], ",".join(cells), *lines[line:]]


@pytest.mark.parametrize("cell", ["", "NaN", "nan", "inf", "-inf", "1e400"])
def test_non_finite_cell_names_file_line_and_column(good_lines, tmp_path: Path, cell: str) -> None:
    path = tmp_path / "bad.csv"
    # line 9000 is a validation row: the scaler never sees it, so only the check can catch it
    with pytest.raises(DataError) as info:
        setup_with(path, with_cell(good_lines, 9000, 2, cell))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: line 9000, column 'HULL': ") and "not a finite number" in message


def test_text_cell_names_file_line_and_column(good_lines, tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    with pytest.raises(DataError, match=rf"^{path}: line 7, column 'OT': '12,5 kV' is not a number$"):
        setup_with(path, with_cell(good_lines, 7, 7, '"12,5 kV"'))


def test_std_overflow_is_refused_not_a_zeroed_channel(good_lines, tmp_path: Path) -> None:
    path = tmp_path / "huge.csv"
    # 1e308 is finite, but (x - mean)^2 overflows: std = inf and x / std = 0 for the whole channel
    with pytest.raises(DataError, match=rf"^{path}: column 'MUFL': values too large to standardise"):
        setup_with(path, with_cell(good_lines, 100, 3, "1e308"))


@pytest.mark.parametrize(
    ("cell", "shown"),
    [("2016-13-45 00:00:00", "'2016-13-45 00:00:00'"), ("yesterday", "'yesterday'"), ("", "nan")],
)
def test_unparsable_or_blank_date_names_the_line(good_lines, tmp_path: Path, cell: str, shown: str) -> None:
    path = tmp_path / "dates.csv"
    with pytest.raises(DataError, match=rf"^{path}: line 50, column 'date': {shown} is not a date$"):
        setup_with(path, with_cell(good_lines, 50, 0, cell))


ORDER_FIX = "rows must be in time order, one row per timestamp (sort the file by date, drop or merge repeated"


def test_a_repeated_timestamp_names_its_line(good_lines, tmp_path: Path) -> None:
    """The bug: a duplicated timestamp was accepted (windows then span a time that never passed)."""
    path = tmp_path / "dup.csv"
    lines = with_cell(good_lines, 50, 0, good_lines[48].split(",")[0])  # line 49's date
    with pytest.raises(DataError) as info:
        setup_with(path, lines)
    assert str(info.value).startswith(
        f"{path}: line 50, column 'date': 2016-07-02 23:00:00 repeats the timestamp of line 49; {ORDER_FIX}"
    )


def test_rows_out_of_time_order_name_the_first_one(good_lines, tmp_path: Path) -> None:
    """The bug: a time-shuffled CSV trained (MSE 1.289 against 0.636 in order) without a word."""
    path = tmp_path / "swapped.csv"
    lines = [*good_lines[:49], good_lines[50], good_lines[49], *good_lines[51:]]  # lines 50 and 51 swapped
    with pytest.raises(DataError) as info:
        setup_with(path, lines)
    assert str(info.value).startswith(
        f"{path}: line 51, column 'date': 2016-07-03 00:00:00 is earlier than line 50's 2016-07-03 01:00:00; "
        f"{ORDER_FIX}"
    )
    shuffled = [good_lines[0], *np.random.default_rng(0).permutation(good_lines[1:])]
    with pytest.raises(DataError, match="rows must be in time order"):
        setup_with(path, shuffled)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "not a readable CSV file"),
        (b"date,HUFL,OT\n", "a header but no data rows"),
        (b"PK\x03\x04\x14\x00binary zip bytes\x00\xff", "no 'date' column|not a readable CSV file"),
        (b'date,OT\n"2016-07-01,1\n', "not a readable CSV file"),
    ],
    ids=["empty", "header-only", "binary", "unclosed-quote"],
)
def test_empty_or_wrong_format_file_is_one_line(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "x.csv"
    path.write_bytes(content)
    dm = TSFDataModule("ETTh1", "ett_hour", seq_len=16, pred_len=8, path=str(path))
    with pytest.raises(DataError, match=rf"^{path}: ({problem})") as info:
        dm.setup()
    assert "\n" not in str(info.value)


def test_truncated_file_names_itself(good_lines, tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    with pytest.raises(DataError, match=rf"^{path}: layout ett_hour needs at least 14400 rows"):
        setup_with(path, good_lines[:5000])


def test_constant_channel_keeps_scale_one(good_lines, tmp_path: Path) -> None:
    """The documented zero-std rule (sklearn's): a constant training channel is centred, not divided by 0."""
    lines = [good_lines[0]] + [",".join([*line.split(",")[:-1], "3.5"]) for line in good_lines[1:]]
    dm = setup_with(tmp_path / "flat.csv", lines)
    assert dm.scaler.std[-1] == 1.0 and dm.scaler.mean[-1] == 3.5
    assert np.all(dm.datasets["test"].values[:, -1].numpy() == 0.0)


@pytest.mark.parametrize(("rows", "split_rows"), [(50, 35), (1, 0)])
def test_a_csv_too_short_for_its_windows_is_one_line(tmp_path: Path, rows: int, split_rows: int) -> None:
    """The bugs: ``__len__() should return >= 0`` (50 rows), "too large to standardise" (one row)."""
    path = tmp_path / "short.csv"
    write_ett_csv(path, rows)
    dm = TSFDataModule("ETTh1", "custom", seq_len=96, pred_len=96, path=str(path))
    with pytest.raises(DataError, match=f"{rows} rows leave the train split {split_rows} rows") as err:
        dm.setup()
    assert str(path) in str(err.value) and "task.seq_len + task.pred_len = 192" in str(err.value)


def test_a_missing_target_column_names_the_file(good_lines: list[str], tmp_path: Path) -> None:
    lines = [line.rpartition(",")[0] for line in good_lines]  # the OT column dropped
    with pytest.raises(DataError, match=r"task\.target='OT' is not a column") as err:
        setup_with(tmp_path / "no_ot.csv", lines)
    assert str(tmp_path / "no_ot.csv") in str(err.value)


def test_an_own_csv_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    """The bug: a FileNotFoundError traceback from the CSV reader."""
    dm = TSFDataModule("ETTh1", "custom", seq_len=16, pred_len=8, path=str(tmp_path / "nope.csv"))
    with pytest.raises(DataError, match=r"nope\.csv: no such file or folder \(given as own data"):
        dm.setup()
