"""``failed.json`` says what failed, even for an error that has no message."""

from __future__ import annotations

import json
from pathlib import Path

from recurrent_attention.train import _record_failure


def test_an_error_without_a_message_records_where_it_was_raised(tmp_path: Path) -> None:
    """The bug: Lightning's bare assert on trainer.max_epochs=abc left failed.json with an empty error."""
    try:
        raise AssertionError  # a bare assert's error, as Lightning's raises it (pytest rewrites asserts)
    except AssertionError as err:
        line = err.__traceback__.tb_lineno
        _record_failure(tmp_path, {"run_id": "r1"}, err)
    record = json.loads((tmp_path / "failed.json").read_text())
    assert record["error"] == f"AssertionError: raised at {__file__}:{line}"
    assert record["run_id"] == "r1" and "Traceback" in record["traceback"]
