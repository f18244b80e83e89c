"""TSLib's ``timeF`` calendar features: each in [-0.5, 0.5], chosen by the sampling frequency."""

from __future__ import annotations

import numpy as np
import pandas as pd

FEATURES = {
    "minute_of_hour": lambda d: d.minute / 59.0 - 0.5,
    "hour_of_day": lambda d: d.hour / 23.0 - 0.5,
    "day_of_week": lambda d: d.dayofweek / 6.0 - 0.5,
    "day_of_month": lambda d: (d.day - 1) / 30.0 - 0.5,
    "day_of_year": lambda d: (d.dayofyear - 1) / 365.0 - 0.5,
    "month_of_year": lambda d: (d.month - 1) / 11.0 - 0.5,
    "week_of_year": lambda d: (d.isocalendar().week.to_numpy() - 1) / 52.0 - 0.5,
}

# TSLib runs every benchmark with its default ``--freq h`` (4 features), including the 15-minute ETTm sets.
FEATURES_BY_FREQ = {
    "h": ["hour_of_day", "day_of_week", "day_of_month", "day_of_year"],
    "t": ["minute_of_hour", "hour_of_day", "day_of_week", "day_of_month", "day_of_year"],
    "d": ["day_of_week", "day_of_month", "day_of_year"],
    "b": ["day_of_week", "day_of_month", "day_of_year"],
    "w": ["day_of_month", "week_of_year"],
    "m": ["month_of_year"],
}


def time_features(dates: pd.DatetimeIndex, freq: str = "h") -> np.ndarray:
    """``(len(dates), n_features)`` float32 calendar features for ``freq`` (h, t, d, b, w, m)."""
    if freq not in FEATURES_BY_FREQ:
        raise ValueError(f"task.freq={freq!r}: choose one of {sorted(FEATURES_BY_FREQ)}")
    dates = pd.DatetimeIndex(dates)
    columns = [np.asarray(FEATURES[name](dates), dtype=np.float32) for name in FEATURES_BY_FREQ[freq]]
    return np.stack(columns, axis=1)


def n_time_features(freq: str) -> int:
    return len(FEATURES_BY_FREQ[freq])
