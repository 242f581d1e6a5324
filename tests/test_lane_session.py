"""Building the lane from the environment: missing names are named; the loopback clock."""

from __future__ import annotations

import pytest

from gpuops.errors import UsageError
from gpuops.lane import session

NAMES = ("GPUOPS_LANE_PROJECT", "GPUOPS_LANE_ZONE", "GPUOPS_LANE_INSTANCE", "GPUOPS_LANE_BUCKET")


def test_a_missing_lane_variable_is_named(monkeypatch):
    """Bad input: every missing variable is named in one message."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUOPS_LANE_ZONE", "us-central1-b")

    with pytest.raises(UsageError) as raised:
        session.lane_env()

    assert "GPUOPS_LANE_PROJECT, GPUOPS_LANE_INSTANCE, GPUOPS_LANE_BUCKET" in str(raised.value)


def test_the_loopback_clock_runs_scaled_from_the_shared_origin(monkeypatch):
    """Every process computes the same scaled now from the exported origin; waits shrink."""
    monkeypatch.setenv("GPUOPS_LANE_TIME_SCALE", "10")
    monkeypatch.setenv("GPUOPS_LANE_TIME_ORIGIN", "1000.0")
    monkeypatch.setattr(session.time, "time", lambda: 1003.0)
    slept: list[float] = []
    monkeypatch.setattr(session.time, "sleep", slept.append)

    now, sleep = session._clock()
    sleep(120.0)

    assert now() == 1030.0 and slept == [12.0]


@pytest.mark.parametrize(
    "scale, origin", [("fast", "1"), ("0", "1"), ("-2", "1"), ("10", "yesterday")]
)
def test_a_bad_time_scale_or_origin_is_a_usage_error(monkeypatch, scale, origin):
    """Bad input names the variable."""
    monkeypatch.setenv("GPUOPS_LANE_TIME_SCALE", scale)
    monkeypatch.setenv("GPUOPS_LANE_TIME_ORIGIN", origin)

    with pytest.raises(UsageError, match="GPUOPS_LANE_TIME_"):
        session._clock()


def test_without_a_time_scale_the_clock_is_the_wall_clock(monkeypatch):
    """Real GCE: real time, real sleeps."""
    monkeypatch.delenv("GPUOPS_LANE_TIME_SCALE", raising=False)

    now, sleep = session._clock()

    assert now is session.time.time and sleep is session.time.sleep
