"""Each family's stream is timed for each backbone through the family's own streaming code, and the
per-token figure is the unit's time over its tokens."""

from __future__ import annotations

import pytest

from recurrent_attention.bench import family_streams
from recurrent_attention.bench.family_streams import FamilyStreamTiming, as_rows, family_stream_timings


def test_every_family_and_backbone_gets_a_row_and_video_has_no_softmax_stream(monkeypatch) -> None:
    units = []
    timed = family_streams._mean_seconds

    def counting(make, n, rounds):
        units.append(n)
        return timed(make, n, rounds)

    monkeypatch.setattr(family_streams, "_mean_seconds", counting)
    rows = {
        (r.family, r.model): r
        for r in family_stream_timings(d_model=16, heads=2, layers=1, units=3, rounds=1)
    }
    models = ("transformer", "aaren", "linear_attention")
    assert set(rows) == {(f, m) for f in ("backbone", "rl", "ef", "video") for m in models}
    assert {(f, r.tokens_per_unit) for (f, _), r in rows.items()} == {
        ("backbone", 1), ("rl", 3), ("ef", 1), ("video", 17)
    }  # fmt: skip
    video = rows[("video", "transformer")]
    assert video.us_per_unit is None and "softmax" in video.note
    assert all(r.us_per_unit > 0 for key, r in rows.items() if key != ("video", "transformer"))
    assert units == [3] * 9 + [8, 8]  # video: an eighth of the units, at least 8 frames


def test_per_token_is_per_unit_over_the_units_tokens() -> None:
    row = FamilyStreamTiming("rl", "aaren", "environment step", 3, 300.0)
    assert row.us_per_token == pytest.approx(100.0)
    assert as_rows([row])[0]["us_per_token"] == pytest.approx(100.0)
    assert FamilyStreamTiming("video", "transformer", "frame", 17, None).us_per_token is None


def test_each_units_fastest_round_is_kept_then_averaged(monkeypatch) -> None:
    """Round 1 slow on unit 0, round 2 slow on unit 1: the figure is the mean of the two fast ones."""
    clock = iter([0.0, 1.0, 1.0, 1.1, 0.0, 0.1, 0.1, 1.1])  # (start, end) of units 0, 1 per round
    monkeypatch.setattr(family_streams.time, "perf_counter", lambda: next(clock))
    assert family_streams._mean_seconds(lambda: lambda i: None, units=2, rounds=2) == pytest.approx(0.1)
