"""Where the Hydra configs live and the custom OmegaConf resolvers they use."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from recurrent_attention.tasks.tsf.timefeatures import n_time_features

CONFIG_DIR = Path(__file__).resolve().parents[2] / "conf"


def _negate(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"${{ra.not:...}} takes true or false, got {value!r}: set that key to true or false")
    return not value


def register_resolvers() -> None:
    """``${ra.env_unset:VAR}`` is true when VAR is empty or unset (wandb goes offline without a key);
    ``${ra.not:${key}}`` negates a boolean (one switch setting two options, e.g. CRT's positions)."""
    if not OmegaConf.has_resolver("ra.env_unset"):
        OmegaConf.register_new_resolver("ra.env_unset", lambda name: not os.environ.get(name))
    if not OmegaConf.has_resolver("ra.not"):
        OmegaConf.register_new_resolver("ra.not", _negate)
    if not OmegaConf.has_resolver("ra.n_time_features"):
        OmegaConf.register_new_resolver("ra.n_time_features", n_time_features)
