"""The training benchmark's stopping rule, on the synthetic sin dataset (generated in memory)."""

from __future__ import annotations

import re

from recurrent_attention.bench.training import family_timings


def _timed_steps(timings: list) -> list[int]:
    return [int(re.search(r"(\d+) steps", t.shape).group(1)) for t in timings]


def test_a_fast_family_keeps_stepping_until_the_time_floor() -> None:
    quick = family_timings("ef", "ef/sin", steps=2)
    assert _timed_steps(quick) == [2, 2]
    longer = family_timings("ef", "ef/sin", steps=2, min_seconds=1.0)
    counts = _timed_steps(longer)
    assert counts[0] == counts[1] > 2
    assert all(t.steps_per_s > 0 for t in quick + longer)
