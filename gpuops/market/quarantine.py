"""Quarantine: machines that failed a probe on a real host fault sit out for a TTL (M2).

The pool heals because entries expire (timing.QUARANTINE_TTL_S). An SSH *auth* failure is
never a host fault: on 20 September an unregistered key made most probes fail on auth and
innocent hosts were quarantined while the race burned through offers (seeds/001).
Entries live in the state store at ``market/quarantine/<machine_id>``, shared by every
operator and host.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuops import timing
from gpuops.errors import AlreadyExists, CorruptState, VersionConflict
from gpuops.ledger import CAS_ATTEMPTS, EventSink
from gpuops.market.probe import Verdict
from gpuops.store.base import Store

PREFIX = "market/quarantine/"
# Probe causes that are the host's fault, as the probe's verdicts define them (one source):
# SSH trouble is never one: auth is our key, and half the unreachable hosts passed later.
HOST_FAULTS = frozenset(v.value for v in Verdict if v.host_fault)


@dataclass(frozen=True)
class Entry:
    machine_id: int
    cause: str
    until: float  # epoch seconds
    by: str


def is_host_fault(cause: str) -> bool:
    """Whether a probe cause says the host is bad (and not our key, nor a pass)."""
    return cause in HOST_FAULTS


class Quarantine:
    """Read and write quarantine entries; expired ones are ignored and swept."""

    def __init__(
        self,
        store: Store,
        events: EventSink,
        operator: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.events = events
        self.operator = operator
        self.clock = clock

    def add(self, machine_id: int, cause: str) -> Entry | None:
        """Quarantine ``machine_id`` for a host fault; None (and nothing written) otherwise."""
        if not is_host_fault(cause):
            return None
        entry = Entry(machine_id, cause, self.clock() + timing.QUARANTINE_TTL_S, self.operator)
        data = json.dumps(entry.__dict__, sort_keys=True).encode()
        key = f"{PREFIX}{machine_id}"
        self._write(key, data)
        self.events.append(
            "market.quarantine", machine_id=machine_id, cause=cause, until=entry.until
        )
        return entry

    def _write(self, key: str, data: bytes) -> None:
        """Create the entry or renew it, by compare-and-swap. A lost race (another renewal, or
        a sweep deleting the expired entry we read) is read again, never taken as quarantined."""
        for _ in range(CAS_ATTEMPTS):
            found = self.store.get(key)
            try:
                if found is None:
                    self.store.create(key, data)
                else:
                    self.store.put(key, data, found.version)  # a fresh fault renews the TTL
            except (AlreadyExists, VersionConflict):
                continue
            return
        raise VersionConflict(key, None)

    def entries(self) -> list[Entry]:
        """Entries still in force."""
        now = self.clock()
        out = []
        for key in self.store.list(PREFIX):
            found = self.store.get(key)
            if found is None:
                continue
            entry = _decode(key, found.data)
            if entry.until > now:
                out.append(entry)
        return out

    def machines(self) -> frozenset[int]:
        return frozenset(entry.machine_id for entry in self.entries())

    def sweep(self) -> int:
        """Delete expired entries; returns how many went."""
        now = self.clock()
        gone = 0
        for key in self.store.list(PREFIX):
            found = self.store.get(key)
            if found is not None and _decode(key, found.data).until <= now:
                try:
                    self.store.delete(key, found.version)
                    gone += 1
                except VersionConflict:
                    pass  # renewed meanwhile: it stays
        return gone


def _decode(key: str, data: bytes) -> Entry:
    try:
        fields = json.loads(data)
        entry = Entry(**fields)
    except (ValueError, TypeError) as exc:
        raise CorruptState(key, f"not a quarantine entry: {exc}") from exc
    if not isinstance(entry.until, int | float) or not isinstance(entry.machine_id, int):
        raise CorruptState(key, "machine_id must be an integer and until a number")
    return entry
