"""``summary.json``: the one record of a finished run that every results table is built from."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from recurrent_attention.runs.atomic import atomic_write_text
from recurrent_attention.runs.record import SUMMARY_NAME

# The record's count of optimiser steps: a run without one is refused (runs.trained) and so is its
# record in a table (results.collect), as its metrics are those of a random initialisation.
STEPS_KEY = "optimizer_steps"


def write_summary(run_dir: str | Path, record: dict[str, Any]) -> Path:
    """Strict JSON: a NaN or infinity anywhere in the record is an error, never written as a number."""
    path = Path(run_dir) / SUMMARY_NAME
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
    return path


# Set by the device runner (device/runner.py) on a machine that received the tree without .git: the
# kit's commit, or that commit marked -dirty when the tree it received differs from the commit's.
SOURCE_COMMIT_ENV = "RA_SOURCE_COMMIT"


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The checkout's commit, with ``-dirty`` when it has uncommitted changes; outside git, what
    ``$RA_SOURCE_COMMIT`` says (a device window's checked tree), else None."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get(SOURCE_COMMIT_ENV) or None
    return commit + ("-dirty" if dirty else "")


def package_version() -> str | None:
    """The installed ``recurrent-attention`` version: what a wheel install has instead of a git commit."""
    try:
        return metadata.version("recurrent-attention")
    except metadata.PackageNotFoundError:
        return None


def device_description() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"CPU {cpu_model()}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}"


def cpu_model() -> str:
    """The processor's marketing name on Linux (``/proc/cpuinfo``), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()
