"""``make help`` lists every target a user can type, each with its one line of intent."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_help_lists_every_phony_target() -> None:
    phony = {
        target
        for line in (ROOT / "Makefile").read_text().splitlines()
        if line.startswith(".PHONY:")
        for target in line.removeprefix(".PHONY:").split()
    }
    listed = subprocess.run(
        ["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    described = {line.split()[0]: line.split(maxsplit=1)[1] for line in listed.splitlines() if line.strip()}
    assert set(described) == phony and "help" in phony
    assert described["tables"].startswith("tables from every run record")
