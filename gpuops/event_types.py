"""The typed events: one frozen dataclass per kind that analysis reads, and one strict decoder.

Owns: what each of these kinds' payloads holds, and the judgment "this line is (not) such an
event". Writers build the type and log ``to_payload()`` (the JSON on disk is what the keyword
arguments wrote before, key for key, so old logs read the same); readers ask ``decode(kind,
payload)`` and get the type or None. None means "count it and skip it": a wrong type, a missing
field, a verdict outside ``probe.Verdict``, a propensity outside (0, 1] or a pick that is not
one of its race's candidates. A reader never trusts a payload it did not decode.

Every field is checked by its annotation's text (``_CHECKS``), so a new field is one line and
the check cannot drift from the type. Each type's decoder is written from those annotations
the first time the type is decoded (``_decoder``), never at import, so a command that reads
no event pays nothing and `stats` pays per event only a check call per field. A bool is never a number here (JSON ``true`` is not 1).
A field without a default is required: what some reader needs. A field with one is context no
reader depends on (hand-written and older logs may leave it out); when present it must still
have its type. Writers always give every field. Extra payload keys are ignored: a writer may
add context without breaking readers. Fields are keyword-only and in the order the writers
always wrote them, so ``to_payload()`` is the old line byte for byte.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from gpuops.market.probe import Verdict

__all__ = [
    "KINDS",
    "ConfirmedGone",
    "Create",
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
    "Transition",
    "decode",
]


_T = TypeVar("_T")


class _Bad(Exception):
    """A payload that is not its kind's event (never leaves this module)."""


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise _Bad
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Bad
    return value


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad
    return value


def _probability(value: object) -> float:
    if not 0 < _number(value) <= 1:
        raise _Bad
    return value  # type: ignore[return-value]


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad
    return value


def _verdict(value: object) -> Verdict:
    if not isinstance(value, str) or value not in _VERDICTS:
        raise _Bad
    return Verdict(value)


_VERDICTS = frozenset(v.value for v in Verdict)


def _decode_as(cls: type[_T], payload: object) -> _T:
    return _decoder(cls)(payload)


# Each type's decoder, written from its annotations the first time one is decoded (not at
# import: a command that builds no event pays nothing) as straight-line code, the way
# dataclasses writes __init__: per field one membership test and one check call, and the
# frozen instance's attributes set at once (what its __init__ would set, at a third the cost).
_DECODERS: dict[type, Callable[[object], object]] = {}


def _decoder(cls: type[_T]) -> Callable[[object], _T]:
    """``cls``'s payload decoder: every field checked by its annotation, required ones present."""
    found = _DECODERS.get(cls)
    if found is not None:
        return found  # type: ignore[return-value]
    every = dataclasses.fields(cls)  # type: ignore[arg-type]
    scope: dict[str, object] = {
        "Mapping": Mapping,
        "_Bad": _Bad,
        "cls": cls,
        "new": object.__new__,
        "setattr": object.__setattr__,
    }
    body = ["def decode_as(p):", "    if type(p) is not dict and not isinstance(p, Mapping):"]
    body += ["        raise _Bad", "    v = {}"]
    for n, f in enumerate(every):
        annotation = str(f.type)
        nullable = annotation.endswith(" | None")
        scope[f"check{n}"], scope[f"default{n}"] = (
            _check(annotation.removesuffix(" | None")),
            f.default,
        )
        body += [f"    if {f.name!r} in p:", f"        x = p[{f.name!r}]"]
        value = f"None if x is None else check{n}(x)" if nullable else f"check{n}(x)"
        body += [f"        v[{f.name!r}] = {value}", "    else:"]
        missing = f"v[{f.name!r}] = default{n}"
        body.append(f"        {'raise _Bad' if f.default is dataclasses.MISSING else missing}")
    body += ["    event = new(cls)", "    setattr(event, '__dict__', v)", "    return event"]
    exec("\n".join(body), scope)  # noqa: S102 (text built here from our own field names)
    _DECODERS[cls] = decode_as = scope["decode_as"]  # type: ignore[assignment]
    return decode_as  # type: ignore[return-value]


def _check(annotation: str) -> Callable[[object], object]:
    """The check for a field's annotation text (less any ``| None``, which the decoder
    handles): ``tuple[X, ...]``, a nested event part, or a scalar in ``_CHECKS``."""
    if annotation.startswith("tuple["):
        return _items(_check(annotation.removeprefix("tuple[").removesuffix(", ...]")))
    if annotation in _PARTS:
        return _decoder(_PARTS[annotation])
    return _CHECKS[annotation]


def _items(check: Callable[[object], object]) -> Callable[[object], object]:
    def items(value: object) -> object:
        if not isinstance(value, list | tuple):
            raise _Bad
        return tuple(map(check, value))

    return items


def _plain(value: object) -> object:
    if isinstance(value, Verdict):
        return value.value
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if dataclasses.is_dataclass(value):
        return value.to_payload()  # type: ignore[union-attr]
    return value


class _Payload:
    def to_payload(self) -> dict[str, object]:
        """The payload as the log holds it: JSON values, keys in field order."""
        fields = dataclasses.fields(self)  # type: ignore[arg-type]
        return {f.name: _plain(getattr(self, f.name)) for f in fields}


# --- the market: one race ----------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Offered(_Payload):
    """One ranked candidate of a race, as logged (M11)."""

    id: int
    machine_id: int
    dph_total: float
    reliability: float | None = None
    disk_bw: float | None = None
    gpu_ram: float | None = None


@dataclass(frozen=True, kw_only=True)
class Removed(_Payload):
    id: int
    reasons: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Picked(_Payload):
    id: int
    rank: int | None = None
    propensity: Probability | None = None  # None: not logged, so no off-policy weight
    explored: bool = False


Probability = float  # in (0, 1]: a pick made with probability 0 was never made


@dataclass(frozen=True, kw_only=True)
class Selection(_Payload):
    """``market.selection``: the full ranked candidate set and each pick's propensity (M11).
    Every pick names one of the candidates."""

    KIND: ClassVar[str] = "market.selection"
    name: str
    gpu_name: str = ""
    k: int | None = None
    candidates: tuple[Offered, ...]
    removed: tuple[Removed, ...] = ()
    quarantined: int | None = None
    picks: tuple[Picked, ...]

    def offered(self, offer_id: int) -> Offered | None:
        return next((c for c in self.candidates if c.id == offer_id), None)


@dataclass(frozen=True, kw_only=True)
class Create(_Payload):
    """``market.create``: one create call's outcome (created, reconciled, taken, ...)."""

    KIND: ClassVar[str] = "market.create"
    name: str
    offer_id: int
    machine_id: int | None = None
    outcome: str
    instance_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class Probe(_Payload):
    """``market.probe``: one box's verdict, a ``probe.Verdict``."""

    KIND: ClassVar[str] = "market.probe"
    name: str
    offer_id: int
    machine_id: int
    instance_id: str | None = None
    verdict: Verdict


@dataclass(frozen=True, kw_only=True)
class RentDone(_Payload):
    """``market.rent.done``: the race kept this box."""

    KIND: ClassVar[str] = "market.rent.done"
    name: str
    instance_id: str | None = None
    offer_id: int | None = None


@dataclass(frozen=True, kw_only=True)
class RentStopped(_Payload):
    """``market.rent.stopped``: the race ended without a box."""

    KIND: ClassVar[str] = "market.rent.stopped"
    name: str
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Quarantine(_Payload):
    """``market.quarantine``: a machine left out until ``until`` (epoch seconds; M2)."""

    KIND: ClassVar[str] = "market.quarantine"
    machine_id: int
    cause: str
    until: float


@dataclass(frozen=True, kw_only=True)
class Transition(_Payload):
    """``ledger.transition``: one ownership record's state change (M3)."""

    KIND: ClassVar[str] = "ledger.transition"
    name: str = ""
    owner: str = ""
    intent_id: str = ""
    instance_id: str | None = None
    before: str | None = None
    after: str
    revision: int | None = None
    error: str | None = None


# --- the guardian and the lane -----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ConfirmedGone(_Payload):
    """``guard.confirmed_gone``: every box of a rental confirmed gone, ``delay_s`` after its
    deadline (negative: before it)."""

    KIND: ClassVar[str] = "guard.confirmed_gone"
    name: str = ""
    instance_id: str | None = None
    guardian: str = ""
    deadline: str = ""
    delay_s: float


@dataclass(frozen=True, kw_only=True)
class LaneStart(_Payload):
    KIND: ClassVar[str] = "lane.start"
    lane: str
    job: str
    attempt: int
    outcome: str


@dataclass(frozen=True, kw_only=True)
class LaneJobEnd(_Payload):
    KIND: ClassVar[str] = "lane.job_end"
    lane: str
    job: str
    attempts: int
    stockouts: int
    waiting_s: float
    running_s: float
    cost_usd: float
    outcome: str


_CHECKS: dict[str, Callable[[object], object]] = {
    "str": _text,
    "int": _whole,
    "float": _number,
    "bool": _flag,
    "Probability": _probability,
    "Verdict": _verdict,
}
_PARTS: Mapping[str, type] = {"Offered": Offered, "Removed": Removed, "Picked": Picked}

_TYPES = (
    Selection,
    Create,
    Probe,
    RentDone,
    RentStopped,
    Quarantine,
    Transition,
    ConfirmedGone,
    LaneStart,
    LaneJobEnd,
)
BY_KIND: Mapping[str, type[Event]] = {t.KIND: t for t in _TYPES}
KINDS = frozenset(BY_KIND)


Event = (
    Selection
    | Create
    | Probe
    | RentDone
    | RentStopped
    | Quarantine
    | Transition
    | ConfirmedGone
    | LaneStart
    | LaneJobEnd
)


def decode(kind: str, payload: object) -> Event | None:
    """The typed event for ``kind``, or None: an unknown kind, or a payload that is not one."""
    cls = BY_KIND.get(kind)
    if cls is None:
        return None
    try:
        event = _decode_as(cls, payload)
    except _Bad:
        return None
    if isinstance(event, Selection) and any(event.offered(p.id) is None for p in event.picks):
        return None
    return event
