"""ifl-tpp's ``.npz`` (ragged ``arrival_times``/``marks``): read as stored, split as Meta TPP splits."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR
from recurrent_attention.data import DataError
from recurrent_attention.tasks.ef.data import EFDataModule, first_events
from recurrent_attention.tasks.ef.formats import EventSequence, read_ifl_tpp_npz

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


def test_max_length_keeps_each_sequence_first_events_before_the_split(tmp_path: Path) -> None:
    # max_length 2 cuts sequences 0 and 2 (3 and 4 events) to their first two; the split by file
    # order is unchanged (3/1/1 sequences) and mark 3, seen only after the cut, is gone from train.
    path = write_ifl(tmp_path / "w.npz")
    module = EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks=4, path=str(path), min_length=1, max_length=2)
    splits = module.load_splits()
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [3, 1, 1]
    for seq, (times, marks) in zip(splits["train"], SEQS[:3], strict=True):
        np.testing.assert_array_equal(seq.times, times[:2])
        np.testing.assert_array_equal(seq.marks, marks[:2])
        assert seq.t_end is None
    np.testing.assert_array_equal(splits["test"][0].times, SEQS[4][0])
    with pytest.raises(ValueError, match=r"task\.max_length=0"):
        EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks=4, path=str(path), max_length=0)


def test_a_cut_sequence_window_ends_at_its_last_kept_event() -> None:
    whole = EventSequence(np.array([0.0, 1.0, 3.0]), np.array([0, 1, 0]), t_end=5.0)
    assert first_events(whole, 3) is whole
    cut = first_events(whole, 2)
    np.testing.assert_array_equal(cut.times, [0.0, 1.0])
    assert cut.t_end is None


def test_a_mark_beyond_n_marks_names_it(tmp_path: Path) -> None:
    """The bug: own data's out-of-range mark named the registry's source, not the user's file."""
    own = write_ifl(tmp_path / "w.npz")
    module = EFDataModule("ifltpp_wiki", "ifl_tpp", n_marks=3, path=str(own))
    with pytest.raises(DataError) as info:
        module.load_splits()
    assert str(info.value) == (
        f"{own} (train split): mark 3 found but task.n_marks=3 (marks are 0 to n_marks - 1); "
        "set task.n_marks=4 or fix the file"
    )


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
def test_mirror_wikipedia_as_meta_tpp_holds_it() -> None:
    """ifl-tpp's file: 1000 sequences, 157471 events, marks 0..8226. The task keeps each sequence's
    first 250 events, which leaves marks 0..8225 with 7628 distinct: the two numbers Meta TPP's
    ``configs/data/datasets/wiki.yaml`` gives (``num_classes: 8226``, its comment's ``wiki: 7628``);
    no other first-N cut gives 7628."""
    raw = np.load(Path(MIRROR) / "tpp/ifl-tpp/wikipedia.npz", allow_pickle=True)
    lengths = [len(t) for t in raw["arrival_times"]]
    raw_marks = np.concatenate(list(raw["marks"]))
    assert (len(lengths), sum(lengths)) == (1000, 157471)
    assert (raw_marks.min(), raw_marks.max(), len(np.unique(raw_marks))) == (0, 8226, 8227)
    task = OmegaConf.load(CONFIG_DIR / "task/ef/wiki_ifltpp.yaml").task
    assert (task.max_length, task.n_marks) == (250, 8226)
    module = EFDataModule(
        "ifltpp_wiki", "ifl_tpp", task.n_marks, max_length=task.max_length, mirror=MIRROR, download=False
    )
    splits = module.load_splits()
    assert [len(splits[s]) for s in ("train", "dev", "test")] == [600, 200, 200]
    kept = [min(n, 250) for n in lengths]
    events = [sum(len(s) for s in splits[k]) for k in ("train", "dev", "test")]
    assert events == [sum(kept[:600]), sum(kept[600:800]), sum(kept[800:])]
    assert sum(kept) == 138705
    marks = np.concatenate([s.marks for part in splits.values() for s in part])
    assert (marks.min(), marks.max() + 1, len(np.unique(marks))) == (0, task.n_marks, 7628)
