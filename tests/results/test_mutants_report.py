"""The mutation-testing report (results/mutants/) counted by hand from a tiny fake cosmic-ray dump."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

from recurrent_attention.cli.mutants import write_config
from recurrent_attention.results.mutants import diff_lines, write_report


def _line(operator: str, line: int, result: dict | None) -> str:
    item = {
        "job_id": f"job{line}{operator}",
        "mutations": [
            {
                "module_path": "src/recurrent_attention/ops/scan.py",
                "operator_name": f"core/{operator}",
                "occurrence": 0,
                "start_pos": [line, 4],
                "end_pos": [line, 5],
                "operator_args": {},
                "definition_name": "f",
            }
        ],
    }
    return json.dumps([item, result])


def _result(test: str | None, worker: str = "normal", output: str = "", old: str = "", new: str = "") -> dict:
    diff = f"--- mutation diff ---\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-    {old}\n+    {new}\n"
    return {"worker_outcome": worker, "output": output, "test_outcome": test, "diff": diff if old else None}


def test_report_counts_each_outcome_and_scores_over_non_equivalent(tmp_path: Path) -> None:
    dump = "\n".join(
        [
            _line("NumberReplacer", 3, _result("killed", output="1 failed", old="a = 1", new="a = 2")),
            _line("NumberReplacer", 3, _result("killed", output="timeout", old="a = 1", new="a = 0")),
            _line("AddNot", 5, _result("survived", old="if x:", new="if not x:")),
            _line("ReplaceBinaryOperator_Add_Sub", 7, _result("survived", old="y = a + e", new="y = a - e")),
            _line(
                "ReplaceBinaryOperator_Add_Mul",
                7,
                _result(None, worker="skipped", output="Filtered operator"),
            ),
            _line(
                "NumberReplacer", 8, _result(None, worker="skipped", output="Not mutated: build machinery")
            ),
            _line("ReplaceTrueWithFalse", 9, None),
        ]
    )
    (tmp_path / "scan.jsonl").write_text(dump + "\n")
    out = tmp_path / "report"
    out.mkdir()
    with (out / "equivalents.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file", "operator", "line", "mutated", "reason"])
        writer.writerow(["ops/scan.py", "ReplaceBinaryOperator_Add_Sub", "y = a + e", "y = a - e", "eps"])

    commit = _git_repo(tmp_path, "a = 1\n")
    dumps = {"ops/scan.py": tmp_path / "scan.jsonl", "ops/later.py": tmp_path / "not_started.jsonl"}
    row, later = write_report(dumps, out, "make mutants", tmp_path, {"ops/scan.py": commit})
    assert (later.file, later.mutants, later.score) == ("ops/later.py", 0, None)  # listed, not run

    # 6 mutants (the filtered operator's is none): 1 killed, 1 timeout, 1 survived, 1 equivalent,
    # 1 skipped (not mutated), 1 pending; score 2/3
    assert (row.mutants, row.killed, row.timeout, row.survived) == (6, 1, 1, 1)
    assert (row.equivalent, row.skipped, row.pending) == (1, 1, 1)
    assert row.score == 2 / 3
    written, _ = list(csv.DictReader((out / "mutants.csv").open()))
    assert written["score"] == "66.7" and written["survived"] == "1" and written["equivalent"] == "1"
    report = (out / "report.md").read_text()
    assert (
        f"Valid at `{commit[:12]}`" in report and "`ops/scan.py:5` AddNot: `if x:` -> `if not x:`" in report
    )
    assert f"| ops/scan.py | 6 | 1 | 1 | 1 | 1 | 1 | 1 | 66.7 | {commit[:12]} |" in report
    assert "| ops/* | 6 | 1 | 1 | 1 | 1 | 1 | 1 | 66.7 |  |" in report


def _git(root: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def _git_repo(root: Path, source: str) -> str:
    """A repository in ``root`` holding the package's ops/scan.py with ``source``: its commit."""
    _git(root, "init", "-q")
    return _commit(root, "src/recurrent_attention/ops/scan.py", source)


def _commit(root: Path, path: str, text: str) -> str:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(text)
    _git(root, "add", path)
    _git(root, "commit", "-q", "-m", path)
    return _git(root, "rev-parse", "HEAD")


def test_a_file_whose_source_changed_after_its_run_is_stale_and_not_counted(tmp_path: Path) -> None:
    """Counted only while the mutated file at HEAD is byte-identical to the commit its session ran at:
    a later commit of tests keeps it, one that edits the file (even back and forth) does not."""
    ran_at = _git_repo(tmp_path, "a = 1\n")
    dump = tmp_path / "scan.jsonl"
    dump.write_text(_line("AddNot", 1, _result("survived", old="if x:", new="if not x:")) + "\n")
    out = tmp_path / "report"

    def report() -> tuple[bool, str, dict]:
        [row] = write_report({"ops/scan.py": dump}, out, "make mutants", tmp_path, {"ops/scan.py": ran_at})
        [written] = list(csv.DictReader((out / "mutants.csv").open()))
        return row.stale, (out / "report.md").read_text(), written

    _commit(tmp_path, "tests/test_scan.py", "def test(): pass\n")  # tests only: still valid
    stale, text, written = report()
    assert not stale and (written["commit"], written["stale"]) == (ran_at, "no")
    assert "| ops/* | 1 | 0 | 0 | 1 | 0 | 0 | 0 | 0.0 |  |" in text and "## Stale" not in text
    assert "`ops/scan.py:1` AddNot" in text

    _commit(tmp_path, "src/recurrent_attention/ops/scan.py", "a = 2\n")
    stale, text, written = report()
    assert stale and written["stale"] == "yes"
    assert "| ops/* | 0 | 0 | 0 | 0 | 0 | 0 | 0 |  |  |" in text  # left out of the group's figures
    assert f"- `ops/scan.py`: ran at `{ran_at[:12]}`" in text and "`ops/scan.py:1` AddNot" not in text
    assert f"Valid at `{_git(tmp_path, 'rev-parse', '--short=12', 'HEAD')}`" in text

    _commit(tmp_path, "src/recurrent_attention/ops/scan.py", "a = 1\n")  # the same text again: valid
    assert not report()[0]
    # a session with no recorded commit (or one that ran on uncommitted text) is stale
    for commits in ({}, {"ops/scan.py": "uncommitted"}):
        [row] = write_report({"ops/scan.py": dump}, out, "make mutants", tmp_path, commits)
        assert row.stale


def test_config_filter_keeps_exactly_the_reduced_operators(tmp_path: Path) -> None:
    """The exclude regex the operators filter gets passes the kept operators and only them."""
    write_config(tmp_path / "c.toml", "ops/scan.py", "true", 60)
    text = (tmp_path / "c.toml").read_text()
    [exclude] = json.loads(re.search(r"^exclude-operators = (.*)$", text, re.M)[1])
    excluded = re.compile(exclude)
    assert 'module-path = "src/recurrent_attention/ops/scan.py"' in text and "timeout = 60" in text
    assert not excluded.match("core/ReplaceBinaryOperator_Add_Sub")
    assert not excluded.match("core/NumberReplacer")
    assert excluded.match("core/ReplaceBinaryOperator_Add_BitXor")
    assert excluded.match("core/ReplaceBinaryOperator_Add_Sub2")


def test_a_mutant_of_the_last_line_without_a_newline_is_keyed_by_that_line() -> None:
    """cosmic-ray's diff of a file's last line (no newline at the end) removes and adds a second, empty
    line."""
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-    return f(-2)\n-\n+    return f(+2)\n+\n"
    assert diff_lines(diff) == ("return f(-2)", "return f(+2)")
