"""``scripts/export_step.py``'s command line: a folder that is not a run is one line; the demo checks."""

from __future__ import annotations

import pytest

from recurrent_attention.cli.export_step import main

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


def test_script_names_a_folder_that_is_not_a_run(tmp_path, capsys) -> None:
    assert main([str(tmp_path)]) == 2
    assert "not a finished train.py run" in capsys.readouterr().err


def test_demo_exports_checks_and_times_the_step(tmp_path, capsys) -> None:
    assert main(["--out", str(tmp_path / "step.onnx"), "--tokens", "5"]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f"wrote {tmp_path / 'step.onnx'}; 5 tokens: max |onnx - eager| = ")
    assert "eager" in line and "onnxruntime" in line
