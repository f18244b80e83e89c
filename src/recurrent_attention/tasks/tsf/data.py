"""TSLib-protocol forecasting data: CSV reading, split borders, train-only scaling, windows.

Borders follow Time-Series-Library: ETT uses fixed 12/4/4-month splits (hourly 8640/2880/2880
rows, x4 for the 15-minute files); other CSVs split 70/10/20. Validation and test windows start
``seq_len`` rows before their border so that every target row belongs to its split. The scaler
sees the training rows only.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from recurrent_attention.data import DataError, DataLocation
from recurrent_attention.data.reading import reading, require_finite, require_scalable
from recurrent_attention.tasks.base import loader_options, make_loader
from recurrent_attention.tasks.tsf.protocol import DEFAULT, TSFProtocol
from recurrent_attention.tasks.tsf.timefeatures import time_features

SPLITS = ("train", "val", "test")
ETT_MONTH_ROWS = {"ett_hour": 30 * 24, "ett_minute": 30 * 24 * 4}


def read_csv(path: str | Path) -> pd.DataFrame:
    """Read a TSLib CSV: CRLF or LF line ends, UTF-8 or legacy (Latin-1) header bytes."""
    with reading(path, "CSV file"):
        raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # weather.csv's header has Latin-1 unit symbols (e.g. "m²")
    with reading(path, "CSV file"):
        frame = pd.read_csv(io.StringIO(text))
    if "date" not in frame.columns:
        raise DataError(f"{path}: no 'date' column in header {list(frame.columns)[:5]}...")
    if frame.empty:
        raise DataError(f"{path}: a header but no data rows")
    return frame


def line_of(row: int) -> str:
    """The file line of data row ``row`` (0-based): the header is line 1."""
    return f"line {row + 2}"


def numeric_values(frame: pd.DataFrame, path: str | Path) -> np.ndarray:
    """The columns of ``frame`` as float64; a text cell or a non-finite one names its line and column."""
    for name in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[name]):
            numbers = pd.to_numeric(frame[name], errors="coerce")
            row = int(np.flatnonzero(numbers.isna() & frame[name].notna())[0])
            raise DataError(
                f"{path}: {line_of(row)}, column {name!r}: {frame[name].iloc[row]!r} is not a number"
            )
    values = frame.to_numpy(dtype=np.float64)
    require_finite(values, path, lambda i: f"{line_of(i[0])}, column {frame.columns[i[1]]!r}")
    return values


def parse_dates(dates: pd.Series, path: str | Path) -> pd.DatetimeIndex:
    """The ``date`` column as timestamps; a blank or unparsable cell names its line."""
    parsed = pd.to_datetime(dates, errors="coerce")
    if parsed.isna().any():
        row = int(np.flatnonzero(parsed.isna())[0])
        raise DataError(f"{path}: {line_of(row)}, column 'date': {dates.iloc[row]!r} is not a date")
    return pd.DatetimeIndex(parsed)


def require_time_order(dates: pd.DatetimeIndex, path: str | Path) -> None:
    """Rows strictly in time order: a shuffled or repeated timestamp names its line.

    Windows are consecutive rows, so rows out of order train on sequences that never happened
    (a time-shuffled ETTh1 trains to twice the ordered MSE) and a split border is no border in time.
    """
    steps = np.diff(dates.asi8)
    if (steps > 0).all():
        return
    row = int(np.flatnonzero(steps <= 0)[0]) + 1
    here, before = dates[row], dates[row - 1]
    problem = (
        f"repeats the timestamp of {line_of(row - 1)}"
        if here == before
        else f"is earlier than {line_of(row - 1)}'s {before}"
    )
    raise DataError(
        f"{path}: {line_of(row)}, column 'date': {here} {problem}; rows must be in time order, one row "
        "per timestamp (sort the file by date, drop or merge repeated timestamps)"
    )


def split_borders(
    n_rows: int, seq_len: int, layout: str, file: str | Path = "the file"
) -> list[tuple[int, int]]:
    """``[(start, end)]`` row ranges of train, val, test (end exclusive), TSLib's arithmetic."""
    if layout in ETT_MONTH_ROWS:
        month = ETT_MONTH_ROWS[layout]
        ends = [12 * month, 16 * month, 20 * month]
        if n_rows < ends[-1]:
            raise DataError(f"{file}: layout {layout} needs at least {ends[-1]} rows, the file has {n_rows}")
    elif layout == "custom":
        n_train, n_test = int(n_rows * 0.7), int(n_rows * 0.2)
        ends = [n_train, n_rows - n_test, n_rows]
    else:
        raise ValueError(f"task.layout={layout!r}: choose ett_hour, ett_minute or custom")
    starts = [0, ends[0] - seq_len, ends[1] - seq_len]
    return list(zip(starts, ends, strict=True))


def require_windows(
    borders: list[tuple[int, int]], seq_len: int, pred_len: int, n_rows: int, file: str | Path
) -> None:
    """Every split holds at least one window of ``seq_len`` inputs and ``pred_len`` targets."""
    for split, (start, end) in zip(SPLITS, borders, strict=True):
        if end - start < seq_len + pred_len:
            raise DataError(
                f"{file}: {n_rows} rows leave the {split} split {max(end - start, 0)} rows, fewer than "
                f"task.seq_len + task.pred_len = {seq_len + pred_len}; use a longer file or shorter windows"
            )


@dataclass
class Standardizer:
    """Per-channel z-scoring fitted on training rows only (population std, as sklearn's StandardScaler)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, values: np.ndarray) -> Standardizer:
        """A constant channel (std 0) keeps scale 1, as sklearn; ``inf`` statistics are left to the caller."""
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused by require_scalable
            std = values.std(axis=0)
            return cls(values.mean(axis=0), np.where(std > 0, std, 1.0))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.std

    def inverse(self, values: np.ndarray) -> np.ndarray:
        return values * self.std + self.mean


def select_columns(
    frame: pd.DataFrame, features: str, target: str, file: str | Path = "the CSV"
) -> pd.DataFrame:
    """TSLib's column order: every channel but the date, the target last; ``S`` keeps the target only."""
    if target not in frame.columns:
        raise DataError(
            f"{file}: task.target={target!r} is not a column (columns: {', '.join(frame.columns[:8])}"
            f"{', ...' if len(frame.columns) > 8 else ''}); set task.target to one of them"
        )
    if features == "S":
        return frame[[target]]
    if features == "M":
        others = [c for c in frame.columns if c not in ("date", target)]
        return frame[[*others, target]]
    raise ValueError(f"task.features={features!r}: choose M (all channels) or S (target only)")


class ForecastWindows(Dataset):
    """Every window of ``seq_len`` inputs followed by ``pred_len`` targets inside one split."""

    def __init__(self, values: np.ndarray, marks: np.ndarray, seq_len: int, pred_len: int) -> None:
        self.values = torch.as_tensor(values, dtype=torch.float32)
        self.marks = torch.as_tensor(marks, dtype=torch.float32)
        self.seq_len, self.pred_len = seq_len, pred_len
        if len(self) <= 0:
            raise ValueError(
                f"a split of {len(values)} rows is too short for {seq_len}+{pred_len}-step windows"
            )

    def __len__(self) -> int:
        return len(self.values) - self.seq_len - self.pred_len + 1

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        mid, end = i + self.seq_len, i + self.seq_len + self.pred_len
        return {
            "x": self.values[i:mid],
            "y": self.values[mid:end],
            "x_mark": self.marks[i:mid],
            "y_mark": self.marks[mid:end],
        }


class TSFDataModule(L.LightningDataModule):
    """Windows of a registered CSV source, scaled with training statistics.

    ``rules`` is the protocol (:class:`TSFProtocol`): whether the last incomplete test batch is
    dropped, as TSLib did until July 2024.
    """

    def __init__(
        self,
        source: str,
        layout: str,
        seq_len: int = 96,
        pred_len: int = 96,
        features: str = "M",
        target: str = "OT",
        freq: str = "h",
        n_channels: int | None = None,
        batch_size: int = 32,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        rules: TSFProtocol = DEFAULT,
        data_dir: str = "data",
        mirror: str | None = None,
        download: bool = True,
        path: str | None = None,
    ) -> None:
        super().__init__()
        self.source, self.layout, self.path = source, layout, path
        self.seq_len, self.pred_len = seq_len, pred_len
        self.features, self.target, self.freq = features, target, freq
        self.n_channels, self.batch_size = n_channels, batch_size
        self.loader_options = loader_options(num_workers, pin_memory, persistent_workers)
        self.rules, self.location = rules, DataLocation(source, data_dir, mirror, download)
        self.datasets: dict[str, ForecastWindows] = {}
        self.scaler: Standardizer | None = None

    def csv_path(self) -> Path:
        """An explicit ``path`` wins (own data); otherwise the registry resolves and verifies the file."""
        return self.location.own_or_registered(self.path, "csv")

    def prepare_data(self) -> None:
        self.csv_path()

    def setup(self, stage: str | None = None) -> None:
        if self.datasets:
            return
        path = self.csv_path()
        frame = read_csv(path)
        channels = select_columns(frame, self.features, self.target, path)
        values = numeric_values(channels, path)
        if self.n_channels is not None and values.shape[1] != self.n_channels:
            raise DataError(
                f"task.n_channels={self.n_channels} but {self.path or self.source} has {values.shape[1]} "
                f"channels with task.features={self.features}; set task.n_channels={values.shape[1]}"
            )
        dates = parse_dates(frame["date"], path)
        if self.path:  # own data; the registry's files are checksummed and in order
            require_time_order(dates, path)
        marks = time_features(dates, self.freq)
        borders = split_borders(len(frame), self.seq_len, self.layout, path)
        require_windows(borders, self.seq_len, self.pred_len, len(frame), path)
        train_start, train_end = borders[0]
        self.scaler = Standardizer.fit(values[train_start:train_end])
        require_scalable(self.scaler.mean, self.scaler.std, path, [f"column {c!r}" for c in channels.columns])
        scaled = self.scaler.transform(values)
        for split, (start, end) in zip(SPLITS, borders, strict=True):
            self.datasets[split] = ForecastWindows(
                scaled[start:end], marks[start:end], self.seq_len, self.pred_len
            )

    def _loader(self, split: str, shuffle: bool, drop_last: bool) -> DataLoader:
        return make_loader(self.datasets[split], self.batch_size, shuffle, drop_last, **self.loader_options)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True, drop_last=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False, drop_last=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", shuffle=False, drop_last=self.rules.drop_last_test_batch)
