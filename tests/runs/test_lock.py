"""One writer per run folder: a live owner stops a second one; a dead owner's lock is taken over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from recurrent_attention.runs.lock import LOCK_NAME, RunFolderBusyError, RunLock

ROOT = Path(__file__).resolve().parents[2]


def hold_lock(run_dir: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; from recurrent_attention.runs.lock import RunLock\n"
            f"with RunLock({str(run_dir)!r}):\n    print('locked', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_live_owner_stops_a_second_writer_and_a_dead_ones_lock_is_taken_over(tmp_path: Path) -> None:
    holder = hold_lock(tmp_path)
    try:
        with (
            pytest.raises(RunFolderBusyError, match=rf"{tmp_path} is in use by pid {holder.pid}\b"),
            RunLock(tmp_path),
        ):
            pass
    finally:
        holder.kill()  # SIGKILL: no clean-up, the lock file still names the dead pid
        holder.wait()
    assert (tmp_path / LOCK_NAME).read_text().strip() == str(holder.pid)
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().strip() == str(os.getpid())


def test_lock_is_released_when_the_block_ends(tmp_path: Path) -> None:
    with RunLock(tmp_path):
        pass
    with RunLock(tmp_path):
        pass
