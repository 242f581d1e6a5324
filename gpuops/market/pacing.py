"""A call budget for the many threads of one command (M12): `sweep` destroys and confirms
hundreds of boxes at once within the provider's rate limit."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.model import Instance

if TYPE_CHECKING:
    from gpuops.market.context import Vast


class Pace:
    """A call budget shared by every thread of one command, and with the Vast adapter's 429
    handling: provider calls start at most one per ``interval_s`` across all threads, and a
    retry wait the adapter takes (pass ``hold`` as its ``sleep``) holds every thread for that
    long, so a 429 slows the whole sweep instead of being hammered by its other threads."""

    def __init__(
        self,
        interval_s: float = timing.VAST_CALL_INTERVAL_S,
        *,
        clock: Clock = SYSTEM,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next_at = float("-inf")

    def take(self) -> None:
        """Wait for this call's slot in the budget."""
        with self._lock:
            now = self._clock.monotonic()
            at = max(now, self._next_at)
            self._next_at = at + self.interval_s
        if at > now:
            self._clock.sleep(at - now)

    def hold(self, wait_s: float) -> None:
        """The adapter's retry wait: no thread starts a call until it is over."""
        with self._lock:
            self._next_at = max(self._next_at, self._clock.monotonic() + wait_s)
        self._clock.sleep(wait_s)


class Paced:
    """The market's Vast calls, each taking its slot in a shared Pace first."""

    def __init__(self, vast: Vast, pace: Pace) -> None:
        self._vast = vast
        self._pace = pace

    def show(self, instance_id: str) -> Instance | None:
        self._pace.take()
        return self._vast.show(instance_id)

    def destroy(self, instance_id: str) -> None:
        self._pace.take()
        self._vast.destroy(instance_id)

    def list_instances(self, *, label: str | None = None) -> list[Instance]:
        self._pace.take()
        return self._vast.list_instances(label=label)
