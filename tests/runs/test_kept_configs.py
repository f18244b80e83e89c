"""Configs moved keep building what they built and keep their runs' ids (issue 68).

``kept_configs.json`` holds, for configs across every model, task family and the CRT experiments,
the backbone's resolved keyword arguments and the run and config ids as commit d8476d0 composed
them, before the paper's LM models became ``model=paper/*`` and the model configs lost their
copied ``backbone:`` node. Each entry's overrides are today's spelling of that config (the paper's
models under ``task.compat=reference`` are ``model=paper/<name>`` now). A run's id names its folder
(``train.py`` finds a finished run, or resumes one, by it), so a config whose id moved would run
again beside its old folder. The ids recorded in the committed summaries are older still (configs
changed since they ran); ``records`` holds the ids their commands composed to at d8476d0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.runs.identity import run_ids

register_resolvers()
KEPT = json.loads((Path(__file__).parent / "kept_configs.json").read_text())
ROOT = Path(__file__).resolve().parents[2]


def _composed(overrides: list[str]):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def _ids(cfg) -> dict[str, str]:
    return run_ids(cfg, OmegaConf.to_container(cfg.hydra.runtime.choices))


@pytest.mark.parametrize("kept", KEPT["configs"], ids=[" ".join(k["overrides"]) for k in KEPT["configs"]])
def test_a_moved_config_builds_the_same_backbone_and_keeps_its_ids(kept: dict) -> None:
    cfg = _composed(kept["overrides"])
    assert OmegaConf.to_container(cfg.model.backbone, resolve=True) == kept["backbone"]
    assert _ids(cfg) == {"run_id": kept["run_id"], "config_id": kept["config_id"]}


@pytest.mark.parametrize("record", sorted(KEPT["records"]))
def test_a_committed_records_command_keeps_its_ids(record: str) -> None:
    """The command of a committed run (its record's overrides) composes to the ids it had at
    d8476d0: a folder it made then is found again (finished, or resumed)."""
    summary = json.loads((ROOT / record).read_text())
    overrides = [o for o in summary["overrides"] if not o.startswith("paths.")]
    assert _ids(_composed(overrides)) == KEPT["records"][record]
