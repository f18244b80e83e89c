"""Each reader on files written in its real format: padding, 1- vs 0-indexed marks, splits, batches."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from recurrent_attention.data import DataError
from recurrent_attention.tasks.ef.data import EFDataModule, collate
from recurrent_attention.tasks.ef.formats import (
    positional_split,
    read_easytpp_json,
    read_meta_tpp_npz,
    read_thp_pickle,
)

# Two sequences as (absolute times, 0-indexed marks).
SEQS = [([0.0, 0.5, 1.25], [2, 0, 1]), ([1.0, 3.0], [1, 1])]


def thp_events(times: list[float], marks: list[int]) -> list[dict]:
    previous = [times[0], *times[:-1]]
    return [
        {"time_since_start": t, "time_since_last_event": t - p, "type_event": k}
        for t, p, k in zip(times, previous, marks, strict=True)
    ]


def write_thp(folder: Path, dim: int = 3) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        data = {"dim_process": dim, split: [thp_events(t, k) for t, k in SEQS], "devtest": []}
        (folder / f"{split}.pkl").write_bytes(pickle.dumps(data, protocol=2))


def write_easytpp(folder: Path, dim: int = 3) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    records = [
        {
            "dim_process": dim,
            "seq_idx": i,
            "seq_len": len(t),
            "time_since_start": t,
            "time_since_last_event": [0.0, *np.diff(t).tolist()],
            "type_event": k,
        }
        for i, (t, k) in enumerate(SEQS)
    ]
    for split in ("train", "dev", "test"):
        (folder / f"{split}.json").write_text(json.dumps(records))


def write_meta_tpp(path: Path, n_copies: int = 5, trailing_axis: bool = False) -> None:
    """Meta TPP layout: inter-event times, 1-indexed marks, 0 where padded, masks."""
    width = 4
    times, marks, masks = np.zeros((0, width)), np.zeros((0, width), np.int64), np.zeros((0, width))
    for t, k in SEQS * n_copies:
        row = np.zeros((3, width))
        row[0, : len(t)] = np.diff(t, prepend=0.0)
        row[1, : len(t)] = np.asarray(k) + 1
        row[2, : len(t)] = 1
        times, marks, masks = (
            np.vstack([times, row[0]]),
            np.vstack([marks, row[1]]),
            np.vstack([masks, row[2]]),
        )
    arrays = {"times": times, "marks": marks.astype(np.int64), "masks": masks}
    if trailing_axis:
        arrays = {k: v[..., None] for k, v in arrays.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)


def check(sequences: list) -> None:
    assert len(sequences) == len(SEQS)
    for seq, (times, marks) in zip(sequences, SEQS, strict=True):
        np.testing.assert_allclose(seq.times, times)
        np.testing.assert_array_equal(seq.marks, marks)


def test_thp_pickle(tmp_path: Path) -> None:
    write_thp(tmp_path)
    sequences, dim = read_thp_pickle(tmp_path / "dev.pkl", "dev")
    check(sequences)
    assert dim == 3


def test_easytpp_json(tmp_path: Path) -> None:
    write_easytpp(tmp_path)
    sequences, dim = read_easytpp_json(tmp_path / "train.json")
    check(sequences)
    assert dim == 3


@pytest.mark.parametrize("trailing_axis", [False, True])
def test_meta_tpp_npz_unpads_and_shifts_marks(tmp_path: Path, trailing_axis: bool) -> None:
    write_meta_tpp(tmp_path / "x.npz", n_copies=1, trailing_axis=trailing_axis)
    # Meta TPP's times are inter-event times; the first one is the offset from 0.
    check(read_meta_tpp_npz(tmp_path / "x.npz"))


def test_meta_tpp_rejects_zero_indexed_marks(tmp_path: Path) -> None:
    np.savez(tmp_path / "bad.npz", times=np.ones((1, 2)), marks=np.array([[0, 1]]), masks=np.ones((1, 2)))
    with pytest.raises(ValueError, match="1-indexed"):
        read_meta_tpp_npz(tmp_path / "bad.npz")


def test_positional_split() -> None:
    assert positional_split(10, (0.6, 0.2)) == [slice(0, 6), slice(6, 8), slice(8, 10)]
    assert positional_split(6000, (4777, 530)) == [slice(0, 4777), slice(4777, 5307), slice(5307, 6000)]


def test_collate_pads_right() -> None:
    from recurrent_attention.tasks.ef.formats import EventSequence

    batch = collate([EventSequence(*SEQS[0]), EventSequence(*SEQS[1], t_end=4.0)])
    torch.testing.assert_close(batch["intervals"][0], torch.tensor([0.0, 0.5, 0.75]))
    torch.testing.assert_close(batch["intervals"][1, :2], torch.tensor([0.0, 2.0]))
    assert batch["mask"].tolist() == [[True, True, True], [True, True, False]]
    assert batch["lengths"].tolist() == [3, 2]
    assert batch["marks"].tolist() == [[2, 0, 1], [1, 1, 0]]
    torch.testing.assert_close(batch["tail"], torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("fmt", ["thp", "easytpp", "meta_tpp"])
def test_datamodule_reads_each_format(tmp_path: Path, fmt: str) -> None:
    if fmt == "thp":
        write_thp(tmp_path)
        path = tmp_path
    elif fmt == "easytpp":
        write_easytpp(tmp_path)
        path = tmp_path
    else:
        path = tmp_path / "x.npz"
        write_meta_tpp(path)
    dm = EFDataModule("unused", fmt, n_marks=3, batch_size=4, path=str(path))
    dm.setup()
    sizes = {split: len(ds) for split, ds in dm.datasets.items()}
    assert sizes == (
        {"train": 6, "dev": 2, "test": 2} if fmt == "meta_tpp" else {"train": 2, "dev": 2, "test": 2}
    )
    batch = next(iter(dm.train_dataloader()))
    assert batch["marks"].max() <= 2 and batch["intervals"].dtype == torch.float32


def test_datamodule_checks_the_number_of_marks(tmp_path: Path) -> None:
    write_thp(tmp_path, dim=3)
    with pytest.raises(ValueError, match="dim_process"):
        EFDataModule("unused", "thp", n_marks=4, path=str(tmp_path)).setup()
    write_easytpp(tmp_path / "e", dim=2)
    with pytest.raises(ValueError, match="dim_process"):
        EFDataModule("unused", "easytpp", n_marks=3, path=str(tmp_path / "e")).setup()


def test_sin_datamodule_splits_generated_sequences() -> None:
    dm = EFDataModule("metatpp_sin", "sin", n_marks=1, sin={"n_sequences": 10, "seed": 1, "a": 1.0, "b": 0.5})
    dm.setup()
    assert [len(dm.datasets[s]) for s in ("train", "dev", "test")] == [6, 2, 2]
    assert all(s.t_end == pytest.approx(32 * np.pi) for s in dm.datasets["test"].sequences)


def test_missing_meta_tpp_file_names_the_manual_step(tmp_path: Path) -> None:
    dm = EFDataModule(
        "metatpp_wiki", "meta_tpp", 8226, data_dir=str(tmp_path), mirror=str(tmp_path), download=False
    )
    with pytest.raises(DataError, match=r"tpp/meta-tpp/real/wiki\.npz"):
        dm.prepare_data()
