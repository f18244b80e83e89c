"""The one loader of a finished run: its config, its ``summary.json`` and the checkpoint that names.

Scripts that use a trained model (``scripts/export_step.py``, ``scripts/ef_stream.py``) load it
here and nowhere else, so they take the weights the run was tested with: the checkpoint
``summary.json`` names (``best_checkpoint``; ``last.ckpt`` where the run monitored nothing), never
a file picked by its name, which after a restart can be a killed attempt's (``best.ckpt`` beside
the new ``best-v1.ckpt``). A folder that is not a finished run is one :class:`RunFolderError` line.

It stands above ``config`` and ``tasks``, beside ``train`` that wrote the folder: a saved config is
read with the core's and the families' resolvers, and ``runs.identity`` (which ``config`` imports
for ``${ra.run_id:}``) recomputes the saved folder's ids.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from recurrent_attention.config import CONFIG_DIR, backbone_config, register_resolvers
from recurrent_attention.migration import migrate_state_dict
from recurrent_attention.runs.identity import run_ids
from recurrent_attention.runs.record import SUMMARY_NAME
from recurrent_attention.runs.resume import CHECKPOINTS, last_checkpoint_path
from recurrent_attention.tasks import register_families


class RunFolderError(ValueError):
    """A folder that is not a finished run (or lacks what its summary names); one line with the fix."""


@dataclass(frozen=True)
class FinishedRun:
    run_dir: Path
    config: DictConfig
    summary: dict[str, Any]
    checkpoint: Path

    @property
    def family(self) -> str:
        return str(self.config.task.family)

    def load_module(self) -> Any:
        """The run's task module (and so its backbone) with the named checkpoint's weights."""
        module = instantiate(
            module_with_protocol_object(self.config), backbone=instantiate(backbone_config(self.config.model))
        )
        state = torch.load(self.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
        module.load_state_dict(migrate_state_dict(state))
        return module


# What a module config saved before protocols were objects (issue 68) passed instead of ``rules``:
# the protocol's name, and the fields EF and LM took one by one.
SAVED_PROTOCOL_KEYS = ("compat", "time_every_layer", "txl_init")


def module_with_protocol_object(config: DictConfig) -> DictConfig:
    """``config.task.module``, where it was saved passing the protocol's name (``compat``) and fields,
    given the object instead: the protocol of that name as defined now
    (``conf/task/<family>/protocol/<name>.yaml``) with the saved fields over it, so that an older run
    still loads."""
    module = config.task.module
    saved = {key: module[key] for key in SAVED_PROTOCOL_KEYS if key in module}
    if "rules" in module or not saved:
        return module
    family, name = config.task.family, config.task.get("compat", "default")
    rules = OmegaConf.load(CONFIG_DIR / "task" / family / "protocol" / f"{name}.yaml")
    upgraded = copy.deepcopy(config)  # the module's interpolations still reach the rest of it
    with open_dict(upgraded):
        for key in saved:
            del upgraded.task.module[key]
        upgraded.task.module.rules = OmegaConf.merge(
            rules, {key: saved[key] for key in saved if key in rules}
        )
    return upgraded.task.module


def named_checkpoint(run_dir: Path, summary: dict[str, Any]) -> Path:
    """The checkpoint ``summary.json`` names, looked up by name in the run's own ``checkpoints/``
    (the folder may have been moved or copied since the absolute path was written)."""
    named = summary.get("best_checkpoint") or str(last_checkpoint_path(run_dir))
    checkpoint = run_dir / CHECKPOINTS / Path(named).name
    if not checkpoint.is_file():
        raise RunFolderError(
            f"{run_dir}: summary.json names the checkpoint {Path(named).name}, which is not in "
            f"{CHECKPOINTS}/; copy the whole run folder, or run it again with force=true"
        )
    return checkpoint


def register_saved_config_resolvers() -> None:
    """The core's and the families' resolvers, which a saved ``.hydra/config.yaml`` may use."""
    register_resolvers()
    register_families()


def run_ids_of_folder(run_dir: str | Path) -> dict[str, str]:
    """The ids of a finished or failed run, recomputed from the config Hydra saved in ``.hydra/`` and
    the data as it is now (an own file edited since gives other ids)."""
    register_saved_config_resolvers()
    hydra_dir = Path(run_dir) / ".hydra"
    choices = OmegaConf.load(hydra_dir / "hydra.yaml").hydra.runtime.choices
    return run_ids(OmegaConf.load(hydra_dir / "config.yaml"), OmegaConf.to_container(choices))


def load_finished_run(run_dir: str | Path) -> FinishedRun:
    """Config, summary and named checkpoint of the finished ``train.py`` run in ``run_dir``."""
    run_dir = Path(run_dir)
    hint = "pass the folder a train.py run printed at its end (run folder: ...)"
    if not run_dir.is_dir():
        raise RunFolderError(f"{run_dir}: no such folder; {hint}")
    summary_path, config_path = run_dir / SUMMARY_NAME, run_dir / ".hydra" / "config.yaml"
    if not summary_path.is_file() or not config_path.is_file():
        missing = SUMMARY_NAME if not summary_path.is_file() else ".hydra/config.yaml"
        raise RunFolderError(f"{run_dir}: not a finished train.py run (no {missing}); {hint}")
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as err:
        raise RunFolderError(f"{summary_path}: not valid JSON ({err}); run the run again") from None
    register_saved_config_resolvers()
    return FinishedRun(run_dir, OmegaConf.load(config_path), summary, named_checkpoint(run_dir, summary))
