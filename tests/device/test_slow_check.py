"""A window's checks run beside its jobs and keep what they finished when stopped at their timeout.

Issue 64: checks ran one after the other before any job, and a benchmark that outlived its timeout
kept nothing. Here a fake benchmark writes a part, starts a child and sleeps past its timeout; a
pytest check with the result log passes one test and sleeps in the next; a stand-in train.py is
the job. The runner's own code (``Runner.run_checks_and_jobs``, ``archive``), no train.py, no torch.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from recurrent_attention.device.chunks import PYTEST
from recurrent_attention.device.runner import RUNNER_JSON, Runner
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
TIMEOUT_S = 25  # long enough for pytest to start and pass a test on a busy 2-core machine

FAKE_BENCH = """
import json, subprocess, sys, time
from pathlib import Path
out = Path(sys.argv[1])
(out / "part-1.json").write_text(json.dumps({"operator": "measured"}))
print("part 1 done", flush=True)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(out / "child.pid").write_text(str(child.pid))
time.sleep(600)  # part 2 never ends
"""
FAKE_TESTS = """
import time

def test_quick():
    assert True

def test_slow():
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which no init here may reap, does not count)."""
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and "\nState:\tZ" not in status.read_text()


def test_checks_run_beside_the_jobs_and_keep_what_they_finished(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("print('trained')\n")  # the job: ends at once
    (repo / "bench.py").write_text(textwrap.dedent(FAKE_BENCH))
    (repo / "test_fake.py").write_text(textwrap.dedent(FAKE_TESTS))
    steps = [
        {"name": "bench", "argv": ["{python}", "bench.py", "{out}"], "timeout_s": TIMEOUT_S},
        {"name": "tests", "argv": [*PYTEST, "test_fake.py"], "timeout_s": TIMEOUT_S},
    ]
    steps = [{**step, "smoke_argv": step["argv"]} for step in steps]
    jobs = [{"overrides": ["seed=1"], "cost": 1.0}]
    kit = tmp_path / "kit"
    kit.mkdir()
    manifest = {"chunk": "verify", "commit": "c" * 40, "parallel": 1, "jobs": jobs, "steps": steps}
    (kit / "kit.json").write_text(json.dumps(manifest))
    runner = Runner(repo, kit, tmp_path / "out", budget_s=300, smoke=True, parallel=None)
    runner.env["PYTHONPATH"] = str(ROOT)  # tests.helpers.result_log, as from the repository root
    runner.python = sys.executable
    runner.run_checks_and_jobs(tmp_path / "data")
    archive = runner.archive()
    shutil.rmtree(runner.work)  # run() would (this test calls the parts it is about)

    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        report = json.loads(tar.extractfile(RUNNER_JSON).read())
        read = {name: tar.extractfile(name).read().decode() for name in names if tar.getmember(name).isfile()}
    assert [j["status"] for j in report["jobs"]] == ["finished"]
    assert {s["name"]: s["returncode"] for s in report["steps"]} == {"bench": 124, "tests": 124}
    assert {s["name"]: s.get("tests") for s in report["steps"]} == {"bench": None, "tests": {"passed": 1}}
    log = read["runner.log"].splitlines()
    finished = next(i for i, line in enumerate(log) if "job 0 finished" in line)
    assert all(i > finished for i, line in enumerate(log) if "exit 124" in line)  # the job did not wait

    assert json.loads(read["steps/bench/part-1.json"]) == {"operator": "measured"}
    assert "part 1 done" in read["steps/bench/output.txt"]
    assert "timed out after" in read["steps/bench/output.txt"]
    results = [json.loads(line) for line in read["steps/tests/results.jsonl"].splitlines()]
    assert [(r["nodeid"], r["outcome"]) for r in results] == [("test_fake.py::test_quick", "passed")]
    assert "steps/tests/junit.xml" not in names  # what the result log is for: junit comes at the end
    assert not alive(int(read["steps/bench/child.pid"]))  # the timeout stopped the check's whole session
