"""The fakes' clocks: gpuops' one ``Clock`` protocol (gpuops/clock.py), plus ``epoch_of``.

FakeVast never reads the wall clock itself (STYLE.md: moto's lesson). In-process tests inject a
:class:`FakeClock` and call ``advance``; ``gpuops fakes serve`` injects an :class:`ExportedClock`,
the scaled clock it exports (GPUOPS_TIME_SCALE, GPUOPS_TIME_ORIGIN), so a separate process sees
boxes boot and die ``time_scale`` times faster than real time and a gpuops process on the
exports reads the fake's times (``start_date``, ``end_date``) on its own clock. A plain
:class:`~gpuops.clock.ScaledClock` (the demo's) renders them on the real clock instead. All are
the ``Clock`` gpuops itself runs on.
"""

from __future__ import annotations

import threading
from typing import Protocol

from gpuops.clock import SYSTEM, ScaledClock
from gpuops.clock import Clock as _Clock

__all__ = ["RECORDED_EPOCH", "Clock", "ExportedClock", "FakeClock", "ScaledClock"]

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

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """A background wait (a racer's heartbeat) takes real seconds here: only the test moves
        this clock, and a thread woken by the test's own moves would race the test."""
        return event.wait(seconds)

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


class ExportedClock(ScaledClock):
    """The one clock ``gpuops fakes serve`` runs its fakes on and exports: ``factor`` times
    faster than ``base`` from ``origin`` (default: now), reading ``origin`` there. It is the
    clock a gpuops process builds from GPUOPS_TIME_SCALE and GPUOPS_TIME_ORIGIN
    (settings.TimeScale), so gpuops and the fake agree on every time the fake renders:
    ``epoch_of`` is the fake time itself. ``real_epoch_of`` is the base clock's epoch for a fake
    time: what an unscaled client (the vastai CLI, SkyPilot) compares with its own wall clock,
    served under the real-clock view (fakes/vast/routes.py, ``REAL_CLOCK``)."""

    def __init__(self, factor: float, origin: float | None = None, base: _Clock = SYSTEM) -> None:
        at = base.wall() if origin is None else float(origin)
        super().__init__(factor, start=at, origin=at, base=base)
        self.origin = at

    def epoch_of(self, at: float) -> float:
        """A client on the exported clock reads fake time as it is."""
        return at

    def real_epoch_of(self, at: float) -> float:
        """The base (real) clock's epoch at which this clock reads ``at``."""
        return super().epoch_of(at)

    def exports(self) -> dict[str, str]:
        """The variables that give a gpuops process this clock (settings.py reads them)."""
        return {"GPUOPS_TIME_SCALE": repr(self.factor), "GPUOPS_TIME_ORIGIN": repr(self.origin)}

    def __repr__(self) -> str:
        return f"ExportedClock(factor={self.factor!r}, origin={self.origin!r})"
