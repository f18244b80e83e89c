"""scripts/bench.py records the command it ran as, thread setting and nice level included: the
committed bench once named a nice level its run did not have."""

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
