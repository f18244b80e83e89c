"""Readers for the three event-sequence file formats, all into one in-memory form.

- Meta TPP ``.npz``: ``times`` (inter-event times, padded), ``marks`` (1-indexed, 0 = padding; absent
  for unmarked sets), ``masks`` (1 = event). One file holds every sequence; the split is by position.
- THP pickle: ``{"dim_process": K, "<split>": [[{"time_since_start", "time_since_last_event",
  "type_event"}, ...], ...]}`` with 0-indexed types, one file per split (``train/dev/test.pkl``).
- EasyTPP JSON: a list of ``{"time_since_start": [...], "time_since_last_event": [...],
  "type_event": [...], "dim_process": K, ...}``, 0-indexed types, one file per split.

Every reader returns :class:`EventSequence` objects: absolute times (float64) and 0-indexed marks.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class EventSequence:
    """One sequence: non-decreasing absolute ``times``, 0-indexed ``marks``, optional window end."""

    times: np.ndarray
    marks: np.ndarray
    t_end: float | None = None

    def __post_init__(self) -> None:
        self.times = np.asarray(self.times, dtype=np.float64)
        self.marks = np.asarray(self.marks, dtype=np.int64)
        if self.times.shape != self.marks.shape or self.times.ndim != 1:
            raise ValueError(
                f"times {self.times.shape} and marks {self.marks.shape} must be equal 1-d shapes"
            )
        if len(self.times) and np.any(np.diff(self.times) < 0):
            raise ValueError("event times must be non-decreasing")
        if self.t_end is not None and len(self.times) and self.t_end < self.times[-1]:
            raise ValueError(f"window end {self.t_end} is before the last event {self.times[-1]}")

    def __len__(self) -> int:
        return len(self.times)

    def intervals(self) -> np.ndarray:
        """Time since the previous event; 0 for the first (it has no predecessor in the data)."""
        return np.diff(self.times, prepend=self.times[:1])


def read_meta_tpp_npz(path: str | Path) -> list[EventSequence]:
    """All sequences of a Meta TPP ``.npz``; ``times`` are inter-event times, accumulated here."""
    with np.load(path, allow_pickle=False) as data:
        if "times" not in data:
            raise ValueError(f"{path}: no 'times' array (keys: {sorted(data.keys())})")
        times = np.asarray(data["times"], dtype=np.float64)
        marks = (
            np.asarray(data["marks"], dtype=np.int64) if "marks" in data else np.ones(times.shape, np.int64)
        )
        masks = np.asarray(data["masks"], dtype=bool) if "masks" in data else np.ones(times.shape, bool)
    if times.ndim == 3:  # Meta TPP also stores (B, L, 1)
        times, marks, masks = times[..., 0], marks[..., 0], masks[..., 0]
    sequences = []
    for row_times, row_marks, row_mask in zip(times, marks, masks, strict=True):
        if np.any(row_marks[row_mask] < 1):
            raise ValueError(f"{path}: Meta TPP marks are 1-indexed, found a mark < 1 at a masked-in event")
        sequences.append(EventSequence(np.cumsum(row_times[row_mask]), row_marks[row_mask] - 1))
    return sequences


def read_thp_pickle(path: str | Path, split: str) -> tuple[list[EventSequence], int]:
    """The ``split`` list of a THP pickle (``train``, ``dev`` or ``test``) and its ``dim_process``."""
    with open(path, "rb") as fh:
        data = pickle.load(fh, encoding="latin1")  # the THP release was pickled by Python 2
    if split not in data or "dim_process" not in data:
        raise ValueError(f"{path}: expected keys 'dim_process' and {split!r}, found {sorted(data)}")
    sequences = [
        EventSequence([e["time_since_start"] for e in seq], [e["type_event"] for e in seq])
        for seq in data[split]
    ]
    return sequences, int(data["dim_process"])


def read_easytpp_json(path: str | Path) -> tuple[list[EventSequence], int | None]:
    """The sequences of an EasyTPP JSON split file and their ``dim_process`` (None if absent)."""
    records = json.loads(Path(path).read_text())
    sequences = [EventSequence(r["time_since_start"], r["type_event"]) for r in records]
    dims = {int(r["dim_process"]) for r in records if "dim_process" in r}
    if len(dims) > 1:
        raise ValueError(f"{path}: sequences disagree on dim_process: {sorted(dims)}")
    return sequences, dims.pop() if dims else None


def positional_split(n: int, sizes: tuple[float, float] | tuple[int, int]) -> list[slice]:
    """Meta TPP's sequential split: fractions of ``n`` (``int(n * f)``) or absolute train/val counts."""
    train, val = sizes
    if train > 1 or val > 1:
        n_train, n_val = int(train), int(val)
    else:
        n_train, n_val = int(n * train), int(n * val)
    return [slice(0, n_train), slice(n_train, n_train + n_val), slice(n_train + n_val, n)]
