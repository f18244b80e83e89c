"""A family's protocol object as ``train.py`` builds it: from its file in ``conf/task/<family>/protocol/``."""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate
from omegaconf import OmegaConf

from recurrent_attention.config import CONFIG_DIR


def protocol(family: str, name: str) -> Any:
    """The object ``conf/task/<family>/protocol/<name>.yaml`` instantiates (``task.rules``)."""
    return instantiate(OmegaConf.load(CONFIG_DIR / "task" / family / "protocol" / f"{name}.yaml"))
