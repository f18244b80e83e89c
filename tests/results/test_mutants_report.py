"""The mutation-testing report (results/mutants/) counted by hand from a tiny fake cosmic-ray dump."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from recurrent_attention.cli.mutants import write_config
from recurrent_attention.results.mutants import write_report


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

    dumps = {"ops/scan.py": tmp_path / "scan.jsonl", "ops/later.py": tmp_path / "not_started.jsonl"}
    row, later = write_report(dumps, out, "abc123", "make mutants")
    assert (later.file, later.mutants, later.score) == ("ops/later.py", 0, None)  # listed, not run

    # 6 mutants (the filtered operator's is none): 1 killed, 1 timeout, 1 survived, 1 equivalent,
    # 1 skipped (not mutated), 1 pending; score 2/3
    assert (row.mutants, row.killed, row.timeout, row.survived) == (6, 1, 1, 1)
    assert (row.equivalent, row.skipped, row.pending) == (1, 1, 1)
    assert row.score == 2 / 3
    written, _ = list(csv.DictReader((out / "mutants.csv").open()))
    assert written["score"] == "66.7" and written["survived"] == "1" and written["equivalent"] == "1"
    report = (out / "report.md").read_text()
    assert "`abc123`" in report and "`ops/scan.py:5` AddNot: `if x:` -> `if not x:`" in report
    assert "| ops/* | 6 | 1 | 1 | 1 | 1 | 1 | 1 | 66.7 |" in report


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
