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
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any, Protocol

from gpuops.errors import (
    AlreadyExists,
    CorruptState,
    IllegalTransition,
    NameTaken,
    NotOwned,
    Refused,
    UsageError,
    VersionConflict,
)
from gpuops.events import scrub
from gpuops.store.base import Store, check_key

PREFIX = "ledger/boxes/"
INSTANCES = "ledger/instances/"  # instance id -> the one record that owns it
# A compare-and-swap that keeps losing means heavy contention or a bug; say so, don't spin.
CAS_ATTEMPTS = 8


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

    @property
    def active(self) -> bool:
        """True while a box may exist or a decision about one is pending."""
        return self.state is not BoxState.RELEASED


class EventSink(Protocol):
    def append(self, kind: str, /, **payload: Any) -> Any: ...


def utc_iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat()


# What earns gone-confirmed (M4), by the state it is earned from. A box that may exist is
# gone only when the provider, asked about that very instance, says so; an intent whose create
# the provider refused outright (the offer was taken, a 429) never produced a box. An empty
# instance list, or a create whose answer was lost, is evidence of nothing.
GONE_BY_SHOW = "provider-show-says-gone"
CREATE_REFUSED = "create-refused"
EVIDENCE_FOR = {BoxState.DESTROYING: GONE_BY_SHOW, BoxState.INTENT: CREATE_REFUSED}


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
    if to is BoxState.GONE_CONFIRMED and evidence != EVIDENCE_FOR[record.state]:
        raise IllegalTransition(
            record.name,
            record.state.value,
            f"{to.value} on evidence {evidence!r} (needs {EVIDENCE_FOR[record.state]!r})",
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


def encode(record: Record) -> bytes:
    fields = asdict(record)
    fields["state"] = record.raw_state if record.state is BoxState.UNKNOWN else record.state.value
    del fields["raw_state"]
    return json.dumps(fields, sort_keys=True).encode()


def decode(key: str, data: bytes) -> Record:
    """Parse a stored record; anything malformed is CorruptState naming the key."""
    try:
        fields = json.loads(data)
        raw_state = fields.pop("state")
        record = Record(state=BoxState.UNKNOWN, **fields)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CorruptState(key, f"not a ledger record: {exc}") from exc
    if not isinstance(record.revision, int) or not isinstance(raw_state, str):
        raise CorruptState(key, "revision must be an integer and state a string")
    known = {s.value: s for s in BoxState if s is not BoxState.UNKNOWN}
    if raw_state in known:
        return replace(record, state=known[raw_state])
    return replace(record, raw_state=raw_state)


class Ledger:
    """Reads, decides with ``advance``, writes by compare-and-swap, logs each transition."""

    def __init__(
        self,
        store: Store,
        events: EventSink,
        operator: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not operator:
            raise UsageError("an operator id is required: every record names its owner")
        self.store = store
        self.events = events
        self.operator = operator
        self.clock = clock

    # --- queries -------------------------------------------------------------------------
    def get(self, name: str) -> Record | None:
        found = self.store.get(self._key(name))
        return None if found is None else decode(found.key, found.data)

    def records(self) -> list[Record]:
        out = []
        for key in self.store.list(PREFIX):
            found = self.store.get(key)
            if found is not None:
                out.append(decode(key, found.data))
        return out

    def retry_list(self) -> list[Record]:
        """Every record whose destroy has not been confirmed, whoever owns it (M4)."""
        return [r for r in self.records() if r.state is BoxState.DESTROYING]

    # --- transitions ---------------------------------------------------------------------
    def record_intent(
        self, name: str, provider: str, deadline_at: str | None = None
    ) -> tuple[Record, bool]:
        """Write the intent before any create (M3). Returns (record, created).

        An active record of ours under this name is returned as it is, never a second intent
        (M8); an active record of another operator's is a refusal; a released name is reused.
        """
        key = self._key(name)
        for _ in range(CAS_ATTEMPTS):
            fresh = Record(
                name=name,
                owner=self.operator,
                state=BoxState.INTENT,
                intent_id=secrets.token_hex(8),
                provider=provider,
                revision=1,
                updated_at=utc_iso(self.clock()),
                deadline_at=deadline_at,
            )
            found = self.store.get(key)
            try:
                if found is None:
                    self.store.create(key, encode(fresh))
                    return self._logged(None, fresh), True
                current = decode(key, found.data)
                if current.state is not BoxState.RELEASED:
                    if current.owner != self.operator:
                        raise NameTaken(name, current.owner)
                    return current, False
                fresh = replace(fresh, revision=current.revision + 1)
                self.store.put(key, encode(fresh), found.version)
                return self._logged(current, fresh), True
            except (AlreadyExists, VersionConflict):
                continue
        raise VersionConflict(key, None)

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
        key = check_key(INSTANCES + instance_id)
        record = self.get(name)
        if record is None:
            raise Refused("M3", f"no ledger record named {name!r}: gpuops cannot prove it owns it")
        mine = json.dumps({"name": name, "intent_id": record.intent_id}, sort_keys=True).encode()
        for _ in range(CAS_ATTEMPTS):
            found = self.store.get(key)
            try:
                if found is None:
                    self.store.create(key, mine)
                    return
                if found.data == mine:
                    return
                holder = json.loads(found.data)
                held = self.get(holder["name"])
                stale = held is None or held.intent_id != holder["intent_id"] or not held.active
                if not stale:
                    raise Refused(
                        "M3",
                        f"instance {instance_id} is already claimed by {holder['name']!r} "
                        f"(owner {held.owner!r}); one instance has one owner",
                    )
                self.store.put(key, mine, found.version)
                return
            except (AlreadyExists, VersionConflict):
                continue
        raise VersionConflict(key, None)

    def _unclaim_instance(self, record: Record) -> None:
        key = check_key(INSTANCES + str(record.instance_id))
        found = self.store.get(key)
        if found is not None and json.loads(found.data).get("intent_id") == record.intent_id:
            try:
                self.store.delete(key, found.version)
            except VersionConflict:
                pass  # reclaimed meanwhile by a later record: it is theirs now

    # --- shell ---------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return check_key(PREFIX + name)

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
        key = self._key(name)
        for _ in range(CAS_ATTEMPTS):
            found = self.store.get(key)
            if found is None:
                raise Refused(
                    "M3", f"no ledger record named {name!r}: gpuops cannot prove it owns it"
                )
            current = decode(key, found.data)
            if idempotent and current.state is to and current.owner == self.operator:
                return current  # already there: a retry after a crash is harmless
            new = advance(
                current,
                to,
                operator=self.operator,
                now_iso=utc_iso(self.clock()),
                instance_id=instance_id,
                error=None if error is None else str(scrub(error)),  # records sync to S3 (H3)
                evidence=evidence,
            )
            try:
                self.store.put(key, encode(new), found.version)
            except VersionConflict:
                continue
            return self._logged(current, new)
        raise VersionConflict(key, None)

    def _logged(self, before: Record | None, after: Record) -> Record:
        self.events.append(
            "ledger.transition",
            name=after.name,
            owner=after.owner,
            intent_id=after.intent_id,
            instance_id=after.instance_id,
            before=None if before is None else before.state.value,
            after=after.state.value,
            revision=after.revision,
            error=after.last_error,
        )
        return after
