"""A pytest plugin that writes each test's outcome the moment it is known, one JSON line per test.

``--junitxml`` is written when the session ends, so a check stopped at its timeout (a GPU window's
``pytest -m gpu``) leaves none; this log keeps every test finished before the stop. Standard library
only (the GPU machine has no pytest-reportlog). Load it with
``python -m pytest -p tests.helpers.result_log --result-log=PATH`` from the repository root.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--result-log",
        type=Path,
        default=None,
        help="append one JSON line per test (nodeid, outcome, seconds) as each ends",
    )


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--result-log")
    # under pytest-xdist the controller receives every worker's reports: only it writes
    if path is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ResultLog(path), "result-log-writer")


class ResultLog:
    """Appends to ``path`` (emptied first): a test's call, or the setup or teardown that failed or
    skipped it, one flushed line each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call" and report.outcome == "passed":
            return
        line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}
        line["seconds"] = round(report.duration, 3)
        with self.path.open("a") as log:
            log.write(json.dumps(line) + "\n")
