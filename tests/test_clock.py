"""The one Clock protocol (gpuops/clock.py): the real clock, the scaled one, the fakes' own."""

from __future__ import annotations

import time

import pytest

from fakes.vast.clock import FakeClock
from gpuops.clock import SYSTEM, Clock, ScaledClock
from gpuops.errors import UsageError
from gpuops.market import guard
from gpuops.market import guardian as g


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
    """SYSTEM, ScaledClock and the fakes' FakeClock all give wall, monotonic and sleep."""
    clocks: list[Clock] = [SYSTEM, ScaledClock(2.0), FakeClock()]

    for clock in clocks:
        assert isinstance(clock.wall(), float) and isinstance(clock.monotonic(), float)


def test_a_fake_clock_sleeps_by_moving_forward():
    """FakeClock.sleep advances it; a negative sleep is no sleep; monotonic is its time."""
    clock = FakeClock(5.0)

    clock.sleep(2.0)
    clock.sleep(-1.0)

    assert clock.wall() == clock.monotonic() == 7.0 and clock.epoch_of(7.0) == 7.0


def test_the_guardian_s_lease_durations_follow_the_one_scale():
    """GPUOPS_TIME_SCALE=k divides every lease duration by k; below 1 is a usage error."""
    assert guard.clockwork_for(1.0) == g.NORMAL
    assert guard.clockwork_for(30.0) == g.NORMAL.scaled(30.0)
    with pytest.raises(UsageError, match="GPUOPS_TIME_SCALE=0.5"):
        guard.clockwork_for(0.5)
