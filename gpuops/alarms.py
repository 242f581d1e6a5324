"""Alarms a person hears (O1): each sent once per cause, retried, never in the way of a destroy.

An ``Alarm`` is what happened (``kind``), the one cause it is heard once for (``cause``, a key
such as ``guardian.exit.job@4242.1``), and what a person reads (``subject``, ``body``).
``Alarms.raise_alarm`` writes it to the event log at once and leaves everything else to a
background thread, so its caller (a guardian about to destroy) never waits on a store write
or an endpoint, and nothing here is ever raised into it:

1. **Once per cause.** Two records in the shared store, both through ``Records`` (the one
   compare-and-swap loop): ``alarms/pending/<cause>`` is created if absent (the work, with the
   endpoints it must still reach and who is sending it), then ``alarms/causes/<cause>`` (the
   memory that it was raised). Whoever finds either already there sends nothing: a second
   raise in the same process, another process, another host sharing the store.
2. **Sent** to every GPUOPS_NOTIFY endpoint through apprise, each with a short timeout
   (timing.ALARM_SEND_TIMEOUT_S: apprise's connect and read timeouts, ``cto``/``rto``).
3. **Retried.** Endpoints not reached stay in the pending record, its claim let go; the next
   raise (of any cause, in any process) and `gpuops sweep` retry it, each first claiming it by
   compare-and-swap, so two retriers never both send. A claim whose sender died mid-send is
   taken over ALARM_CLAIM_STALE_S + CLOCK_SKEW_S after it (the claim's time is another
   host's clock, M17). A pending record is deleted once every endpoint was reached.

A process about to exit waits for its alarms still in flight, at most timing.ALARM_FLUSH_S
(an ``atexit`` hook): a guardian's last alarm goes out after its destroy, never before it.
When the store cannot be written the alarm is sent anyway, unrecorded (a person may hear it
twice, never not at all). Without GPUOPS_NOTIFY an alarm is an event-log line only.

Endpoints are named by ``endpoint_id`` (scheme and a hash): a URL holds tokens, so no URL is
ever written to the store, the event log or stderr (H3).

The lane's hook is ``open_alarms(settings, store, events).raise_alarm(...)`` with
``lane_stale_claim`` (L8) or ``lane_billing`` (L12): see their docstrings.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from gpuops import event_ops as ops
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import UsageError
from gpuops.event_base import Kinded, write
from gpuops.ledger import EventSink
from gpuops.store.base import Store, is_key
from gpuops.store.records import NO_CHANGE, JsonCodec, NoChange, Records
from gpuops.timestamps import utc_iso

if TYPE_CHECKING:
    from gpuops.settings import Settings

CAUSES = "alarms/causes/"
PENDING = "alarms/pending/"
# a guardian's destroy still pending after this many rounds is an alarm (each round a destroy
# call and its whole confirmation wait, timing.DESTROY_CONFIRM_TIMEOUT_S): a count, not a time
DESTROY_PENDING_ROUNDS = 3


class AlarmKind(StrEnum):
    GUARDIAN_EXIT = "guardian.exit"  # a guardian exiting non-zero (M7, M17)
    DESTROY_PENDING = "guardian.destroy_pending"  # a destroy not confirmed after rounds (M4)
    COPY_FAILED = "guardian.copy_failed"  # a results copy that failed (M5, M17)
    SYNC_FAILED = "guardian.sync_failed"  # a results sync while the job ran that failed (M5)
    JOB_STALLED = "job.stalled"  # a judgment: alert only (M10)
    JOB_DEAD = "job.dead"  # a fact (M10)
    SWEEP_UNOWNED = "sweep.unowned"  # instances no ledger owns (M3)
    SWEEP_UNRESOLVED = "sweep.unresolved"  # creates never resolved (M12, M13)
    SWEEP_UNREADABLE = "sweep.unreadable"  # records nobody can read (M17)
    LANE_STALE_CLAIM = "lane.stale_claim"  # L8
    LANE_BILLING = "lane.billing"  # a job ended, its VM still runs (L12)
    BUDGET = "budget.threshold"  # spent + committed reached a fraction of a limit (M15)


def check_cause(cause: str) -> str:
    """A cause is one store key segment (letters, digits and _.@+=-, at most 128)."""
    if "/" in cause or not is_key(cause):
        raise UsageError(f"alarm cause {cause!r} must be one key segment (letters, digits, _.@+=-)")
    return cause


def cause_of(kind: AlarmKind, *parts: object) -> str:
    """``kind.part.part``; a digest of it when that is no key segment (too long, odd text)."""
    cause = ".".join([kind.value, *(str(p) for p in parts)])
    if "/" in cause or not is_key(cause):
        return f"{kind.value}.{hashlib.sha256(cause.encode()).hexdigest()[:32]}"
    return cause


@dataclass(frozen=True)
class Alarm:
    kind: AlarmKind
    cause: str  # heard once per cause, whoever raises it how often
    subject: str
    body: str

    def __post_init__(self) -> None:
        check_cause(self.cause)


# --- the alarms gpuops raises ----------------------------------------------------------------
class Guarded(Protocol):
    """What an alarm about a guardian's rental names (a Guardian is one)."""

    name: str
    instance_id: str | None
    deadline_at: float


def incarnation(guarded: Guarded) -> str:
    """One rental's incarnation: its name and kept box, or its deadline before it has one."""
    box = guarded.instance_id or f"d{int(guarded.deadline_at)}"
    return f"{guarded.name}@{box}"


def guardian_exit(guarded: Guarded, code: int, reason: str) -> Alarm:
    return Alarm(
        AlarmKind.GUARDIAN_EXIT,
        cause_of(AlarmKind.GUARDIAN_EXIT, incarnation(guarded), code),
        f"gpuops: the guardian of {guarded.name} exited {code}",
        f"{reason or 'no reason given'}. Instance {guarded.instance_id or 'none kept'}, "
        f"deadline {utc_iso(guarded.deadline_at)}. Until another guardian runs, `gpuops sweep` "
        f"is its only ceiling: run `gpuops boxes`, then `gpuops guard {guarded.name}` or "
        f"`gpuops destroy {guarded.name}`.",
    )


def destroy_pending(guarded: Guarded, detail: str) -> Alarm:
    return Alarm(
        AlarmKind.DESTROY_PENDING,
        cause_of(AlarmKind.DESTROY_PENDING, incarnation(guarded)),
        f"gpuops: {guarded.name}'s destroy is still not confirmed",
        f"After {DESTROY_PENDING_ROUNDS} rounds the provider has not confirmed every box of "
        f"{guarded.name} gone: {detail}. The guardian keeps trying; the box may still bill.",
    )


def copy_failed(guarded: Guarded, detail: str) -> Alarm:
    return Alarm(
        AlarmKind.COPY_FAILED,
        cause_of(AlarmKind.COPY_FAILED, incarnation(guarded)),
        f"gpuops: {guarded.name}'s results were not copied off",
        f"{detail}. The box is destroyed at its deadline all the same "
        f"({utc_iso(guarded.deadline_at)}); what the job made there is lost with it.",
    )


def sync_failed(guarded: Guarded, detail: str, failing_since: float) -> Alarm:
    """A results sync failed while the job runs: heard once per run of failures (its cause
    names when the run began), the next sync tried on schedule all the same."""
    return Alarm(
        AlarmKind.SYNC_FAILED,
        cause_of(AlarmKind.SYNC_FAILED, incarnation(guarded), int(failing_since)),
        f"gpuops: {guarded.name}'s results could not be synced",
        f"{detail}. What earlier syncs delivered is kept; the guardian tries again at the next "
        f"sync, and the box is destroyed at its deadline ({utc_iso(guarded.deadline_at)}) "
        "whether or not a sync works.",
    )


def job_judged(
    name: str, instance_id: str, job_started_at: float, state: str, detail: str
) -> Alarm | None:
    """`gpuops watch`'s judgment as an alarm: stalled (alert only, M10) or dead; else None."""
    kind = {"stalled": AlarmKind.JOB_STALLED, "dead": AlarmKind.JOB_DEAD}.get(state)
    if kind is None:
        return None
    what = "looks stalled (it is left running)" if kind is AlarmKind.JOB_STALLED else "ended"
    return Alarm(
        kind,
        cause_of(kind, f"{name}@{instance_id}", int(job_started_at)),
        f"gpuops: the job on {name} {what}",
        f"{detail}. Instance {instance_id}; the box bills until its deadline or `gpuops "
        f"destroy {name}`.",
    )


_FOUND = {
    AlarmKind.SWEEP_UNOWNED: "instance(s) on the account no ledger owns; gpuops never "
    "touches them: find whose they are",
    AlarmKind.SWEEP_UNRESOLVED: "create(s) still unresolved past the deadline: a box may "
    "exist that nobody has seen; sweep keeps looking",
    AlarmKind.SWEEP_UNREADABLE: "record(s) nobody can read: each blocks only itself; restore "
    "it from a backup or move it aside",
}


def sweep_found(kind: AlarmKind, items: Sequence[str]) -> Alarm | None:
    """What `gpuops sweep` found, one alarm per distinct set (a set seen again is not heard
    again; a changed one is); None when there is nothing."""
    if not items:
        return None
    listed = sorted(items)
    digest = hashlib.sha256("\n".join(listed).encode()).hexdigest()[:24]
    return Alarm(
        kind,
        cause_of(kind, digest),
        f"gpuops sweep: {len(listed)} {_FOUND[kind].partition(';')[0]}",
        f"{len(listed)} {_FOUND[kind]}:\n" + "\n".join(f"- {item}" for item in listed[:50]),
    )


def lane_stale_claim(lane: str, owner: str, job: str, claimed_at: float, detail: str) -> Alarm:
    """L8, for the lane: a claim busy for hours without a start. ``claimed_at`` names the claim
    (heard once per claim); ``detail``: instance state, retry state, last log line."""
    return Alarm(
        AlarmKind.LANE_STALE_CLAIM,
        cause_of(AlarmKind.LANE_STALE_CLAIM, lane, job, int(claimed_at)),
        f"gpuops lane: {owner}'s claim on {lane} for {job} is STALE",
        f"Claimed {utc_iso(claimed_at)} and never started (L8): {detail}.",
    )


def lane_billing(lane: str, job: str, ended_at: float | None, message: str) -> Alarm:
    """L12, for the lane: a job ended and its VM still runs (``message``: the runner's billing
    alarm text). Heard once per job end."""
    return Alarm(
        AlarmKind.LANE_BILLING,
        cause_of(AlarmKind.LANE_BILLING, lane, job, int(ended_at or 0)),
        f"gpuops lane: {lane} still bills after {job} ended",
        message,
    )


def budget_threshold(
    who: str, period: str, period_start: float, threshold: float, cap_usd: float, detail: str
) -> Alarm:
    """M15: ``who``'s (the team's or an operator's) spent + committed reached ``threshold`` of
    its limit per ``period``; heard once per threshold per period (``period_start`` names it)."""
    percent = round(threshold * 100)
    return Alarm(
        AlarmKind.BUDGET,
        cause_of(AlarmKind.BUDGET, who, period, int(period_start), percent),
        f"gpuops budget: {who} at {percent}% of ${cap_usd:.2f} per {period}",
        f"{detail}. `gpuops budget` shows every limit with what is spent and committed; "
        "`rent` refuses a rental that would cross one (M15).",
    )


# --- endpoints -------------------------------------------------------------------------------
class Endpoint(Protocol):
    id: str  # endpoint_id: never the URL

    def send(self, alarm: Alarm, /) -> str | None:
        """Send; None when delivered, else what went wrong (no URL in it). Never raises."""
        ...


def endpoint_id(url: str) -> str:
    """A URL's name in records and logs: its scheme and a hash, never its text (tokens)."""
    scheme = url.partition("://")[0].lower()
    return f"{scheme}-{hashlib.sha256(url.encode()).hexdigest()[:12]}"


def with_timeouts(url: str, timeout_s: float) -> str:
    """``url`` with apprise's connect and read timeouts (cto, rto), unless it sets its own."""
    query = url.partition("?")[2]
    given = {part.partition("=")[0] for part in query.split("&")}
    extra = [f"{name}={timeout_s:g}" for name in ("cto", "rto") if name not in given]
    if not extra:
        return url
    return url + ("&" if "?" in url else "?") + "&".join(extra)


class AppriseEndpoint:
    """One GPUOPS_NOTIFY URL, sent through apprise (imported at the first send: it costs a
    tenth of a second, which no command that raises nothing may pay)."""

    def __init__(self, url: str, timeout_s: float = timing.ALARM_SEND_TIMEOUT_S) -> None:
        # apprise reaches for concurrent.futures' thread module at a send; imported for the
        # first time while the interpreter exits (a guardian's last alarm) it raises, since
        # that module registers an exit hook of its own: import it now, while that is allowed
        import concurrent.futures.thread  # noqa: F401

        self._url = url
        self._timeout_s = timeout_s
        self.id = endpoint_id(url)

    def __repr__(self) -> str:
        return f"AppriseEndpoint({self.id})"

    def send(self, alarm: Alarm, /) -> str | None:
        try:
            import logging

            # apprise logs through `logging`; unconfigured, Python would print its warnings
            # (which may name the URL) on stderr. Quiet before the import: apprise logs while
            # it loads too (its locale, read from LC_ALL/LANG on the first import)
            logging.getLogger("apprise").addHandler(logging.NullHandler())
            logging.getLogger("apprise").propagate = False

            import apprise

            # in this thread, bounded by the URL's own cto/rto: apprise's worker pools refuse
            # work once the interpreter is exiting, which is when a guardian's last alarm goes
            asset = apprise.AppriseAsset(
                async_mode=False,
                service_timeout=timing.ALARM_APPRISE_SERVICE_LIMIT_S,
                storage_mode="memory",
            )
            notifier = apprise.Apprise(asset=asset)
            if not notifier.add(with_timeouts(self._url, self._timeout_s)):
                return "apprise does not know this URL (its scheme, or its form)"
            result = notifier.notify(
                body=alarm.body, title=alarm.subject, notify_type=apprise.NotifyType.FAILURE
            )
        except Exception as exc:  # an alarm never raises into its caller (O1)
            return f"apprise failed: {type(exc).__name__}"
        return None if result else f"not delivered ({result.status.name})"


# --- the records -----------------------------------------------------------------------------
@dataclass(frozen=True)
class RaisedCause:
    """``alarms/causes/<cause>``: this cause was raised; it is never sent again."""

    kind: str
    subject: str
    raised_at: str
    raised_by: str


@dataclass(frozen=True)
class PendingAlarm:
    """``alarms/pending/<cause>``: an alarm some endpoint has not had yet, and who sends it."""

    kind: str
    subject: str
    body: str
    raised_at: str
    pending: str  # endpoint ids not yet reached, space-separated
    attempts: int
    sending_by: str | None = None  # the process sending it now (a claim)
    sending_at: float | None = None  # when, by that process's host's clock
    last_error: str | None = None


CAUSE_CODEC = JsonCodec(RaisedCause, "raised alarm record")
PENDING_CODEC = JsonCodec(PendingAlarm, "pending alarm record")


# --- raising ---------------------------------------------------------------------------------
class Alarms:
    """Raise alarms: logged at once, deduplicated, sent and retried in the background (above)."""

    def __init__(
        self,
        store: Store | None,
        events: EventSink,
        endpoints: Sequence[Endpoint] = (),
        *,
        who: str,
        clock: Clock = SYSTEM,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        """``who``: this process (operator/host/pid/nonce), named in its claims; ``say``: where
        a fault of the alarms themselves is told (a guardian's stderr)."""
        self.events = events
        self.endpoints = {endpoint.id: endpoint for endpoint in endpoints}
        self.who = who
        self.clock = clock
        self.say = say
        self.causes = (
            None if store is None else Records(store, CAUSES, CAUSE_CODEC, check_name=check_cause)
        )
        self.pending = (
            None
            if store is None
            else Records(store, PENDING, PENDING_CODEC, check_name=check_cause)
        )
        self._lock = threading.RLock()  # an RLock: a signal handler may raise while we hold it
        self._threads: list[threading.Thread] = []
        self._rounds: dict[str, int] = {}
        self._at_exit = False

    # --- what callers use (none of it raises) ------------------------------------------------
    def raise_alarm(self, alarm: Alarm) -> None:
        """Log ``alarm`` now; dedupe, send and retry it in the background. Never raises."""
        try:
            self._log(
                ops.AlarmRaised(cause=alarm.cause, kind=alarm.kind.value, subject=alarm.subject)
            )
            if self.endpoints:
                self._start(self._deliver, alarm)
        except Exception as exc:  # an alarm is never in the way of its caller (O1)
            self._fault(f"could not raise alarm {alarm.cause}", exc)

    def raise_after(self, rounds: int, alarm: Alarm) -> None:
        """Raise ``alarm`` once this process has been asked to ``rounds`` times (a destroy
        still pending after repeated rounds)."""
        with self._lock:
            seen = self._rounds[alarm.cause] = self._rounds.get(alarm.cause, 0) + 1
        if seen == rounds:
            self.raise_alarm(alarm)

    def retry(self) -> None:
        """Retry every pending alarm in the background (what `gpuops sweep` does)."""
        if self.endpoints and self.pending is not None:
            self._start(self._retry_pending)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait for the alarms in flight, at most ``timeout_s`` in all (real time); True when
        none is left. A process's exit does this (timing.ALARM_FLUSH_S)."""
        ends = None if timeout_s is None else SYSTEM.monotonic() + timeout_s  # a join: real time
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(None if ends is None else max(0.0, ends - SYSTEM.monotonic()))
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            return not self._threads

    # --- the background ------------------------------------------------------------------------
    def _start(self, work: Callable[..., None], *args: object) -> None:
        def run() -> None:
            try:
                work(*args)
            except Exception as exc:  # the store, a codec, anything: told, never raised
                self._fault("alarm delivery failed", exc)

        thread = threading.Thread(target=run, name="gpuops-alarm", daemon=True)
        with self._lock:  # started inside: a thread not yet started is not alive, and flush
            self._threads = [t for t in self._threads if t.is_alive()]  # must never drop it
            thread.start()
            self._threads.append(thread)
            if not self._at_exit:
                atexit.register(self.flush, timing.ALARM_FLUSH_S)
                self._at_exit = True

    def _deliver(self, alarm: Alarm) -> None:
        assert self.causes is not None and self.pending is not None
        try:
            mine = self._claim_new(alarm)
        except Exception as exc:  # the store refused: heard twice rather than never (O1)
            self._log(ops.AlarmUnrecorded(cause=alarm.cause, error=f"{type(exc).__name__}: {exc}"))
            self._send(alarm, list(self.endpoints))
            return
        if mine is None:
            self._log(ops.AlarmDuplicate(cause=alarm.cause))
        else:
            self._send_claimed(alarm.cause, mine)
        self._retry_pending(skip=alarm.cause)

    def _claim_new(self, alarm: Alarm) -> PendingAlarm | None:
        """The pending record, created and claimed by us; None when the cause is known."""
        assert self.causes is not None and self.pending is not None
        if self.causes.get(alarm.cause) is not None:
            return None
        now = self.clock.wall()
        work = PendingAlarm(
            alarm.kind.value,
            alarm.subject,
            alarm.body,
            raised_at=utc_iso(now),
            pending=" ".join(self.endpoints),
            attempts=1,
            sending_by=self.who,
            sending_at=now,
        )
        if not self.pending.update(
            alarm.cause, lambda cur: work if cur is None else NO_CHANGE
        ).written:
            return None
        if not self._remember(alarm.cause, work):
            # raised, sent and finished by another between our look and our claim
            self.pending.remove(alarm.cause, lambda cur: cur.sending_by == self.who)
            return None
        return work

    def _remember(self, cause: str, work: PendingAlarm) -> bool:
        assert self.causes is not None
        raised = RaisedCause(work.kind, work.subject, work.raised_at, self.who)
        return self.causes.update(cause, lambda cur: raised if cur is None else NO_CHANGE).written

    def _retry_pending(self, skip: str | None = None) -> None:
        assert self.pending is not None
        for cause, _, _ in self.pending.entries():
            if cause == skip:
                continue
            claim = self.pending.update(cause, self._claim_old)
            if claim.written and claim.after is not None:
                self._remember(cause, claim.after)  # a sender that died before it did
                self._send_claimed(cause, claim.after)

    def _claim_old(self, current: PendingAlarm | None) -> PendingAlarm | NoChange:
        if current is None or not set(current.pending.split()) & set(self.endpoints):
            return NO_CHANGE  # gone meanwhile, or only other hosts' endpoints are left
        now = self.clock.wall()
        if current.sending_by is not None and current.sending_at is not None:
            stale_at = current.sending_at + timing.ALARM_CLAIM_STALE_S + timing.CLOCK_SKEW_S
            if now < stale_at:
                return NO_CHANGE  # someone is sending it now
        return replace(current, attempts=current.attempts + 1, sending_by=self.who, sending_at=now)

    def _send_claimed(self, cause: str, work: PendingAlarm) -> None:
        assert self.pending is not None
        alarm = Alarm(AlarmKind(work.kind), cause, work.subject, work.body)
        ours = [i for i in work.pending.split() if i in self.endpoints]
        errors = self._send(alarm, ours)
        left = [i for i in work.pending.split() if i not in self.endpoints or i in errors]
        if not left:
            self.pending.remove(cause, lambda cur: cur.sending_by == self.who)
            return
        error = "; ".join(f"{i}: {e}" for i, e in errors.items()) or None

        def release(current: PendingAlarm | None) -> PendingAlarm | NoChange:
            if current is None or current.sending_by != self.who:
                return NO_CHANGE  # taken over meanwhile: the new sender records it
            return replace(
                current, pending=" ".join(left), sending_by=None, sending_at=None, last_error=error
            )

        self.pending.update(cause, release)

    def _send(self, alarm: Alarm, ids: Sequence[str]) -> dict[str, str]:
        """Send to each endpoint named; what went wrong, by endpoint id."""
        errors: dict[str, str] = {}
        for i in ids:
            error = self.endpoints[i].send(alarm)
            if error is None:
                self._log(ops.AlarmDelivered(cause=alarm.cause, endpoint=i))
            else:
                errors[i] = error
                self._log(ops.AlarmUndelivered(cause=alarm.cause, endpoint=i, error=error))
        return errors

    def _log(self, event: Kinded) -> None:
        try:
            write(self.events, event)
        except Exception as exc:  # a log we cannot write is told, never raised (M17)
            self._fault(f"could not log {event.KIND}", exc)

    def _fault(self, what: str, exc: Exception) -> None:
        with contextlib.suppress(Exception):  # stderr itself gone: nothing is left to tell
            self.say(f"gpuops: {what}: {type(exc).__name__}: {exc}")


def open_alarms(
    settings: Settings,
    store: Store | None,
    events: EventSink,
    *,
    operator: str = "gpuops",
    clock: Clock = SYSTEM,
    say: Callable[[str], None] = lambda line: None,
) -> Alarms:
    """The alarms of one command: GPUOPS_NOTIFY's endpoints, deduplicated in ``store``."""
    import secrets
    import socket

    who = f"{operator}/{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"
    endpoints = [AppriseEndpoint(url) for url in settings.notify_urls]
    return Alarms(store, events, endpoints, who=who, clock=clock, say=say)


def silent(events: EventSink) -> Alarms:
    """Alarms that only log: a guardian built without GPUOPS_NOTIFY's (tests, the demo)."""
    return Alarms(None, events, who="silent")
