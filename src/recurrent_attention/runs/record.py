"""What a run folder says about the run it holds: Hydra's record of the command, and the run's ids.

Hydra would write ``.hydra/*.yaml`` into the run folder before ``train.py`` starts, so every
later command (a skipped one, a refused one, another config given the same ``hydra.run.dir``) would
rewrite a finished run's record, and its config would not match its ``summary.json``.
``conf/train.yaml`` turns that off (``hydra.output_subdir: null``) and ``train.py`` writes the same
three files here, once it has decided to run in the folder, beside ``identity.json``: the ids of
the run the folder holds from its first epoch on, so that a folder holding another config's run, finished or
interrupted, is refused before anything in it changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from recurrent_attention.errors import ConfigError
from recurrent_attention.runs.atomic import atomic_write_text

HYDRA_RECORD = ".hydra"
IDENTITY_NAME = "identity.json"
SUMMARY_NAME = "summary.json"
"""A finished run's record (``results.summary.write_summary``), which every results table is built from."""
FAILED_NAME = "failed.json"
"""A failed run's record (``train.py``), which tables count as a failed seed."""
# Where a folder names its run: the record written at its start, else (folders from before it)
# the finished run's summary or the failed run's record.
ID_SOURCES = (IDENTITY_NAME, SUMMARY_NAME, FAILED_NAME)


class RunFolderMismatchError(ConfigError):
    """The run folder holds the run of another config."""


def write_run_record(
    run_dir: Path, task_cfg: DictConfig, hydra_cfg: DictConfig, identity: Mapping[str, Any]
) -> None:
    """``.hydra/{config,hydra,overrides}.yaml`` as Hydra writes them, and ``identity.json``."""
    folder = run_dir / HYDRA_RECORD
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "config.yaml": task_cfg,
        "hydra.yaml": OmegaConf.create({"hydra": hydra_cfg}),
        "overrides.yaml": hydra_cfg.overrides.task,
    }
    for name, node in files.items():
        atomic_write_text(folder / name, OmegaConf.to_yaml(node))
    ids = {key: identity[key] for key in ("run_id", "config_id")}
    atomic_write_text(run_dir / IDENTITY_NAME, json.dumps(ids, indent=2) + "\n")


def recorded_run_id(run_dir: Path) -> str | None:
    """The ``run_id`` the folder's own records give, or None where it holds no run (yet)."""
    for name in ID_SOURCES:
        path = run_dir / name
        if path.is_file():
            try:
                return str(json.loads(path.read_text())["run_id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # a torn or foreign file names no run; the next source may
    return None


def require_same_run(run_dir: Path, run_id: str) -> None:
    """Raise :class:`RunFolderMismatchError` where ``run_dir`` holds a run other than ``run_id``."""
    recorded = recorded_run_id(run_dir)
    if recorded is not None and recorded != run_id:
        raise RunFolderMismatchError(
            f"{run_dir} holds run {recorded}, not this config's run {run_id}; leave out hydra.run.dir "
            "(each config gets its own folder), give another folder, or pass force=true to set that run aside"
        )
