"""Ctrl-C stops a run as SIGTERM does: at the end of a batch, with a resumable checkpoint.

Lightning catches SIGTERM with a handler that only sets a flag; its loops stop at the next batch
boundary (``SIGTERMException``), where ``runs.resume.ReproducibleEpochs`` saves ``last.ckpt``, and
the resumed run ends with an unbroken run's metrics. SIGINT it leaves to Python, which raises
``KeyboardInterrupt`` wherever the process is (inside an optimiser step, between a forward and its
backward); Lightning then saves whatever half-updated state there is and exits 1 itself, so the
resumed run was not exact and ``train.py`` printed no ``interrupted:`` line. While
:func:`sigint_as_sigterm` is active, SIGINT is handed to the SIGTERM handler instead.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


def _as_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGINT to the SIGTERM handler that a running trainer installs; outside one, Python's default."""
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        handler(signal.SIGTERM, frame)
    else:
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt


@contextmanager
def sigint_as_sigterm() -> Iterator[None]:
    """Within the block, Ctrl-C is SIGTERM (only the main thread may set handlers; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _as_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
