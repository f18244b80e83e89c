"""`make figures` redraws the bench's PNGs from the committed report: the plots read every field the
report has (the training ceiling included), one without the ceiling rows (older reports) and one
with linear attention's rows (the report's next form) alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.image import imread

from recurrent_attention.bench.plot import plot_bench, plot_stream_costs
from recurrent_attention.bench.training import NO_MIXING

REPORT = Path(__file__).resolve().parents[2] / "results" / "bench" / "bench.json"


@pytest.mark.parametrize("form", ["with ceiling", "without ceiling", "with linear attention"])
def test_the_committed_report_draws(tmp_path: Path, form: str) -> None:
    report = json.loads(REPORT.read_text())
    assert any(r["model"] == NO_MIXING for r in report["training"])
    if form == "without ceiling":
        report["training"] = [r for r in report["training"] if r["model"] != NO_MIXING]
    if form == "with linear attention":  # Aaren's rows under linear attention's name stand in
        for part in ("steps", "stream", "training"):
            report[part] += [
                {**r, "model": "linear_attention"} for r in report[part] if r["model"] == "aaren"
            ]
    for draw, name in ((plot_bench, "bench.png"), (plot_stream_costs, "figure5.png")):
        height, width, _ = imread(draw(report, tmp_path / name)).shape
        assert width > 500 and height > 200
