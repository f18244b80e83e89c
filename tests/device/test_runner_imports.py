"""The runner starts on a bare GPU machine: before it installs the kit's wheels it may import only
the standard library (and its own budget rule). A module it imports that needs hydra, or anything
the machine lacks, would fail there before the first log line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.test_layering import PACKAGE, imported_modules

ALLOWED = {
    "recurrent_attention.device",
    "recurrent_attention.device.budget",
    "recurrent_attention.device.budget.Budget",
}


@pytest.mark.parametrize("name", ["runner.py", "budget.py", "__init__.py"])
def test_runner_imports_only_the_standard_library(name: str) -> None:
    path: Path = PACKAGE / "device" / name
    outside = sorted(
        module
        for module in imported_modules(path)
        if module.split(".")[0] not in sys.stdlib_module_names and module not in ALLOWED
    )
    assert not outside, f"device/{name} imports {outside}"
