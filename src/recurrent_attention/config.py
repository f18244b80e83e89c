"""Where the Hydra configs live, the custom OmegaConf resolvers they use, and which part of a
``model`` node the backbone is built from.

The resolvers here are the core's. A task family that needs one of its own (TSF's
``ra.n_time_features``) registers it with :func:`register_resolver` from its ``checks.py``, which
``recurrent_attention.tasks.register_families`` imports: this module imports no family.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from recurrent_attention.runs.identity import run_id_resolver

# The configs ship inside the package (an installed ``ra-train`` finds them); in a checkout this is
# a symlink to the top-level ``conf/`` where they are edited.
CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def ddp_accelerator() -> str:
    """``gpu`` where CUDA devices exist, else ``cpu``: ``trainer=ddp`` runs on either machine."""
    return "gpu" if torch.cuda.is_available() else "cpu"


def ddp_devices() -> int:
    """Every GPU; on a CPU-only machine 2 processes (more would only split the same cores)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 2


def ddp_precision() -> str:
    """bf16 mixed precision on GPUs as ``trainer=gpu``; full fp32 on CPUs."""
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def program() -> str:
    """How the user started a run, for ``--help``: ``ra-train`` (the installed command) or
    ``python train.py`` (the checkout's entry point)."""
    return "ra-train" if Path(sys.argv[0]).name.startswith("ra-train") else "python train.py"


def _negate(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"${{ra.not:...}} takes true or false, got {value!r}: set that key to true or false")
    return not value


def _choose(condition: object, if_true: object, if_false: object) -> object:
    if not isinstance(condition, bool):
        raise ValueError(
            f"${{ra.if:...}} takes true or false first, got {condition!r}: set that key to true or false"
        )
    return if_true if condition else if_false


def _equal(value: object, other: object) -> bool:
    return value == other


def register_resolver(name: str, resolver: Callable[..., object]) -> None:
    """Register ``resolver`` as ``${name:...}`` unless one of that name exists (calling again is free)."""
    if not OmegaConf.has_resolver(name):
        OmegaConf.register_new_resolver(name, resolver)


def register_resolvers() -> None:
    """Register the core's ``ra.*`` resolvers (families' own: ``tasks.register_families``).

    ``${ra.env_unset:VAR}`` is true when VAR is empty or unset (wandb goes offline without a key);
    ``${ra.not:${key}}`` negates a boolean (one switch setting two options, e.g. CRT's positions);
    ``${ra.if:${flag},a,b}`` is a when the boolean flag is true, else b (a switch choosing a value,
    e.g. the Transformer's class); ``${ra.eq:${key},value}`` is true when the key holds that value;
    ``${ra.run_id:}`` is the run's config hash (see ``runs.identity``);
    ``${ra.ddp_*:}`` fill ``trainer=ddp`` from the machine it starts on;
    ``${ra.program:}`` is the command's own name (``--help`` names itself).
    """
    resolvers = {
        "ra.env_unset": lambda name: not os.environ.get(name),
        "ra.not": _negate,
        "ra.if": _choose,
        "ra.eq": _equal,
        "ra.run_id": run_id_resolver,
        "ra.ddp_accelerator": ddp_accelerator,
        "ra.ddp_devices": ddp_devices,
        "ra.ddp_precision": ddp_precision,
        "ra.program": program,
    }
    for name, resolver in resolvers.items():
        register_resolver(name, resolver)


# The keys of a ``model`` node that are the run's, not the backbone's: the name that files and tables
# use, the switch to compile it, and the two options an LM head reads (whether the backbone's state
# is carried between segments, whether the head adds sinusoidal positions). Every other key is an
# argument of the class ``model._target_`` names (conf/README.md, "Model configs").
RUN_KEYS = ("name", "compile", "compile_backend", "carry_state", "absolute_positions")


def backbone_config(model: DictConfig) -> DictConfig:
    """The part of a ``model`` node that ``instantiate`` builds: the node less :data:`RUN_KEYS`.

    A run folder written before the model configs were flattened (issue 68) holds the backbone's
    arguments in a ``model.backbone`` node of its own: that node is returned, so a finished run
    made then loads as it did."""
    if "backbone" in model:
        return model.backbone
    resolved = OmegaConf.to_container(model, resolve=True)
    return OmegaConf.create({key: value for key, value in resolved.items() if key not in RUN_KEYS})
