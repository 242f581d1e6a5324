"""The typed events: one frozen dataclass per kind that analysis reads, the one registry of
every kind, and one strict decoder.

Owns: what each of these kinds' payloads holds, the registry (``BY_KIND``: these kinds and the
operational ones of gpuops/event_ops.py; ``KINDS`` the kinds analysis reads, ``ALL_KINDS``
every kind gpuops writes), and the judgment "this line is (not) such an event". Writers build
the type and log ``to_payload()`` (the JSON on disk is what the keyword arguments wrote
before, key for key, so old logs read the same); readers ask ``decode(kind,
payload)`` or, straight from a line's bytes, ``decode_line(kind, raw)`` and get the type or None
(``parse(kind, payload)`` says why instead: a UsageError naming the kind and the field).
None means "count it and skip it": a wrong type, a missing field, a verdict outside
``model.Verdict``, a number that is not finite, a propensity outside (0, 1] or a pick that is
not one of its race's candidates. A reader never trusts a payload it did not decode.

Every field is checked by its annotation, by msgspec (a C decoder that validates while it
builds the dataclass: about 20 times the speed of checking the decoded JSON field by field in
Python, the figure that gets ``stats`` through 1,000,000 events in time). ``Number`` is a
finite float, ``Probability`` one in (0, 1]; an ``int`` is never a bool or a float (JSON
``true`` is not 1, ``1.0`` is no id); a ``float`` field takes a whole number as that float.
A field without a default is required: what some reader needs. A field with one is context no
reader depends on (hand-written and older logs may leave it out); when present it must still
have its type. Writers always give every field. Extra payload keys are ignored: a writer may
add context without breaking readers. Fields are keyword-only and in the order the writers
always wrote them, so ``to_payload()`` is the old line byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

import msgspec

from gpuops import event_ops as ops
from gpuops.errors import UsageError
from gpuops.event_base import Kinded, Number, Payload, Probability, Whole
from gpuops.model import Verdict

__all__ = [
    "ALL_KINDS",
    "KINDS",
    "AnalysisEvent",
    "ConfirmedGone",
    "Create",
    "GuardDestroy",
    "LaneJobEnd",
    "LaneStart",
    "Offered",
    "Picked",
    "Probe",
    "Quarantine",
    "Removed",
    "RentDone",
    "RentStopped",
    "Selection",
    "SweepEnded",
    "Transition",
    "decode",
    "decode_line",
    "parse",
]


# --- the market: one race ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Offered(Payload):
    """One ranked candidate of a race, as logged (M11)."""

    id: Whole
    machine_id: Whole
    dph_total: Number
    reliability: Number | None = None
    disk_bw: Number | None = None
    gpu_ram: Number | None = None


@dataclass(frozen=True, kw_only=True)
class Removed(Payload):
    id: Whole
    reasons: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Picked(Payload):
    id: Whole
    rank: Whole | None = None
    propensity: Probability | None = None  # None: not logged, so no off-policy weight
    explored: bool = False


@dataclass(frozen=True, kw_only=True)
class Selection(Kinded):
    """``market.selection``: the full ranked candidate set and each pick's propensity (M11).
    Every pick names one of the candidates."""

    KIND: ClassVar[str] = "market.selection"
    name: str
    gpu_name: str = ""
    k: Whole | None = None
    candidates: tuple[Offered, ...]
    removed: tuple[Removed, ...] = ()
    quarantined: Whole | None = None
    picks: tuple[Picked, ...]

    def offered(self, offer_id: int) -> Offered | None:
        return next((c for c in self.candidates if c.id == offer_id), None)


@dataclass(frozen=True, kw_only=True)
class Create(Kinded):
    """``market.create``: one create call's outcome (created, reconciled, taken, ...)."""

    KIND: ClassVar[str] = "market.create"
    name: str
    offer_id: Whole
    machine_id: Whole | None = None
    outcome: str
    instance_id: str | None = None
    rental_id: str | None = None  # the incarnation it is a box of (M16)


@dataclass(frozen=True, kw_only=True)
class Probe(Kinded):
    """``market.probe``: one box's verdict, a ``model.Verdict``."""

    KIND: ClassVar[str] = "market.probe"
    name: str
    offer_id: Whole
    machine_id: Whole
    instance_id: str | None = None
    verdict: Verdict
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RentDone(Kinded):
    """``market.rent.done``: the race kept this box."""

    KIND: ClassVar[str] = "market.rent.done"
    name: str
    instance_id: str | None = None
    offer_id: Whole | None = None
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RentStopped(Kinded):
    """``market.rent.stopped``: the race ended without a box."""

    KIND: ClassVar[str] = "market.rent.stopped"
    name: str
    reason: str = ""
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Quarantine(Kinded):
    """``market.quarantine``: a machine left out until ``until`` (epoch seconds; M2)."""

    KIND: ClassVar[str] = "market.quarantine"
    machine_id: Whole
    cause: str
    until: Number


@dataclass(frozen=True, kw_only=True)
class Transition(Kinded):
    """``ledger.transition``: one ownership record's state change (M3)."""

    KIND: ClassVar[str] = "ledger.transition"
    name: str = ""
    owner: str = ""
    intent_id: str = ""
    instance_id: str | None = None
    before: str | None = None
    after: str
    revision: Whole | None = None
    error: str | None = None
    rental_id: str | None = None  # the record's incarnation (M16)


# --- the guardian and the lane -----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ConfirmedGone(Kinded):
    """``guard.confirmed_gone``: every box of a rental confirmed gone, ``delay_s`` after its
    deadline (negative: before it)."""

    KIND: ClassVar[str] = "guard.confirmed_gone"
    name: str = ""
    instance_id: str | None = None
    guardian: str = ""
    deadline: str = ""
    delay_s: Number
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardDestroy(Kinded):
    """``guard.destroy``: a guardian begins ending its rental's boxes at (or past) ``deadline``."""

    KIND: ClassVar[str] = "guard.destroy"
    name: str
    instance_id: str | None = None
    guardian: str = ""
    deadline: str = ""
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class SweepEnded(Kinded):
    """``market.sweep.ended``: `gpuops sweep` ended one box record (``ending``: teardown.Ending's
    value); ``retried``: a pending destroy retried, else a record past its rental's deadline."""

    KIND: ClassVar[str] = "market.sweep.ended"
    name: str
    instance_id: str | None = None
    ending: str
    retried: bool
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class LaneStart(Kinded):
    KIND: ClassVar[str] = "lane.start"
    lane: str
    job: str
    attempt: Whole
    outcome: str


@dataclass(frozen=True, kw_only=True)
class LaneJobEnd(Kinded):
    KIND: ClassVar[str] = "lane.job_end"
    lane: str
    job: str
    attempts: Whole
    stockouts: Whole
    waiting_s: Number
    running_s: Number
    cost_usd: Number
    outcome: str


_TYPES = (
    Selection,
    Create,
    Probe,
    RentDone,
    RentStopped,
    Quarantine,
    Transition,
    ConfirmedGone,
    GuardDestroy,
    SweepEnded,
    LaneStart,
    LaneJobEnd,
)
# The one registry: every kind written, the analysis kinds' types and the operational ones'.
BY_KIND: Mapping[str, type[Event]] = {t.KIND: t for t in (*_TYPES, *ops.TYPES)}
KINDS = frozenset(t.KIND for t in _TYPES)  # the kinds analysis reads
ALL_KINDS = frozenset(BY_KIND)  # every kind gpuops writes


AnalysisEvent = (
    Selection
    | Create
    | Probe
    | RentDone
    | RentStopped
    | Quarantine
    | Transition
    | ConfirmedGone
    | GuardDestroy
    | SweepEnded
    | LaneStart
    | LaneJobEnd
)
Event = AnalysisEvent | ops.OpEvent  # what decode reads: every kind


def parse(kind: str, payload: object) -> Event:
    """The typed event for ``kind``; a UsageError naming the kind and what is wrong when the
    kind is unknown or the payload is not one of its events."""
    cls = BY_KIND.get(kind)
    if cls is None:
        raise UsageError(f"{kind!r} is not an event kind")
    try:
        event = msgspec.convert(payload, cls)
    except (msgspec.ValidationError, UnicodeEncodeError) as exc:  # a lone surrogate, an enum
        raise UsageError(f"not a {kind} event: {exc}") from None
    if not _consistent(event):
        raise UsageError(f"not a {kind} event: a pick is not one of its candidates")
    return event


def decode(kind: str, payload: object) -> Event | None:
    """The typed event for ``kind``, or None: an unknown kind, or a payload that is not one.
    What ``parse`` answers, without the reason (a bad line costs no message: a fold skips it)."""
    cls = BY_KIND.get(kind)
    if cls is None:
        return None
    try:
        event = msgspec.convert(payload, cls)
    except (msgspec.ValidationError, UnicodeEncodeError):  # a lone surrogate where an enum is
        return None
    return event if _consistent(event) else None


_E = TypeVar("_E")


class _Line(msgspec.Struct, Generic[_E]):
    """A whole event line as EventLog writes it, its payload one kind's event."""

    ts: str
    operator: str
    kind: str
    payload: _E


_LINE_DECODERS: dict[str, msgspec.json.Decoder[_Line[Event]]] = {}


def decode_line(kind: str, raw: bytes) -> tuple[str, Event] | None:
    """``(ts, event)`` of a whole log line holding an event of ``kind``, parsed and checked in
    one step; None when it is anything else (not JSON, not UTF-8, not an event line, another
    kind, a payload that does not decode): the caller's slower reading then says which. The
    fast path of ``stats``; what it returns is what reading the line and ``decode`` give."""
    decoder = _LINE_DECODERS.get(kind)
    if decoder is None:
        cls = BY_KIND.get(kind)
        if cls is None:
            return None
        decoder = _LINE_DECODERS[kind] = msgspec.json.Decoder(_Line[cls])  # type: ignore[valid-type]
    try:
        line = decoder.decode(raw)
    except msgspec.DecodeError:  # ValidationError included
        return None
    if line.kind != kind or not _consistent(line.payload):
        return None
    return line.ts, line.payload


def _consistent(event: Event) -> bool:
    """What no annotation says: every pick of a race is one of its candidates."""
    if not isinstance(event, Selection):
        return True
    ids = {c.id for c in event.candidates}
    return all(p.id in ids for p in event.picks)
