"""A backbone built in Python is the backbone its config builds: every option a model config sets
to a literal value (not a size the task sets, nor an interpolation of another key) is the class's
own default for it. Otherwise a researcher who builds ``CRViT(...)`` in a notebook trains another
model than ``model=cr_vit`` does, with nothing to say so."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR
from tests.helpers.backbones import model_config

MODEL_FILES = sorted((CONFIG_DIR / "model").glob("*.yaml"))


def literal_options(path: Path) -> dict[str, object]:
    """``{argument: value}`` for each backbone argument that reads ``${model.<key>}`` where the
    file itself gives ``<key>`` a literal value."""
    raw = OmegaConf.load(path)
    backbone = raw.get("backbone")
    if backbone is None:
        return {}
    options = {}
    for argument in backbone:
        if argument == "_target_":
            continue
        reference = OmegaConf.to_container(backbone, resolve=False)[argument]
        if (
            not isinstance(reference, str)
            or not reference.startswith("${model.")
            or reference.count("$") != 1
        ):
            continue
        key = reference.removeprefix("${model.").removesuffix("}")
        if key not in raw or OmegaConf.is_missing(raw, key) or OmegaConf.is_interpolation(raw, key):
            continue
        options[argument] = raw[key]
    return options


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_python_defaults_are_the_config_values(path: Path) -> None:
    cls = get_class(model_config(path.stem).model.backbone._target_)
    defaults = {
        name: p.default
        for klass in reversed(cls.__mro__)  # a subclass's default overrides its base's
        if "__init__" in vars(klass)
        for name, p in inspect.signature(klass.__init__).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    differing = {
        argument: (defaults[argument], value)
        for argument, value in literal_options(path).items()
        if argument in defaults and defaults[argument] != value
    }
    assert not differing, f"{cls.__name__} defaults (python, config) differ from {path.name}: {differing}"
