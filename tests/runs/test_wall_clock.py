"""A resumed run's wall time adds the seconds its checkpoint carries to those of its own process."""

from __future__ import annotations

from recurrent_attention.runs.wall_clock import WallClock


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_seconds_before_a_stop_travel_in_the_checkpoint_state() -> None:
    first_process = FakeClock(1000.0)
    first = WallClock(first_process)
    first_process.now += 90.0
    saved = first.state_dict()  # what last.ckpt holds when the first process is killed
    assert saved == {"seconds": 90.0}

    second_process = FakeClock(5.0)  # another process: its clock shares no origin with the first
    second = WallClock(second_process)
    second.setup(None, None, "fit")
    second.load_state_dict(saved)
    second_process.now += 30.0
    assert second.segment_s() == 30.0
    assert second.total_s() == 120.0
    assert second.state_dict() == {"seconds": 120.0}


def test_testing_a_checkpoint_does_not_turn_the_clock_back() -> None:
    process = FakeClock(0.0)
    clock = WallClock(process)
    clock.setup(None, None, "fit")
    process.now += 50.0
    best = clock.state_dict()  # best.ckpt, written mid-run
    process.now += 50.0
    clock.setup(None, None, "test")  # trainer.test(ckpt_path=best) restores callback states
    clock.load_state_dict(best)
    assert clock.total_s() == 100.0
