"""A GPU window end to end on this CPU, for every chunk of the queue: kit, the copy a GPU machine
receives (no ``.git``), the runner's smoke form under a budget of seconds, its archive imported,
and the tables made from it. Same code as on the GPU; the smoke preset and ``trainer=cpu``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from recurrent_attention.cli.make_tables import main as make_tables
from recurrent_attention.device.importer import ArchiveError, import_archive
from recurrent_attention.device.kit import KIT_DIR
from recurrent_attention.device.kit import main as make_kit
from recurrent_attention.device.runner import RUNNER_JSON, git_blob_id
from tests.device.conftest import MIRROR, needs_mirror
from tests.helpers.device_repo import device_copy

pytestmark = [pytest.mark.slow, needs_mirror]
# Seconds of the smoke window per chunk: verify ends when its checks and two runs are done (about 90 s
# alone here, 140 s on a busy machine); the others fill their budget with runs, one at a time (a smoke
# run takes 15-25 s alone here and up to a minute on a busy machine: the first must fit).
BUDGET = {"verify": 300, "ef_wiki": 90, "tsf": 90, "ptb": 90, "ptb16": 90, "rl_medium_replay": 120}


def window(checkout: Path, wheels: Path, tmp_path: Path, chunk: str, edit: str = "") -> tuple[Path, dict]:
    """Kit -> device copy (``edit`` appended to that file there) -> runner --smoke; (archive, runner.json)."""
    kit = ["--repo", str(checkout), "--chunk", chunk, "--find-links", str(wheels), "--mirror", MIRROR]
    assert make_kit(kit) == 0
    there = device_copy(checkout, tmp_path / "device", [KIT_DIR])
    if edit:
        (there / edit).write_text((there / edit).read_text() + "\nchanged on the way\n")
    out = tmp_path / "out"
    argv = [sys.executable, "scripts/device_run.py", "--kit", KIT_DIR, "--out", str(out), "--smoke"]
    argv += ["--budget", str(BUDGET[chunk]), "--parallel", "1"]
    env = {k: v for k, v in os.environ.items() if k != "RA_DATA_MIRROR"}  # the kit's data, nothing else
    done = subprocess.run(
        argv, cwd=there, env=env, capture_output=True, text=True, timeout=BUDGET[chunk] + 120
    )
    (archive,) = out.glob("device-*.tar.gz")
    with tarfile.open(archive) as tar:
        report = json.loads(tar.extractfile(RUNNER_JSON).read())
    report["returncode"], report["stdout"] = done.returncode, done.stdout
    return archive, report


@pytest.fixture(scope="module")
def windows(checkout: Path, wheels: Path, tmp_path_factory: pytest.TempPathFactory):
    """One smoke window per chunk, run once for the tests of this file that read it."""
    made: dict[str, tuple[Path, dict]] = {}

    def get(chunk: str) -> tuple[Path, dict]:
        if chunk not in made:
            made[chunk] = window(checkout, wheels, tmp_path_factory.mktemp(chunk), chunk)
        return made[chunk]

    return get


@pytest.mark.parametrize("chunk", ["verify", "ef_wiki", "tsf", "ptb", "rl_medium_replay"])
def test_smoke_window_of_each_chunk_makes_a_table(
    checkout: Path, windows, tmp_path: Path, chunk: str
) -> None:
    archive, report = windows(chunk)
    assert report["problems"] == [], report["stdout"]
    finished = [j for j in report["jobs"] if j["status"] == "finished"]
    assert finished, report["stdout"]
    if chunk == "verify":
        assert sorted(s["name"] for s in report["steps"]) == [
            "bench-gpu",
            "tests-cpu",
            "tests-gpu",
            "tests-gpu-compile",
        ]
        assert all(s["returncode"] == 0 for s in report["steps"]), report["stdout"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout
    results = tmp_path / "imported"  # stands for the checkout, which the import would leave to commit
    with pytest.raises(ArchiveError, match="smoke"):
        import_archive(archive, results)  # a smoke window's runs are no results
    counts = import_archive(archive, results, allow_smoke=True)
    assert counts["runs added"] == len(finished)
    imported = [json.loads(p.read_text()) for p in (results / "results" / "runs").rglob("summary.json")]
    assert len(imported) == len(finished)
    assert all(s["git_commit"] == head.strip() for s in imported)  # no .git there: the kit's, checked
    out = tmp_path / "tables"
    assert make_tables(["--runs", str(results / "results" / "runs"), "--out", str(out)]) == 0
    tables = [p.read_text() for p in out.glob("*.md")]
    assert tables and all("preset: smoke" in t and f"commit: {head.strip()}" in t for t in tables)
    assert import_archive(archive, results, allow_smoke=True)["runs already there"] == len(finished)


def test_budget_stops_launching_and_names_what_it_skipped(windows) -> None:
    _, report = windows("tsf")
    statuses = [j["status"] for j in report["jobs"]]
    assert statuses.count("finished") >= 1 and set(statuses) <= {"finished", "killed", "skipped"}
    skipped = [j for j in report["jobs"] if j["status"] == "skipped"]
    # 96 smoke runs one at a time take minutes (6 s each on a quiet machine here, 30 s on a busy one)
    assert len(skipped) >= len(report["jobs"]) // 2
    assert all(j["reason"].startswith(("expected", "no time left")) for j in skipped)
    assert sum(
        "skipped: expected" in line or "skipped: no time" in line for line in report["stdout"].splitlines()
    ) == len(skipped)


def test_a_tree_that_differs_from_the_kit_stamps_runs_dirty(
    checkout: Path, wheels: Path, tmp_path: Path
) -> None:
    archive, report = window(checkout, wheels, tmp_path, "ptb16", edit="README.md")
    assert report["returncode"] == 1
    assert any("README.md (changed)" in p for p in report["problems"])
    with tarfile.open(archive) as tar:
        summaries = [
            json.loads(tar.extractfile(m).read()) for m in tar.getmembers() if m.name.endswith("summary.json")
        ]
    assert summaries and all(s["git_commit"].endswith("-dirty") for s in summaries)


def test_a_stopped_runner_stops_its_jobs_and_still_writes_its_archive(
    checkout: Path, wheels: Path, tmp_path: Path
) -> None:
    kit = ["--repo", str(checkout), "--chunk", "tsf", "--find-links", str(wheels), "--mirror", MIRROR]
    assert make_kit(kit) == 0
    there = device_copy(checkout, tmp_path / "device", [KIT_DIR])
    argv = [
        sys.executable,
        "scripts/device_run.py",
        "--kit",
        KIT_DIR,
        "--out",
        str(tmp_path / "out"),
        "--smoke",
    ]
    runner = subprocess.Popen([*argv, "--parallel", "2"], cwd=there, stdout=subprocess.PIPE, text=True)
    for line in runner.stdout:  # wait until both first jobs are training
        if "job 1 started" in line:
            break
    runner.send_signal(signal.SIGTERM)
    rest = runner.communicate(timeout=120)[0]
    assert runner.returncode == 128 + signal.SIGTERM, rest
    (archive,) = (tmp_path / "out").glob("device-*.tar.gz")
    with tarfile.open(archive) as tar:
        report = json.loads(tar.extractfile(RUNNER_JSON).read())
    assert any(p.startswith("runner stopped: SystemExit") for p in report["problems"])
    stopped = [j for j in report["jobs"] if j["reason"] == "the runner was stopped"]
    assert [j["status"] for j in stopped] == ["killed", "killed"]
    assert all("epochs_reached" in j for j in stopped)  # None here: killed before a log was flushed
    assert {j["status"] for j in report["jobs"][2:]} == {"pending"}


def test_blob_ids_are_gits(checkout: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=checkout, capture_output=True, text=True).stdout
    rows = [line.split(None, 3) for line in listed.splitlines()]
    links = [r for r in rows if r[0] == "120000"]
    assert links  # the package's conf/ is a link: git hashes its target, not the folder
    for mode, blob, _stage, path in links + rows[:20]:
        assert git_blob_id(checkout / path, mode) == blob
