"""SLURM's warning to a submitit job stops a run as SIGTERM does, and submitit's handler, kept aside,
requeues the job only once the run has stopped (runs/interrupt.py). Without SLURM: the signal is
sent to this process, the handlers are stand-ins for Lightning's and submitit's."""

from __future__ import annotations

import os
import signal

import pytest

from recurrent_attention.runs.interrupt import interrupts_as_sigterm, requeue_if_warned, warned_by_slurm


@pytest.fixture
def handlers(monkeypatch):
    """Stand-ins: submitit's USR2 handler (as in a job) and a trainer's SIGTERM handler; both record."""
    calls: list[str] = []
    monkeypatch.setenv("SUBMITIT_FOLDER", "/nowhere")
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR2, signal.SIGTERM)}
    signal.signal(
        signal.SIGUSR2, lambda signum, frame: calls.append(f"submitit {signal.Signals(signum).name}")
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(f"stop {signal.Signals(signum).name}"))
    yield calls
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def test_the_warning_stops_the_run_and_requeues_only_when_asked(handlers: list[str]) -> None:
    submitit_handler = signal.getsignal(signal.SIGUSR2)
    with interrupts_as_sigterm():
        os.kill(os.getpid(), signal.SIGUSR2)
        assert handlers == ["stop SIGTERM"]  # the trainer stops after its batch; submitit waits
        assert warned_by_slurm()
    assert signal.getsignal(signal.SIGUSR2) is submitit_handler  # put back when the block ends
    requeue_if_warned()
    assert handlers == ["stop SIGTERM", "submitit SIGUSR2"]
    requeue_if_warned()  # once only
    assert handlers == ["stop SIGTERM", "submitit SIGUSR2"] and not warned_by_slurm()


def test_outside_a_submitit_job_the_signal_is_left_alone(handlers: list[str], monkeypatch) -> None:
    monkeypatch.delenv("SUBMITIT_FOLDER")
    with interrupts_as_sigterm():
        os.kill(os.getpid(), signal.SIGUSR2)
    assert handlers == ["submitit SIGUSR2"] and not warned_by_slurm()
    requeue_if_warned()
    assert handlers == ["submitit SIGUSR2"]
