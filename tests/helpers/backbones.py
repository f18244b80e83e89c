"""Backbones built as a run builds them: from ``conf/model/<name>.yaml`` by Hydra, at test sizes.

Building from the configs (not the classes) is what makes a backbone added to ``conf/model`` reach
the contract tests without editing them, and tests the configs' wiring on the way.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.models import Backbone

D_MODEL = 16
# What a task sets (a model file leaves these `???`: conf/README.md), at test sizes, where the
# model has the key (the video encoders have no activation or norm_first).
SIZES = {
    "d_model": D_MODEL,
    "n_heads": 2,
    "n_layers": 2,
    "d_ff": 32,
    "dropout": 0.0,
    "activation": "gelu",
    "norm_first": False,
}
# A backbone config's window, wherever it has one, set small so that the tests cross it.
WINDOWS = {"mem_len": 4, "seg_len": 4}


@cache
def model_config(name: str, overrides: tuple[str, ...] = (), config_dir: Path = CONFIG_DIR) -> DictConfig:
    """``<config_dir>/model/<name>.yaml`` composed alone (under ``model``) at the test sizes and windows."""
    register_resolvers()
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        keys = set(compose(overrides=[f"+model={name}"]).model.keys())  # `in` skips `???` keys
        settings = [f"model.{key}={value}" for key, value in {**SIZES, **WINDOWS}.items() if key in keys]
        return compose(overrides=[f"+model={name}", *settings, *overrides])


def sequence_backbones(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Every model config in ``config_dir/model`` whose backbone is a :class:`Backbone` (the video
    encoders are not): the list is read from the folder, never written down, so a config added
    there is found without editing a test."""
    names = sorted(path.stem for path in (config_dir / "model").glob("*.yaml"))
    return [
        name
        for name in names
        if issubclass(get_class(model_config(name, (), config_dir).model._target_), Backbone)
    ]


def build_backbone(name: str, overrides: tuple[str, ...] = ()) -> Backbone:
    """The backbone of ``conf/model/<name>.yaml`` (plus ``overrides``), seeded, float64, eval mode."""
    torch.manual_seed(0)
    return instantiate(backbone_config(model_config(name, overrides).model)).double().eval()


def assert_states_close(actual: list, expected: list, **tolerance: float) -> None:
    """Two step states (one state tuple per layer) of the same types, part by part within ``tolerance``."""
    for got, want in zip(actual, expected, strict=True):
        assert type(got) is type(want)
        for got_part, want_part in zip(got, want, strict=True):
            torch.testing.assert_close(got_part, want_part, **tolerance)
