"""The fakes' clocks: gpuops' one ``Clock`` protocol (gpuops/clock.py), plus ``epoch_of``.

FakeVast never reads the wall clock itself (STYLE.md: moto's lesson). In-process tests inject a
:class:`FakeClock` and call ``advance``; ``gpuops fakes serve`` injects a
:class:`~gpuops.clock.ScaledClock` so a separate process sees boxes boot and die
``time_scale`` times faster than real time. Both are the ``Clock`` gpuops itself runs on.
"""

from __future__ import annotations

import threading
from typing import Protocol

from gpuops.clock import Clock as _Clock
from gpuops.clock import ScaledClock

__all__ = ["RECORDED_EPOCH", "Clock", "FakeClock", "ScaledClock"]

# 2026-11-30 09:12:05 UTC: the start_date of the instance in recordings/vast/show_running.yaml,
# so a fake's first box starts when the recorded one did.
RECORDED_EPOCH = 1796029925.0


class Clock(_Clock, Protocol):
    """A fake's clock: gpuops' ``Clock``, whose ``wall`` is the fake's time, and the wall-clock
    epoch a client should read for a fake time (``start_date``)."""

    def epoch_of(self, at: float) -> float: ...


class FakeClock:
    """A clock that moves only when a test says so; ``sleep`` moves it."""

    def __init__(self, start: float = RECORDED_EPOCH) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def wall(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        return self.wall()

    def sleep(self, seconds: float) -> None:
        self.advance(max(seconds, 0.0))

    def epoch_of(self, at: float) -> float:
        """In tests the fake time is the world's time."""
        return at

    def advance(self, seconds: float) -> None:
        """Move forward ``seconds``; time never runs backwards."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward, not by {seconds!r} s")
        with self._lock:
            self._now += seconds

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"
