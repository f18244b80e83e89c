"""The shared reader checks against hand-made arrays: first bad entry, allowed holes, overflow."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from recurrent_attention.data import DataError
from recurrent_attention.data.reading import reading, require_finite, require_scalable


def test_require_finite_reports_the_first_bad_entry_in_row_order() -> None:
    values = np.array([[1.0, 2.0], [3.0, np.inf], [np.nan, 4.0]])
    with pytest.raises(DataError, match=r"^f\.csv: row 1, col 1: inf is not a finite number"):
        require_finite(values, "f.csv", lambda i: f"row {i[0]}, col {i[1]}")


def test_require_finite_skips_allowed_entries_only() -> None:
    values = np.array([1.0, np.nan, np.inf])
    allowed = np.array([False, True, False])
    with pytest.raises(DataError, match=r"^f: at 2: inf"):
        require_finite(values, "f", lambda i: f"at {i[0]}", allowed=allowed)
    require_finite(values[:2], "f", lambda i: "", allowed=allowed[:2])


def test_require_scalable_names_the_overflowing_column() -> None:
    with pytest.raises(DataError, match=r"^f: column 'b': values too large to standardise"):
        require_scalable(np.array([0.0, 1e300]), np.array([1.0, np.inf]), "f", ["column 'a'", "column 'b'"])
    require_scalable(np.zeros(2), np.zeros(2), "f", ["a", "b"])  # zero std is each scaler's own rule


def test_reading_turns_parser_errors_into_one_line(tmp_path: Path) -> None:
    path = tmp_path / "x.pkl"
    path.write_bytes(pickle.dumps({"a": list(range(100))})[:20])
    with (
        pytest.raises(DataError, match=rf"^{path}: not a readable pickle \(UnpicklingError: "),
        reading(path, "pickle"),
    ):
        pickle.loads(path.read_bytes())
    with (
        pytest.raises(DataError, match=rf"^{tmp_path / 'gone'}: no such file"),
        reading(tmp_path / "gone", "x"),
    ):
        (tmp_path / "gone").read_bytes()
    with pytest.raises(KeyError), reading(path, "pickle"):  # the reader's own bugs are not data errors
        raise KeyError("mine")
