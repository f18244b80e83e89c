"""``make device-import ARCHIVE=...``: a window's archive into ``results/``, ready for ``make results``.

Every run record goes to ``results/runs/<task>/<model>/<preset>/seed<N>-<run_id>/`` as ``train.py``
laid it out (summary.json or failed.json, the config, metrics.csv, train.log); a record already
there is left as it is. The window's own account (``runner.json``: the GPU, every job finished,
failed, killed or skipped and why, each check's exit code) goes to
``results/device/<chunk>/<stamp>.json`` and, for ``verify``, its checks' outputs (tests, GPU
benchmarks) beside it with the report that marks ``verify`` done; the GPU benchmark also becomes
``results/bench/gpu/bench_gpu.{json,md}``, ``make bench``'s GPU section.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path, PurePosixPath

from recurrent_attention.device.chunks import VERIFY_REPORT
from recurrent_attention.device.runner import RUNNER_JSON


class ArchiveError(ValueError):
    """The archive cannot be imported; the message names the file and the fix."""


def _safe(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveError(f"archive member {name!r} points outside its folder; refusing the archive")
    return path


def import_archive(archive: Path, repo: Path, allow_smoke: bool = False) -> dict[str, int]:
    """Copy the archive's records into ``repo/results``; counts of what was added and kept."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            return _import(tar, archive, repo, allow_smoke)
    except (OSError, tarfile.TarError) as err:
        raise ArchiveError(
            f"{archive}: not a device archive ({err}); pass the .tar.gz the runner wrote"
        ) from err


def _import(tar: tarfile.TarFile, archive: Path, repo: Path, allow_smoke: bool) -> dict[str, int]:
    counts = {"runs added": 0, "runs already there": 0, "files": 0}
    members = {str(_safe(m.name)): m for m in tar.getmembers() if m.isfile()}
    if RUNNER_JSON not in members:
        raise ArchiveError(f"{archive}: no {RUNNER_JSON}; not an archive of scripts/device_run.py")
    window = json.loads(tar.extractfile(members[RUNNER_JSON]).read())
    if window.get("smoke") and not allow_smoke:
        raise ArchiveError(f"{archive}: a --smoke window (CPU, smoke preset): its runs are no results")
    run_folders = {
        PurePosixPath(name).parent
        for name in members
        if name.startswith("runs/") and PurePosixPath(name).name in ("summary.json", "failed.json")
    }
    results = repo / "results"
    for folder in sorted(run_folders):
        target = results / "runs" / folder.relative_to("runs")
        if (target / "summary.json").is_file():
            counts["runs already there"] += 1
            continue
        counts["runs added"] += 1
        for name, member in members.items():
            if PurePosixPath(name).is_relative_to(folder):
                _write(tar, member, target / PurePosixPath(name).relative_to(folder))
                counts["files"] += 1
    stamp = archive.name.removesuffix(".tar.gz")
    chunk_dir = results / "device" / str(window.get("chunk", "unknown"))
    chunk_dir.mkdir(parents=True, exist_ok=True)
    (chunk_dir / f"{stamp}.json").write_text(json.dumps(window, indent=1) + "\n")
    if window.get("steps"):
        for name, member in members.items():
            if name.startswith("steps/"):
                _write(tar, member, chunk_dir / stamp / PurePosixPath(name).relative_to("steps"))
        if window.get("chunk") == "verify" and window.get("gpu"):
            report = repo / VERIFY_REPORT
            report.parent.mkdir(parents=True, exist_ok=True)
            report.write_text(json.dumps({**window, "archive": archive.name}, indent=1) + "\n")
            for name in ("bench_gpu.json", "bench_gpu.md"):  # make bench's GPU section
                if f"steps/bench-gpu/{name}" in members:
                    _write(tar, members[f"steps/bench-gpu/{name}"], results / "bench" / "gpu" / name)
    return counts


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(tar.extractfile(member).read())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make device-import",
        description="Put a GPU window's archive into results/ (then: make results).",
    )
    parser.add_argument("archive", type=Path, help="the .tar.gz that scripts/device_run.py wrote")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    parser.add_argument("--smoke", action="store_true", help="import a --smoke window too (tests only)")
    args = parser.parse_args(argv)
    try:
        counts = import_archive(args.archive, args.repo, args.smoke)
    except ArchiveError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(", ".join(f"{k}: {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
