"""`make figures` redraws the bench's PNGs from the committed report: the plots read every field the
report has (the training ceiling included) and one without the ceiling rows (older reports) alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.image import imread

from recurrent_attention.bench.plot import plot_bench, plot_stream_costs
from recurrent_attention.bench.training import NO_MIXING

REPORT = Path(__file__).resolve().parents[2] / "results" / "bench" / "bench.json"


@pytest.mark.parametrize("with_ceiling", [True, False], ids=["with ceiling", "without ceiling"])
def test_the_committed_report_draws(tmp_path: Path, with_ceiling: bool) -> None:
    report = json.loads(REPORT.read_text())
    assert any(r["model"] == NO_MIXING for r in report["training"])
    if not with_ceiling:
        report["training"] = [r for r in report["training"] if r["model"] != NO_MIXING]
    for draw, name in ((plot_bench, "bench.png"), (plot_stream_costs, "figure5.png")):
        height, width, _ = imread(draw(report, tmp_path / name)).shape
        assert width > 500 and height > 200
