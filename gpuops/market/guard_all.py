"""`gpuops guard --all`: one guardian service per host, guarding every rental it can reach.

One process instead of one per rental: each rental in the state that needs a ceiling gets a
``Guardian`` of its own (market/guard.py, unchanged: its own lease, heartbeat, standby role,
copy and destroy) on a thread of this process, acting as the rental's owner as `gpuops guard
NAME --operator OWNER` would (a guardian only ever ends its owner's records, M3). Rentals that
appear later are picked up; a guardian whose rental ended leaves, and its thread with it.

Another host's `guard --all` over the same state is a standby per rental, exactly as single
guardians are: each of its guardians takes over the one lease it saw standing still for a TTL
on its own clock (M7, M17). A guardian that leaves as superseded (7) is started again at once,
as a standby: the successor may die too. One rental's fault (a corrupt record, a failed copy,
a store error) ends or retries that rental's guardian only (M17: one bad record blocks only
itself). SIGTERM or SIGINT gives every lease up and exits loudly, 128 + the signal.

Split: ``wanted`` and ``after_exit`` decide (pure); ``Service`` runs threads and reads the state.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from types import FrameType
from typing import NoReturn

from gpuops import event_ops as ops
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import GpuopsError, StateError, Unavailable
from gpuops.event_base import Kinded, write
from gpuops.ledger import EventSink, Ledger
from gpuops.market import guardian as g
from gpuops.market.guard import Guardian, release
from gpuops.market.leases import Leases
from gpuops.market.rentals import FAILED, RELEASED, Rental, Rentals
from gpuops.store.base import Store

# Each guardian's thread stack. Only the pages a thread touches count in RSS (a few KiB for a
# guardian), so this bounds address space, not memory; 1 MiB leaves ssl and boto3 call chains
# a wide margin (a C stack overflow would kill every guardian of the host at once).
STACK_BYTES = 1024 * 1024

Incarnation = tuple[str, str | None]  # (name, rental id): what one guardian answers for (M16)


def wanted(rental: Rental, active: bool) -> bool:
    """Whether ``rental`` needs a guardian: it has a deadline, and it is racing or live, or it
    failed with a record still active or unreadable (``active``: a box may still bill)."""
    if rental.deadline_at is None or rental.state == RELEASED:
        return False
    return active if rental.state == FAILED else True


class Next(Enum):
    """What the service does once a rental's guardian has left."""

    DONE = "done"  # its incarnation is ended (or handed to sweep): never again
    AGAIN = "again"  # superseded: guard it again at once, as a standby
    RETRY = "retry"  # it failed (a fault of its own): try again a lease TTL later


def after_exit(code: int, raised: bool) -> Next:
    """The guardian's exit, as the service acts on it. A code it returned is its decision:
    0 gone, 1 gone with its own work faulted, 5 an unresolved create handed to sweep; 7 is a
    verified successor, who may die later. Anything raised (a corrupt record, the store) is
    retried: one bad record blocks only itself, and only until it is repaired (M17)."""
    if raised:
        return Next.RETRY
    return Next.AGAIN if code == g.SUPERSEDED else Next.DONE


class LeaseGate:
    """Lease writes of a service's guardians, closed at once when the service stops: a lease
    is never taken or renewed after the service has begun dropping them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._closed = False
        self._writing = 0

    @contextlib.contextmanager
    def open(self) -> Iterator[bool]:
        with self._cond:
            if self._closed:
                allowed = False
            else:
                self._writing += 1
                allowed = True
        try:
            yield allowed
        finally:
            if allowed:
                with self._cond:
                    self._writing -= 1
                    self._cond.notify_all()

    def close(self, wait_s: float) -> None:
        """Refuse every later write; wait (at most ``wait_s``) for those in flight."""
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._writing == 0, timeout=wait_s)

    def park(self) -> None:
        """Once closed, the calling guardian's thread waits here until the process exits: 500
        guardians still reading the store would starve the stop of the lock and of the GIL."""
        with self._cond:
            if not self._closed:
                return
        threading.Event().wait()


class GatedLeases(Leases):
    """Leases whose takes and renewals pass through the service's gate (drops always do)."""

    def __init__(self, store: Store, gate: LeaseGate) -> None:
        super().__init__(store)
        self.gate = gate

    def read(self, name: str) -> tuple[g.Lease | None, str | None]:
        self.gate.park()
        return super().read(name)

    def take(self, name: str, me: str, now: float, lease: g.Lease | None) -> bool:
        with self.gate.open() as allowed:
            return allowed and super().take(name, me, now, lease)

    def renew(self, name: str, me: str, now: float, *, copied: bool = False) -> bool:
        with self.gate.open() as allowed:
            return allowed and super().renew(name, me, now, copied=copied)


@dataclass
class Slot:
    """One rental's guardian on its thread."""

    incarnation: Incarnation
    thread: threading.Thread | None = None
    guardian: Guardian | None = None
    code: int | None = None
    raised: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class Service:
    def __init__(
        self,
        store: Store,
        events: EventSink,
        guardian_for: Callable[[Rental, Leases], Guardian],
        *,
        clock: Clock = SYSTEM,
        clockwork: g.Clockwork = g.NORMAL,
        say: Callable[[str], None],
        where: str = "the state",
        gate: LeaseGate | None = None,
    ) -> None:
        """``guardian_for(rental, leases)``: the rental's guardian, acting as its owner, over
        ``leases`` (the service's gated ones); called on the guardian's own thread, so a
        failure to build one is that rental's alone. ``events``: the service's own events."""
        self.store = store
        self.events = events
        self.guardian_for = guardian_for
        self.clock = clock
        self.clockwork = clockwork
        self.say = say
        self.where = where
        self.gate = gate or LeaseGate()
        self.rentals = Rentals(store, "guard-all")
        self.ledger = Ledger(store, events, "guard-all")
        self.slots: dict[str, Slot] = {}
        self.done: set[Incarnation] = set()
        self.retry_at: dict[Incarnation, float] = {}
        self.unreadable: set[str] = set()  # corrupt rental records already reported
        self._lock = threading.Lock()

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> NoReturn:
        """Guard until a signal ends the service (``stop``): reap guardians that left every
        poll, look for new rentals every lease TTL (a new rental's own guardian covers it
        meanwhile)."""
        self.say(
            f"gpuops guard --all: guardian service (pid {os.getpid()}) guards every rental "
            f"in {self.where}"
        )
        self._log(ops.GuardAllStart(pid=os.getpid()))
        threading.stack_size(STACK_BYTES)
        looked = float("-inf")
        while True:
            if self.clock.monotonic() - looked >= self.clockwork.lease_ttl_s or self._retry_due():
                looked = self.clock.monotonic()
                self.round(look=True)
            else:
                self.round(look=False)
            self.clock.sleep(self.clockwork.poll_s)

    def round(self, *, look: bool = True) -> None:
        """Reap the guardians that left, then (``look``) start one for each rental that needs
        one and has none here. The store being down is said, and tried again next round."""
        self._reap()
        if not look:
            return
        try:
            found = self.rentals.all()
        except (Unavailable, StateError) as exc:
            self.say(f"gpuops guard --all: cannot list the rentals: {exc}; the guardians go on")
            self._log(ops.GuardAllError(error=f"{type(exc).__name__}: {exc}"))
            return
        self._report_unreadable()
        now = self.clock.monotonic()
        listed = {(r.name, r.rental_id) for r in found}
        self.retry_at = {k: at for k, at in self.retry_at.items() if k in listed}
        for rental in found:
            key = (rental.name, rental.rental_id)
            if rental.name in self.slots or key in self.done or self.retry_at.get(key, now) > now:
                continue
            try:
                need = wanted(rental, rental.state == FAILED and self._active(rental.name))
            except (Unavailable, StateError) as exc:  # this rental's to retry, no other's
                self.say(f"gpuops guard --all: {rental.name}: {exc}; looking again later")
                self.retry_at[key] = now + self.clockwork.lease_ttl_s
                continue
            if need:
                self.start(rental)
            elif rental.state == FAILED:
                self.done.add(key)  # a failed rental gains no box: nothing to look at again

    def _active(self, name: str) -> bool:
        """A record of the rental still active, or unreadable (it may stand for a box)."""
        records = self.ledger.records(skip_corrupt=True, under=f"{name}+")
        return any(r.active for r in records) or bool(self.ledger.corrupt)

    def _retry_due(self) -> bool:
        now = self.clock.monotonic()
        return any(at <= now for at in self.retry_at.values()) or any(
            slot.done.is_set() for slot in self.slots.values()
        )

    def start(self, rental: Rental) -> Slot:
        slot = Slot((rental.name, rental.rental_id))
        slot.thread = threading.Thread(
            target=self._guard, args=(slot, rental), name=f"guard {rental.name}", daemon=True
        )
        with self._lock:
            self.slots[rental.name] = slot
        self.retry_at.pop(slot.incarnation, None)
        slot.thread.start()
        return slot

    def _guard(self, slot: Slot, rental: Rental) -> None:
        """One rental's guardian, to its end; whatever it raises is its own (M17)."""
        try:
            slot.guardian = self.guardian_for(rental, GatedLeases(self.store, self.gate))
            slot.code = slot.guardian.run()
        except BaseException as exc:  # it logged and alarmed its own exit (Guardian.run)
            slot.code = exc.exit_code if isinstance(exc, GpuopsError) else 1
            slot.raised = True
            self.say(
                f"gpuops guard --all: {rental.name}: its guardian failed "
                f"({type(exc).__name__}: {exc}); trying again in {self.clockwork.lease_ttl_s:g} s"
            )
        finally:
            slot.done.set()

    def _reap(self) -> None:
        for name, slot in list(self.slots.items()):
            if not slot.done.is_set():
                continue
            with self._lock:
                del self.slots[name]
            code = 1 if slot.code is None else slot.code
            step = after_exit(code, slot.raised)
            self._log(
                ops.GuardAllLeft(
                    name=name, rental_id=slot.incarnation[1], code=code, then=step.value
                )
            )
            if step is Next.DONE:
                self.done.add(slot.incarnation)
            elif step is Next.RETRY:
                self.retry_at[slot.incarnation] = (
                    self.clock.monotonic() + self.clockwork.lease_ttl_s
                )
            # AGAIN: the next look starts it afresh, as a standby

    def _report_unreadable(self) -> None:
        """A rental record that cannot be read blocks only itself: said once, loudly."""
        for key, exc in sorted(self.rentals.corrupt.items()):
            if key not in self.unreadable:
                self.unreadable.add(key)
                self.say(f"gpuops guard --all: cannot guard {key}: {exc}")
                self._log(ops.GuardAllUnreadable(record=key, error=str(exc)))
        self.unreadable &= set(self.rentals.corrupt)

    # --- stopping ------------------------------------------------------------------------
    def stop(self, signum: int) -> NoReturn:
        """Stopped by a signal: no lease is taken or renewed from now on, every lease one of
        ours holds is given up (a standby elsewhere takes each over at once), each guardian's
        exit is logged and alarmed, and the service exits 128 + the signal, loudly."""
        self.gate.close(timing.GUARD_STOP_WAIT_S)
        with self._lock:
            slots = list(self.slots.values())
        held = []
        for slot in slots:
            guardian = slot.guardian
            if guardian is None or slot.done.is_set():
                continue
            # every lease is dropped (a no-op where another holds it): one taken a moment ago
            # may not show in the guardian's mind yet
            release(guardian, signum, " (the guardian service)", alarm=guardian.mind.held)
            if guardian.mind.held:
                held.append(guardian.name)
        name = signal.Signals(signum).name
        self._log(
            ops.GuardAllExit(code=128 + signum, reason=f"stopped by {name}", held=tuple(held))
        )
        self.say(
            f"gpuops guard --all: stopped by {name}; {len(held)} rental(s) it was responsible "
            "for have only their boxes' own ceilings (deadline plus "
            f"{timing.BOX_CEILING_GRACE_S / 60:.0f} min, M14) until another guardian takes "
            f"over: {', '.join(held) or 'none'} (exit {128 + signum})"
        )
        raise SystemExit(128 + signum)

    def _log(self, event: Kinded) -> None:
        try:
            write(self.events, event)
        except (StateError, OSError) as exc:  # never in the way of the guardians (M17)
            self.say(f"gpuops guard --all: could not log {event.KIND}: {exc}")


def install_signal_handlers(service: Service) -> None:
    """SIGTERM and SIGINT stop the service loudly (``Service.stop``); SIGHUP is ignored."""

    def stop(signum: int, frame: FrameType | None) -> None:
        service.stop(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
