"""``summary.json`` writing: readable permissions, strict JSON."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from recurrent_attention.results.summary import SUMMARY_NAME, atomic_write_text, write_summary


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_results_files_get_the_mode_open_would_give(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "table.md", "| a |\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "table.md").stat().st_mode) == mode
    assert (tmp_path / "table.md").read_text() == "| a |\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.md"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_summary_refuses_nan_and_infinity(tmp_path: Path, bad: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_summary(tmp_path, {"metrics": {"mse": bad}})
    assert not (tmp_path / SUMMARY_NAME).exists()


def test_summary_is_strict_json(tmp_path: Path) -> None:
    path = write_summary(tmp_path, {"metrics": {"mse": 0.5}, "seed": 1})
    assert json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(name)) == {
        "metrics": {"mse": 0.5},
        "seed": 1,
    }
