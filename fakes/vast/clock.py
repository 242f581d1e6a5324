"""The fake's clocks: a hand-advanced one for tests, a scaled wall clock for loopback mode.

FakeVast never reads the wall clock itself (STYLE.md: moto's lesson). In-process tests inject a
:class:`FakeClock` and call ``advance``; ``gpuops fakes serve`` injects a :class:`ScaledClock`
so a separate process sees boxes boot and die ``time_scale`` times faster than real time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

# 2026-11-30 09:12:05 UTC: the start_date of the instance in recordings/vast/show_running.yaml,
# so a fake's first box starts when the recorded one did.
RECORDED_EPOCH = 1796029925.0


class Clock(Protocol):
    """Epoch seconds, as the fake sees them."""

    def now(self) -> float: ...

    def wall(self, at: float) -> float:
        """The wall-clock epoch a client should read for fake time ``at`` (start_date)."""
        ...


class FakeClock:
    """A clock that moves only when a test says so."""

    def __init__(self, start: float = RECORDED_EPOCH) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def wall(self, at: float) -> float:
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


class ScaledClock:
    """Loopback mode: ``start`` plus real elapsed seconds times ``time_scale``.

    ``monotonic`` and ``wall_now`` are injectable so the scaling is tested without waiting.
    :meth:`wall` maps a fake time back to the wall clock, anchored at the moment this clock
    was made: a box created one real second ago is one second old to a client that compares
    its ``start_date`` with ``time.time()`` (the vastai CLI does), whatever the scale.
    """

    def __init__(
        self,
        time_scale: float,
        start: float = RECORDED_EPOCH,
        monotonic: Callable[[], float] = time.monotonic,
        wall_now: Callable[[], float] = time.time,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be positive, not {time_scale!r}")
        self.time_scale = float(time_scale)
        self._start = float(start)
        self._monotonic = monotonic
        self._origin = monotonic()
        self._wall_origin = wall_now()

    def now(self) -> float:
        return self._start + (self._monotonic() - self._origin) * self.time_scale

    def wall(self, at: float) -> float:
        return self._wall_origin + (at - self._start) / self.time_scale

    def __repr__(self) -> str:
        return f"ScaledClock(time_scale={self.time_scale!r})"
