"""The training benchmark: its stopping rule (on the synthetic sin dataset, generated in memory), the
Aaren/Transformer ratio its target and plot read, and the no-token-mixing model whose ratio is that
target's ceiling."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch

from recurrent_attention.bench import training
from recurrent_attention.bench.training import NO_MIXING, aaren_speedups, family_timings, remove_token_mixing
from recurrent_attention.models.aaren import Aaren
from tests.helpers.d4rl_files import write_tiny_d4rl


def _timed_steps(timings: list) -> list[int]:
    return [int(re.search(r"(\d+) steps", t.shape).group(1)) for t in timings]


def test_a_fast_family_keeps_stepping_until_the_time_floor() -> None:
    quick = family_timings("ef", "ef/sin", steps=2, models=training.AAREN_PAIR)
    assert _timed_steps(quick) == [2, 2]
    longer = family_timings("ef", "ef/sin", steps=2, min_seconds=1.0, models=training.AAREN_PAIR)
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


def test_the_ceiling_divides_the_unmixed_models_rate_and_is_none_where_it_was_not_timed() -> None:
    rows = [
        {"family": "tsf", "model": "transformer", "steps_per_s": 8.0},
        {"family": "tsf", "model": "aaren", "steps_per_s": 10.0},
        {"family": "tsf", "model": NO_MIXING, "steps_per_s": 12.0},
        {"family": "ef", "model": "transformer", "steps_per_s": 4.0},
        {"family": "ef", "model": "aaren", "steps_per_s": 3.0},
    ]
    assert aaren_speedups(rows, NO_MIXING) == {"ef": None, "tsf": 1.5}


def _first_token_reach(model: Aaren) -> torch.Tensor:
    """How much each output moves when only the first token changes (per position)."""
    x = torch.randn(2, 5, 16)
    changed = x.clone()
    changed[:, 0] += 1.0
    with torch.no_grad():
        return (model(changed)[0] - model(x)[0]).abs().amax(dim=(0, 2))


def test_without_token_mixing_each_output_depends_on_its_own_token_only() -> None:
    torch.manual_seed(0)
    mixing = Aaren(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0).eval()
    unmixed = remove_token_mixing(Aaren(d_model=16, n_heads=2, n_layers=2, d_ff=32, dropout=0.0).eval())
    assert (_first_token_reach(mixing)[1:] > 1e-4).all()
    reach = _first_token_reach(unmixed)
    assert reach[0] > 1e-4 and (reach[1:] == 0).all()


def test_every_bench_backbone_and_the_ceiling_take_turns_on_the_same_batches() -> None:
    """`make bench` times linear attention beside Aaren and the Transformer (issue 49)."""
    timings = family_timings("ef", "ef/sin", steps=2, ceiling=True)
    assert [t.model for t in timings] == ["transformer", "aaren", "linear_attention", NO_MIXING]
    assert _timed_steps(timings) == [2, 2, 2, 2]
    assert all(t.steps_per_s > 0 for t in timings)


def test_training_timings_measure_the_families_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(training, "FAMILY_TASKS", {"ef": "ef/sin", "tsf": "ef/sin"})
    timings = training.training_timings(steps=2, families=["ef"])
    assert [(t.family, t.model) for t in timings] == [
        ("ef", model) for model in (*training.MODELS, NO_MIXING)
    ]


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
        models=training.AAREN_PAIR,
    )
    assert _timed_steps(timings) == [2, 2]
    assert all("d_model 16" in t.shape and t.steps_per_s == 1.0 for t in timings)


def test_compiled_trainees_take_their_turn_and_give_a_compiled_over_eager_ratio() -> None:
    """`make bench`'s compiled / eager column (issue 64), at smoke size: the compiled backbone
    (aot_eager here, inductor in the bench, for its compile time) is timed on the same batches,
    after warm-up steps that hold the compilation, and divided by its own eager rate."""
    timings = family_timings("ef", "ef/sin", steps=2, models=("transformer",), compile_backend="aot_eager")
    assert [t.model for t in timings] == ["transformer", "transformer" + training.COMPILED]
    assert _timed_steps(timings) == [2, 2]
    (ratio,) = training.compile_speedups(training.as_rows(timings))["ef"].values()
    eager, compiled = (t.steps_per_s for t in timings)
    assert ratio == pytest.approx(compiled / eager) and ratio > 0


def test_compile_speedups_divide_each_models_compiled_rate_by_its_eager_one() -> None:
    rows = [
        {"family": "tsf", "model": "transformer", "steps_per_s": 8.0},
        {"family": "tsf", "model": "transformer+compiled", "steps_per_s": 12.0},
        {"family": "tsf", "model": "aaren", "steps_per_s": 10.0},
        {"family": "tsf", "model": "aaren+compiled", "steps_per_s": 5.0},
        {"family": "rl", "model": "aaren", "steps_per_s": None},
        {"family": "rl", "model": "aaren+compiled", "steps_per_s": None},
    ]
    assert training.compile_speedups(rows) == {
        "tsf": {"transformer": 1.5, "aaren": 0.5},
        "rl": {"aaren": None},
    }
