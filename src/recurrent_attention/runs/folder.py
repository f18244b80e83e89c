"""Housekeeping of one run folder: a fresh start on ``force``, a corrupt checkpoint, a refused config."""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from recurrent_attention.runs.lock import LOCK_NAME

# Files a force-restart leaves in place: Hydra's log file that may be open already, and the lock.
# The old run's ``.hydra/`` record moves aside with its summary (train.py writes the new one after).
KEPT_ON_FORCE = (LOCK_NAME,)
# Records that results tables collect by name; inside a set-aside folder they get this suffix so
# that an old run never reappears in a table.
RECORD_NAMES = ("summary.json", "failed.json")
SET_ASIDE_SUFFIX = ".replaced"


def set_aside_previous_run(run_dir: Path, hydra_log: str) -> Path | None:
    """Move an earlier run's files into ``replaced-<UTC time>/`` inside the folder; returns it.

    Nothing is deleted: ``force=true`` asks for a clean run, not for losing the old one.
    """
    kept = {*KEPT_ON_FORCE, hydra_log}
    previous = [
        p for p in sorted(run_dir.iterdir()) if p.name not in kept and not p.name.startswith("replaced-")
    ]
    if not previous:
        return None
    target = run_dir / datetime.now(timezone.utc).strftime("replaced-%Y%m%dT%H%M%S.%fZ")
    target.mkdir()
    for path in previous:
        path.rename(target / path.name)
    for name in RECORD_NAMES:
        for record in target.rglob(name):
            record.rename(record.with_name(name + SET_ASIDE_SUFFIX))
    return target


def usable_checkpoint(path: Path) -> Path | None:
    """``path`` if it loads as a Lightning checkpoint, else None with the attempt's checkpoints aside.

    A corrupt ``last.ckpt`` means the attempt that wrote it died; the new run starts from scratch.
    Every checkpoint of that attempt moves with it into ``corrupt-<UTC time>/`` beside them, so the
    new run's ``best.ckpt`` never lands as ``best-v1.ckpt`` next to the dead attempt's weights.
    """
    if not path.is_file():
        return None
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint or "loops" not in checkpoint:
            raise ValueError("not a Lightning training checkpoint")
    except Exception as err:  # a truncated or foreign file: any load error means "cannot resume"
        aside = path.parent / datetime.now(timezone.utc).strftime("corrupt-%Y%m%dT%H%M%S.%fZ")
        aside.mkdir()
        for old in sorted(path.parent.glob("*.ckpt")):
            old.rename(aside / old.name)
        print(
            f"warning: {path} cannot be loaded ({type(err).__name__}); it and the other checkpoints of "
            f"that attempt moved to {aside}, starting from scratch",
            file=sys.stderr,
        )
        return None
    return path


def remove_refused_folder(run_dir: Path, output_dir: Path) -> None:
    """Remove ``run_dir`` and the folders Hydra made above it, inside ``output_dir``, while empty.

    Hydra creates the run folder before ``train.py`` can refuse a config; a refusal leaves nothing
    behind. A folder holding anything (another run's files) stays, and so does ``output_dir``.
    """
    folder, root = run_dir.resolve(), output_dir.resolve()
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        if root not in folder.parents:
            return  # a run folder outside the output folder (hydra.run.dir=...): only itself
        folder = folder.parent
