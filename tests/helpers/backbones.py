"""Backbones built as a run builds them: from ``conf/model/<name>.yaml`` by Hydra, at test sizes.

Building from the configs (not the classes) is what makes a backbone added to ``conf/model`` reach
the contract tests without editing them, and tests the configs' wiring on the way.
"""

from __future__ import annotations

from functools import cache

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig

from recurrent_attention.config import CONFIG_DIR, register_resolvers
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
def model_config(name: str, overrides: tuple[str, ...] = ()) -> DictConfig:
    """``conf/model/<name>.yaml`` composed alone (under ``model``) at the test sizes and windows."""
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        keys = set(compose(overrides=[f"+model={name}"]).model.keys())  # `in` skips `???` keys
        settings = [f"model.{key}={value}" for key, value in {**SIZES, **WINDOWS}.items() if key in keys]
        return compose(overrides=[f"+model={name}", *settings, *overrides])


def sequence_backbones() -> list[str]:
    """Every model config whose backbone is a :class:`Backbone` (the video encoders are not)."""
    names = sorted(path.stem for path in (CONFIG_DIR / "model").glob("*.yaml"))
    return [n for n in names if issubclass(get_class(model_config(n).model.backbone._target_), Backbone)]


def build_backbone(name: str, overrides: tuple[str, ...] = ()) -> Backbone:
    """The backbone of ``conf/model/<name>.yaml`` (plus ``overrides``), seeded, float64, eval mode."""
    torch.manual_seed(0)
    return instantiate(model_config(name, overrides).model.backbone).double().eval()
