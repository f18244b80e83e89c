"""``summary.json`` writing: readable permissions, strict JSON, whole or not at all."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest
import torch

from recurrent_attention.results.summary import write_summary
from recurrent_attention.runs.atomic import AtomicCheckpointIO, atomic_write_text
from recurrent_attention.runs.record import SUMMARY_NAME


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


def test_a_write_cut_short_leaves_the_old_file_whole_and_no_temporary_file(
    tmp_path: Path, monkeypatch
) -> None:
    """The bug: a full disk left a truncated best.ckpt and a .failed.json.* temporary file."""
    path = tmp_path / "failed.json"
    atomic_write_text(path, "old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(path, "new, and longer than the old\n")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["failed.json"]
    checkpoint = tmp_path / "last.ckpt"
    with pytest.raises(OSError, match="No space left"):
        AtomicCheckpointIO().save_checkpoint({"epoch": 3}, checkpoint)
    assert not checkpoint.exists() and [p.name for p in tmp_path.iterdir()] == ["failed.json"]
    monkeypatch.undo()
    AtomicCheckpointIO().save_checkpoint({"epoch": 3}, checkpoint)
    assert torch.load(checkpoint)["epoch"] == 3
