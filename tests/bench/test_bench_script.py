"""scripts/bench.py records the command it ran as, thread setting and nice level included (the
committed bench once named a nice level its run did not have), and says when a missed training
target was out of reach of any attention."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_script", ROOT / "scripts" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_invocation_names_threads_nice_level_and_arguments(bench_script, monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(bench_script.os, "nice", lambda increment: 10 + increment)
    assert bench_script.invocation(["--out", "my dir"]) == (
        "OMP_NUM_THREADS=3 nice -n 10 python scripts/bench.py --out 'my dir'"
    )


def test_invocation_leaves_out_what_was_not_set(bench_script, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(bench_script.os, "nice", lambda increment: increment)
    assert bench_script.invocation([]) == "python scripts/bench.py"


def _training_rows(transformer: float, aaren: float, unmixed: float) -> list[dict]:
    common = {"family": "ef", "task": "ef/mimic", "shape": "batch 16", "note": ""}
    rates = {"transformer": transformer, "aaren": aaren, "aaren_no_mixing": unmixed}
    return [{**common, "model": model, "steps_per_s": rate} for model, rate in rates.items()]


@pytest.mark.parametrize(
    ("unmixed", "out_of_reach"), [(10.5, True), (11.0, False), (12.0, False)], ids=["below", "at", "above"]
)
def test_a_missed_training_target_says_when_no_attention_could_meet_it(
    bench_script, unmixed: float, out_of_reach: bool
) -> None:
    report = {"steps": [], "operator": [], "training": _training_rows(10.0, 10.2, unmixed)}
    (row,) = [r for r in bench_script.targets_table(report).splitlines() if "training steps/s, ef" in r]
    assert "| 1.020x | MISSED" in row
    assert ("out of reach of any attention" in row) == out_of_reach
    if out_of_reach:
        assert f"{unmixed / 10:.3f}x" in row


def test_the_training_table_shows_the_ceiling_beside_the_ratio(bench_script) -> None:
    table = bench_script.training_table(_training_rows(10.0, 10.2, 10.5))
    assert table.splitlines()[-1].endswith("| 10.00 | 10.20 | 1.020x | 10.50 | 1.050x |")


def test_quick_is_a_few_sizes_one_round_and_leaves_the_committed_bench_alone(bench_script) -> None:
    """``make bench`` took 5+ minutes and 7.8 GB before its first round ended; a first look must not."""
    full, quick = bench_script.parse_args([]), bench_script.parse_args(["--quick"])
    assert (full.rounds, full.out, full.contexts[-1], full.stream_tokens) == (
        3,
        "results/bench",
        16384,
        16384,
    )
    assert quick.rounds == 1 and quick.out == "outputs/bench-quick"
    assert max(quick.lengths) <= 512 and max(quick.contexts) <= 512 and quick.batches == [1]
    assert quick.stream_tokens <= 1024 and quick.train_seconds <= 1.0
    # a flag given beside --quick wins over the quick grid
    assert bench_script.parse_args(["--quick", "--contexts", "64"]).contexts == [64]


def test_make_bench_quick_runs_the_quick_mode() -> None:
    import re

    (recipe,) = re.findall(r"^bench-quick:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert recipe.endswith("scripts/bench.py --quick")
