"""A sweep's report of failed jobs points to what exists: a job's failed.json, or the refusal itself."""

from __future__ import annotations

from pathlib import Path

from recurrent_attention.runs.sweep import FAILURES_ENV, note_failed_job, report_line


def test_each_failed_job_is_shown_by_what_it_left(tmp_path: Path, monkeypatch) -> None:
    registry = tmp_path / "failed-jobs.txt"
    monkeypatch.setenv(FAILURES_ENV, str(registry))
    ran, refused = tmp_path / "ran", tmp_path / "refused"
    (ran / "failed.json").parent.mkdir()
    (ran / "failed.json").write_text("{}")
    note_failed_job(ran, RuntimeError("CUDA out of memory\nmore lines"))
    note_failed_job(refused, ValueError("task.lr=-1 is not allowed: use a number >= 0"))
    assert [report_line(entry) for entry in registry.read_text().splitlines()] == [
        f"  {ran / 'failed.json'}",
        f"  {refused} (refused, no folder): task.lr=-1 is not allowed: use a number >= 0",
    ]
