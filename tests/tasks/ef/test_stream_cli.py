"""``scripts/ef_stream.py`` on what is not a usable event-forecasting run: one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.test_finished_run import write_run
from tests.train_process import run_script

pytestmark = pytest.mark.slow


SCRIPT = ROOT / "scripts" / "ef_stream.py"


def stream(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The script in its own process, forked after the imports (tests/train_process.py)."""
    return run_script(SCRIPT, list(args), cwd=ROOT, env=env or dict(os.environ), timeout=300)


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    return lines[0]


def test_a_bad_path_is_one_line(tmp_path: Path) -> None:
    # a fresh interpreter: nothing printed on import adds a line
    fresh = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nowhere")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert "no such folder" in one_error_line(fresh)
    assert "not a finished train.py run" in one_error_line(stream(str(tmp_path)))


def test_a_run_of_another_family_is_one_line(tmp_path: Path) -> None:
    write_run(tmp_path / "run", task="tsf/etth1")
    assert "a tsf run" in one_error_line(stream(str(tmp_path / "run")))


def test_a_missing_mirror_is_one_line(tmp_path: Path) -> None:
    write_run(tmp_path / "run", task="ef/so_fold1", overrides=[f"paths.data_dir={tmp_path}/data"])
    env = {**os.environ, "RA_DATA_MIRROR": str(tmp_path / "no_mirror")}
    line = one_error_line(stream(str(tmp_path / "run"), env=env))
    assert "so_fold1.npz" in line and "not found" in line


@pytest.mark.parametrize("sequence", ["5000"])
def test_a_sequence_beyond_the_test_split_is_one_line(tmp_path: Path, sequence: str) -> None:
    write_run(tmp_path / "run")
    assert "sequences" in one_error_line(stream(str(tmp_path / "run"), "--sequence", sequence))
