"""An output folder that cannot be written is one line before Hydra makes any folder, not a traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from recurrent_attention.runs.writable import unwritable
from tests.conftest import run_train


def test_a_writable_folder_or_one_still_to_be_made_passes(tmp_path: Path) -> None:
    assert unwritable(tmp_path) is None and unwritable(tmp_path / "a" / "b") is None


def test_a_path_through_a_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert unwritable(tmp_path / "f" / "runs") == f"{tmp_path / 'f'} is a file, not a folder"


@pytest.fixture
def read_only_folder(tmp_path: Path):
    """A folder no process may write: a read-only tmpfs for root (who ignores modes), else mode 555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("root cannot mount a read-only tmpfs here")
    yield folder
    subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_folder_is_named(read_only_folder: Path) -> None:
    assert unwritable(read_only_folder / "runs") == f"{read_only_folder} is read-only"


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True])
def test_train_py_stops_in_one_line_where_the_output_cannot_be_written(
    tmp_path: Path, multirun: bool
) -> None:
    (tmp_path / "f").write_text("x")
    flags = ["-m", "seed=1,2"] if multirun else []
    proc = run_train([*flags, "preset=smoke"], tmp_path / "f" / "out", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert (
        line.startswith(f"error: cannot write {tmp_path / 'f' / 'out'}") and "is a file, not a folder" in line
    )
