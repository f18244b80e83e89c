"""TSLib borders, train-only scaling, time features and CSV quirks, against hand-computed values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recurrent_attention.tasks.tsf.data import TSFDataModule, read_csv, split_borders
from recurrent_attention.tasks.tsf.timefeatures import time_features
from tests.helpers.protocols import protocol


def write_ett_csv(path: Path, n_rows: int, freq: str = "h", seed: int = 0) -> pd.DataFrame:
    """An ETT-format file: date + HUFL..LULL + OT, values whose split statistics differ."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"date": pd.date_range("2016-07-01", periods=n_rows, freq=freq)})
    for i, col in enumerate(["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]):
        frame[col] = np.arange(n_rows) * (0.01 * (i + 1)) + rng.normal(0, 1 + i, n_rows)
    frame["date"] = frame["date"].dt.strftime("%Y-%m-%d %H:%M:%S")
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return frame


def own_csv_run(folder: Path, n_rows: int = 240) -> list[str]:
    """Overrides for a small TSF run on an own CSV (custom 70/10/20 layout, input 16, horizon 8).

    240 rows leave 48 test rows, so 48 - 8 + 1 = 41 test windows: an odd count.
    """
    csv = folder / "own.csv"
    write_ett_csv(csv, n_rows)
    return [
        "task=tsf/etth1",
        "task.layout=custom",
        "task.n_channels=7",
        f"task.datamodule.path={csv}",
        "task.seq_len=16",
        "task.pred_len=8",
    ]


def test_ett_hour_borders_are_twelve_four_four_months() -> None:
    assert split_borders(17420, 96, "ett_hour") == [(0, 8640), (8640 - 96, 11520), (11520 - 96, 14400)]
    assert split_borders(69680, 96, "ett_minute") == [(0, 34560), (34560 - 96, 46080), (46080 - 96, 57600)]


def test_custom_borders_are_seventy_ten_twenty() -> None:
    # 7588 rows (exchange_rate): int(0.7 n) = 5311 train, int(0.2 n) = 1517 test, 760 val.
    assert split_borders(7588, 96, "custom") == [(0, 5311), (5311 - 96, 6071), (6071 - 96, 7588)]


def test_too_short_ett_file_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="at least 14400 rows"):
        split_borders(1000, 96, "ett_hour")


def test_scaler_uses_training_rows_only_and_windows_cover_every_target(tmp_path: Path) -> None:
    frame = write_ett_csv(tmp_path / "ETTh1.csv", 14400)
    dm = TSFDataModule(
        "ETTh1", "ett_hour", seq_len=96, pred_len=24, n_channels=7, path=str(tmp_path / "ETTh1.csv")
    )
    dm.setup()
    train_values = frame.iloc[:8640, 1:].to_numpy()
    np.testing.assert_allclose(dm.scaler.mean, train_values.mean(axis=0))
    np.testing.assert_allclose(dm.scaler.std, train_values.std(axis=0))  # population std, as sklearn
    assert len(dm.datasets["train"]) == 8640 - 96 - 24 + 1
    assert len(dm.datasets["val"]) == 2880 - 24 + 1
    assert len(dm.datasets["test"]) == 2880 - 24 + 1
    # The first test window's inputs start 96 rows before the test border; the target is row 11520 on.
    first = dm.datasets["test"][0]
    expected_target = (frame.iloc[11520:11544, 1:].to_numpy() - dm.scaler.mean) / dm.scaler.std
    np.testing.assert_allclose(first["y"].numpy(), expected_target, rtol=1e-5, atol=1e-5)
    assert first["x"].shape == (96, 7) and first["x_mark"].shape == (96, 4)
    # The last test window ends on the last test row: nothing is dropped.
    last = dm.datasets["test"][len(dm.datasets["test"]) - 1]
    expected_last = (frame.iloc[14376:14400, 1:].to_numpy() - dm.scaler.mean) / dm.scaler.std
    np.testing.assert_allclose(last["y"].numpy(), expected_last, rtol=1e-5, atol=1e-5)


def test_reference_protocol_drops_the_last_test_batch(tmp_path: Path) -> None:
    write_ett_csv(tmp_path / "e.csv", 14400)
    common = dict(seq_len=96, pred_len=24, batch_size=32, path=str(tmp_path / "e.csv"))
    full = TSFDataModule("ETTh1", "ett_hour", **common)
    quirk = TSFDataModule("ETTh1", "ett_hour", rules=protocol("tsf", "reference"), **common)
    for dm in (full, quirk):
        dm.setup()
    n_windows = 2880 - 24 + 1
    assert sum(len(b["y"]) for b in full.test_dataloader()) == n_windows
    assert sum(len(b["y"]) for b in quirk.test_dataloader()) == (n_windows // 32) * 32


def test_channel_count_mismatch_names_the_key(tmp_path: Path) -> None:
    write_ett_csv(tmp_path / "e.csv", 14400)
    dm = TSFDataModule("ETTh1", "ett_hour", n_channels=8, path=str(tmp_path / "e.csv"))
    # own data: the message names the user's file, not the registry's ETTh1 (the bug), and the fix
    with pytest.raises(ValueError) as info:
        dm.setup()
    assert str(info.value) == (
        f"task.n_channels=8 but {tmp_path / 'e.csv'} has 7 channels with task.features=M; "
        "set task.n_channels=7"
    )


def test_custom_csv_with_crlf_and_latin1_header(tmp_path: Path) -> None:
    header = "date,p (mbar),SWDR (W/m\xb2),OT"
    dates = pd.date_range("2020-01-01", periods=200, freq="10min").strftime("%Y-%m-%d %H:%M:%S")
    rows = [f"{date},{i},{2 * i},{3 * i}" for i, date in enumerate(dates)]
    (tmp_path / "weather.csv").write_bytes(("\r\n".join([header, *rows]) + "\r\n").encode("latin-1"))
    frame = read_csv(tmp_path / "weather.csv")
    assert list(frame.columns) == ["date", "p (mbar)", "SWDR (W/m²)", "OT"]
    assert len(frame) == 200 and frame["OT"].iloc[-1] == 597
    dm = TSFDataModule(
        "weather", "custom", seq_len=8, pred_len=4, features="S", path=str(tmp_path / "weather.csv")
    )
    dm.setup()
    assert dm.datasets["train"][0]["x"].shape == (8, 1)


def test_time_features_by_hand() -> None:
    dates = pd.DatetimeIndex(["2016-07-01 00:00:00", "2016-12-31 23:45:00"])
    hourly = time_features(dates, "h")
    # 2016-07-01 is a Friday (dayofweek 4), day-of-year 183; 2016-12-31 is a Saturday, day 366.
    np.testing.assert_allclose(
        hourly[0], [0 / 23 - 0.5, 4 / 6 - 0.5, 0 / 30 - 0.5, 182 / 365 - 0.5], rtol=1e-6
    )
    np.testing.assert_allclose(
        hourly[1], [23 / 23 - 0.5, 5 / 6 - 0.5, 30 / 30 - 0.5, 365 / 365 - 0.5], rtol=1e-6
    )
    assert time_features(dates, "t")[1, 0] == pytest.approx(45 / 59 - 0.5)
    with pytest.raises(ValueError, match=r"task.freq='x'"):
        time_features(dates, "x")


def test_a_csv_path_that_is_a_folder_is_one_data_error(tmp_path: Path) -> None:
    from recurrent_attention.data import DataError

    with pytest.raises(
        DataError, match=rf"^{tmp_path}: a folder, not a CSV file; give the path of the file itself$"
    ):
        read_csv(tmp_path)
