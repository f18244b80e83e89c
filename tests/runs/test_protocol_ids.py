"""Protocols became objects (issue 68): every family's runs made before keep their ids."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.runs.identity import run_ids

register_resolvers()

# The ids these configs had before the move (computed at d8476d0, `preset=smoke`): old run folders
# are still found, finished or resumable, and their table rows still join the new runs.
BEFORE = {
    ("tsf/etth1", "aaren", "default"): "74a1fa817711",
    ("tsf/etth1", "aaren", "reference"): "626e8f577394",
    ("tsc/japanesevowels", "aaren", "default"): "5fc7cd9686ad",
    ("tsc/japanesevowels", "aaren", "reference"): "5a4830af1202",
    ("ef/mimic", "aaren", "default"): "714980efdd1f",
    ("ef/mimic", "aaren", "reference"): "b019cb66d86f",
    ("rl/hopper_medium", "aaren", "default"): "2e39b76c2367",
    ("rl/hopper_medium", "aaren", "reference"): "6265d35e0332",
    ("video/smarthome_cs", "timesformer", "default"): "550c63032e1c",
    ("video/smarthome_cs", "timesformer", "reference"): "47c6b26607cc",
    ("lm/ptb", "transformer_xl", "default"): "e11d48169080",
    # the paper's Transformer-XL, which model=transformer_xl built under reference then
    ("lm/ptb", "paper/transformer_xl", "reference"): "d15f6722083f",
}


def run_id(*overrides: str) -> str:
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "preset=smoke"], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return run_ids(cfg, OmegaConf.to_container(cfg.hydra.runtime.choices))["run_id"]


@pytest.mark.parametrize(("task", "model", "compat"), list(BEFORE))
def test_a_protocol_keeps_the_run_id_it_had_as_a_name(task: str, model: str, compat: str) -> None:
    assert run_id(f"task={task}", f"model={model}", f"task.compat={compat}") == BEFORE[task, model, compat]


def test_a_protocol_with_another_rule_is_another_run() -> None:
    changed = run_id(
        "task=tsf/etth1", "task.compat=reference", "task.protocols.reference.drop_last_test_batch=false"
    )
    assert changed not in (BEFORE["tsf/etth1", "aaren", "reference"], BEFORE["tsf/etth1", "aaren", "default"])
