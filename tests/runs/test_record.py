"""A run folder names the run it holds from its start, so another config's command is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recurrent_attention.runs.record import (
    RunFolderMismatchError,
    recorded_run_id,
    require_same_run,
    write_run_record,
)


def record_interrupted_run(run_dir: Path, run_id: str) -> None:
    """The folder of a run stopped before its summary: the record written when it started."""
    hydra = OmegaConf.create({"overrides": {"task": ["seed=22"]}, "run": {"dir": str(run_dir)}})
    write_run_record(run_dir, OmegaConf.create({"seed": 22}), hydra, {"run_id": run_id, "config_id": "c1"})


def test_an_interrupted_folder_refuses_another_run_and_accepts_its_own(tmp_path: Path) -> None:
    record_interrupted_run(tmp_path, "aaaa11112222")
    require_same_run(tmp_path, "aaaa11112222")
    with pytest.raises(RunFolderMismatchError, match="holds run aaaa11112222, not this config's run bbbb"):
        require_same_run(tmp_path, "bbbb33334444")


def test_the_record_is_hydras_three_files_and_the_ids(tmp_path: Path) -> None:
    record_interrupted_run(tmp_path, "aaaa11112222")
    assert OmegaConf.load(tmp_path / ".hydra" / "config.yaml") == {"seed": 22}
    assert OmegaConf.load(tmp_path / ".hydra" / "hydra.yaml").hydra.run.dir == str(tmp_path)
    assert OmegaConf.load(tmp_path / ".hydra" / "overrides.yaml") == ["seed=22"]
    assert json.loads((tmp_path / "identity.json").read_text()) == {
        "run_id": "aaaa11112222",
        "config_id": "c1",
    }


def test_a_folder_from_before_the_record_is_named_by_its_summary_or_failure(tmp_path: Path) -> None:
    assert recorded_run_id(tmp_path) is None  # an empty folder holds no run: any config may start
    (tmp_path / "failed.json").write_text(json.dumps({"run_id": "f0"}))
    assert recorded_run_id(tmp_path) == "f0"
    (tmp_path / "summary.json").write_text(json.dumps({"run_id": "s0"}))
    assert recorded_run_id(tmp_path) == "s0"
