"""Rentals: the name a user rents under, and the one box that answers to it (M8).

``market/rentals/<NAME>`` maps a rental name to its owner, its state and the ledger record of
the box that won its race. Boxes themselves are ledger records named ``<NAME>+<race>-<slot>``
(one per candidate), so ownership stays per box while ``rent NAME`` stays idempotent: a live
rental of ours is returned as it is, never rented again, from any process, after any crash.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuops import timing
from gpuops.errors import (
    CorruptState,
    IllegalTransition,
    NameTaken,
    StillRunning,
    UsageError,
)
from gpuops.ledger import BoxState, Record
from gpuops.market.gpu_names import fold_gpu_name
from gpuops.store.base import Store
from gpuops.store.records import JsonCodec, Records
from gpuops.timestamps import epoch_of

PREFIX = "market/rentals/"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_RENTAL_ID = re.compile(r"[0-9a-f]{12}")  # new_rental_id: six random bytes, in hex
_NAME_MAX_CHARS = 64
_NAME_PUNCTUATION = "_-"

RACING, LIVE, FAILED, RELEASED = "racing", "live", "failed", "released"
# How an incarnation's results copy ended (M17): delivered (results_detail says where), missing
# (the copy failed, overran its budget, was cut by a signal or refused: it says why), or none
# (the job made no results directory). None: no copy was made (no job declared results).
DELIVERED, MISSING, NO_RESULTS = "delivered", "missing", "none"

# A rental's one state machine: where each state may go (a state may always stay, its other
# fields changing). A rental follows its boxes' ledger records: `settled` says when they
# release it. Anything else is IllegalTransition, never a silent write.
MOVES: dict[str | None, frozenset[str]] = {
    None: frozenset({RACING}),
    RACING: frozenset({RACING, LIVE, FAILED, RELEASED}),
    LIVE: frozenset({LIVE, RELEASED}),
    FAILED: frozenset({FAILED, RACING, RELEASED}),
    RELEASED: frozenset({RELEASED, RACING}),
}


@dataclass(frozen=True)
class Rental:
    name: str
    owner: str
    state: str
    race: int  # how many races this rental has started; names its candidates' records
    box: str | None = None  # the ledger record of the kept box
    instance_id: str | None = None
    offer_id: int | None = None
    machine_id: int | None = None
    gpu_name: str | None = None
    dph_total: float | None = None
    started_at: float | None = None  # epoch seconds the box was kept
    deadline_at: float | None = None  # epoch seconds
    ended_at: float | None = None  # epoch seconds every box of it was confirmed gone
    revision: int = 1
    racer: str | None = None  # the rent process racing for it (M8: one race at a time)
    beat: int = 0  # the racer's heartbeats: a waiting rent sees them move, or takes over
    deadline_host: str | None = None  # whose wall clock deadline_at was read from (M17)
    rental_id: str | None = None  # this incarnation of the name, minted at its first race (M16)
    results: str | None = None  # DELIVERED, MISSING or NO_RESULTS once a copy ended (M17)
    results_detail: str | None = None  # where they were delivered, or why they are missing
    hours: float | None = None  # the hours its race asked for (M8: a rerun asks the same)
    # epoch s the kept offer's contract ends (its end_date): Vast stops the box then (expired)
    contract_end_at: float | None = None
    # how its owner was established when its race began (M3): True, attested by the provider
    # (the Vast key's user, GPUOPS_IDENTITY=key); False, declared. A record from before the
    # field reads as declared.
    attested: bool = False
    # results synced while the job runs (M5): every this many seconds (0: off; None: a rental
    # from before syncs were recorded, off), the last sync that worked, the last one's failure
    sync_every_s: float | None = None
    synced_at: float | None = None  # epoch s the last sync that worked ended
    sync_error: str | None = None  # why the last sync failed; None once one works again


CODEC = JsonCodec(Rental, "rental record")


def past_contract(rental: Rental, deadline_at: float) -> bool:
    """Whether a deadline moved to ``deadline_at`` leaves less than CONTRACT_END_MARGIN_S
    before the kept box's contract ends: Vast stops the box at that end, so its own ceiling and
    a guardian's copy and destroy would fall outside the contract (`guard --hours` refuses it).
    A rental with no recorded contract end: never."""
    end = rental.contract_end_at
    return end is not None and deadline_at > end - timing.CONTRACT_END_MARGIN_S


def request_differs(
    rental: Rental, gpu_name: str, hours: float, sync_every_s: float | None = None
) -> list[str]:
    """What a rerun of `rent NAME` asks that its live rental was not rented with (M8): each as
    "--flag asked, not had". GPU names compare case and spacing aside; a rental from before
    its hours (or its sync interval) were recorded is not compared on them."""
    differs = []
    if rental.gpu_name is not None and fold_gpu_name(gpu_name) != fold_gpu_name(rental.gpu_name):
        differs.append(f"--gpu {gpu_name!r}, not its {rental.gpu_name!r}")
    if rental.hours is not None and hours != rental.hours:
        differs.append(f"--hours {hours:g}, not its {rental.hours:g}")
    had = rental.sync_every_s
    if had is not None and sync_every_s is not None and sync_every_s != had:
        differs.append(f"--sync-every {sync_every_s / 60:g}, not its {had / 60:g}")
    return differs


class Moved(StillRunning):
    """The rental left the state a change expected: someone else (its guardian) moved it."""

    def __init__(self, name: str, expected: str, found: str) -> None:
        super().__init__(f"rental {name!r} is {found}, no longer {expected}")
        self.name, self.expected, self.found = name, expected, found


class RaceInProgress(StillRunning):
    """Another rent process of ours is racing for this name right now (M8)."""

    def __init__(self, name: str, racer: str, beat: int) -> None:
        super().__init__(f"rental {name!r} is being raced for by {racer}")
        self.name, self.racer, self.beat = name, racer, beat


class _RaceOver(Exception):
    """The rental is no longer this racer's race: its heartbeat stops."""


class _Elsewhere(Exception):
    """The rental is no longer this incarnation of ours: nothing of it is written (M16)."""


def process_id(operator: str, host: str | None = None) -> str:
    """Who is acting, from which host and process: a racer's or a guardian's id."""
    import secrets  # here, not at the top: a listing (`boxes`) names no process

    return f"{operator}/{host or this_host()}/{os.getpid()}/{secrets.token_hex(3)}"


def results_key(rental: Rental) -> str:
    """Where an incarnation's results are delivered under the results destination (M16):
    ``NAME/<rental id>``, so a later rental of the name never overwrites them; a rental from
    before ids were minted keeps ``NAME``."""
    return f"{rental.name}/{rental.rental_id}" if rental.rental_id else rental.name


def lease_key(rental: Rental) -> str:
    """Whose lease guards this incarnation (M16): ``NAME+<rental id>``, so a guardian of an
    earlier incarnation of the name, still ending its own boxes, neither stands in for this
    one's nor hands it its state (a copy it made); a rental from before ids keeps ``NAME``."""
    return f"{rental.name}+{rental.rental_id}" if rental.rental_id else rental.name


def check_lease_key(key: str) -> str:
    """A lease's key: a rental name, or one with ``+`` and its rental id (``lease_key``)."""
    name, plus, rental_id = key.partition("+")
    check_name(name)
    if plus and not _RENTAL_ID.fullmatch(rental_id):
        raise UsageError(f"lease key {key!r}: {rental_id!r} is not a rental id")
    return key


def new_rental_id() -> str:
    """A fresh incarnation's id (M16): unique, short enough for a path segment."""
    import secrets

    return secrets.token_hex(6)


def this_host() -> str:
    import socket

    return socket.gethostname()


def host_of(process: str | None) -> str | None:
    """The host of a ``process_id`` (operator/host/pid/nonce), or None for another shape."""
    parts = str(process).split("/")  # None names no host either
    return parts[1] if len(parts) == 4 and parts[1] else None


def enforce_at(rental: Rental | None, record_deadline: str | None, here: str) -> float:
    """When host ``here`` may end a box record (M13, M17): ``due_at``, on this host's clock
    when this host wrote that deadline, else CLOCK_SKEW_S later, so that no host's clock ahead
    of the writer's ends the box early. No decision compares two hosts' clocks closer."""
    at = due_at(rental, record_deadline)
    mine = rental is not None and rental.deadline_at is not None and rental.deadline_host == here
    return at if mine else at + timing.CLOCK_SKEW_S


def check_name(name: str) -> str:
    """A rental name: letters, digits, '_' and '-', starting with a letter or digit."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"rental name {name!r} ({name_fault(name)}) must be 1-64 letters, digits, '_' or "
            "'-', starting with a letter or digit"
        )
    return name


def name_fault(name: str) -> str:
    """What is wrong with a refused rental name, in words that stay readable even where the
    scrubber hides the name itself (a run of 64 hex digits has a Vast key's shape)."""
    if not 1 <= len(name) <= _NAME_MAX_CHARS:
        return f"{len(name)} characters"
    if not (name[0].isascii() and name[0].isalnum()):
        return f"it starts with {name[0]!r}"
    bad = next(c for c in name if not (c.isascii() and (c.isalnum() or c in _NAME_PUNCTUATION)))
    return f"{bad!r} is not allowed"


def box_name(name: str, race: int, slot: int) -> str:
    """The ledger record of candidate ``slot`` in race ``race`` of rental ``name``."""
    return f"{name}+{race}-{slot}"


def rental_of(box: str) -> str:
    """The rental a candidate's ledger record belongs to."""
    return box.partition("+")[0]


class Rentals:
    """Compare-and-swap access to rental records. ``attested``: whether ``operator`` was
    attested by the provider (identity.py), recorded on each race this begins (M3)."""

    def __init__(self, store: Store, operator: str, *, attested: bool = False) -> None:
        self.operator = operator
        self.attested = attested
        self.records = Records(store, PREFIX, CODEC, check_name=check_name)

    @property
    def corrupt(self) -> dict[str, CorruptState]:
        """Records `all` could not read: each blocks only itself, and the CLI names it."""
        return self.records.corrupt

    def get(self, name: str) -> Rental | None:
        return self.records.get(name)

    def all(self) -> list[Rental]:
        """Every readable rental; an unreadable one is left out and kept in ``corrupt``."""
        return self.records.all()

    def begin_race(
        self,
        name: str,
        deadline_at: float | None = None,
        *,
        racer: str | None = None,
        takeover: tuple[str, int] | None = None,
        hours: float | None = None,
        sync_every_s: float | None = None,
    ) -> Rental:
        """Start (or restart) a race for ``name``: new, released and failed rentals of anyone,
        racing ones of ours. An active rental of another operator is refused (M3). The
        deadline is set before any create, so whoever owns the race's boxes knows when to end
        them (M13). A race another rent process is running is RaceInProgress (M8), unless
        ``takeover`` names its (racer, beat) as seen standing still for a whole RACER_TTL_S."""

        def start(current: Rental | None) -> Rental:
            if current is None:
                return Rental(
                    name,
                    self.operator,
                    RACING,
                    race=1,
                    deadline_at=deadline_at,
                    racer=racer,
                    deadline_host=host_of(racer),
                    rental_id=new_rental_id(),
                    hours=hours,
                    attested=self.attested,
                    sync_every_s=sync_every_s,
                )
            if current.state in (RACING, LIVE) and current.owner != self.operator:
                raise NameTaken(name, current.owner)
            if current.state == LIVE:
                raise UsageError(f"{name!r} is already live; it is returned, not raced again")
            running = current.state == RACING and current.racer not in (None, racer)
            if running and takeover != (current.racer, current.beat):
                raise RaceInProgress(name, str(current.racer), current.beat)
            return Rental(
                name,
                self.operator,
                RACING,
                current.race + 1,
                deadline_at=deadline_at,
                revision=current.revision + 1,
                racer=racer,
                deadline_host=host_of(racer),
                # a restart of our own race is the same incarnation; anything else a new one
                rental_id=current.rental_id if current.state == RACING else new_rental_id(),
                hours=hours,
                attested=self.attested,
                sync_every_s=sync_every_s,
            )

        return self._change(name, start)

    def abandon_race(self, name: str, racer: str, beat: int) -> bool:
        """Fail the race ``racer`` ran, only while the rental is still that racer's at that
        beat (a rerun that took it over meanwhile is left alone); True when this failed it."""

        def fail(current: Rental | None) -> Rental:
            if current is None or (current.state, current.racer, current.beat) != (
                RACING,
                racer,
                beat,
            ):
                raise _RaceOver
            return replace(current, state=FAILED, revision=current.revision + 1)

        try:
            self._change(name, fail)
        except _RaceOver:
            return False
        return True

    def beat(self, name: str, racer: str) -> bool:
        """The racer's heartbeat; False once the rental is no longer its race."""

        def bump(current: Rental | None) -> Rental:
            if current is None or current.state != RACING or current.racer != racer:
                raise _RaceOver
            return replace(current, beat=current.beat + 1, revision=current.revision + 1)

        try:
            self._change(name, bump)
        except _RaceOver:
            return False
        return True

    def note_results(self, name: str, rental_id: str | None, results: str, detail: str) -> bool:
        """Record how incarnation ``rental_id``'s results copy ended (M17: results missing are
        shown, never silence); True when it was written."""
        return self._note(
            name,
            rental_id,
            lambda current: replace(current, results=results, results_detail=detail),
        )

    def note_sync(self, name: str, rental_id: str | None, at: float, error: str | None) -> bool:
        """Record how incarnation ``rental_id``'s last results sync ended (M5): when, if it
        worked (``synced_at``), and its failure or None (``sync_error``); True when written."""

        def synced(current: Rental) -> Rental:
            synced_at = current.synced_at if error else at
            return replace(current, synced_at=synced_at, sync_error=error)

        return self._note(name, rental_id, synced)

    def _note(self, name: str, rental_id: str | None, change: Callable[[Rental], Rental]) -> bool:
        """``change`` written, only while the rental is still incarnation ``rental_id`` of
        ours (M16: a later rental of the name is never marked); True when it was written."""

        def note(current: Rental | None) -> Rental:
            if current is None or (current.owner, current.rental_id) != (self.operator, rental_id):
                raise _Elsewhere
            return replace(change(current), revision=current.revision + 1)

        try:
            self._change(name, note)
        except _Elsewhere:
            return False
        return True

    def update(self, name: str, *, expect: str | None = None, **changes: Any) -> Rental:
        """Change our rental; with ``expect``, only while it is still in that state (a race
        whose rental its guardian has meanwhile ended must not come back to life)."""

        def apply(current: Rental | None) -> Rental:
            if current is None:
                raise UsageError(f"no rental named {name!r}")
            if current.owner != self.operator:
                raise NameTaken(name, current.owner)
            if expect is not None and current.state != expect:
                raise Moved(name, expect, current.state)
            return replace(current, revision=current.revision + 1, **changes)

        return self._change(name, apply)

    def _change(self, name: str, decide: Callable[[Rental | None], Rental]) -> Rental:
        def checked(current: Rental | None) -> Rental:
            new = decide(current)
            before = None if current is None else current.state
            if new.state not in MOVES.get(before, frozenset()):
                raise IllegalTransition(name, str(before), new.state, rule="M13")
            return new

        return self.records.update(name, checked).after  # type: ignore[return-value]


def settled(rental: Rental, active_records: int, now: float) -> str | None:
    """The state a rental's records put it in, or None to leave it (M13): once none of its
    records is active, a live rental is released (no spend accrues on a gone box), and so is a
    racing one past its deadline (before it, the race may still create)."""
    if rental.state not in (LIVE, RACING) or active_records:
        return None
    if rental.state == RACING and (rental.deadline_at is None or now < rental.deadline_at):
        return None
    return RELEASED


def due_at(rental: Rental | None, record_deadline: str | None) -> float:
    """When a box record must be ended (M13): its rental's deadline (which `guard --hours`
    moves), else the deadline written into the record at its intent; with neither, now."""
    if rental is not None and rental.deadline_at is not None:
        return rental.deadline_at
    if record_deadline:
        return epoch_of(record_deadline)
    return float("-inf")


# A destroy began and was not finished: the retry list, plus a confirmation whose release a
# crash cut off (M4).
PENDING = (BoxState.DESTROYING, BoxState.GONE_CONFIRMED)


def due_records(
    records: Iterable[Record], rentals: Mapping[str, Rental], me: str, now: float, here: str
) -> list[tuple[Record, bool]]:
    """Which listed records a sweep on host ``here`` ends now, in listing order (M13, M17):
    every active record of ``me``'s whose destroy is pending (True: a retry), and every other
    active record of ``me``'s past its rental's deadline as this host may judge it
    (``enforce_at``: another host's deadline a skew allowance later). ``rentals`` by name."""
    due = []
    for record in records:
        if record.owner != me or not record.active:
            continue
        if record.state in PENDING and record.instance_id:
            due.append((record, True))
        elif now >= enforce_at(rentals.get(rental_of(record.name)), record.deadline_at, here):
            due.append((record, False))
    return due
