"""The one clock protocol: wall time, monotonic time and a way to wait, for gpuops and the fakes.

``SYSTEM`` is the real clock. ``ScaledClock`` runs ``factor`` times faster than the clock under
it, from an origin where the two agree: the loopback fakes run on one, and a gpuops process
started with ``GPUOPS_TIME_SCALE`` (read once, by settings.py) uses one for what must keep pace
with them. A test's hand-moved clock (``fakes.vast.clock.FakeClock``) is a third ``Clock``.
``WithSleep`` is a clock's time with another way to wait: a wait that does more than wait (the
guardian renews its lease while it waits), or a shortened one on a clock that keeps real time.

Imports nothing but ``time``: settings.py and the CLI's start-up load it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import threading


class Clock(Protocol):
    """Epoch seconds (``wall``), seconds that never run backwards (``monotonic``), a wait
    of ``seconds`` as this clock counts them (``sleep``), and the same wait cut short when
    ``event`` is set (``wait``: True when it was)."""

    def wall(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, seconds: float) -> bool: ...


class SystemClock:
    """The real clock."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(seconds)

    def __repr__(self) -> str:
        return "SYSTEM"


SYSTEM = SystemClock()


class ScaledClock:
    """``start`` plus the seconds the ``base`` clock has run since ``origin``, times ``factor``.

    ``origin`` is the base clock's epoch at which this clock reads ``start`` (default: now, and
    ``start`` defaults to ``origin``): two processes given the same origin, start and factor
    agree, which is how the runner's clock and the loopback FakeGCE's agree. Elapsed time is
    measured on the base's monotonic clock from the moment this clock is made, so a wall-clock
    step never moves it. ``sleep`` waits ``seconds / factor`` on the base clock.
    """

    def __init__(
        self,
        factor: float,
        start: float | None = None,
        origin: float | None = None,
        base: Clock = SYSTEM,
    ) -> None:
        if not (factor > 0 and math.isfinite(factor)):
            raise ValueError(f"a time scale must be a positive finite number, not {factor!r}")
        self.factor = float(factor)
        self._base = base
        self._made_mono = base.monotonic()
        made_wall = base.wall()
        self._origin = made_wall if origin is None else float(origin)
        self._start = self._origin if start is None else float(start)
        self._lead = made_wall - self._origin  # base seconds already past the origin

    def wall(self) -> float:
        return self._start + self._elapsed() * self.factor

    def monotonic(self) -> float:
        return self._elapsed() * self.factor

    def sleep(self, seconds: float) -> None:
        self._base.sleep(seconds / self.factor)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return self._base.wait(event, seconds / self.factor)

    def epoch_of(self, at: float) -> float:
        """The base clock's epoch at which this clock reads ``at`` (a fake's ``start_date``
        as a client comparing it with its own wall clock must see it)."""
        return self._origin + (at - self._start) / self.factor

    def _elapsed(self) -> float:
        return self._base.monotonic() - self._made_mono + self._lead

    def __repr__(self) -> str:
        return f"ScaledClock(factor={self.factor!r})"


def scale_of(clock: Clock) -> float:
    """How many times faster than real time ``clock`` runs: a ScaledClock's factor (through
    WithSleep too), 1 for any other. Only said (a guardian's start event), never divided by:
    a clock that runs faster already makes every duration on it pass faster."""
    while isinstance(clock, WithSleep):
        clock = clock._base
    return clock.factor if isinstance(clock, ScaledClock) else 1.0


class WithSleep:
    """``base``'s wall and monotonic time, waiting with ``sleep``."""

    def __init__(self, base: Clock, sleep: Callable[[float], None]) -> None:
        self._base = base
        self._sleep = sleep

    def wall(self) -> float:
        return self._base.wall()

    def monotonic(self) -> float:
        return self._base.monotonic()

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Cut short by ``event``: the base clock's wait (``sleep``'s other work is not done)."""
        return self._base.wait(event, seconds)

    def __repr__(self) -> str:
        return f"WithSleep({self._base!r})"
