"""Quarantine: machines that failed a probe on a real host fault sit out for a TTL (M2).

Which causes are host faults is the model's one set (``gpuops.model.is_host_fault``). The pool
heals because entries expire (timing.QUARANTINE_TTL_S). An SSH *auth* failure is
never a host fault: on 20 September an unregistered key made most probes fail on auth and
innocent hosts were quarantined while the race burned through offers (docs/rules.md, M2).
Entries live in the state store at ``market/quarantine/<machine_id>``, shared by every
operator and host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuops import event_types as ev
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import CorruptState
from gpuops.ledger import EventSink
from gpuops.model import is_host_fault
from gpuops.store.base import Store
from gpuops.store.records import JsonCodec, Records

PREFIX = "market/quarantine/"


@dataclass(frozen=True)
class Entry:
    machine_id: int
    cause: str
    until: float  # epoch seconds
    by: str


CODEC = JsonCodec(Entry, "quarantine entry")


def renewed(current: Entry | None, fault: Entry) -> Entry:
    """A fresh fault renews the entry, but never shortens one another operator (a later
    fault, or a clock ahead of ours) wrote meanwhile: the later end wins. Pure."""
    if current is None:
        return fault
    return replace(fault, until=max(fault.until, current.until))


class Quarantine:
    """Read and write quarantine entries; expired ones are ignored and swept. An unreadable
    entry blocks only its own machine: it is left out, kept in ``corrupt``, never deleted."""

    def __init__(
        self,
        store: Store,
        events: EventSink,
        operator: str,
        clock: Clock = SYSTEM,
    ) -> None:
        self.store = store
        self.events = events
        self.operator = operator
        self.clock = clock
        self.records = Records(store, PREFIX, CODEC)

    @property
    def corrupt(self) -> dict[str, CorruptState]:
        return self.records.corrupt

    def add(self, machine_id: int, cause: str) -> Entry | None:
        """Quarantine ``machine_id`` for a host fault; None (and nothing written) otherwise.
        Create or renew by compare-and-swap: a lost race (another renewal, or a sweep deleting
        the expired entry we read) is read again and decided again, never overwritten."""
        if not is_host_fault(cause):
            return None
        fault = Entry(machine_id, cause, self.clock.wall() + timing.QUARANTINE_TTL_S, self.operator)
        entry = self.records.update(str(machine_id), lambda current: renewed(current, fault))
        written: Entry = entry.after  # type: ignore[assignment]
        self.events.append(
            ev.Quarantine.KIND,
            **ev.Quarantine(machine_id=machine_id, cause=cause, until=written.until).to_payload(),
        )
        return written

    def entries(self) -> list[Entry]:
        """Entries still in force."""
        now = self.clock.wall()
        return [entry for entry in self.records.all() if entry.until > now]

    def machines(self) -> frozenset[int]:
        return frozenset(entry.machine_id for entry in self.entries())

    def sweep(self) -> int:
        """Delete expired entries (renewed meanwhile: it stays); returns how many went."""
        now = self.clock.wall()
        return sum(
            self.records.remove(name, lambda e: e.until <= now)
            for name, entry, _ in self.records.entries()
            if entry.until <= now
        )
