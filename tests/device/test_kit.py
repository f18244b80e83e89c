"""``make device-kit``: a clean commit's kit for each chunk, a dirty tree refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from recurrent_attention.data.sources import get_source
from recurrent_attention.device.chunks import QUEUE, chunk_named
from recurrent_attention.device.kit import KIT_JSON, main
from tests.device.conftest import MIRROR, needs_mirror

pytestmark = pytest.mark.slow


def build(repo: Path, wheels: Path, out: Path, *chunk: str) -> int:
    return main(
        ["--repo", str(repo), "--out", str(out), "--find-links", str(wheels), "--mirror", str(MIRROR), *chunk]
    )


@needs_mirror
@pytest.mark.parametrize("name", [c.name for c in QUEUE])
def test_kit_of_each_chunk(checkout: Path, wheels: Path, tmp_path: Path, name: str, capsys) -> None:
    assert build(checkout, wheels, tmp_path / "kit", "--chunk", name) == 0
    printed = capsys.readouterr().out
    kit = json.loads((tmp_path / "kit" / KIT_JSON).read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout
    chunk = chunk_named(name)
    assert kit["commit"] == head.strip() and kit["chunk"] == name
    assert [tuple(j["overrides"]) for j in kit["jobs"]] == [j.overrides for j in chunk.jobs]
    for source in chunk.sources:  # every registry file, with the registry's checksum
        for entry in get_source(source).files.values():
            assert kit["data"][entry.path] == entry.sha256
            assert (tmp_path / "kit" / "data" / entry.path).is_file()
    for relative in chunk.local_files:
        assert (tmp_path / "kit" / "data" / f"{relative}.gz").is_file()
    wheel_names = {w.split("-")[0] for w in kit["wheels"]}
    assert wheel_names == {r.replace("-", "_") for r in chunk.requirements}
    assert len(kit["tree"]) > 100 and all(len(blob) == 40 for _, blob, _ in kit["tree"])
    command = next(line for line in printed.splitlines() if line.startswith("run there"))
    assert "scripts/device_run.py" in command and len(command) < 2000


@needs_mirror
def test_default_chunk_is_the_next_unfinished(checkout: Path, wheels: Path, tmp_path: Path, capsys) -> None:
    assert build(checkout, wheels, tmp_path / "kit") == 0
    assert json.loads((tmp_path / "kit" / KIT_JSON).read_text())["chunk"] == "verify"


def test_dirty_tree_is_refused_and_nothing_written(
    checkout: Path, wheels: Path, tmp_path: Path, capsys
) -> None:
    readme = checkout / "README.md"
    original = readme.read_text()
    readme.write_text(original + "\nedited\n")
    try:
        assert build(checkout, wheels, tmp_path / "kit", "--chunk", "tsf") == 2
    finally:
        readme.write_text(original)
    assert "the tree is dirty (M README.md" in capsys.readouterr().err
    assert not (tmp_path / "kit").exists()
    (checkout / "notes.txt").write_text("untracked, would travel")
    try:
        assert build(checkout, wheels, tmp_path / "kit", "--chunk", "tsf") == 2
    finally:
        (checkout / "notes.txt").unlink()
    assert "?? notes.txt" in capsys.readouterr().err
