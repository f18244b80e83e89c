"""Event-sequence data: pick the reader for the format, split, pad into batches.

Formats (``task.datamodule.format``): ``thp`` (train/dev/test pickles), ``easytpp`` (train/dev/test
JSON), ``meta_tpp`` (one ``.npz``, split 60/20/20 by position, or by the absolute counts Meta TPP
fixes for so_fold1), ``ifl_tpp`` (one ifl-tpp ``.npz``, split as ``meta_tpp``) and ``sin``
(generated in memory, same positional split). Files come from the registry (checked against the
manifest) unless ``path`` names them: a folder holding the split files, or the ``.npz`` itself.
``max_length`` keeps each sequence's first events only (Meta TPP's ``wiki.npz`` holds the first 250
of each of ifl-tpp's Wikipedia sequences; docs/ef.md says how that was established). Sequences with
fewer than ``min_length`` events predict nothing and are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.data import DataError, DataLocation
from recurrent_attention.tasks.base import loader_options, make_loader
from recurrent_attention.tasks.ef.formats import (
    EventSequence,
    positional_split,
    read_easytpp_json,
    read_ifl_tpp_npz,
    read_meta_tpp_npz,
    read_thp_pickle,
)
from recurrent_attention.tasks.ef.sin import SinIntensity, generate_sin

SPLITS = ("train", "dev", "test")
SPLIT_SUFFIX = {"thp": ".pkl", "easytpp": ".json"}
FORMATS = ("thp", "easytpp", "meta_tpp", "ifl_tpp", "sin")
NPZ_READERS = {"meta_tpp": read_meta_tpp_npz, "ifl_tpp": read_ifl_tpp_npz}


class EventDataset(Dataset):
    def __init__(self, sequences: Sequence[EventSequence]) -> None:
        self.sequences = list(sequences)

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, i: int) -> EventSequence:
        return self.sequences[i]


def collate(sequences: Sequence[EventSequence], dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
    """Right-pad a list of sequences: ``intervals, times (B, N)``, ``marks (B, N)``, ``mask``, ``lengths``,
    ``tail (B,)`` = window end minus last event time (0 when the window ends at the last event)."""
    lengths = [len(s) for s in sequences]
    n = max(lengths)
    intervals = np.ones((len(sequences), n))
    times = np.zeros((len(sequences), n))
    marks = np.zeros((len(sequences), n), np.int64)
    tail = np.zeros(len(sequences))
    for row, s in enumerate(sequences):
        intervals[row, : len(s)] = s.intervals()
        times[row, : len(s)] = s.times
        marks[row, : len(s)] = s.marks
        tail[row] = 0.0 if s.t_end is None else s.t_end - s.times[-1]
    lengths_t = torch.tensor(lengths)
    return {
        "intervals": torch.as_tensor(intervals, dtype=dtype),
        "times": torch.as_tensor(times, dtype=dtype),
        "marks": torch.as_tensor(marks),
        "mask": torch.arange(n)[None, :] < lengths_t[:, None],
        "lengths": lengths_t,
        "tail": torch.as_tensor(tail, dtype=dtype),
    }


def first_events(sequence: EventSequence, n: int) -> EventSequence:
    """The first ``n`` events; a cut sequence's window ends at its last kept event."""
    if len(sequence) <= n:
        return sequence
    return EventSequence(sequence.times[:n], sequence.marks[:n])


class EFDataModule(L.LightningDataModule):
    """Train/val/test event sequences of one source.

    ``split_sizes`` (``.npz`` formats and ``sin``): train and validation fractions, or absolute
    counts when above 1. ``sin``: generator settings (``n_sequences``, ``seed``, ``a``, ``b``,
    ``period``, ``t_end``); see :mod:`recurrent_attention.tasks.ef.sin`. ``max_length``: keep the
    first events of each sequence, before the split (``None`` keeps them all).
    """

    def __init__(
        self,
        source: str,
        format: str,
        n_marks: int,
        batch_size: int = 16,
        split_sizes: Sequence[float] = (0.6, 0.2),
        min_length: int = 2,
        max_length: int | None = None,
        sin: dict[str, Any] | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        data_dir: str = "data",
        mirror: str | None = None,
        download: bool = True,
        path: str | None = None,
    ) -> None:
        super().__init__()
        if format not in FORMATS:
            raise ValueError(f"task.datamodule.format={format!r}: choose one of {FORMATS}")
        self.source, self.format, self.n_marks = source, format, n_marks
        if max_length is not None and max_length < 1:
            raise ValueError(f"task.max_length={max_length}: give a positive event count, or null for all")
        self.batch_size, self.split_sizes, self.min_length = batch_size, tuple(split_sizes), min_length
        self.max_length = max_length
        self.sin = dict(sin or {})
        self.location = DataLocation(source, data_dir, mirror, download)
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.path = path
        self.datasets: dict[str, EventDataset] = {}

    def _file(self, key: str) -> Path:
        """An explicit ``path`` wins (own data); otherwise the registry resolves and verifies the file."""
        if self.path is not None:
            base = Path(self.path)
            return base if self.format in NPZ_READERS else base / f"{key}{SPLIT_SUFFIX[self.format]}"
        return self.location.registered(key)

    def _split_name(self, split: str) -> str:
        """A split as a message names it: the user's file (own data), else the registry source's split."""
        if self.path is None or self.format == "sin":
            return f"{self.source}/{split}"
        if self.format in NPZ_READERS:
            return f"{self._file('npz')} ({split} split)"
        return str(self._file(split))

    def prepare_data(self) -> None:
        if self.format in NPZ_READERS:
            self._file("npz")
        elif self.format in SPLIT_SUFFIX:
            for split in SPLITS:
                self._file(split)

    def load_splits(self) -> dict[str, list[EventSequence]]:
        """The sequences of each split (``train``, ``dev``, ``test``), checked against ``n_marks``."""
        if self.format == "thp":
            splits, dims = {}, set()
            for split in SPLITS:
                splits[split], dim = read_thp_pickle(self._file(split), split)
                dims.add(dim)
        elif self.format == "easytpp":
            splits, dims = {}, set()
            for split in SPLITS:
                splits[split], dim = read_easytpp_json(self._file(split))
                dims.add(dim)
        else:
            if self.format == "sin":
                settings = {k: v for k, v in self.sin.items() if k in ("n_sequences", "seed")}
                shape = SinIntensity(**{k: v for k, v in self.sin.items() if k not in settings})
                sequences = generate_sin(intensity=shape, **settings)
            else:
                sequences = NPZ_READERS[self.format](self._file("npz"))
            parts = positional_split(len(sequences), self.split_sizes)
            splits, dims = {s: sequences[p] for s, p in zip(SPLITS, parts, strict=True)}, set()
        dims.discard(None)
        if dims and dims != {self.n_marks}:
            raise DataError(
                f"task.n_marks={self.n_marks} but {self.path or self.source} declares dim_process "
                f"{sorted(dims)}; set task.n_marks to it"
            )
        for split, sequences in splits.items():
            if self.max_length is not None:
                sequences = [first_events(s, self.max_length) for s in sequences]
            top = max((int(s.marks.max()) for s in sequences if len(s)), default=0)
            if top >= self.n_marks:
                raise DataError(
                    f"{self._split_name(split)}: mark {top} found but task.n_marks={self.n_marks} "
                    f"(marks are 0 to n_marks - 1); set task.n_marks={top + 1} or fix the file"
                )
            splits[split] = [s for s in sequences if len(s) >= self.min_length]
        return splits

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        for split, sequences in self.load_splits().items():
            if not sequences:
                raise DataError(f"{self.source}/{split}: no sequence with at least {self.min_length} events")
            self.datasets[split] = EventDataset(sequences)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return make_loader(
            self.datasets[split], self.batch_size, shuffle, collate_fn=collate, **self.loader_options
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("dev", shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False)
