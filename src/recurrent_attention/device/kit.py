"""``make device-kit``: one git-ignored folder that turns a bare GPU machine into a place to run a chunk.

The GPU machine receives a copy of the working tree without ``.git`` and reaches no package index.
The kit carries what it lacks: the wheels of the distributions its Python misses (pinned to the
versions installed here, the ones the tests ran on), the data files the chunk reads (registry files
from the mirror, checked against the registry's sha256; recipe-made local files gzipped with their
sha256), and the commit with every tracked file's blob id, so the runner can stamp runs with the
commit only when the tree it received is that commit's. A dirty tree is refused: runs must come from
one clean commit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from recurrent_attention.data.download import resolve_file, sha256sum
from recurrent_attention.data.sources import get_source
from recurrent_attention.device.chunks import (
    QUEUE,
    VERIFY_REPORT,
    Chunk,
    chunk_named,
    next_chunk,
    pending_jobs,
)
from recurrent_attention.errors import DataError

KIT_DIR = "device_kit"
KIT_JSON = "kit.json"
# The GPU machine's Python (torch 2.11, CUDA 13) and platform; wheels are fetched for it.
DEVICE_PYTHON = "3.12"
DEVICE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
WHEEL_CACHE = Path.home() / ".cache" / "recurrent-attention" / "device-wheels"
MAX_KIT_BYTES = 56 * 2**20  # the tree (~3 MiB) and the kit travel together under the tool's 64 MiB
RUN_COMMAND = 'python3 scripts/device_run.py --kit {kit} --out "$OUT"'


class KitError(RuntimeError):
    """The kit cannot be built as asked; the one-line message says why and what to do."""


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def clean_commit(repo: Path) -> str:
    """HEAD's commit; a tree with changes or untracked files (which would travel too) is refused."""
    try:
        status = _git(repo, "status", "--porcelain")
        commit = _git(repo, "rev-parse", "HEAD").strip()
    except (OSError, subprocess.CalledProcessError) as err:
        raise KitError(f"{repo}: not a git checkout ({err}); build the kit from a clone") from err
    if status.strip():
        first = status.strip().splitlines()[0]
        raise KitError(
            f"{repo}: the tree is dirty ({first} ...): runs must come from one clean commit; "
            "commit or stash, then make device-kit again"
        )
    return commit


def tree_blobs(repo: Path) -> list[list[str]]:
    """``[mode, blob id, path]`` of every tracked file (``git ls-files -s``)."""
    rows = []
    for line in _git(repo, "ls-files", "-s").splitlines():
        meta, path = line.split("\t", 1)
        mode, blob, _stage = meta.split()
        rows.append([mode, blob, path])
    return rows


def copy_sources(sources: tuple[str, ...], mirror: Path | None, data_dir: Path, dest: Path) -> dict[str, str]:
    """Every file of the registry ``sources`` into ``dest`` at its registry path: found as a run finds
    it (mirror, then ``data_dir``; no download), checked against the registry's sha256, and checked
    again on arrival. Returns {path: sha256}."""
    copied = {}
    for name in sources:
        source = get_source(name)
        for key, entry in source.files.items():
            try:
                found = resolve_file(name, key, data_dir, mirror, download=False)
            except DataError as err:
                raise KitError(f"{err} (the kit copies data from there; make data DATASETS={name})") from err
            target = dest / entry.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(found, target)
            digest = sha256sum(target)
            if entry.sha256 and digest != entry.sha256:
                raise KitError(f"{target}: sha256 {digest} after copying, registry says {entry.sha256}")
            copied[entry.path] = digest
    return copied


def pack_local_files(paths: tuple[str, ...], data_dir: Path, dest: Path) -> dict[str, str]:
    """Files that no registry holds (``data/rl/*-sac.hdf5``), gzipped; {path: sha256 of the file}."""
    packed = {}
    for relative in paths:
        source = data_dir / relative
        if not source.is_file():
            raise KitError(f"{source}: missing; make it first (the RL files: make rl-data-sac)")
        target = dest / f"{relative}.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        with source.open("rb") as raw, gzip.open(target, "wb", compresslevel=6) as packed_file:
            shutil.copyfileobj(raw, packed_file)
        packed[relative] = sha256sum(source)
    return packed


def pinned(requirements: tuple[str, ...]) -> list[str]:
    """``name==version`` of each requirement as installed here: the GPU machine gets what tests ran on."""
    pins = []
    for name in requirements:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError as err:
            raise KitError(f"{name} is not installed here; make setup installs it") from err
    return pins


def _target_options(python: str) -> list[str]:
    options = ["--only-binary=:all:", "--python-version", python, "--implementation", "cp"]
    for platform in DEVICE_PLATFORMS:
        options += ["--platform", platform]
    return options


def fetch_wheels(
    pins: list[str], dest: Path, find_links: Path | None, python: str = DEVICE_PYTHON
) -> list[str]:
    """A wheel of each pin for the GPU machine's Python in ``dest``.

    From ``find_links`` alone when given (a wheelhouse, or a test's own wheels), else from a cache
    kept between kits, filled from the package index: a kit built twice downloads nothing the
    second time. A distribution published only as source (hydra's antlr4 runtime) is built here
    into a pure-Python wheel.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cache = find_links or WHEEL_CACHE / f"py{python.replace('.', '')}"
    cache.mkdir(parents=True, exist_ok=True)
    names = []
    for pin in pins:
        wheel = _wheel_of(cache, pin, python)
        if wheel is None and not find_links:
            _download(pin, cache, python)
            wheel = _wheel_of(cache, pin, python)
        if wheel is None:
            raise KitError(f"no wheel of {pin} for Python {python} in {cache}; check --find-links")
        shutil.copyfile(wheel, dest / wheel.name)
        names.append(wheel.name)
    return names


def _download(pin: str, cache: Path, python: str) -> None:
    download = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(cache)]
    got = subprocess.run([*download, *_target_options(python), pin], capture_output=True, text=True)
    if got.returncode != 0:  # published as source only: a pure-Python wheel built here serves any Python
        wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(cache)]
        got = subprocess.run([*wheel, pin], capture_output=True, text=True)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["no output"])[-1]
        raise KitError(f"no wheel of {pin} for Python {python} ({last}); check the network or --find-links")


def _wheel_of(folder: Path, pin: str, python: str) -> Path | None:
    """The wheel of ``pin`` in ``folder`` that the GPU machine's Python takes: pure Python, or built for
    that CPython (``cp312``), by its file name's tags."""
    name, version = pin.split("==")
    stem = f"{name.replace('-', '_').lower()}-{version}-"
    cpython = f"-cp{python.replace('.', '')}-"
    found = sorted(
        p
        for p in folder.glob("*.whl")
        if p.name.lower().startswith(stem) and ("-none-" in p.name or cpython in p.name)
    )
    return found[-1] if found else None


def prior_s_per_cost(repo: Path) -> float | None:
    """Seconds per unit of job cost from ``verify``'s committed report (its timed ETTh1@96 runs)."""
    report = repo / VERIFY_REPORT
    if not report.is_file():
        return None
    jobs = [j for j in json.loads(report.read_text()).get("jobs", []) if j.get("status") == "finished"]
    cost = sum(j["cost"] for j in jobs)
    return sum(j["seconds"] for j in jobs) / cost if cost else None


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build_kit(
    repo: Path,
    chunk: Chunk,
    out: Path,
    mirror: Path | None,
    find_links: Path | None = None,
    python: str = DEVICE_PYTHON,
) -> dict:
    """Write the kit for ``chunk`` into ``out`` (replaced whole) and return its ``kit.json``."""
    commit = clean_commit(repo)
    jobs = pending_jobs(chunk, repo)
    if not jobs and not chunk.steps:
        raise KitError(f"chunk {chunk.name}: every job has a GPU run in results/runs; pick another CHUNK=")
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as scratch:
        staging = Path(scratch) / "kit"
        data = staging / "data"
        data.mkdir(parents=True)
        data_dir = repo / "data"
        manifest = {
            "commit": commit,
            "chunk": chunk.name,
            "description": chunk.description,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": python,
            "parallel": chunk.parallel,
            "prior_s_per_cost": prior_s_per_cost(repo),
            "jobs": [asdict(job) for job in jobs],
            "steps": [asdict(step) for step in chunk.steps],
            "data": copy_sources(chunk.sources, mirror, data_dir, data),
            "local_data": pack_local_files(chunk.local_files, data_dir, data),
            "wheels": fetch_wheels(pinned(chunk.requirements), staging / "wheels", find_links, python),
            "tree": tree_blobs(repo),
        }
        (staging / KIT_JSON).write_text(json.dumps(manifest, indent=1) + "\n")
        size = _size(staging)
        if size > MAX_KIT_BYTES:
            raise KitError(
                f"the kit for {chunk.name} is {size / 2**20:.1f} MiB, over {MAX_KIT_BYTES // 2**20} MiB"
            )
        if out.exists():
            shutil.rmtree(out)
        shutil.move(str(staging), out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make device-kit",
        description="Build the folder a GPU window needs for one chunk of the queue, and print the command "
        "to run there. Chunks, in order: " + ", ".join(f"{c.name} ({c.description})" for c in QUEUE),
    )
    parser.add_argument(
        "--chunk", default="", help="which chunk (default: the next one not done in results/)"
    )
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the clean checkout (default: here)")
    parser.add_argument("--out", type=Path, default=None, help=f"the kit folder (default: <repo>/{KIT_DIR})")
    parser.add_argument("--mirror", type=Path, default=None, help="data mirror (default: $RA_DATA_MIRROR)")
    parser.add_argument("--find-links", type=Path, default=None, help="take wheels from this folder only")
    parser.add_argument(
        "--python", default=DEVICE_PYTHON, help="the GPU machine's Python (wheels are for it)"
    )
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    mirror = args.mirror or (Path(os.environ["RA_DATA_MIRROR"]) if os.environ.get("RA_DATA_MIRROR") else None)
    try:
        chunk = chunk_named(args.chunk) if args.chunk else next_chunk(repo)
        if chunk is None:
            print("the GPU queue is done: every chunk has its runs in results/runs", file=sys.stderr)
            return 0
        out = (args.out or repo / KIT_DIR).resolve()
        manifest = build_kit(repo, chunk, out, mirror, args.find_links, args.python)
    except (KitError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    relative = os.path.relpath(out, repo)
    print(
        f"kit for chunk {chunk.name} ({len(manifest['jobs'])} jobs, {len(manifest['steps'])} checks) "
        f"at {relative}: {_size(out) / 2**20:.1f} MiB, commit {manifest['commit'][:12]}"
    )
    print(f"send the folder: {relative}")
    print(f"run there (from the repository root): {RUN_COMMAND.format(kit=relative)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
