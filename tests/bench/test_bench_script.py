"""scripts/bench.py records the command it ran as, thread setting and nice level included (the
committed bench once named a nice level its run did not have), says when a missed training
target was out of reach of any attention, and reports linear attention beside Aaren without
touching Aaren's targets."""

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


def _training_rows(
    transformer: float, aaren: float, unmixed: float, linear: float | None = None
) -> list[dict]:
    common = {"family": "ef", "task": "ef/mimic", "shape": "batch 16", "note": ""}
    rates = {"transformer": transformer, "aaren": aaren, "aaren_no_mixing": unmixed}
    if linear is not None:
        rates["linear_attention"] = linear
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
    assert table.splitlines()[-1].endswith("| 10.00 | 10.20 | 1.020x | 10.50 | 1.050x |  |  |")


def test_the_training_table_gives_linear_attentions_rate_and_ratio(bench_script) -> None:
    header, _, row = bench_script.training_table(_training_rows(10.0, 10.2, 10.5, linear=8.0)).splitlines()
    assert header.endswith("| linear attention steps/s | linear attention / Transformer |")
    assert row.endswith("| 10.00 | 10.20 | 1.020x | 10.50 | 1.050x | 8.00 | 0.800x |")


def _step_rows(linear: bool) -> list[dict]:
    """Batch 1 at N = 128: Transformer 200 µs (2 MiB cache), Aaren 50 µs, linear attention 80 µs;
    exported: Aaren 40 µs, linear attention 44 µs."""
    cells = {"transformer": (200.0, 2 * 2**20), "aaren": (50.0, 3072), "aaren_onnx": (40.0, 3072)}
    if linear:
        cells["linear_attention"] = (80.0, 33792)
        cells["linear_attention_onnx"] = (44.0, 33792)
    return [
        {"model": m, "batch": 1, "n": 128, "us_per_token": us, "state_bytes": b, "note": ""}
        for m, (us, b) in cells.items()
    ]


def test_the_step_table_gives_linear_attentions_step_ratio_and_state(bench_script) -> None:
    header, _, row = bench_script.step_table(_step_rows(linear=True)).splitlines()
    assert header.endswith(
        "| linear attention µs | linear attention / Transformer | linear attention state KiB "
        "| linear attention / Aaren | linear attention ONNX µs | ONNX: linear attention / Aaren |"
    )
    assert row.endswith("| 2.0 | 3.0 | 80 | 0.400x | 33.0 | 1.600x | 44 | 1.100x |")
    # a report from before linear attention was timed still renders, its columns blank
    (old,) = bench_script.step_table(_step_rows(linear=False)).splitlines()[2:]
    assert old.endswith("| 2.0 | 3.0 |  |  |  |  |  |  |")


def test_linear_attention_leaves_aarens_targets_as_they_were(bench_script) -> None:
    """Aaren's targets compare Aaren with the Transformer only: adding linear attention's rows to a
    report changes none of them; linear attention's own targets read "not measured" without them."""
    steps = [{**r, "batch": b, "n": n} for r in _step_rows(linear=True) for b in (1, 64) for n in (128, 8192)]
    report = {
        "steps": steps,
        "operator": [{"path": p, "n": n, "seconds": 1.0} for p in ("sdpa", "chunked") for n in (2048, 8192)],
        "training": _training_rows(10.0, 10.2, 10.5, linear=20.0),
    }
    without = {
        **report,
        "steps": [r for r in steps if r["model"] != "linear_attention"],
        "training": [r for r in report["training"] if r["model"] != "linear_attention"],
    }
    table, table_without = bench_script.targets_table(report), bench_script.targets_table(without)

    def aarens(text: str) -> list[str]:
        return [row for row in text.splitlines() if "linear" not in row]

    assert aarens(table) == aarens(table_without)
    assert "| Aaren step / lean Transformer step, N=128, batch 1 <= 0.5x | 0.250x | met |" in table
    assert "| linear attention step / Aaren step, batch 1 (median over the N) | not measured | |" in (
        table_without
    )


def test_linear_attentions_targets_take_the_worst_n_and_the_median_step(bench_script) -> None:
    """The chunked path must hold at every N >= 512 (N=96 does not count); the steps: a row per batch."""
    seconds = {
        ("sdpa", 96): 1.0,
        ("linear_chunked", 96): 5.0,
        ("sdpa", 512): 1.0,
        ("linear_chunked", 512): 0.5,
    }
    seconds |= {("sdpa", 2048): 2.0, ("linear_chunked", 2048): 1.8}
    steps = [{**r, "n": n} for r in _step_rows(linear=True) for n in (128, 512, 2048)]
    slow_64 = {"linear_attention": 1000.0, "linear_attention_onnx": 1000.0}  # batch 64: its own rows
    steps += [{**r, "batch": 64, "us_per_token": slow_64.get(r["model"], 1.0)} for r in steps]
    (slow,) = [r for r in steps if (r["model"], r["batch"], r["n"]) == ("linear_attention", 1, 2048)]
    slow["us_per_token"] = 500.0  # one disturbed N: the median is the other two's 80 / 50
    report = {
        "steps": steps,
        "operator": [{"path": p, "n": n, "seconds": s} for (p, n), s in seconds.items()],
        "training": [],
    }
    table = bench_script.targets_table(report)
    assert (
        "| linear attention chunked / Transformer (SDPA) fwd+bwd, worst N >= 512 <= 1x | 0.900x | met |"
        in table
    )
    assert (
        "| linear attention step / Aaren step, batch 1 (median over the N) <= 1.2x | 1.600x | MISSED |"
        in table
    )
    assert (
        "| linear attention ONNX step / Aaren ONNX step, batch 1 (median over the N) <= 1.2x | 1.100x | met |"
        in (table)
    )
    assert (
        "| linear attention step / Aaren step, batch 64 (median over the N) <= 1.2x | 1000.000x | MISSED |"
        in table
    )


def test_aarens_bound_target_is_the_median_multiple_of_the_compiled_step_per_batch(bench_script) -> None:
    """Aaren's compiled step (not its ONNX export, not linear attention) against this machine's bound:
    the median over the N of each batch, so one disturbed N does not decide it; a report without
    roofline rows reads "not measured"."""
    multiples = {("aaren", 1): [1.5, 9.0, 1.9], ("aaren", 64): [2.5, 2.1, 1.0], ("aaren_onnx", 1): [0.5] * 3}
    multiples[("linear_attention", 64)] = [0.5] * 3
    roofline = [
        {"model": model, "batch": batch, "n": n, "multiple": m}
        for (model, batch), values in multiples.items()
        for n, m in zip((128, 512, 2048), values, strict=True)
    ]
    rows = bench_script.bound_targets(roofline)
    assert rows == [
        "| Aaren step / this machine's bound, batch 1 (median over the N) <= 2x | 1.900x | met |",
        "| Aaren step / this machine's bound, batch 64 (median over the N) <= 2x | 2.100x | MISSED |",
    ]
    assert bench_script.bound_targets([])[0].endswith("| not measured | |")


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


def test_the_compiled_table_gives_each_models_compiled_over_eager_ratio(bench_script) -> None:
    rows = _training_rows(10.0, 10.2, 10.5) + [
        {"family": "ef", "task": "ef/mimic", "shape": "", "note": "", "model": m, "steps_per_s": rate}
        for m, rate in (("transformer+compiled", 15.0), ("aaren+compiled", 5.1))
    ]
    header, _, row = bench_script.compiled_table(rows).splitlines()
    assert header == "| family | task | aaren compiled / eager | transformer compiled / eager |"
    assert row == "| ef | ef/mimic | 0.500x | 1.500x |"
    assert "compiled" not in bench_script.training_table(rows)  # the eager table is unchanged
    assert "compile" in bench_script.parse_args(["--quick"]).skip  # a first look compiles nothing


def test_the_family_stream_table_gives_per_unit_per_token_and_ratios(bench_script) -> None:
    models = ("transformer", "aaren", "linear_attention")
    rows = [
        {"family": family, "model": model, "unit": "u", "tokens_per_unit": tokens, "note": ""}
        | {"us_per_unit": us, "us_per_token": None if us is None else us / tokens}
        for family, tokens, times in (("rl", 3, (600.0, 300.0, 450.0)), ("video", 17, (None, 170.0, 340.0)))
        for model, us in zip(models, times, strict=True)
    ]
    _, _, rl, video = bench_script.family_stream_table(rows).splitlines()
    assert rl == "| rl | u (3) | 600 | 300 | 450 | 200.0 | 100.0 | 150.0 | 0.500x | 0.750x | 1.500x |"
    assert video == "| video | u (17) | n/a | 170 | 340 | n/a | 10.0 | 20.0 |  |  | 2.000x |"


def test_a_missed_linear_step_target_names_the_floor_when_the_models_work_is_past_it(bench_script) -> None:
    """Linear attention's step does more matmul work than Aaren's (its query projection) and carries
    a larger state: where the two models' FLOP ratio is already over 1.2x, the missed row says so,
    with both ratios; under it, or without a roofline, a missed row is a plain MISSED."""
    steps = [{**r, "batch": b} for r in _step_rows(linear=True) for b in (1, 64)]
    flops = {
        ("aaren", 1): 100,
        ("linear_attention", 1): 121,
        ("aaren", 64): 100,
        ("linear_attention", 64): 110,
    }
    roofline = [
        {"model": m, "batch": b, "n": 128, "flops": f, "multiple": 1.0} for (m, b), f in flops.items()
    ]
    report = {"steps": steps, "operator": [], "training": [], "roofline": roofline}
    rows = [row for row in bench_script.targets_table(report).splitlines() if "linear attention step" in row]
    assert rows == [
        "| linear attention step / Aaren step, batch 1 (median over the N) <= 1.2x | 1.600x | "
        "MISSED (under its floor: linear attention's step does 1.210x Aaren's matmul work, "
        "the query projection that Aaren's learned query folds away, and carries a 11x larger state, "
        "read and written every token) |",
        "| linear attention step / Aaren step, batch 64 (median over the N) <= 1.2x | 1.600x | MISSED |",
    ]
    without = bench_script.targets_table({**report, "roofline": []})
    assert (
        "| linear attention step / Aaren step, batch 1 (median over the N) <= 1.2x | 1.600x | MISSED |"
        in without
    )


def test_the_bf16_table_sets_each_models_bf16_step_beside_its_float32_one(bench_script) -> None:
    """bfloat16 over float32 per model, and the two bfloat16 steps against each other; no bfloat16
    rows (an older report, or ``--skip steps``): no table."""
    cells = {"aaren": 40.0, "aaren_bf16": 20.0, "linear_attention": 60.0, "linear_attention_bf16": 24.0}
    rows = [{"model": m, "batch": 1, "n": 128, "us_per_token": us} for m, us in cells.items()]
    header, _, row = bench_script.bf16_table(rows).splitlines()
    assert header.startswith("| batch | N | Aaren µs | Aaren bf16 µs |")
    assert row == "| 1 | 128 | 40 | 20 | 0.500x | 60 | 24 | 0.400x | 1.200x |"
    assert bench_script.bf16_table([r for r in rows if "bf16" not in r["model"]]) == ""
    assert set(bench_script.bf16_variants({"aaren": None, "transformer": None})) == {"aaren_bf16"}
