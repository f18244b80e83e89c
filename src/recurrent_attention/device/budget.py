"""Which job fits the time left: the runner's launch rule, kept apart so tests can drive it with a clock.

A GPU window is a fixed wall budget. A job killed at the budget's end leaves nothing behind (the
archive carries no checkpoints), so a job is launched only when its expected time fits what is
left. Jobs differ in size (ETTm1 has four times ETTh1's windows), so each carries a relative
``cost`` and the expected time is ``cost x seconds-per-cost``: measured from this window's
finished jobs as soon as one has finished, before that the prior the kit carries (``verify``'s
paper-size ETTh1@96 runs), and with neither, the first wave is launched to learn it.
Standard library only: it runs on the GPU machine before any wheel is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Decision:
    """Launch the job now, or skip it for good with the reason (named in the runner's log)."""

    launch: bool
    reason: str = ""


@dataclass
class Budget:
    """Seconds-per-cost from finished jobs (else ``prior``); launch while the estimate fits.

    ``margin_s`` is kept back for stopping the last jobs and writing the archive; ``slack``
    stretches each estimate, since jobs of one cost differ (start-up, an early stop).
    """

    total_s: float
    prior_s_per_cost: float | None = None
    margin_s: float = 20.0
    slack: float = 1.15  # runs of one cost vary (start-up, early stopping): expect this much longer
    finished: list[tuple[float, float]] = field(default_factory=list)  # (seconds, cost) per finished job

    def record(self, seconds: float, cost: float) -> None:
        """A job finished (successfully) in ``seconds``: it sharpens the estimate for the rest."""
        self.finished.append((seconds, cost))

    def s_per_cost(self) -> float | None:
        """Measured once a job has finished (total seconds over total cost), else the prior."""
        if self.finished:
            seconds = sum(s for s, _ in self.finished)
            cost = sum(c for _, c in self.finished)
            return seconds / cost
        return self.prior_s_per_cost

    def expected_s(self, cost: float) -> float | None:
        rate = self.s_per_cost()
        return None if rate is None else rate * cost

    def decide(self, cost: float, elapsed_s: float, running: int) -> Decision:
        """Whether a job of ``cost`` may start ``elapsed_s`` into the window with ``running`` jobs going.

        With no estimate yet the answer is yes: the runner launches one wave that way and waits for
        its first finished job before launching more.
        """
        left = self.total_s - self.margin_s - elapsed_s
        if left <= 0:
            return Decision(False, f"no time left ({elapsed_s:.0f} s of {self.total_s:.0f} s used)")
        expected = self.expected_s(cost)
        if expected is None:
            return Decision(True, "no estimate yet: first wave")
        expected *= self.slack
        if expected > left:
            return Decision(False, f"expected {expected:.0f} s > {left:.0f} s left")
        return Decision(True, f"expected {expected:.0f} s of {left:.0f} s left")
