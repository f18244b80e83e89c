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
from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
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


# Backbones that take attn_dropout only to drop it (no attention probabilities): they are handed
# the 0.0 that presets and LM set for every model, which their old copied node left out.
DROPPED = {
    "recurrent_attention.models.aaren.Aaren",
    "recurrent_attention.models.linear_attention.LinearTransformer",
}


@pytest.mark.parametrize("kept", KEPT["configs"], ids=[" ".join(k["overrides"]) for k in KEPT["configs"]])
def test_a_moved_config_builds_the_same_backbone_and_keeps_its_ids(kept: dict) -> None:
    cfg = _composed(kept["overrides"])
    arguments = OmegaConf.to_container(backbone_config(cfg.model), resolve=True)
    if arguments["_target_"] in DROPPED and arguments.get("attn_dropout") == 0:
        del arguments["attn_dropout"]
    assert arguments == kept["backbone"]
    assert _ids(cfg) == {"run_id": kept["run_id"], "config_id": kept["config_id"]}


@pytest.mark.parametrize("record", sorted(KEPT["records"]))
def test_a_committed_records_command_keeps_its_ids(record: str) -> None:
    """The command of a committed run (its record's overrides) composes to the ids it had at
    d8476d0: a folder it made then is found again (finished, or resumed)."""
    summary = json.loads((ROOT / record).read_text())
    overrides = [o for o in summary["overrides"] if not o.startswith("paths.")]
    assert _ids(_composed(overrides)) == KEPT["records"][record]


def test_a_run_folder_from_before_builds_its_backbone_from_its_copied_node() -> None:
    """A finished run's folder keeps the config it ran with: one written before issue 68 holds the
    backbone's arguments in a ``model.backbone`` node, beside keys the class does not take."""
    old = OmegaConf.create(
        {
            "model": {
                "name": "aaren",
                "d_model": 8,
                "compile": False,
                "carry_state": False,
                "backbone": {
                    "_target_": "recurrent_attention.models.aaren.Aaren",
                    "d_model": "${model.d_model}",
                    "n_heads": 2,
                    "n_layers": 1,
                    "d_ff": 16,
                },
            }
        }
    )
    backbone = instantiate(backbone_config(old.model))
    assert type(backbone).__name__ == "Aaren" and backbone.d_model == 8
