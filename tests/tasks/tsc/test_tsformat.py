"""The ``.ts`` reader against hand-written files: values, lengths, missing values, labels, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recurrent_attention.tasks.tsc.tsformat import TSFormatError, parse_ts, read_ts

EQUAL = """# a comment line
#
@problemName Toy
@timeStamps false
@missing false
@univariate false
@dimensions 2
@equalLength true
@seriesLength 3
@classLabel true walk run

@data
1,2,3:4,5,6:run
-1.5,0,2e1:7,8,9:walk
"""

UNEQUAL = """@problemName Uneq
@missing true
@univariate true
@equalLength false
@classLabel true 1.0 2.0 3.0
@data
1,?,3,4:2.0
5,6:3
?,7,?:1.0
"""


def test_equal_length_multivariate_string_labels() -> None:
    data = parse_ts(EQUAL)
    assert data.problem_name == "Toy"
    assert data.class_names == ["walk", "run"]
    assert data.labels.tolist() == [1, 0]
    np.testing.assert_array_equal(data.series[0], [[1, 4], [2, 5], [3, 6]])
    np.testing.assert_array_equal(data.series[1], [[-1.5, 7], [0, 8], [20, 9]])
    assert data.n_channels == 2
    assert data.lengths.tolist() == [3, 3]


def test_unequal_length_missing_values_numeric_labels() -> None:
    data = parse_ts(UNEQUAL)
    assert data.lengths.tolist() == [4, 2, 3]
    assert data.n_channels == 1
    np.testing.assert_array_equal(data.series[0][:, 0], [1, np.nan, 3, 4])
    np.testing.assert_array_equal(data.series[2][:, 0], [np.nan, 7, np.nan])
    # "3" is the declared "3.0": labels follow the header's order
    assert data.labels.tolist() == [1, 2, 0]


def test_read_ts_accepts_latin1_comments(tmp_path: Path) -> None:
    path = tmp_path / "x.ts"
    path.write_bytes(b"#pp 1\x9631\n" + EQUAL.encode())
    assert read_ts(path).labels.tolist() == [1, 0]


def _replace(text: str, old: str, new: str) -> str:
    assert old in text
    return text.replace(old, new)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (_replace(EQUAL, "@missing false", "@colour blue"), 5, "unknown header tag @colour"),
        (_replace(EQUAL, "@dimensions 2", "@dimensions two"), 7, "@dimensions"),
        (_replace(EQUAL, "@univariate false", "@univariate maybe"), 6, "true or false"),
        (_replace(EQUAL, "4,5,6:run", "4,5,6:7,8,9:run"), 13, "3 channels, the header declares 2"),
        (_replace(EQUAL, "4,5,6:run", "4,x,6:run"), 13, "'x'"),
        (_replace(EQUAL, ":walk", ":jump"), 14, "class label 'jump'"),
        (_replace(EQUAL, "1,2,3:4,5,6", "1,2,3:4,5"), 13, "differ in length"),
        (_replace(EQUAL, "1,2,3:4,5,6", "1,2:4,5"), 13, "@seriesLength declares 3"),
        (_replace(EQUAL, "@classLabel true walk run\n", ""), 11, "@data before @classLabel"),
        (_replace(EQUAL, "@problemName Toy", "problemName Toy"), 3, "expected a @tag line"),
    ],
)
def test_malformed_files_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(TSFormatError) as err:
        parse_ts(text, "toy.ts")
    assert str(err.value).startswith(f"toy.ts:{line}:")
    assert words in str(err.value)


def test_missing_data_section_is_an_error() -> None:
    with pytest.raises(TSFormatError, match="no @data line"):
        parse_ts(EQUAL.split("@data")[0], "toy.ts")
