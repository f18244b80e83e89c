"""A full disk loses nothing: checkpoints written whole or not at all, and one line that says so.

Lightning's ``TorchCheckpointIO`` serialises to memory and then writes the bytes straight into
``best.ckpt`` / ``last.ckpt``: a write cut short by a full disk leaves a truncated file where the
last good checkpoint was. Here the bytes go to a temporary file beside it, renamed over it only
once they are all on disk (:func:`atomic_write_bytes`, through which the run's records and tables
are written too); a failed write removes the temporary file, so the same command resumes from the
last good ``last.ckpt``.
"""

from __future__ import annotations

import errno
import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write via a temporary file in the same folder and rename, so readers never see half a file.

    A write that fails (a full disk) removes its temporary file and leaves ``path`` as it was. The
    file gets the mode a plain ``open`` would give (0666 less the umask, 0644 usually), not the
    temporary file's private 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        try:
            tmp.write(data)
            tmp.flush()
            os.fchmod(tmp.fileno(), 0o666 & ~_umask())
            os.fsync(tmp.fileno())
        except BaseException:
            Path(tmp.name).unlink(missing_ok=True)
            raise
    os.replace(tmp.name, path)


def atomic_write_text(path: str | Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


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
