"""ifl-tpp's ``.npz`` (ragged ``arrival_times``/``marks``): read as stored, split as Meta TPP splits."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR
from recurrent_attention.data import DataError
from recurrent_attention.tasks.ef.data import EFDataModule
from recurrent_attention.tasks.ef.formats import read_ifl_tpp_npz

# Five sequences (absolute times, 0-indexed marks); event counts 3, 2, 4, 1, 2 = 12.
SEQS = [
    ([0.0, 1.0, 4.0], [0, 2, 2]),
    ([2.0, 2.5], [1, 1]),
    ([1.0, 1.0, 3.0, 7.0], [3, 0, 1, 3]),
    ([5.0], [2]),
    ([0.5, 0.75], [3, 3]),
]


def ragged(rows: list[list]) -> np.ndarray:
    """An object array of per-sequence arrays, as ifl-tpp stores them."""
    out = np.empty(len(rows), dtype=object)
    out[:] = [np.asarray(r) for r in rows]
    return out


def write_ifl(path: Path, seqs=SEQS, **arrays) -> Path:
    data = {"arrival_times": ragged([t for t, _ in seqs]), "marks": ragged([k for _, k in seqs])}
    np.savez(path, **{**data, **arrays})
    return path


def test_reader_keeps_absolute_times_and_0_indexed_marks(tmp_path: Path) -> None:
    sequences = read_ifl_tpp_npz(write_ifl(tmp_path / "w.npz"))
    assert len(sequences) == 5
    for seq, (times, marks) in zip(sequences, SEQS, strict=True):
        np.testing.assert_array_equal(seq.times, times)
        np.testing.assert_array_equal(seq.marks, marks)
    np.testing.assert_array_equal(sequences[2].intervals(), [0.0, 0.0, 2.0, 4.0])


def test_datamodule_splits_60_20_20_by_file_order(tmp_path: Path) -> None:
    # int(5 * 0.6) = 3 train, int(5 * 0.2) = 1 dev, the remaining 1 test; min_length 2 then drops
    # the dev sequence of one event, so dev must be refused as empty.
    path = write_ifl(tmp_path / "w.npz")
    module = EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks=4, path=str(path), min_length=1)
    splits = module.load_splits()
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [3, 1, 1]
    assert [sum(len(s) for s in splits[k]) for k in ("train", "dev", "test")] == [9, 1, 2]
    np.testing.assert_array_equal(splits["dev"][0].times, [5.0])
    strict = EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks=4, path=str(path))
    with pytest.raises(DataError, match="dev: no sequence with at least 2 events"):
        strict.setup()


def test_a_mark_beyond_n_marks_names_it(tmp_path: Path) -> None:
    module = EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks=3, path=str(write_ifl(tmp_path / "w.npz")))
    with pytest.raises(DataError, match=r"mark 3 found but task\.n_marks=3"):
        module.load_splits()


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"seqs": [([0.0, 1.0], [0, -1])]}, "sequence 0: ifl-tpp marks are 0-indexed"),
        ({"seqs": [([1.0, 0.5], [0, 0])]}, "sequence 0: event times must be non-decreasing"),
        ({"seqs": [([0.0, 1.0], [0, 1.5])]}, "sequence 0, event 1: mark 1.5 is not an integer"),
    ],
)
def test_bad_values_are_one_line_errors(tmp_path: Path, arrays: dict, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_ifl_tpp_npz(write_ifl(tmp_path / "w.npz", **arrays))


def test_missing_array_and_unequal_counts_are_named(tmp_path: Path) -> None:
    np.savez(tmp_path / "times_only.npz", arrival_times=ragged([[0.0, 1.0]]))
    with pytest.raises(DataError, match=r"no \['marks'\] array"):
        read_ifl_tpp_npz(tmp_path / "times_only.npz")
    np.savez(tmp_path / "short.npz", arrival_times=ragged([[0.0], [1.0]]), marks=ragged([[0]]))
    with pytest.raises(DataError, match="2 arrival_times sequences but 1 marks sequences"):
        read_ifl_tpp_npz(tmp_path / "short.npz")


MIRROR = os.environ.get("RA_DATA_MIRROR")


@pytest.mark.skipif(not MIRROR, reason="RA_DATA_MIRROR unset: the real wikipedia.npz is not here")
def test_mirror_wikipedia_counts_and_the_task_n_marks() -> None:
    """1000 sequences, 157471 events, marks 0..8226 (ifl-tpp's published counts), via the registry."""
    raw = np.load(Path(MIRROR) / "tpp/ifl-tpp/wikipedia.npz", allow_pickle=True)
    lengths = [len(t) for t in raw["arrival_times"]]
    n_marks = OmegaConf.load(CONFIG_DIR / "task/ef/wiki_ifltpp.yaml").task.n_marks
    module = EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks, mirror=MIRROR, download=False)
    splits = module.load_splits()
    assert (len(lengths), sum(lengths)) == (1000, 157471)
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [600, 200, 200]
    events = [sum(len(s) for s in splits[k]) for k in ("train", "dev", "test")]
    assert events == [sum(lengths[:600]), sum(lengths[600:800]), sum(lengths[800:])]
    marks = np.concatenate([s.marks for part in splits.values() for s in part])
    assert (marks.min(), marks.max(), len(np.unique(marks))) == (0, 8226, 8227) == (0, 8226, n_marks)
