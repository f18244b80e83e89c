"""An output folder that cannot be written is one line, before Hydra makes the run folder.

Hydra creates the run (or sweep) folder before ``train.py`` starts, so a read-only output folder
(``OSError: [Errno 30]``) or a path through a file (``NotADirectoryError``) ended in Hydra's
traceback. This Hydra callback looks first: the nearest existing folder on the way must be a
writable folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

EXIT_BAD_INPUT = 2  # train.py's code for a bad command


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written, or None where it can."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is read-only"
    return None


def output_folder(config: DictConfig, key: str) -> Path:
    """The folder Hydra is about to make (``key``), or ``paths.output_dir`` where it does not resolve yet."""
    HydraConfig.instance().set_config(config)  # its ${hydra:...} values, as Hydra itself does next
    try:
        return Path(str(OmegaConf.select(config, key)))
    except Exception:  # a bad config: train.py names its key; here only the writing matters
        return Path(str(OmegaConf.select(config, "paths.output_dir", throw_on_resolution_failure=False)))


class WritableOutput(Callback):
    """Hydra callback: stop with one ``error:`` line (exit 2) where the output cannot be written."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._require_writable(output_folder(config, "hydra.run.dir"))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._require_writable(output_folder(config, "hydra.sweep.dir"))

    @staticmethod
    def _require_writable(folder: Path) -> None:
        reason = unwritable(folder.absolute())
        if reason:
            fix = "set paths.output_dir (or hydra.run.dir) to a writable folder"
            print(f"error: cannot write {folder}: {reason}; {fix}", file=sys.stderr)
            sys.exit(EXIT_BAD_INPUT)
