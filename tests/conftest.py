"""Shared test helpers: run the Hydra app in-process on a tiny preset."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from recurrent_attention.tasks import register_families
from tests.train_process import run_script

ROOT = Path(__file__).resolve().parents[1]

# One thread in each test process and in every process a test starts: `make test` runs one
# pytest-xdist worker per core, and more threads would only make the workers wait on each other.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)
# Tests compose, check and instantiate families' configs directly: register the families' config
# rules and resolvers first, as train.py does on import.
register_families()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first (a stable sort: the rest keep their order), so that the workers, taking
    tests in this order, end the run on quick tests, not on one long run of train.py begun last."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def run_train(overrides: list[str], output_dir: Path, env: dict[str, str] | None = None, check: bool = True):
    """Run ``train.py`` as users do (its own process, forked after the imports: tests/train_process.py),
    outputs under ``output_dir``; returns the finished process (returncode, stdout, stderr)."""
    flags = [o for o in overrides if o.startswith("-")]
    settings = [o for o in overrides if not o.startswith("-")]
    args = [*flags, f"paths.output_dir={output_dir}", *settings]
    proc = run_script(ROOT / "train.py", args, cwd=ROOT, env={**os.environ, **(env or {})}, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"train.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return proc


def read_summaries(output_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(output_dir.rglob("summary.json"))]


@pytest.fixture
def train_runner():
    return run_train
