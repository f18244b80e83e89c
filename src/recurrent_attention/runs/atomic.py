"""A full disk loses nothing: checkpoints written whole or not at all, and one line that says so.

Lightning's ``TorchCheckpointIO`` serialises to memory and then writes the bytes straight into
``best.ckpt`` / ``last.ckpt``: a write cut short by a full disk leaves a truncated file where the
last good checkpoint was. Here the bytes go to a temporary file beside it, renamed over it only
once they are all on disk (``results.summary.atomic_write_bytes``); a failed write removes the
temporary file, so the same command resumes from the last good ``last.ckpt``.
"""

from __future__ import annotations

import errno
import io
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from recurrent_attention.results.summary import atomic_write_bytes


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose saves replace the file atomically (local paths, as runs write)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        atomic_write_bytes(path, buffer.getvalue())


def disk_full(err: BaseException) -> bool:
    """True when ``err``, or an error it was raised from, is "no space left on device" (ENOSPC;
    EDQUOT, a quota reached, reads the same to the user)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class DiskFullError(OSError):
    """The run stopped on a full disk; the message says where and that the same command resumes."""

    def __init__(self, run_dir: Path, last_checkpoint: Path) -> None:
        resume = (
            f"it resumes from {last_checkpoint}, the last checkpoint written whole"
            if last_checkpoint.is_file()
            else "it starts again, as no checkpoint had been written"
        )
        super().__init__(
            errno.ENOSPC,
            f"no space left on the device of {run_dir}: free some space and run the same command; {resume}",
        )

    def __str__(self) -> str:
        return str(self.strerror)
