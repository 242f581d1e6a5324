"""The operational events: one frozen dataclass per kind that no analysis reads.

Owns: what each operational kind's payload holds (the guardian's and `guard --all`'s reports,
the lane runner's, the race's candidate steps, the sweep's, the drill's, the alarms', the
adapters' calls). The analysis kinds are gpuops/event_types.py's, which holds the one registry
of every kind and the one decoder (``event_types.decode`` reads these too); the field types and
``to_payload`` are gpuops/event_base.py's. This module only declares: a writer builds the type
and logs ``log.append(event.KIND, **event.to_payload())``, and tests/test_event_kinds.py fails
on an event written by a bare kind anywhere in gpuops/.

The same rules as the analysis kinds: fields keyword-only, in the order their writer always
wrote them; a field without a default is required, one with a default is context a writer may
leave out (older logs do); every field is checked by its annotation when decoded.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, TypedDict

from gpuops.event_base import Kinded, Number, Whole
from gpuops.model import Verdict

__all__ = [
    "TYPES",
    "AlarmDelivered",
    "AlarmDuplicate",
    "AlarmRaised",
    "AlarmUndelivered",
    "AlarmUnrecorded",
    "Candidate",
    "GceError",
    "GceGet",
    "GceOperation",
    "GceSetLabels",
    "GceSetMetadata",
    "GceSetScheduling",
    "GceStart",
    "GuardAllError",
    "GuardAllExit",
    "GuardAllLeft",
    "GuardAllStart",
    "GuardAllUnreadable",
    "GuardCopy",
    "GuardCopyStarted",
    "GuardDestroyPending",
    "GuardDrill",
    "GuardError",
    "GuardExit",
    "GuardGivenUp",
    "GuardLeaseTaken",
    "GuardRaceEnded",
    "GuardRole",
    "GuardStart",
    "GuardSync",
    "JobStarted",
    "JobStatus",
    "LaneBillingAlarm",
    "LaneBoard",
    "LaneClaim",
    "LaneInstall",
    "LedgerNeverFound",
    "OperatorIdentity",
    "OpEvent",
    "Step",
    "Sweep",
    "VastCall",
    "VastRetry",
    "Who",
]


class Who(TypedDict):
    """What every guard.* event of one guardian says first: the rental, its box, the guardian,
    and the incarnation it answers for once it has read one (M16)."""

    name: str
    instance_id: str | None
    guardian: str
    rental_id: str | None


# --- the guardian (gpuops/market/guard.py) -----------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GuardStart(Kinded):
    """``guard.start``: a guardian began guarding a rental (``pid``: its process)."""

    KIND: ClassVar[str] = "guard.start"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    deadline: str
    pid: Whole
    time_scale: Number
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardExit(Kinded):
    """``guard.exit``: a guardian leaves with ``code`` (its process's exit status)."""

    KIND: ClassVar[str] = "guard.exit"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    code: Whole
    reason: str
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardError(Kinded):
    """``guard.error``: a round of the guardian's loop failed; it tries again."""

    KIND: ClassVar[str] = "guard.error"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    error: str
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardRole(Kinded):
    """``guard.role``: the guardian's role changed (``holder``: the lease's holder, if any)."""

    KIND: ClassVar[str] = "guard.role"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    role: str
    holder: str | None = None
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardLeaseTaken(Kinded):
    """``guard.lease.taken``: the guardian took the lease over from ``previous``."""

    KIND: ClassVar[str] = "guard.lease.taken"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    previous: str | None = None
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardSync(Kinded):
    """``guard.sync``: one results sync's end; a cut one says only ``ended`` (the copy
    children's pids it killed)."""

    KIND: ClassVar[str] = "guard.sync"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset(
        {"files", "bytes", "held", "seconds", "ended", "rental_id"}
    )
    name: str
    instance_id: str | None = None
    guardian: str
    ok: bool
    final: bool
    detail: str
    files: Whole | None = None
    bytes: Whole | None = None
    held: Whole | None = None
    deferred: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    none_made: bool = False
    seconds: Number | None = None
    ended: tuple[Whole, ...] = ()
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardCopy(Kinded):
    """``guard.copy``: the results copy's end; ``results`` is the rental's results state
    (rentals.DELIVERED, MISSING, ...) when it was recorded."""

    KIND: ClassVar[str] = "guard.copy"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"seconds", "results", "ended", "rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    ok: bool
    detail: str
    seconds: Number | None = None
    results: str | None = None
    ended: tuple[Whole, ...] = ()
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardCopyStarted(Kinded):
    """``guard.copy.started``: a copy child ``pid`` writes ``tarball``."""

    KIND: ClassVar[str] = "guard.copy.started"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    pid: Whole
    tarball: str
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardDestroyPending(Kinded):
    """``guard.destroy.pending``: a destroy round left boxes not yet confirmed gone."""

    KIND: ClassVar[str] = "guard.destroy.pending"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    detail: str
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardGivenUp(Kinded):
    """``guard.given_up``: released but never confirmed gone; the guardian leaves, loudly."""

    KIND: ClassVar[str] = "guard.given_up"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    detail: str
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardRaceEnded(Kinded):
    """``guard.race_ended``: the racer died mid-race; ``ended`` says each box's ending."""

    KIND: ClassVar[str] = "guard.race_ended"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"rental_id"})
    name: str
    instance_id: str | None = None
    guardian: str
    racer: str
    ended: tuple[str, ...]
    rental_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class GuardDrill(Kinded):
    """``guard.drill``: the fire drill's result (M5), as the store's drill record holds it."""

    KIND: ClassVar[str] = "guard.drill"
    date: str
    target: str
    name: str
    instance_id: str | None = None
    deadline_at: Number
    confirmed_at: Number | None = None
    delay_s: Number | None = None
    passed: bool
    guardian_pid: Whole
    guardian_log: str
    cleanup: tuple[str, ...] = ()


# --- `guard --all` (gpuops/market/guard_all.py) ------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GuardAllStart(Kinded):
    KIND: ClassVar[str] = "guard.all.start"
    pid: Whole


@dataclass(frozen=True, kw_only=True)
class GuardAllError(Kinded):
    KIND: ClassVar[str] = "guard.all.error"
    error: str


@dataclass(frozen=True, kw_only=True)
class GuardAllLeft(Kinded):
    """``guard.all.left``: one rental's guardian thread ended with ``code``; ``then`` is
    guard_all.Next's value (what the process does about that rental next)."""

    KIND: ClassVar[str] = "guard.all.left"
    name: str
    rental_id: str | None = None
    code: Whole
    then: str


@dataclass(frozen=True, kw_only=True)
class GuardAllUnreadable(Kinded):
    KIND: ClassVar[str] = "guard.all.unreadable"
    record: str  # the unreadable record's store key (a field named `key` reads as a secret)
    error: str


@dataclass(frozen=True, kw_only=True)
class GuardAllExit(Kinded):
    """``guard.all.exit``: stopped by a signal; ``held`` names the rentals it answered for."""

    KIND: ClassVar[str] = "guard.all.exit"
    code: Whole
    reason: str
    held: tuple[str, ...] = ()


# --- the market ---------------------------------------------------------------------------------
class Step(enum.Enum):
    """What a race did with one candidate, as its ``market.candidate`` event says."""

    CREATE_FAILED = "create-failed"  # a create call made no box (``outcome``: taken, ...)
    UNCLEAR = "unclear"  # a create's answer was unclear: looked for by its label (M12)
    CREATED = "created"
    BOOT_FAILED = "boot-failed"  # ``outcome``: why (the race's cause)
    PROBING = "probing"
    PROBED = "probed"  # ``verdict``: the probe's
    KEPT = "kept"
    DESTROYED = "destroyed"


@dataclass(frozen=True, kw_only=True)
class Candidate(Kinded):
    """``market.candidate``: one step of one candidate of a race; ``what`` is the line said
    for a person, ``step``/``outcome``/``verdict`` what a reader decides from."""

    KIND: ClassVar[str] = "market.candidate"
    name: str
    slot: Whole
    offer_id: Whole
    what: str = ""
    step: Step
    outcome: str | None = None  # a create's outcome (race.Created.logged), or a boot's cause
    verdict: Verdict | None = None  # a probe's, when step is PROBED


@dataclass(frozen=True, kw_only=True)
class Sweep(Kinded):
    """``market.sweep``: one `gpuops sweep`, counted."""

    KIND: ClassVar[str] = "market.sweep"
    retried: Whole
    expired: Whole
    unresolved: Whole
    unowned: Whole


@dataclass(frozen=True, kw_only=True)
class LedgerNeverFound(Kinded):
    """``ledger.never_found``: a box record whose create never made a box, ended."""

    KIND: ClassVar[str] = "ledger.never_found"
    name: str
    intent_id: str
    written_at: str


@dataclass(frozen=True, kw_only=True)
class JobStarted(Kinded):
    KIND: ClassVar[str] = "market.job.started"
    name: str
    instance_id: str
    results: str


@dataclass(frozen=True, kw_only=True)
class JobStatus(Kinded):
    """``market.job.status``: a job's state (watchdog.State's value) as `gpuops status` saw it."""

    KIND: ClassVar[str] = "market.job.status"
    name: str
    state: str
    detail: str
    exit_code: Whole | None = None


@dataclass(frozen=True, kw_only=True)
class OperatorIdentity(Kinded):
    """``operator.identity``: who a command acts as, and whether Vast attested it (M3)."""

    KIND: ClassVar[str] = "operator.identity"
    operator: str
    attested: bool
    user_id: Whole | None = None


# --- the lane (gpuops/lane/runner.py) ----------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LaneBoard(Kinded):
    """``lane.board``: one write of the lane's state line (the board's fields as written)."""

    KIND: ClassVar[str] = "lane.board"
    LEFT_OUT: ClassVar[frozenset[str]] = frozenset({"repaired"})
    lane: str
    state: str
    owner: str | None = None
    job: str | None = None
    attempt: Whole
    revision: Whole
    repaired: bool = False


@dataclass(frozen=True, kw_only=True)
class LaneClaim(Kinded):
    KIND: ClassVar[str] = "lane.claim"
    lane: str
    job: str
    revision: Whole


@dataclass(frozen=True, kw_only=True)
class LaneInstall(Kinded):
    """``lane.install``: a job's startup script installed (``chars`` long)."""

    KIND: ClassVar[str] = "lane.install"
    lane: str
    job: str
    chars: Whole
    max_run_s: Number


@dataclass(frozen=True, kw_only=True)
class LaneBillingAlarm(Kinded):
    KIND: ClassVar[str] = "lane.billing_alarm"
    lane: str
    job: str | None = None


# --- alarms (gpuops/alarms.py) -----------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class AlarmRaised(Kinded):
    KIND: ClassVar[str] = "alarm.raised"
    cause: str
    kind: str
    subject: str


@dataclass(frozen=True, kw_only=True)
class AlarmUnrecorded(Kinded):
    KIND: ClassVar[str] = "alarm.unrecorded"
    cause: str
    error: str


@dataclass(frozen=True, kw_only=True)
class AlarmDuplicate(Kinded):
    KIND: ClassVar[str] = "alarm.duplicate"
    cause: str


@dataclass(frozen=True, kw_only=True)
class AlarmDelivered(Kinded):
    KIND: ClassVar[str] = "alarm.delivered"
    cause: str
    endpoint: str


@dataclass(frozen=True, kw_only=True)
class AlarmUndelivered(Kinded):
    KIND: ClassVar[str] = "alarm.undelivered"
    cause: str
    endpoint: str
    error: str


# --- the adapters (gpuops/providers/vast.py, gce.py) -------------------------------------------
@dataclass(frozen=True, kw_only=True)
class VastCall(Kinded):
    """``vast.call``: one HTTP call to Vast (``status`` None: no answer; ``error``: the
    translated error's type name)."""

    KIND: ClassVar[str] = "vast.call"
    op: str
    method: str
    path: str
    status: Whole | None = None
    duration_s: Number
    attempt: Whole
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class VastRetry(Kinded):
    KIND: ClassVar[str] = "vast.retry"
    op: str
    attempt: Whole
    wait_s: Number
    reason: str


@dataclass(frozen=True, kw_only=True)
class GceError(Kinded):
    KIND: ClassVar[str] = "gce.error"
    call: str
    error: str


@dataclass(frozen=True, kw_only=True)
class GceGet(Kinded):
    KIND: ClassVar[str] = "gce.get"
    instance: str
    status: str


@dataclass(frozen=True, kw_only=True)
class GceSetMetadata(Kinded):
    KIND: ClassVar[str] = "gce.set_metadata"
    instance: str
    keys: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class GceSetLabels(Kinded):
    KIND: ClassVar[str] = "gce.set_labels"
    instance: str
    labels: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class GceSetScheduling(Kinded):
    KIND: ClassVar[str] = "gce.set_scheduling"
    instance: str
    max_run_s: Whole


@dataclass(frozen=True, kw_only=True)
class GceStart(Kinded):
    KIND: ClassVar[str] = "gce.start"
    instance: str
    operation: str


@dataclass(frozen=True, kw_only=True)
class GceOperation(Kinded):
    """``gce.operation``: an operation DONE (``error``: the translated error's type name)."""

    KIND: ClassVar[str] = "gce.operation"
    operation: str
    call: str
    error: str | None = None


TYPES = (
    GuardStart,
    GuardExit,
    GuardError,
    GuardRole,
    GuardLeaseTaken,
    GuardSync,
    GuardCopy,
    GuardCopyStarted,
    GuardDestroyPending,
    GuardGivenUp,
    GuardRaceEnded,
    GuardDrill,
    GuardAllStart,
    GuardAllError,
    GuardAllLeft,
    GuardAllUnreadable,
    GuardAllExit,
    Candidate,
    Sweep,
    LedgerNeverFound,
    JobStarted,
    JobStatus,
    OperatorIdentity,
    LaneBoard,
    LaneClaim,
    LaneInstall,
    LaneBillingAlarm,
    AlarmRaised,
    AlarmUnrecorded,
    AlarmDuplicate,
    AlarmDelivered,
    AlarmUndelivered,
    VastCall,
    VastRetry,
    GceError,
    GceGet,
    GceSetMetadata,
    GceSetLabels,
    GceSetScheduling,
    GceStart,
    GceOperation,
)

OpEvent = (
    GuardStart
    | GuardExit
    | GuardError
    | GuardRole
    | GuardLeaseTaken
    | GuardSync
    | GuardCopy
    | GuardCopyStarted
    | GuardDestroyPending
    | GuardGivenUp
    | GuardRaceEnded
    | GuardDrill
    | GuardAllStart
    | GuardAllError
    | GuardAllLeft
    | GuardAllUnreadable
    | GuardAllExit
    | Candidate
    | Sweep
    | LedgerNeverFound
    | JobStarted
    | JobStatus
    | OperatorIdentity
    | LaneBoard
    | LaneClaim
    | LaneInstall
    | LaneBillingAlarm
    | AlarmRaised
    | AlarmUnrecorded
    | AlarmDuplicate
    | AlarmDelivered
    | AlarmUndelivered
    | VastCall
    | VastRetry
    | GceError
    | GceGet
    | GceSetMetadata
    | GceSetLabels
    | GceSetScheduling
    | GceStart
    | GceOperation
)
