"""Each family's protocols: one object per file of conf/task/<family>/protocol/, checked once."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR, register_resolvers
from recurrent_attention.config_checks import check_protocol
from recurrent_attention.errors import ConfigError
from recurrent_attention.tasks.ef.protocol import EFProtocol
from tests.helpers.protocols import protocol

register_resolvers()
FAMILIES = sorted(path.parent.name for path in (CONFIG_DIR / "task").glob("*/protocol"))
DATASET = {"tsf": "etth1", "tsc": "japanesevowels", "ef": "sin", "rl": "hopper_medium", "lm": "ptb"}


def composed(*overrides: str):
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=[*overrides, "preset=smoke"])


def test_every_family_with_a_compat_switch_has_its_protocols() -> None:
    assert FAMILIES == ["ef", "lm", "rl", "tsc", "tsf", "video"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_python_default_is_the_default_file(family: str) -> None:
    """``DEFAULT`` (a task built without a config) is ``default.yaml``'s object, field for field."""
    assert (
        protocol(family, "default")
        == importlib.import_module(f"recurrent_attention.tasks.{family}.protocol").DEFAULT
    )
    assert protocol(family, "reference") != protocol(family, "default")


@pytest.mark.parametrize("family", FAMILIES)
def test_the_family_lists_every_protocol_file_and_selects_by_compat(family: str) -> None:
    task = f"task={family}/{DATASET.get(family, 'smarthome_cs')}"
    model = "model=timesformer" if family == "video" else "model=aaren"
    cfg = composed(task, model, "task.compat=reference")
    files = sorted(Path(p).stem for p in (CONFIG_DIR / "task" / family / "protocol").glob("*.yaml"))
    assert sorted(cfg.task.protocols) == files
    assert (
        cfg.task.rules
        == cfg.task.protocols.reference
        == OmegaConf.load(CONFIG_DIR / "task" / family / "protocol" / "reference.yaml")
    )


def test_an_unknown_protocol_name_is_one_line_naming_the_choices() -> None:
    cfg = composed("task=tsf/etth1", "task.compat=referense")
    with pytest.raises(ConfigError) as info:
        check_protocol(cfg)
    assert str(info.value) == (
        "task.compat='referense' is not allowed: use one of default, reference "
        "(the files of conf/task/tsf/protocol/)"
    )


def test_a_bad_field_is_one_line_naming_it_and_what_it_takes() -> None:
    with pytest.raises(ConfigError) as info:
        EFProtocol(nll="meta", rmse="per_event", checkpoint_metric="val/nll", time_every_layer=False)
    assert str(info.value).startswith(
        "task.rules.nll='meta' is not allowed: use one of per_predicted_event, meta_tpp"
    )
    with pytest.raises(
        ConfigError, match=r"task\.rules\.time_every_layer=1 is not allowed: use true or false"
    ):
        EFProtocol(nll="meta_tpp", rmse="per_event", checkpoint_metric="val/nll", time_every_layer=1)
    cfg = composed("task=ef/sin", "task.protocols.default.checkpoint_metric=val/acc")
    with pytest.raises(ConfigError, match=r"task\.rules\.checkpoint_metric='val/acc' is not allowed"):
        check_protocol(cfg)
