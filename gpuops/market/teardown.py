"""Destroying boxes we own: destroy, then confirm gone by asking for that box (M3, M4).

A destroy call's success says nothing about whether the box stopped billing; only ``show``
answering "no such instance" does. An empty instance *list* is never taken as proof: the
list can lag or answer empty while the box still runs. A destroy that fails, or a box that
will not confirm gone in time, stays on the ledger's retry list for ``gpuops sweep``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    ExitCode,
    GpuopsError,
    IllegalTransition,
    NotOwned,
    ProviderError,
    Unavailable,
)
from gpuops.ledger import GONE_BY_SHOW, BoxState, Ledger, Record
from gpuops.model import Instance
from gpuops.timestamps import epoch_of


class Destroyer(Protocol):
    def destroy(self, instance_id: str) -> None: ...
    def show(self, instance_id: str) -> Instance | None: ...


LABEL_PREFIX = "gpuops:"


def label_for(intent_id: str) -> str:
    """The instance label that carries our intent id, written at create (M3)."""
    return f"{LABEL_PREFIX}{intent_id}"


def intent_of(label: str | None) -> str | None:
    """The intent id a label carries, or None for a box gpuops did not create."""
    if label and label.startswith(LABEL_PREFIX) and len(label) > len(LABEL_PREFIX):
        return label[len(LABEL_PREFIX) :]
    return None


class Ending(Enum):
    """How one box's destroy ended: the only input the exit code reads (M13)."""

    GONE = "gone"  # the provider, asked for that box, says gone; the record is released
    NEVER_CREATED = "never-created"  # its create was refused outright: no box ever existed
    # an unclear create no look-up by label found in UNCLEAR_CREATE_WINDOW_S: released, the
    # name free again, but never "confirmed gone" (a guardian says so loudly; sweep ends any
    # box that turns up with its label later)
    GIVEN_UP = "given-up"
    PENDING = "pending"  # the destroy failed or is not confirmed yet: on the retry list (M4)
    UNRESOLVED = "unresolved"  # an intent no look-up by label has found: a box may exist
    # a record that cannot be read: every box its instance claim names is confirmed gone, and
    # the record is left, never replaced, for a person to move aside (it blocks only itself)
    UNREADABLE = "unreadable"


ENDED = frozenset({Ending.GONE, Ending.NEVER_CREATED, Ending.GIVEN_UP})


@dataclass(frozen=True)
class Outcome:
    name: str
    ending: Ending
    detail: str  # for people only: never read to decide anything

    @property
    def released(self) -> bool:
        return self.ending in ENDED


def exit_code(outcomes: Iterable[Outcome]) -> int:
    """The one mapping from destroy outcomes to an exit code (M13): 0 only when every box is
    gone or was never created; 4 while a destroy is pending on the retry list; 5 while an
    intent is unresolved (a box may or may not exist: unknown); 1 when only an unreadable
    record is left (its boxes gone, the record for a person to repair)."""
    endings = {outcome.ending for outcome in outcomes}
    if Ending.PENDING in endings:
        return ExitCode.UNAVAILABLE
    if Ending.UNRESOLVED in endings:
        return ExitCode.UNKNOWN
    if Ending.UNREADABLE in endings:
        return ExitCode.ERROR
    return ExitCode.OK


def destroy_box(
    vast: Destroyer,
    ledger: Ledger,
    name: str,
    *,
    clock: Clock = SYSTEM,
) -> Outcome:
    """Destroy the box behind ledger record ``name`` and release it once confirmed gone.

    Refuses (NotOwned, M3) unless this operator owns the record. A record with no instance
    (an intent whose create never produced one) is confirmed gone by the caller's
    reconciliation, not here.
    """
    current = ledger.get(name)
    if current is not None and current.state is BoxState.GONE_CONFIRMED:
        # a crash between the confirmation and the release: the evidence is already recorded
        ledger.release(name)  # owner check (M3) in the ledger
        if current.instance_id is None:  # a create refused outright: no box was ever made
            return Outcome(name, Ending.NEVER_CREATED, "its create was refused; released")
        return Outcome(
            name, Ending.GONE, f"instance {current.instance_id} was confirmed gone; released"
        )
    if current is not None and current.instance_id is None:
        if current.owner != ledger.operator:
            raise NotOwned(name, current.owner, ledger.operator)  # M3, as begin_destroy would
        # an intent: only a look-up by its label can settle it; moving it to destroying would
        # leave a record no answer about an instance could ever release (M4)
        return Outcome(
            name, Ending.UNRESOLVED, "no instance recorded: reconcile its intent by label first"
        )
    try:
        record = ledger.begin_destroy(name)  # owner check (M3); on the retry list from now (M4)
    except IllegalTransition:
        if _released_meanwhile(ledger, name):  # another destroy of ours finished it first
            return Outcome(name, Ending.GONE, "already confirmed gone and released by another")
        raise
    assert record.instance_id is not None  # current had one, and a record never loses it
    try:
        vast.destroy(record.instance_id)
    except (Unavailable, ProviderError) as exc:
        ledger.destroy_failed(name, f"{type(exc).__name__}: {exc}")
        return Outcome(name, Ending.PENDING, f"destroy failed, kept on the retry list: {exc}")
    return confirm_and_release(vast, ledger, record, clock=clock)


def confirm_and_release(
    vast: Destroyer,
    ledger: Ledger,
    record: Record,
    *,
    clock: Clock = SYSTEM,
) -> Outcome:
    """Ask for this very instance until it is gone, then confirm and release (M4)."""
    if record.instance_id is None:
        raise ValueError(f"{record.name!r} has no instance to confirm gone")
    last = poll_gone(vast, record.instance_id, clock=clock)
    if last is not None:
        ledger.destroy_failed(record.name, f"not confirmed gone in time: {last}")
        return Outcome(
            record.name, Ending.PENDING, f"not confirmed gone, kept on the retry list: {last}"
        )
    detail = f"instance {record.instance_id} confirmed gone"
    try:
        ledger.confirm_gone(record.name, GONE_BY_SHOW)
        ledger.release(record.name)
    except IllegalTransition:
        if not _released_meanwhile(ledger, record.name):
            raise
        detail += " (released meanwhile by another destroy)"
    return Outcome(record.name, Ending.GONE, detail)


def poll_gone(
    vast: Destroyer,
    instance_id: str,
    *,
    clock: Clock = SYSTEM,
) -> str | None:
    """Ask for this very instance every DESTROY_CONFIRM_POLL_S until the provider says it is
    gone (M4): None then; what it last said when DESTROY_CONFIRM_TIMEOUT_S ran out first."""
    deadline = clock.monotonic() + timing.DESTROY_CONFIRM_TIMEOUT_S
    while True:
        try:
            shown = vast.show(instance_id)
        except GpuopsError as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if shown is None:
                return None
            last = "the provider still shows it"
        if clock.monotonic() >= deadline:
            return last
        clock.sleep(timing.DESTROY_CONFIRM_POLL_S)


def never_found(record: Record, now: float) -> bool:
    """An unclear create given up on (M13): an intent written UNCLEAR_CREATE_WINDOW_S before
    ``now`` (its ``updated_at``, on its writer's clock: the window holds the skew allowance)
    whose box no look-up by label has found. A record that is no intent never is."""
    if record.state is not BoxState.INTENT:
        return False
    written = epoch_of(record.updated_at)
    return now - written >= timing.UNCLEAR_CREATE_WINDOW_S


def _released_meanwhile(ledger: Ledger, name: str) -> bool:
    """Two destroys of one box at once (M4): the other confirmed it gone and released the
    record between our read and our write; the box is gone, which is all either wanted."""
    current = ledger.get(name)
    return current is not None and current.state is BoxState.RELEASED
