#!/usr/bin/env python
"""Install torch into this environment as ``make setup`` needs it: the CPU build where no GPU is found.

python scripts/install_torch.py 2.13.0            # what make setup runs (TORCH=2.13.0)
python scripts/install_torch.py 2.13.0 --dry-run  # say which build, and the pip commands, only

PyPI's Linux torch is the CUDA build with several GB of CUDA libraries; a CPU-only machine (a
laptop, CI) wants the CPU build. Without an NVIDIA GPU (``nvidia-smi -L`` lists none) this takes
the CPU build: a torch wheel pip already has on disk (``--no-index``: pip's find-links, e.g. a
wheelhouse), then ``pip install torch==<version>`` for its dependencies (torch itself is then
satisfied); where no such wheel exists, everything from PyTorch's CPU index. With a GPU it takes
PyPI's default (CUDA) build. ``TORCH_BUILD=cpu`` or ``cuda`` overrides the guess. It prints the
choice and why.

It uses the standard library only: it runs before the package (and torch) is installed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def nvidia_gpus() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists (none where the tool is missing or fails)."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return []
    try:
        listed = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if listed.returncode:
        return []
    return [line for line in listed.stdout.splitlines() if line.startswith("GPU")]


Route = list[list[str]]  # pip commands that must all succeed


def plan(version: str, build: str | None = None) -> tuple[str, list[Route]]:
    """Which build and why, and the routes to try in turn (the first whose commands all succeed)."""
    pip = [sys.executable, "-m", "pip", "install", f"torch=={version}"]
    gpus = nvidia_gpus()
    build = build or ("cuda" if gpus else "cpu")
    if build == "cuda":
        why = f"NVIDIA GPU found ({gpus[0]})" if gpus else "TORCH_BUILD=cuda"
        return f"{why}: torch {version}, CUDA build (PyPI)", [[pip]]
    why = "TORCH_BUILD=cpu" if gpus else "no NVIDIA GPU found (nvidia-smi lists none)"
    local_wheel = [[*pip, "--no-index", "--no-deps"], pip]
    return f"{why}: torch {version}, CPU build", [local_wheel, [[*pip, "--index-url", CPU_INDEX]]]


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("version", help="the torch version to install, e.g. 2.13.0")
    parser.add_argument("--dry-run", action="store_true", help="print the choice and commands only")
    args = parser.parse_args(argv)
    build = os.environ.get("TORCH_BUILD") or None
    if build not in (None, "cpu", "cuda"):
        print(f"error: TORCH_BUILD={build!r}: use cpu or cuda (or leave it unset to guess)", file=sys.stderr)
        return 2
    choice, routes = plan(args.version, build)
    print(f"make setup: {choice}")
    for number, route in enumerate(routes, 1):
        print(f"  route {number}: " + " && ".join("python " + " ".join(c[1:]) for c in route), flush=True)
        if args.dry_run:
            continue
        if all(subprocess.run(command).returncode == 0 for command in route):
            return 0
    return 0 if args.dry_run else 1


if __name__ == "__main__":
    raise SystemExit(main())
