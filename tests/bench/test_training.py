"""The training benchmark: its stopping rule (on the synthetic sin dataset, generated in memory) and
the Aaren/Transformer ratio its target and plot read."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from recurrent_attention.bench import training
from recurrent_attention.bench.training import aaren_speedups, family_timings
from tests.helpers.d4rl_files import write_tiny_d4rl


def _timed_steps(timings: list) -> list[int]:
    return [int(re.search(r"(\d+) steps", t.shape).group(1)) for t in timings]


def test_a_fast_family_keeps_stepping_until_the_time_floor() -> None:
    quick = family_timings("ef", "ef/sin", steps=2)
    assert _timed_steps(quick) == [2, 2]
    longer = family_timings("ef", "ef/sin", steps=2, min_seconds=1.0)
    counts = _timed_steps(longer)
    assert counts[0] == counts[1] > 2
    assert all(t.steps_per_s > 0 for t in quick + longer)


def test_aaren_speedups_divide_each_familys_rates_and_leave_skipped_ones_unmeasured() -> None:
    rows = [
        {"family": "tsf", "model": "transformer", "steps_per_s": 8.0},
        {"family": "tsf", "model": "aaren", "steps_per_s": 10.0},
        {"family": "ef", "model": "aaren", "steps_per_s": 3.0},
        {"family": "ef", "model": "transformer", "steps_per_s": 4.0},
        {"family": "rl", "model": "transformer", "steps_per_s": None},
        {"family": "rl", "model": "aaren", "steps_per_s": None},
    ]
    assert aaren_speedups(rows) == {"ef": 0.75, "rl": None, "tsf": 1.25}


def test_training_timings_measure_the_families_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training, "FAMILY_TASKS", {"ef": "ef/sin", "tsf": "ef/sin"})
    timings = training.training_timings(steps=2, families=["ef"])
    assert [(t.family, t.model) for t in timings] == [("ef", model) for model in training.MODELS]


def test_other_sizes_warm_up_and_clock_as_asked(tmp_path: Path) -> None:
    """scripts/bench_rl_update.py's settings reach the timing: train.py overrides (here the smoke
    sizes and an own data file), the untimed warm-up updates, and the clock a step is measured by."""
    data = write_tiny_d4rl(tmp_path / "hopper.hdf5")
    ticks = itertools.count()  # every reading one second later: every timed update takes 1 s
    timings = family_timings(
        "rl",
        "rl/hopper_medium_sac",
        steps=2,
        overrides=["preset=smoke", f"task.datamodule.path={data}"],
        warmup=3,
        clock=lambda: float(next(ticks)),
    )
    assert _timed_steps(timings) == [2, 2]
    assert all("d_model 16" in t.shape and t.steps_per_s == 1.0 for t in timings)
