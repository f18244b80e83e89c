"""``scripts/bench_gpu.py`` writes its report after each part, so a window's timeout in the middle of
one keeps the parts measured before it (issue 64: it wrote only once every part had finished)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from recurrent_attention.bench import gpu
from recurrent_attention.bench.gpu import PARTS, gpu_bench, write_report


class Stopped(BaseException):
    """Stands for the kill at a check's timeout: not an ``Exception``, so no part's guard catches it."""


def test_a_run_stopped_in_a_part_keeps_the_parts_before_it(monkeypatch, tmp_path: Path) -> None:
    row = {"path": "sdpa", "n": 64, "seconds": 0.001}

    def stopped() -> list[dict]:
        raise Stopped

    def failed() -> list[dict]:
        raise RuntimeError("out of memory")

    parts = {"operator": lambda: [row], "training": failed, "steps": stopped}
    monkeypatch.setattr(gpu, "bench_parts", lambda device, smoke: parts)
    with pytest.raises(Stopped):
        gpu_bench(smoke=True, on_part=partial(write_report, tmp_path))
    report = json.loads((tmp_path / "bench_gpu.json").read_text())
    assert report["parts_done"] == ["operator", "training"]
    assert report["operator"] == [row]
    assert [e["part"] for e in report["errors"]] == ["training"]  # a failed part is recorded, not lost
    text = (tmp_path / "bench_gpu.md").read_text()
    assert "failed: training: RuntimeError: out of memory" in text
    assert "not reached (the run stopped first): steps" in text
    assert list(PARTS) == list(parts)  # the stand-ins cover every part
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench_gpu.json", "bench_gpu.md"]  # no temp left
