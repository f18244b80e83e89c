"""One writer per run folder: ``run.lock`` holds the pid of the process that owns the folder.

The lock is an ``flock`` on that file, so the kernel releases it when its process dies: a lock
left by a dead process (SIGKILL, power loss) is taken over without anyone deleting a file, and a
live one makes the second process stop with the folder and the owner's pid.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_NAME = "run.lock"


class RunFolderBusyError(RuntimeError):
    """Another live process writes this run folder."""


class RunLock:
    """``with RunLock(run_dir):`` holds the folder's lock for the block (non-blocking)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunFolderBusyError(
                f"{self.path.parent} is in use by pid {owner} (the same run started earlier); "
                "wait for it to finish or stop it"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        # The file stays (removing a locked file lets a third process lock a fresh one beside a
        # second that opened the old one); it is emptied so it names no owner.
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
