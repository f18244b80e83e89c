"""Ctrl-C stops a run as SIGTERM does: at the end of a batch, with a resumable checkpoint.

Lightning catches SIGTERM with a handler that only sets a flag; its loops stop at the next batch
boundary (``SIGTERMException``), where ``runs.resume.ReproducibleEpochs`` saves ``last.ckpt``, and
the resumed run ends with an unbroken run's metrics. SIGINT it leaves to Python, which raises
``KeyboardInterrupt`` wherever the process is (inside an optimiser step, between a forward and its
backward); Lightning would then save whatever half-updated state there is and exit 1 itself, so
the resumed run would not be exact and ``train.py`` would print no ``interrupted:`` line. While
:func:`interrupts_as_sigterm` is active, SIGINT is handed to the SIGTERM handler instead.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


def _as_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGINT to the SIGTERM handler that a running trainer installs; outside one, Python's default."""
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        handler(signal.SIGTERM, frame)
    else:
        signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt


def slurm_warning() -> signal.Signals | None:
    """The signal that warns a submitit job of its end (submitit's ``SUBMITIT_PREEMPT_SIGNAL``,
    USR2 by default), or None outside a submitit job."""
    if "SUBMITIT_FOLDER" not in os.environ:  # set by submitit in the job's process
        return None
    return signal.Signals["SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")]


Handler = Callable[[int, FrameType | None], Any]


class _Warning:
    """Submitit's handler of the warning, called with it, once the warning arrived; else None."""

    requeue: Callable[[], Any] | None = None


def _warned(submitit_handler: Handler) -> Handler:
    def on_warning(signum: int, frame: FrameType | None) -> None:
        _Warning.requeue = lambda: submitit_handler(signum, None)
        stop = signal.getsignal(signal.SIGTERM)  # Lightning's while it trains: stop after the batch
        if callable(stop):
            stop(signal.SIGTERM, frame)

    return on_warning


@contextmanager
def interrupts_as_sigterm() -> Iterator[None]:
    """Within the block, Ctrl-C is SIGTERM, and so is SLURM's warning in a submitit job (only the
    main thread may set handlers; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _as_sigterm)
    warning = slurm_warning()
    submitit_handler = signal.getsignal(warning) if warning else None
    if warning and callable(submitit_handler):
        signal.signal(warning, _warned(submitit_handler))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if warning and callable(submitit_handler):
            signal.signal(warning, submitit_handler)


def warned_by_slurm() -> bool:
    """The run stopped on SLURM's warning to its submitit job (the job is to be requeued)."""
    return _Warning.requeue is not None


def requeue_if_warned() -> None:
    """After a run stopped on SLURM's warning: submitit requeues the job and exits (else returns)."""
    requeue, _Warning.requeue = _Warning.requeue, None
    if requeue is not None:
        requeue()
