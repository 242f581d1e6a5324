"""The ownership ledger: who owns which box, from intent to confirmed-gone to released (M3, M4).

One record per box name, stored at ``ledger/boxes/<name>``. A record moves

    intent -> live -> destroying -> gone-confirmed -> released
       \\________________^    \\_^ (a failed destroy: stays on the retry list)
        \\_________________________^ (intent -> gone-confirmed: nothing was created)

and a released name may start a new intent. The rules this module enforces:
- the intent is written before any create call, so a box we pay for is always findable (M3);
- only the record's owner moves it; the owner is explicit, never inferred (M3);
- release only from gone-confirmed, which only a provider's answer about that box earns (M4);
- a failed destroy keeps the record in ``destroying`` with the error: the retry list is
  simply every record in that state, visible to every process and after restarts (M4);
- every transition is a compare-and-swap on the store and is written to the event log.

``advance`` is the pure decision; ``Ledger`` is the thin shell that reads, decides, writes.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Any, Protocol

from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    CorruptState,
    IllegalTransition,
    NameTaken,
    NotOwned,
    Refused,
    UsageError,
)
from gpuops.store.base import Store
from gpuops.store.records import (
    CAS_ATTEMPTS,
    ISO_TIMESTAMP,
    NO_CHANGE,
    JsonCodec,
    NoChange,
    Records,
)
from gpuops.timestamps import utc_iso

__all__ = ["CAS_ATTEMPTS", "BoxState", "Ledger", "Record", "advance", "decode", "encode"]

PREFIX = "ledger/boxes/"
INSTANCES = "ledger/instances/"  # instance id -> the one record that owns it


class BoxState(Enum):
    INTENT = "intent"
    LIVE = "live"
    DESTROYING = "destroying"
    GONE_CONFIRMED = "gone-confirmed"
    RELEASED = "released"
    UNKNOWN = "unknown"  # written by something newer than us: act on nothing, release nothing


# Where each state may go. UNKNOWN goes nowhere: a record we cannot understand is left alone.
ALLOWED: dict[BoxState, frozenset[BoxState]] = {
    BoxState.INTENT: frozenset({BoxState.LIVE, BoxState.DESTROYING, BoxState.GONE_CONFIRMED}),
    BoxState.LIVE: frozenset({BoxState.DESTROYING}),
    BoxState.DESTROYING: frozenset({BoxState.DESTROYING, BoxState.GONE_CONFIRMED}),
    BoxState.GONE_CONFIRMED: frozenset({BoxState.RELEASED}),
    BoxState.RELEASED: frozenset({BoxState.INTENT}),
    BoxState.UNKNOWN: frozenset(),
}


@dataclass(frozen=True)
class Record:
    """One box's ownership record."""

    name: str
    owner: str
    state: BoxState
    intent_id: str
    provider: str
    revision: int
    updated_at: str
    instance_id: str | None = None
    deadline_at: str | None = None
    destroy_attempts: int = 0
    last_error: str | None = None
    raw_state: str | None = None  # the stored string when state is UNKNOWN
    rental_id: str | None = None  # the incarnation of the rental it is a box of (M16)

    @property
    def active(self) -> bool:
        """True while a box may exist or a decision about one is pending."""
        return self.state is not BoxState.RELEASED


class EventSink(Protocol):
    def append(self, kind: str, /, **payload: Any) -> Any: ...


# What earns gone-confirmed (M4), by the state it is earned from. A box that may exist is
# gone only when the provider, asked about that very instance, says so; an intent whose create
# the provider refused outright (the offer was taken, a 429) never produced a box. An empty
# instance list, or a create whose answer was lost, is evidence of nothing.
GONE_BY_SHOW = "provider-show-says-gone"
CREATE_REFUSED = "create-refused"
# an unclear create no look-up by label found across its whole resolution window (M13)
NEVER_FOUND = "not-found-by-label-in-time"
EVIDENCE_FOR = {
    BoxState.DESTROYING: frozenset({GONE_BY_SHOW}),
    BoxState.INTENT: frozenset({CREATE_REFUSED, NEVER_FOUND}),
}


def advance(
    record: Record,
    to: BoxState,
    *,
    operator: str,
    now_iso: str,
    instance_id: str | None = None,
    error: str | None = None,
    evidence: str | None = None,
) -> Record:
    """Decide the next record for a requested transition, or raise a refusal. Pure."""
    if record.owner != operator:
        raise NotOwned(record.name, record.owner, operator)
    if to not in ALLOWED[record.state]:
        raise IllegalTransition(record.name, record.state.value, to.value)
    if to is BoxState.GONE_CONFIRMED and evidence not in EVIDENCE_FOR[record.state]:
        needs = " or ".join(repr(e) for e in sorted(EVIDENCE_FOR[record.state]))
        raise IllegalTransition(
            record.name,
            record.state.value,
            f"{to.value} on evidence {evidence!r} (needs {needs})",
        )
    changes: dict[str, Any] = {"state": to, "revision": record.revision + 1, "updated_at": now_iso}
    if to is BoxState.LIVE:
        if not instance_id:
            raise UsageError(f"{record.name!r}: going live needs the provider's instance id")
        changes["instance_id"] = instance_id
    if error:
        if to is not BoxState.DESTROYING:
            raise UsageError(f"{record.name!r}: only a destroy can fail with an error")
        changes["destroy_attempts"] = record.destroy_attempts + 1
        changes["last_error"] = error
    elif to is BoxState.DESTROYING and record.state is BoxState.DESTROYING:
        raise UsageError(f"{record.name!r}: a failed destroy must say what failed")
    return replace(record, **changes)


@dataclass(frozen=True)
class Claim:
    """``ledger/instances/<id>``: the one record (and intent) an instance belongs to (M3)."""

    name: str
    intent_id: str


CLAIMS = JsonCodec(Claim, "instance claim")
_FIELDS = JsonCodec(
    Record,
    "ledger record",
    as_str=frozenset({"state"}),
    checks={"updated_at": ISO_TIMESTAMP, "deadline_at": ISO_TIMESTAMP},
)


def encode(record: Record) -> bytes:
    fields = asdict(record)
    fields["state"] = record.raw_state if record.state is BoxState.UNKNOWN else record.state.value
    del fields["raw_state"]
    return json.dumps(fields, sort_keys=True).encode()


def decode(key: str, data: bytes) -> Record:
    """Parse a stored record strictly; anything malformed is CorruptState naming the key and
    the field. A state this gpuops does not know is kept raw as UNKNOWN, never guessed."""
    fields = _FIELDS.fields_of(key, data)
    if "raw_state" in fields:  # never stored: it is the state field's own raw text
        raise CorruptState(key, "not a ledger record: unknown field 'raw_state'")
    raw_state = fields.pop("state")
    known = {s.value: s for s in BoxState if s is not BoxState.UNKNOWN}
    if raw_state in known:
        return Record(state=known[raw_state], **fields)
    return Record(state=BoxState.UNKNOWN, raw_state=raw_state, **fields)


class _Codec:
    what = "ledger record"
    encode = staticmethod(encode)
    decode = staticmethod(decode)


class Ledger:
    """Reads, decides with ``advance``, writes by compare-and-swap, logs each transition."""

    def __init__(
        self,
        store: Store,
        events: EventSink,
        operator: str,
        clock: Clock = SYSTEM,
    ) -> None:
        if not operator:
            raise UsageError("an operator id is required: every record names its owner")
        self.store = store
        self.events = events
        self.operator = operator
        self.clock = clock
        self.boxes = Records(store, PREFIX, _Codec())
        self.claims = Records(store, INSTANCES, CLAIMS)

    # --- queries -------------------------------------------------------------------------
    def get(self, name: str) -> Record | None:
        return self.boxes.get(name)

    def records(self, *, skip_corrupt: bool = False, under: str = "") -> list[Record]:
        """Every record (whose name begins with ``under``, when given: one rental's). An
        unreadable one stops the caller (it may stand for a box that bills), unless
        ``skip_corrupt``: then it blocks only itself and is kept in ``corrupt`` for the
        caller to name (the read-only views)."""
        out = self.boxes.all(under)
        if self.boxes.corrupt and not skip_corrupt:
            raise min(self.boxes.corrupt.items())[1]
        return out

    @property
    def corrupt(self) -> dict[str, CorruptState]:
        return self.boxes.corrupt

    def retry_list(self) -> list[Record]:
        """Every record whose destroy has not been confirmed, whoever owns it (M4)."""
        return [r for r in self.records() if r.state is BoxState.DESTROYING]

    # --- transitions ---------------------------------------------------------------------
    def record_intent(
        self,
        name: str,
        provider: str,
        deadline_at: str | None = None,
        rental_id: str | None = None,
    ) -> tuple[Record, bool]:
        """Write the intent before any create (M3), of rental incarnation ``rental_id`` (M16).
        Returns (record, created).

        An active record of ours under this name is returned as it is, never a second intent
        (M8); an active record of another operator's is a refusal; a released name is reused.
        """

        import secrets  # here, not at the top: listings (`boxes`) never write an intent

        def intend(current: Record | None) -> Record | NoChange:
            fresh = Record(
                name=name,
                owner=self.operator,
                state=BoxState.INTENT,
                intent_id=secrets.token_hex(8),
                provider=provider,
                revision=1,
                updated_at=utc_iso(self.clock.wall()),
                deadline_at=deadline_at,
                rental_id=rental_id,
            )
            if current is None:
                return fresh
            if current.state is not BoxState.RELEASED:
                if current.owner != self.operator:
                    raise NameTaken(name, current.owner)
                return NO_CHANGE
            return replace(fresh, revision=current.revision + 1)

        done = self.boxes.update(name, intend)
        if not done.written:
            return done.before, False  # type: ignore[return-value]
        return self._logged(done.before, done.after), True  # type: ignore[arg-type]

    def mark_live(self, name: str, instance_id: str) -> Record:
        """The create answered with ``instance_id``: claim it for this record (M3).

        An instance index makes the claim exclusive: one instance, one record. Repeating the
        call with the same instance (a retry after a lost reply) is harmless.
        """
        current = self.get(name)
        if current is not None and current.state is BoxState.LIVE:
            if current.owner == self.operator and current.instance_id == instance_id:
                return current
        self._claim_instance(name, instance_id)
        return self._move(name, BoxState.LIVE, instance_id=instance_id)

    def begin_destroy(self, name: str) -> Record:
        """Put the box on the retry list before the destroy call is made."""
        return self._move(name, BoxState.DESTROYING, idempotent=True)

    def destroy_failed(self, name: str, error: str) -> Record:
        """The destroy call failed: stay on the retry list with the reason (M4)."""
        return self._move(name, BoxState.DESTROYING, error=error)

    def confirm_gone(self, name: str, evidence: str) -> Record:
        """Gone, on ``evidence``: GONE_BY_SHOW for a box, CREATE_REFUSED for an intent (M4)."""
        return self._move(name, BoxState.GONE_CONFIRMED, idempotent=True, evidence=evidence)

    def release(self, name: str) -> Record:
        """Drop ownership; only from gone-confirmed (M4)."""
        released = self._move(name, BoxState.RELEASED, idempotent=True)
        if released.instance_id is not None:
            self._unclaim_instance(released)
        return released

    def _claim_instance(self, name: str, instance_id: str) -> None:
        record = self.get(name)
        if record is None:
            raise Refused("M3", f"no ledger record named {name!r}: gpuops cannot prove it owns it")
        mine = Claim(name, record.intent_id)

        def claim(current: Claim | None) -> Claim | NoChange:
            if current == mine:
                return NO_CHANGE
            held = None if current is None else self.get(current.name)
            # the holder's record still stands for that intent: not stale, so it is theirs
            if current and held and held.intent_id == current.intent_id and held.active:
                raise Refused(
                    "M3",
                    f"instance {instance_id} is already claimed by {current.name!r} "
                    f"(owner {held.owner!r}); one instance has one owner",
                )
            return mine

        self.claims.update(instance_id, claim)

    def _unclaim_instance(self, record: Record) -> None:
        # reclaimed meanwhile by a later record: it is theirs now, and stays
        self.claims.remove(str(record.instance_id), lambda c: c.intent_id == record.intent_id)

    # --- shell ---------------------------------------------------------------------------
    def _move(
        self,
        name: str,
        to: BoxState,
        *,
        instance_id: str | None = None,
        error: str | None = None,
        evidence: str | None = None,
        idempotent: bool = False,
    ) -> Record:
        from gpuops.secrets import scrub  # a failed destroy's error: records sync to S3 (H3)

        def step(current: Record | None) -> Record | NoChange:
            if current is None:
                raise Refused(
                    "M3", f"no ledger record named {name!r}: gpuops cannot prove it owns it"
                )
            if idempotent and current.state is to and current.owner == self.operator:
                return NO_CHANGE  # a retry after a crash
            return advance(
                current,
                to,
                operator=self.operator,
                now_iso=utc_iso(self.clock.wall()),
                instance_id=instance_id,
                error=None if error is None else str(scrub(error)),  # records sync to S3 (H3)
                evidence=evidence,
            )

        done = self.boxes.update(name, step)
        if not done.written:
            return done.before  # type: ignore[return-value]
        return self._logged(done.before, done.after)  # type: ignore[arg-type]

    def _logged(self, before: Record | None, after: Record) -> Record:
        from gpuops import event_types as ev  # writers only: `boxes` never builds an event

        transition = ev.Transition(
            name=after.name,
            owner=after.owner,
            intent_id=after.intent_id,
            instance_id=after.instance_id,
            before=None if before is None else before.state.value,
            after=after.state.value,
            revision=after.revision,
            error=after.last_error,
            rental_id=after.rental_id,
        )
        self.events.append(transition.KIND, **transition.to_payload())
        return after
