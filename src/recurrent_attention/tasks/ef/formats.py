"""Readers for the three event-sequence file formats, all into one in-memory form.

- Meta TPP ``.npz``: ``times`` (inter-event times, padded), ``marks`` (1-indexed, 0 = padding; absent
  for unmarked sets), ``masks`` (1 = event). One file holds every sequence; the split is by position.
- THP pickle: ``{"dim_process": K, "<split>": [[{"time_since_start", "time_since_last_event",
  "type_event"}, ...], ...]}`` with 0-indexed types, one file per split (``train/dev/test.pkl``).
- ifl-tpp ``.npz`` (Shchur et al.'s intensity-free release): ``arrival_times`` and ``marks``, object
  arrays of one ragged array per sequence, absolute times and 0-indexed marks; one file, split by
  position as Meta TPP splits its ``.npz``.
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

from recurrent_attention.data import DataError
from recurrent_attention.data.reading import reading, require_finite


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


def event_sequence(times: object, marks: object, file: str | Path, where: str) -> EventSequence:
    """One sequence from a file's raw values; a missing, non-finite or non-integer value names its place.

    Marks must be whole numbers: ``int64`` would otherwise truncate a 1.7 to 1 without a word.
    Sequence and event numbers are 0-based, as the file's own lists and arrays index them.
    """
    try:
        times_f = np.asarray(times, dtype=np.float64)
        marks_f = np.asarray(marks, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise DataError(f"{file}: {where}: an event time or mark is not a number ({err})") from None
    require_finite(times_f, file, lambda i: f"{where}, event {i[0]}, time")
    require_finite(marks_f, file, lambda i: f"{where}, event {i[0]}, mark")
    fractional = np.flatnonzero(marks_f != np.round(marks_f))
    if len(fractional):
        raise DataError(
            f"{file}: {where}, event {fractional[0]}: mark {marks_f[fractional[0]]} is not an integer"
        )
    try:
        return EventSequence(times_f, marks_f.astype(np.int64))
    except ValueError as err:
        raise DataError(f"{file}: {where}: {err}") from None


def read_meta_tpp_npz(path: str | Path) -> list[EventSequence]:
    """All sequences of a Meta TPP ``.npz``; ``times`` are inter-event times, accumulated here."""
    with reading(path, "Meta TPP .npz archive"):
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise DataError(f"{path}: a single .npy array, not a Meta TPP .npz archive")
        with data:
            arrays = {key: data[key] for key in ("times", "marks", "masks") if key in data.files}
            keys = sorted(data.files)
    if "times" not in arrays:
        raise DataError(f"{path}: no 'times' array (keys: {keys})")
    times = arrays["times"]
    marks = arrays.get("marks", np.ones(times.shape, np.int64))
    masks = arrays.get("masks", np.ones(times.shape, bool))
    if not times.shape == marks.shape == masks.shape or times.ndim not in (2, 3):
        raise DataError(
            f"{path}: times {times.shape}, marks {marks.shape} and masks {masks.shape} must share one "
            "(sequences, events) shape"
        )
    if times.ndim == 3:  # Meta TPP also stores (B, L, 1)
        times, marks, masks = times[..., 0], marks[..., 0], masks[..., 0]
    masks = masks.astype(bool)
    for name, values in (("times", times), ("marks", marks)):
        values = np.asarray(values, dtype=np.float64)
        require_finite(values, path, lambda i, n=name: f"{n}[{i[0]}, {i[1]}]", allowed=~masks)
    if np.any(marks[masks] < 1):
        raise DataError(f"{path}: Meta TPP marks are 1-indexed, found a mark < 1 at a masked-in event")
    return [
        event_sequence(np.cumsum(row_times[row_mask]), row_marks[row_mask] - 1, path, f"sequence {i}")
        for i, (row_times, row_marks, row_mask) in enumerate(zip(times, marks, masks, strict=True))
    ]


def read_ifl_tpp_npz(path: str | Path) -> list[EventSequence]:
    """All sequences of an ifl-tpp ``.npz``, in file order; marks stay 0-indexed as stored.

    The ragged per-sequence arrays are pickled object arrays, so the archive is opened with
    ``allow_pickle``: read only registry files (pinned by sha256) or files you trust.
    """
    with reading(path, "ifl-tpp .npz archive"):
        data = np.load(path, allow_pickle=True)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise DataError(f"{path}: a single .npy array, not an ifl-tpp .npz archive")
        with data:
            missing = sorted({"arrival_times", "marks"} - set(data.files))
            if missing:
                raise DataError(f"{path}: no {missing} array (keys: {sorted(data.files)})")
            times, marks = data["arrival_times"], data["marks"]
    if len(times) != len(marks):
        raise DataError(f"{path}: {len(times)} arrival_times sequences but {len(marks)} marks sequences")
    sequences = [
        event_sequence(t, k, path, f"sequence {i}") for i, (t, k) in enumerate(zip(times, marks, strict=True))
    ]
    negative = [i for i, s in enumerate(sequences) if len(s) and s.marks.min() < 0]
    if negative:
        raise DataError(f"{path}: sequence {negative[0]}: ifl-tpp marks are 0-indexed, found a mark < 0")
    return sequences


def read_thp_pickle(path: str | Path, split: str) -> tuple[list[EventSequence], int]:
    """The ``split`` list of a THP pickle (``train``, ``dev`` or ``test``) and its ``dim_process``."""
    with reading(path, "THP pickle"), open(path, "rb") as fh:
        data = pickle.load(fh, encoding="latin1")  # the THP release was pickled by Python 2
    if not isinstance(data, dict) or split not in data or "dim_process" not in data:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise DataError(f"{path}: expected a dict with keys 'dim_process' and {split!r}, found {found}")
    sequences = []
    for i, seq in enumerate(data[split]):
        try:
            times, marks = [e["time_since_start"] for e in seq], [e["type_event"] for e in seq]
        except (KeyError, TypeError) as err:
            raise DataError(
                f"{path}: sequence {i}: every event needs 'time_since_start' and 'type_event' ({err!r})"
            ) from None
        sequences.append(event_sequence(times, marks, path, f"sequence {i}"))
    return sequences, int(data["dim_process"])


def read_easytpp_json(path: str | Path) -> tuple[list[EventSequence], int | None]:
    """The sequences of an EasyTPP JSON split file and their ``dim_process`` (None if absent)."""
    with reading(path, "EasyTPP JSON file"):
        records = json.loads(Path(path).read_text())
    if not isinstance(records, list) or not all(
        isinstance(r, dict) and "time_since_start" in r and "type_event" in r for r in records
    ):
        raise DataError(
            f"{path}: expected a list of sequences, each with 'time_since_start' and 'type_event'"
        )
    sequences = [
        event_sequence(r["time_since_start"], r["type_event"], path, f"sequence {i}")
        for i, r in enumerate(records)
    ]
    dims = {int(r["dim_process"]) for r in records if "dim_process" in r}
    if len(dims) > 1:
        raise DataError(f"{path}: sequences disagree on dim_process: {sorted(dims)}")
    return sequences, dims.pop() if dims else None


def positional_split(n: int, sizes: tuple[float, float] | tuple[int, int]) -> list[slice]:
    """Meta TPP's sequential split: fractions of ``n`` (``int(n * f)``) or absolute train/val counts."""
    train, val = sizes
    if train > 1 or val > 1:
        n_train, n_val = int(train), int(val)
    else:
        n_train, n_val = int(n * train), int(n * val)
    return [slice(0, n_train), slice(n_train, n_train + n_val), slice(n_train + n_val, n)]
