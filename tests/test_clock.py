"""The one Clock protocol (gpuops/clock.py): the real clock, the scaled one, the fakes' own."""

from __future__ import annotations

import time

import pytest

from fakes.vast.clock import FakeClock
from gpuops.clock import SYSTEM, Clock, ScaledClock, WithSleep


def test_the_system_clock_is_the_real_one():
    """SYSTEM: time.time, time.monotonic, and a real (here zero-length) sleep."""
    before = time.time()
    wall = SYSTEM.wall()
    assert before <= wall <= time.time()
    before = time.monotonic()
    assert before <= SYSTEM.monotonic() <= time.monotonic()
    SYSTEM.sleep(0.0)
    assert repr(SYSTEM) == "SYSTEM"


def test_a_scaled_clock_runs_factor_times_faster_from_its_origin():
    """Ten base seconds at x60 are ten minutes; a sleep of a minute is one base second."""
    base = FakeClock(1000.0)
    clock = ScaledClock(60.0, base=base)
    slept: list[float] = []
    base.sleep = slept.append  # type: ignore[method-assign]

    base.advance(10.0)
    clock.sleep(60.0)

    assert clock.wall() == 1000.0 + 600.0 and clock.monotonic() == 600.0
    assert slept == [1.0] and repr(clock) == "ScaledClock(factor=60.0)"


def test_two_scaled_clocks_with_one_origin_agree_whenever_they_were_made():
    """The runner's clock and the fake's, made at different moments from one exported origin."""
    base = FakeClock(1003.0)
    late = ScaledClock(10.0, origin=1000.0, base=base)
    base.advance(5.0)
    later = ScaledClock(10.0, origin=1000.0, base=base)

    assert late.wall() == later.wall() == 1000.0 + 8.0 * 10.0
    assert late.epoch_of(1080.0) == 1008.0


def test_a_scaled_clock_can_start_elsewhere_and_maps_its_time_back_to_the_base_s():
    """A fake's clock starts at the recorded epoch; epoch_of gives the base's time for it."""
    base = FakeClock(500.0)
    clock = ScaledClock(2.0, start=10_000.0, base=base)
    base.advance(3.0)

    assert clock.wall() == 10_006.0 and clock.epoch_of(10_006.0) == 503.0


def test_a_scaled_clock_may_run_slower_than_real_time():
    """A factor between 0 and 1 is a slow world, not an error."""
    base = FakeClock(0.0)
    clock = ScaledClock(0.5, base=base)
    base.advance(4.0)

    assert clock.wall() == 2.0


@pytest.mark.parametrize("factor", [0.0, -1.0, float("inf"), float("-inf"), float("nan")])
def test_a_scale_that_is_not_a_positive_finite_number_is_refused(factor):
    """A clock that stands still, runs backwards or is undefined is a bug."""
    with pytest.raises(ValueError, match="positive finite"):
        ScaledClock(factor)


def test_every_clock_is_the_one_protocol():
    """SYSTEM, ScaledClock, WithSleep and the fakes' FakeClock all give wall, monotonic and sleep."""
    clocks: list[Clock] = [SYSTEM, ScaledClock(2.0), FakeClock(), WithSleep(SYSTEM, SYSTEM.sleep)]

    for clock in clocks:
        assert isinstance(clock.wall(), float) and isinstance(clock.monotonic(), float)


def test_a_clock_with_its_own_sleep_keeps_its_base_s_time_and_waits_its_own_way():
    """WithSleep: the base's wall and monotonic time (never each other's); a wait goes to the
    sleep it was given, and the base never moves."""
    base = FakeClock(1000.0)
    scaled = ScaledClock(2.0, start=50.0, base=base)
    waits: list[float] = []
    clock = WithSleep(scaled, waits.append)
    base.advance(3.0)

    clock.sleep(4.0)

    assert (clock.wall(), clock.monotonic()) == (56.0, 6.0)
    assert waits == [4.0] and base.wall() == 1003.0
    assert repr(clock) == "WithSleep(ScaledClock(factor=2.0))"


def test_a_fake_clock_sleeps_by_moving_forward():
    """FakeClock.sleep advances it; a negative sleep is no sleep; monotonic is its time."""
    clock = FakeClock(5.0)

    clock.sleep(2.0)
    clock.sleep(-1.0)

    assert clock.wall() == clock.monotonic() == 7.0 and clock.epoch_of(7.0) == 7.0


def test_a_wait_for_an_event_counts_the_clock_s_own_seconds_and_ends_when_it_is_set():
    """Clock.wait: a scaled clock waits 1/factor of the seconds on its base (the racer's
    heartbeat beats as fast as the world it is judged in); WithSleep's wait is its base's,
    whatever its sleep does; SYSTEM and a hand-moved clock wait real seconds (only the test
    moves the latter), and every one returns True at once when the event is set."""
    import threading

    class Base(FakeClock):
        def __init__(self) -> None:
            super().__init__(5.0)
            self.asked: list[float] = []

        def wait(self, event: threading.Event, seconds: float) -> bool:
            self.asked.append(seconds)
            return event.is_set()

    base = Base()
    unset, done = threading.Event(), threading.Event()
    done.set()
    assert ScaledClock(100.0, base=base).wait(unset, 5.0) is False
    assert WithSleep(ScaledClock(4.0, base=base), lambda s: None).wait(done, 8.0) is True
    assert base.asked == [0.05, 2.0]
    for clock in (SYSTEM, FakeClock(5.0)):
        started = time.monotonic()
        assert clock.wait(unset, 0.02) is False
        assert time.monotonic() - started >= 0.015, clock  # real seconds, never fewer
        assert clock.wait(done, 3600.0) is True


def test_a_clock_s_scale_is_its_factor_through_withsleep_and_one_for_any_other():
    """scale_of: what a guardian's start event says its clock runs at (never divided by)."""
    from gpuops.clock import scale_of

    assert scale_of(SYSTEM) == 1.0 and scale_of(FakeClock(5.0)) == 1.0
    assert scale_of(ScaledClock(30.0)) == 30.0
    assert scale_of(WithSleep(WithSleep(ScaledClock(4.0), lambda s: None), lambda s: None)) == 4.0
    assert scale_of(WithSleep(SYSTEM, lambda s: None)) == 1.0
