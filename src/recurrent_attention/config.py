"""Where the Hydra configs live and the custom OmegaConf resolvers they use."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from recurrent_attention.runs.identity import run_id_resolver
from recurrent_attention.tasks.tsf.timefeatures import n_time_features

# The configs ship inside the package (an installed ``ra-train`` finds them); in a checkout this is
# a symlink to the top-level ``conf/`` where they are edited.
CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def register_resolvers() -> None:
    """``${ra.env_unset:VAR}`` is true when VAR is empty or unset (wandb goes offline without a key);
    ``${ra.run_id:}`` is the run's config hash (see ``runs.identity``)."""
    if not OmegaConf.has_resolver("ra.env_unset"):
        OmegaConf.register_new_resolver("ra.env_unset", lambda name: not os.environ.get(name))
    if not OmegaConf.has_resolver("ra.n_time_features"):
        OmegaConf.register_new_resolver("ra.n_time_features", n_time_features)
    if not OmegaConf.has_resolver("ra.run_id"):
        OmegaConf.register_new_resolver("ra.run_id", run_id_resolver)
