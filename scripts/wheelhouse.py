#!/usr/bin/env python
"""Every dependency but torch as wheels for one Python and platform: an install with no index reachable.

python scripts/wheelhouse.py --python 3.12 --out wheelhouse           # what `make wheelhouse PY=3.12` runs
pip install --no-index --find-links wheelhouse "recurrent-attention[dev,rl]"   # on the node, beside its torch

A cluster's compute node often reaches no package index but has its own torch (the CUDA build that
fits its drivers). This resolves the package with its extras for the target Python and platform
(``pip install --dry-run --report``: metadata only, no torch download), then downloads every wheel
of that resolution except torch and the CUDA/Triton packages that come with a torch build, and
builds this package's own wheel beside them. A dependency published only as source (hydra's
antlr4 runtime) is built into a pure-Python wheel first, since another Python takes wheels only.
``torch`` is left to the node: the package's torch range (pyproject.toml) accepts the one there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a torch build brings with it: the node's torch has these already (or, CPU-only, needs none).
# By prefix, except torch itself: torchmetrics (Lightning's) is a dependency like any other.
TORCH = "torch"
WITH_TORCH = ("triton", "nvidia-", "cuda-", "pytorch-triton")


def target(python: str, platform: str) -> list[str]:
    """pip's options that resolve and download for another interpreter: binary wheels only."""
    abi = "cp" + python.replace(".", "")
    return [
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        abi,
        "--abi",
        "abi3",
        "--abi",
        "none",
        *(f"--platform={tag}" for tag in platform.split(",")),
    ]


def report(extras: str, options: list[str]) -> list[dict]:
    """The items ``pip install`` would take for ``.[extras]`` (a dry run: metadata only)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += [*options, "--report", str(path), f"{ROOT}[{extras}]"]
        subprocess.run(command, check=True)
        return json.loads(path.read_text())["install"]


def pin(item: dict) -> str:
    return f"{item['metadata']['name']}=={item['metadata']['version']}"


def wanted(item: dict) -> bool:
    """Neither this package (built separately) nor torch's own packages (the node has them)."""
    name = item["metadata"]["name"].lower().replace("_", "-")
    return name not in ("recurrent-attention", TORCH) and not name.startswith(WITH_TORCH)


def wheels_of_sdists(extras: str, out: Path) -> None:
    """Build a wheel of every dependency published as source only (hydra's antlr4 runtime): a
    resolution for another Python takes wheels only, and these are pure Python."""
    sdists = [
        pin(item)
        for item in report(extras, [])
        if wanted(item) and not item["download_info"]["url"].endswith(".whl")
    ]
    if sdists:
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out)]
        subprocess.run([*command, *sdists], check=True)


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}")
    parser.add_argument(
        "--platform",
        default="manylinux_2_28_x86_64,manylinux_2_17_x86_64,manylinux2014_x86_64,linux_x86_64",
        help="comma-separated platform tags the node accepts (newest first)",
    )
    parser.add_argument("--extras", default="dev,rl")
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wheels_of_sdists(args.extras, args.out)
    options = [*target(args.python, args.platform), "--find-links", str(args.out)]
    with tempfile.TemporaryDirectory() as scratch:
        pinned = [pin(item) for item in report(args.extras, [*options, "--target", scratch]) if wanted(item)]
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(args.out)]
    subprocess.run([*download, *options, *pinned], check=True)
    own = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(args.out)]
    subprocess.run([*own, str(ROOT)], check=True)
    wheels = sorted(args.out.glob("*.whl"))
    print(
        f"wrote {args.out}: {len(wheels)} wheels for Python {args.python} ({len(pinned)} dependencies, "
        "torch left out); install beside an installed torch with\n"
        f'  pip install --no-index --find-links {args.out} "recurrent-attention[{args.extras}]"'
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
