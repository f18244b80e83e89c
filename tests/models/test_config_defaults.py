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

from recurrent_attention.config import CONFIG_DIR, RUN_KEYS
from tests.helpers.backbones import model_config

MODEL_FILES = sorted((CONFIG_DIR / "model").glob("*.yaml"))
# The options whose class default is another reading's. TransformerXL draws one positional dropout
# mask for all layers as Transformer-XL's code (model=paper/transformer_xl, and the paper's
# Transformer, which is that class); model=transformer_xl keeps the mask per layer its runs had. Its
# memory is none by default (mem_len 0: the paper's Transformer, model=paper/transformer, which sets
# no mem_len); model=transformer_xl keeps 128 tokens (LM's segment under LM: conf/fit/lm/).
OTHER_READING = {"transformer_xl.yaml": {"shared_position_dropout", "mem_len"}}


def literal_options(path: Path) -> dict[str, object]:
    """``{argument: value}`` for each backbone argument the file gives a literal value, in a file
    that names its class (``_target_``; a file that only changes another's options, as crt_gru
    does crt's, builds a class whose defaults are another file's)."""
    raw = OmegaConf.load(path)
    if "_target_" not in raw:
        return {}
    return {
        key: raw[key]
        for key in raw
        if key not in (*RUN_KEYS, "_target_", "defaults")
        and not OmegaConf.is_missing(raw, key)
        and not OmegaConf.is_interpolation(raw, key)
    }


@pytest.mark.parametrize("path", MODEL_FILES, ids=[p.stem for p in MODEL_FILES])
def test_python_defaults_are_the_config_values(path: Path) -> None:
    cls = get_class(model_config(path.stem).model._target_)
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
        if argument in defaults
        and defaults[argument] != value
        and argument not in OTHER_READING.get(path.name, ())
    }
    assert not differing, f"{cls.__name__} defaults (python, config) differ from {path.name}: {differing}"
