"""The guardian process: a billing ceiling that outlives the laptop (M5, M7).

``Guardian.run`` applies ``market/guardian.py``'s decisions: it holds the box's lease in the
state store (``market/leases/<NAME>``) with a heartbeat, waits as a standby while another
guardian's lease is fresh, copies results off near the deadline, destroys the box, confirms it
gone by asking for that instance, releases the records, and exits 0 only then. Every step goes
to the event log; every exit other than a confirmed-gone box is non-zero and said on stderr.

Split by concern: the decisions are ``market/guardian.py``'s (pure), the lease records
``market/leases.py``'s, where results go and copying them off ``market/results.py``'s,
starting a detached guardian ``market/spawn.py``'s and the systemd unit ``market/systemd.py``'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import NoReturn

from gpuops import alarms as a
from gpuops import event_ops as ops
from gpuops import event_types as ev
from gpuops import timing
from gpuops.clock import Clock, WithSleep, scale_of
from gpuops.errors import (
    ExitCode,
    GpuopsError,
    NotOwned,
    StateError,
    StoreUnavailable,
    Unavailable,
    UnexpectedResponse,
    UsageError,
    VersionConflict,
)
from gpuops.event_base import Kinded, write
from gpuops.ledger import BoxState, EventSink
from gpuops.market import guardian as g
from gpuops.market import sync_plan as sp
from gpuops.market.ending import (
    Incarnation,
    destroy_rental,
    end_instance,
    end_records,
    owned_records,
)
from gpuops.market.jobs import STOPPED_WHY, BoxShell, Copies, Jobs
from gpuops.market.leases import Leases
from gpuops.market.rent import Market
from gpuops.market.rentals import (
    DELIVERED,
    FAILED,
    MISSING,
    NO_RESULTS,
    RACING,
    RELEASED,
    check_name,
    lease_key,
    process_id,
    results_key,
)
from gpuops.market.results import Copied, Results, copy_results
from gpuops.market.sync import SyncReport, sync_results
from gpuops.market.teardown import Ending, label_for
from gpuops.model import InstanceStatus
from gpuops.timestamps import utc_iso

# exit code: every box confirmed gone, but the guardian's own work failed on the way (M17):
# results not delivered, the store not writable, a record unreadable; loud, never 0
FAULTED = ExitCode.ERROR  # gone, but a fault of our own work is named (M17)


def guardian_id(operator: str) -> str:
    return process_id(operator)


# --- the guardian --------------------------------------------------------------------------
class Guardian:
    def __init__(
        self,
        market: Market,
        name: str,
        *,
        shell: BoxShell,
        results: Results,
        me: str | None = None,
        clock: Clock | None = None,
        clockwork: g.Clockwork = g.NORMAL,
        say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
        alarms: a.Alarms | None = None,
        leases: Leases | None = None,
    ) -> None:
        """``clock``: the guardian's time and its waits (None: its market's, the command's one
        clock); leases are judged stale on its monotonic time alone (never another host's).
        ``leases``: the lease records (default over the market's store; `guard --all` gives its
        guardians ones it can stop). The guardian runs ``market`` anew on this clock, waiting
        with ``Guardian.sleep``: every wait inside a destroy keeps the heartbeat going."""
        self.name = check_name(name)
        self.operator = market.ledger.operator
        self.me = me or guardian_id(self.operator)
        self.shell = shell
        self.results = results
        self.clock = clock = market.clock if clock is None else clock
        self.clockwork = clockwork
        self.say = say
        self.leases = leases or Leases(market.ledger.store)
        self.jobs = Jobs(market.ledger.store)
        self.mind = g.Mind(self.me)
        self.instance_id: str | None = None
        self.deadline_at = 0.0
        self.results_key = self.name
        self.rental_id: str | None = None  # the incarnation this guardian answers for (M16)
        self.lease_key = self.name  # its lease: that incarnation's (rentals.lease_key)
        self.last_race = 0  # the last race of it seen: a later incarnation's come after
        self.copying = False  # a results copy is under way: a signal cuts it (M17)
        self.syncing = False  # a periodic results sync is under way: a signal cuts it too
        self.due_at = 0.0  # the deadline as this host enforces it; set by bind and _box
        # results synced this often while the job runs (None or 0: off)
        self.sync_every_s: float | None = None
        self.syncs = sp.SyncState()  # the last sync tried, the last that worked, failing since
        self.faults: list[str] = []  # what failed in our own work: the exit says it (M17)
        self.finished: int | None = None  # an exit decided outside the pure core (M17)
        self.events = _NeverInTheWay(market.events, say)
        self.alarms = alarms or a.silent(self.events)  # O1: heard, never in the way
        self.market = market.on(clock=WithSleep(clock, self.sleep), events=self.events)
        # its copy children, ended by the signal path (``release``), never left running (M17)
        self.copies = Copies(started=self._copy_started)

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        self.bind()
        while True:
            try:
                code = self.step()
            except (Unavailable, VersionConflict) as exc:
                # the store or the provider, or a write that kept losing its race: loud, retried
                self._log(ops.GuardError(**self.who, error=f"{type(exc).__name__}: {exc}"))
                self.say(f"gpuops guard: {self.name}: {exc}; retrying")
                if isinstance(exc, StoreUnavailable) and self._past_deadline():
                    # the store is down at the deadline: the box still ends (M17)
                    self._end_unrecorded(exc)
                if self.finished is not None:
                    return self._leave(self.finished)
                self.clock.sleep(self.clockwork.poll_s)
                continue
            except BaseException as exc:  # anything else ends it: loudly, never silently (M7)
                code = exc.exit_code if isinstance(exc, GpuopsError) else 1
                if not isinstance(exc, SystemExit):  # the signal handler logged its own
                    self._log(
                        ops.GuardExit(**self.who, code=code, reason=f"{type(exc).__name__}: {exc}")
                    )
                    self.alarms.raise_alarm(
                        a.guardian_exit(self, code, f"{type(exc).__name__}: {exc}")
                    )
                raise
            if code is not None:
                return code

    def bind(self) -> None:
        """Refuse anything but our own rental with a deadline (M3). A racing rental is bound
        too: the guardian answers for every box its race creates (M13)."""
        if self.deadline_at:
            return
        rental = self.market.rentals.get(self.name)
        if rental is None:
            raise UsageError(f"no rental named {self.name!r}; rent it first")
        if rental.owner != self.operator:
            raise NotOwned(self.name, rental.owner, self.operator)
        if rental.deadline_at is None:
            raise UsageError(
                f"{self.name!r} has no deadline; give one: gpuops guard {self.name} --hours H"
            )
        self.instance_id = rental.instance_id
        self.deadline_at = rental.deadline_at
        self.results_key = results_key(rental)  # this incarnation's, to the end (M16)
        self.rental_id = rental.rental_id
        self.lease_key = lease_key(rental)
        self.last_race = rental.race
        self.sync_every_s = rental.sync_every_s or 0.0
        self.syncs = sp.SyncState(last_ok_at=rental.synced_at)
        mine = rental.deadline_host == self.market.host  # else another host's clock (M17)
        self.due_at = rental.deadline_at + (0.0 if mine else timing.CLOCK_SKEW_S)
        self._log(
            ops.GuardStart(
                **self.who,
                deadline=utc_iso(rental.deadline_at),
                pid=os.getpid(),
                time_scale=scale_of(self.clock),
            )
        )
        self.say(
            f"gpuops guard: guardian {self.me} (pid {os.getpid()}) guards {self.name} "
            f"({rental.state}, instance {self.instance_id}) until {utc_iso(rental.deadline_at)}"
        )

    def step(self) -> int | None:
        """One round: read, decide, act. Returns an exit code when the guardian is done."""
        self.bind()
        lease, _ = self.leases.read(self.lease_key)
        box = self._box()
        now = self.clock.wall()
        before = self.mind.role
        self.mind, action = g.decide(
            self.mind, lease, box, now, self.clockwork, self.clock.monotonic()
        )
        if self.mind.role is not before:
            self._log(
                ops.GuardRole(
                    **self.who, role=self.mind.role.value, holder=lease.holder if lease else None
                )
            )
            self.say(f"gpuops guard: {self.name}: {self.mind.role.value}")
        if isinstance(action, g.Leave):
            if action.code == g.GONE:
                self.leases.drop(self.lease_key, self.me)
                if self.faults:  # gone, but something of ours failed: loud (M17)
                    return self._leave(FAULTED, action.reason)
            if action.code == g.UNKNOWN:  # an unclear create outlived the grace: a person's
                return self._leave(action.code, action.reason)  # to hear (O1)
            self._log(ops.GuardExit(**self.who, code=action.code, reason=action.reason))
            self.say(f"gpuops guard: {self.name}: {action.reason} (exit {action.code})")
            return action.code
        if isinstance(action, g.Take):
            if self.leases.take(self.lease_key, self.me, now, lease):
                self.mind = replace(self.mind, held=True)
                self._log(ops.GuardLeaseTaken(**self.who, previous=lease.holder if lease else None))
        elif isinstance(action, g.Renew):
            self.leases.renew(self.lease_key, self.me, now)
        elif isinstance(action, g.Wait):
            self.clock.sleep(action.seconds)
        elif isinstance(action, g.EndRace):
            self._end_race(action)
        elif isinstance(action, g.Sync):
            self._sync(action.budget_s)
        elif isinstance(action, g.Copy):
            self._copy(action.budget_s)
            self.mind = replace(self.mind, copied=True)
        else:
            self._destroy()
        return None if self.finished is None else self._leave(self.finished)

    @property
    def incarnation(self) -> Incarnation:
        """The incarnation this guardian answers for, to the end (M16)."""
        return Incarnation(self.rental_id, self.last_race)

    def _leave(self, code: int, reason: str = "") -> int:
        """Exit ``code``, naming every fault of our own work (M17)."""
        why = "; ".join([reason, *self.faults] if reason else self.faults)
        self._log(ops.GuardExit(**self.who, code=code, reason=why))
        self.say(f"gpuops guard: {self.name}: {why} (exit {code})")
        self.alarms.raise_alarm(a.guardian_exit(self, code, why))  # O1
        return code

    def _past_deadline(self) -> bool:
        """Past the deadline as this host may judge it: another host's deadline only a skew
        allowance later (M17), as ``_box`` gives it to the core."""
        return bool(self.due_at) and self.clock.wall() >= self.due_at

    def sleep(self, seconds: float) -> None:
        """Sleep, renewing our lease whenever its heartbeat falls due."""
        ends = self.clock.wall() + seconds
        while True:
            due = self._heartbeat()
            nap = min(ends - self.clock.wall(), due)
            if nap <= 0:
                return
            self.clock.sleep(nap)
            if self.clock.wall() >= ends:
                return

    def _heartbeat(self) -> float:
        """Renew our lease if its heartbeat is due; seconds until the next one is (a whole
        heartbeat when another guardian holds the lease: nothing of ours to renew)."""
        lease, _ = self.leases.read(self.lease_key)
        if lease is None or lease.holder != self.me:
            return self.clockwork.heartbeat_s
        due = lease.heartbeat_at + self.clockwork.heartbeat_s - self.clock.wall()
        if due > 0:
            return due
        self.leases.renew(self.lease_key, self.me, self.clock.wall())
        return self.clockwork.heartbeat_s

    # --- what the box is ---------------------------------------------------------------
    def _box(self) -> g.Box:
        """What is left of the rental: its active records, and whether it has ended."""
        rental = self.market.rentals.get(self.name)
        if rental is not None and rental.rental_id != self.rental_id:
            rental = None  # the name was raced again: ours has ended; end what is left of it
        if rental is not None:
            self.last_race = max(self.last_race, rental.race)
        if rental is not None and rental.owner == self.operator:
            self.instance_id = rental.instance_id or self.instance_id
            self.deadline_at = rental.deadline_at or self.deadline_at
        started_at = rental.started_at if rental and rental.started_at else self.deadline_at
        ended = rental is None or rental.state in (FAILED, RELEASED)
        left = owned_records(self.market, self.name, of=self.incarnation)
        unresolved = bool(left) and all(r.state is BoxState.INTENT for r in left)
        gone = ended and not left and (self.instance_id is None or self._shown_gone())
        # a deadline another host's clock wrote is enforced CLOCK_SKEW_S later here, the whole
        # schedule (copy, then destroy) moved with it: never earlier than the renter's (M17)
        mine = rental is not None and rental.deadline_host == self.market.host
        late = 0.0 if mine else timing.CLOCK_SKEW_S
        self.due_at = self.deadline_at + late  # what "past the deadline" means here (M17)
        racing = rental is not None and rental.state == RACING and rental.racer is not None
        return g.Box(
            gone,
            started_at + late,
            self.deadline_at + late,
            ended=ended,
            unresolved=unresolved,
            racer=(str(rental.racer), rental.beat) if racing and rental else None,
            sync_at=sp.next_sync_at(self.sync_every_s, started_at + late, self.syncs.last_try_at),
        )

    def _shown_gone(self) -> bool:
        """Gone only when the provider, asked for this very instance, says so (M4, M7)."""
        assert self.instance_id is not None
        try:
            return self.market.vast.show(self.instance_id) is None
        except UnexpectedResponse:
            return False

    # --- copy, destroy -----------------------------------------------------------------
    def _copy(self, budget_s: float) -> None:
        """Copy results off; any failure of the copy is recorded and shown, and never keeps
        the destroy from following (M17)."""
        faults = len(self.faults)
        self.copying = True
        try:
            self._copy_results(budget_s)
        except Exception as exc:  # the copy is ours: its fault ends in the destroy, never here
            detail = f"the results copy failed: {type(exc).__name__}: {exc}"
            self.faults.append(f"results not delivered ({detail})")
            self._log(ops.GuardCopy(**self.who, ok=False, detail=detail, results=MISSING))
            self._note_results(MISSING, detail)
            self.say(f"gpuops guard: {self.name}: {detail}; destroying at the deadline anyway")
        finally:
            self.copying = False
        if len(self.faults) > faults:  # O1: a person hears it, and the destroy follows at once
            self.alarms.raise_alarm(a.copy_failed(self, self.faults[-1]))

    # --- results synced while the job runs ---------------------------------------------------
    def _sync(self, budget_s: float) -> None:
        """A periodic sync: what changed in the results, delivered; a failure is an alarm (the
        first of a run of them, O1) and never keeps the copy or the destroy from following."""
        started = self.clock.wall()
        self.syncing = True
        try:
            report = self._sync_once(budget_s)
        except Exception as exc:  # ours: said and alarmed, never in the way of the destroy
            report = SyncReport(f"the sync failed: {type(exc).__name__}: {exc}", "")
        finally:
            self.syncing = False
        if report is not None and report.error and self.copies.ended is not None:
            return  # cut by a signal: ``cut_copy`` has said it
        if report is None:  # no job declared results: nothing to sync yet
            self.syncs = replace(self.syncs, last_try_at=started)
            return
        self._synced(report, started)

    def _sync_once(self, budget_s: float) -> SyncReport | None:
        """One sync of the job's results, or None when no job of this box declared any."""
        job = self.jobs.get(self.name)
        if job is None or job.instance_id != self.instance_id:
            return None
        instance = self.market.vast.show(job.instance_id)
        where = self.results.where(self.results_key)
        if instance is None:
            return SyncReport("the box is gone: nothing more can be synced from it", where)
        if instance.actual_status is InstanceStatus.STOPPED:
            return SyncReport(f"the box is stopped ({STOPPED_WHY})", where)
        return sync_results(
            self.shell,
            instance,
            self.name,
            job.results,
            budget_s,
            results=self.results,
            key=self.results_key,
            rental_id=self.rental_id,
            stamp=lambda: utc_iso(self.clock.wall()),
            poll_s=self.clockwork.poll_s,
            keep_alive=self._heartbeat,
            copies=self.copies,
        )

    def _synced(self, report: SyncReport, started: float, *, final: bool = False) -> None:
        """Say and record how a sync ended; a failed periodic one is an alarm (O1)."""
        now = self.clock.wall()
        self.syncs, alarm = sp.after_sync(self.syncs, now, not report.error)
        detail = report.error or (
            f"{report.delivered} file(s), {report.size} bytes to {report.destination}; "
            f"{report.held} held"
            + (
                f"; {len(report.deferred)} changed while read, for the next sync"
                if report.deferred
                else ""
            )
        )
        self._log(
            ops.GuardSync(
                **self.who,
                ok=not report.error,
                final=final,
                detail=detail,
                files=report.delivered,
                bytes=report.size,
                held=report.held,
                deferred=report.deferred,
                left_out=report.left_out,
                none_made=report.none_made,
                seconds=round(now - started, 3),
            )
        )
        try:
            self.market.rentals.note_sync(self.name, self.rental_id, now, report.error or None)
        except Exception as exc:  # the store is what failed: said, never in the way (M17)
            self.say(f"gpuops guard: {self.name}: could not record the sync: {exc}")
        if report.error:
            self.say(f"gpuops guard: {self.name}: results sync failed: {report.error}")
        if alarm and not final:  # a failed final copy is the copy's own alarm
            since = self.syncs.failing_since or now
            self.alarms.raise_alarm(a.sync_failed(self, report.error, since))

    def _final_sync(self, budget_s: float) -> None:
        """The copy before the destroy, for a rental that syncs: one more sync, recorded on
        the rental as the copy's outcome (delivered, none, or missing and why)."""
        started = self.clock.wall()
        report = self._sync_once(budget_s)
        if report is None:
            self._log(
                ops.GuardCopy(
                    **self.who, ok=False, detail="no job declared results: nothing to copy"
                )
            )
            return
        if report.error and self.copies.ended is not None:
            return  # cut by a signal: ``cut_copy`` has said and recorded it (M17)
        self._synced(report, started, final=True)
        if report.none_made and not report.held:
            outcome = (NO_RESULTS, report.detail)
        elif report.error:
            kept = self.syncs.last_ok_at
            earlier = (
                f"; what the sync of {utc_iso(kept)} delivered is kept ({report.destination})"
                if kept is not None
                else ""
            )
            outcome = (MISSING, report.error + earlier)
            self.faults.append(f"results not delivered ({outcome[1]})")
        else:
            outcome = (DELIVERED, report.destination)
            self.leases.renew(self.lease_key, self.me, self.clock.wall(), copied=True)
        self._log(
            ops.GuardCopy(
                **self.who,
                ok=outcome[0] == DELIVERED,
                detail=outcome[1]
                if outcome[0] != DELIVERED
                else (f"synced {report.held} file(s) to {report.destination}"),
                seconds=round(self.clock.wall() - started, 3),
                results=outcome[0],
            )
        )
        self._note_results(*outcome)
        self.say(
            f"gpuops guard: {self.name}: "
            + (report.error or f"results synced to {report.destination}")
        )

    def _copy_results(self, budget_s: float) -> None:
        if self.sync_every_s:  # the last sync is the copy (M5)
            self._final_sync(budget_s)
            return
        job = self.jobs.get(self.name)
        if job is None or job.instance_id != self.instance_id:
            self._log(
                ops.GuardCopy(
                    **self.who, ok=False, detail="no job declared results: nothing to copy"
                )
            )
            return
        started = self.clock.wall()
        instance = self.market.vast.show(job.instance_id)
        if instance is None:
            gone = "the box was already gone: its results were never copied"
            self._log(ops.GuardCopy(**self.who, ok=False, detail=gone, results=MISSING))
            self._note_results(MISSING, gone)
            return
        if instance.actual_status is InstanceStatus.STOPPED:
            stopped = f"the box is stopped ({STOPPED_WHY}): its results were never copied"
            self._log(ops.GuardCopy(**self.who, ok=False, detail=stopped, results=MISSING))
            self._note_results(MISSING, stopped)
            return
        copied = copy_results(
            self.shell,
            instance,
            self.name,
            job.results,
            budget_s,
            deliver=lambda tarball: self.results.deliver(self.results_key, tarball),
            poll_s=self.clockwork.poll_s,
            keep_alive=self._heartbeat,
            copies=self.copies,
        )
        error, destination, size = copied.error, copied.destination, copied.size
        if error and self.copies.ended is not None:
            return  # cut by a signal: ``cut_copy`` has said and recorded it (M17)
        outcome = results_outcome(copied)
        if not error:
            self.leases.renew(self.lease_key, self.me, self.clock.wall(), copied=True)
        elif not copied.none_made:  # the job made results and they were not delivered
            self.faults.append(f"results not delivered ({error})")
        self._log(
            ops.GuardCopy(
                **self.who,
                ok=not error,
                detail=error or f"copied {size} bytes to {destination}",
                seconds=round(self.clock.wall() - started, 3),
                results=outcome[0],
            )
        )
        self._note_results(*outcome)
        self.say(f"gpuops guard: {self.name}: " + (error or f"results copied to {destination}"))

    def _copy_started(self, pid: int, tarball: Path) -> None:
        """A copy child started (its pid is its process group): said in the event log."""
        self._log(ops.GuardCopyStarted(**self.who, pid=pid, tarball=str(tarball)))

    def _note_results(self, results: str, detail: str) -> None:
        """Record on the rental how its results copy ended, for `boxes` to show (M17); a store
        that cannot take it is said on stderr and never keeps the destroy from following."""
        try:
            self.market.rentals.note_results(self.name, self.rental_id, results, detail)
        except Exception as exc:
            self.say(
                f"gpuops guard: {self.name}: could not record the results as {results} "
                f"({detail}): {type(exc).__name__}: {exc}"
            )

    def _destroy(self) -> None:
        self._log(ev.GuardDestroy(**self.who, deadline=utc_iso(self.deadline_at)))
        try:
            outcomes = destroy_rental(self.market, self.name, of=self.incarnation)
        except StoreUnavailable as exc:  # a full disk, a store that refuses writes (M17)
            self._end_unrecorded(exc)
            return
        for outcome in outcomes:  # released, but never confirmed gone: loud (M7, M13)
            if outcome.ending is Ending.GIVEN_UP:
                self.faults.append(f"{outcome.name}: {outcome.detail}")
        unreadable = [o for o in outcomes if o.ending is Ending.UNREADABLE]
        if unreadable and all(o.released or o.ending is Ending.UNREADABLE for o in outcomes):
            for outcome in unreadable:  # its boxes confirmed gone; the record is a person's
                self.faults.append(f"{outcome.name}: {outcome.detail}")
            self.finished = FAULTED
            return
        if any(o.ending is Ending.GIVEN_UP for o in outcomes) and all(
            o.released for o in outcomes
        ):  # released, never confirmed gone: the next round leaves, loudly (faults)
            self._log(ops.GuardGivenUp(**self.who, detail="; ".join(self.faults)))
            return
        rental = self.market.rentals.get(self.name)
        if rental is not None and rental.state == RELEASED and all(o.released for o in outcomes):
            now = self.clock.wall()
            gone = ev.ConfirmedGone(
                name=self.name,
                instance_id=self.instance_id,
                guardian=self.me,
                deadline=utc_iso(self.deadline_at),
                delay_s=round(now - self.deadline_at, 3),
                rental_id=self.rental_id,
            )
            self.events.append(gone.KIND, **gone.to_payload())
            self.say(
                f"gpuops guard: {self.name}: every box confirmed gone "
                f"({len(outcomes)} ended), {now - self.deadline_at:+.1f} s from its deadline"
            )
            return
        details = "; ".join(f"{o.name}: {o.detail}" for o in outcomes if not o.released)
        self._log(ops.GuardDestroyPending(**self.who, detail=details))
        self.alarms.raise_after(a.DESTROY_PENDING_ROUNDS, a.destroy_pending(self, details))
        self.say(f"gpuops guard: {self.name}: not all confirmed gone yet: {details}")
        self.sleep(self.clockwork.confirm_poll_s)

    def _end_race(self, action: g.EndRace) -> None:
        """The racer died mid-race (its heartbeat stood still): fail its race, if it is still
        that racer's, and end the race's boxes now, each confirmed gone (M13)."""
        rental = self.market.rentals.get(self.name)
        if rental is None or not self.market.rentals.abandon_race(
            self.name, action.racer, action.beat
        ):
            return  # it beat again, or a rerun took the race over: theirs to finish
        outcomes = end_records(self.market, self.name, race=rental.race)
        self._log(
            ops.GuardRaceEnded(
                **self.who,
                racer=action.racer,
                ended=tuple(f"{o.name}: {o.ending.value}" for o in outcomes),
            )
        )
        self.say(f"gpuops guard: {self.name}: its racer {action.racer} died; its boxes ended")

    def _end_unrecorded(self, exc: Exception) -> None:
        """The store cannot be written (or read) at the deadline: destroy the boxes we know of
        and confirm each gone by asking the provider for it (M4), without the records; then
        exit loudly, the records left for `gpuops sweep` to release once the store works."""
        ids = {self.instance_id} if self.instance_id else set()
        intents: list[str] = []  # intents whose box, if any, only its label can name (M12)
        # the store may not be read either: then the rental's own box is what we know
        with contextlib.suppress(StateError, Unavailable):
            for record in owned_records(self.market, self.name, of=self.incarnation):
                if record.instance_id:
                    ids.add(record.instance_id)
                elif record.state is BoxState.INTENT:
                    intents.append(record.intent_id)
        unfound = []
        for intent in intents:  # a provider read: no store write is needed to find it
            try:
                found = self.market.reconcile(label_for(intent))
            except (Unavailable, UnexpectedResponse):
                found = None
            if found is None:
                unfound.append(intent)
            else:
                ids.add(found.instance_id)
        still = []
        for instance_id in sorted(ids):
            try:
                up = self.market.vast.show(instance_id) is not None
            except (Unavailable, UnexpectedResponse) as error:
                still.append(f"instance {instance_id}: {error}")
                continue
            problem = end_instance(self.market, instance_id) if up else None
            if problem is not None:
                still.append(f"instance {instance_id}: {problem}")
        grace_over = self.clock.wall() >= self.due_at + timing.OWNER_GRACE_S
        if unfound and not grace_over:  # a box may yet show up by its label: keep looking
            still += [f"intent {intent}: no box found by its label yet" for intent in unfound]
        if still:
            self.say(f"gpuops guard: {self.name}: still ending: {'; '.join(still)}")
            return
        if unfound:  # past the grace: loud, and sweep looks on once the store works
            self.faults.append(f"intent(s) {', '.join(unfound)}: no box found by label")
        gone = ", ".join(sorted(ids)) or "none known"
        self.faults.append(
            f"the store could not be written ({type(exc).__name__}: {exc}); instance(s) {gone} "
            "confirmed gone by the provider, their records not yet released: run `gpuops "
            "sweep` once the store works"
        )
        self.finished = FAULTED

    @property
    def who(self) -> ops.Who:
        """What every guard.* event says first: the rental's name and box, this guardian, and
        the incarnation it answers for once it has read one (M16: a name's next incarnation is
        another rental)."""
        return ops.Who(
            name=self.name, instance_id=self.instance_id, guardian=self.me, rental_id=self.rental_id
        )

    def _log(self, event: Kinded) -> None:
        """A guard.* event, built with ``**self.who``."""
        write(self.events, event)


class _NeverInTheWay:
    """The guardian's event sink: an event it cannot write (a full disk, a log it cannot
    open) is said on stderr instead, and never stops a destroy (M17)."""

    def __init__(self, events: EventSink, say: Callable[[str], None]) -> None:
        self._events = events
        self._say = say

    def append(self, kind: str, /, **payload: object) -> object:
        try:
            return self._events.append(kind, **payload)
        except (StateError, OSError) as exc:
            self._say(f"gpuops guard: could not log {kind}: {type(exc).__name__}: {exc}")
            return None


def release(guardian: Guardian, signum: int, by: str = "", *, alarm: bool = True) -> None:
    """A guardian stopped by a signal ends its results copy first (``cut_copy``), then gives
    its lease up, so a successor (`gpuops guard NAME`, a standby) takes over at once instead of
    a TTL later, and says so loudly (the event, and with ``alarm`` an alarm: `guard --all`
    spares one for a standby that never held it)."""
    why = f"stopped by {signal.Signals(signum).name}{by}"
    cut_copy(guardian, why)
    try:
        guardian.leases.drop(guardian.lease_key, guardian.me)
    except Exception as exc:  # the store is what failed: the lease goes stale by itself
        guardian.say(f"gpuops guard: {guardian.name}: could not drop the lease: {exc}")
    guardian._log(ops.GuardExit(**guardian.who, code=128 + signum, reason=why))
    if alarm:
        guardian.alarms.raise_alarm(a.guardian_exit(guardian, 128 + signum, why))


def cut_copy(guardian: Guardian, why: str) -> None:
    """End the guardian's results copy (M17): every copy child's process group killed and
    reaped, its partial tarball removed (``Copies.end``), and a copy under way recorded on the
    rental as missing, before the lease is given up, so a successor's copy is the last word.
    Any later copy of this guardian is ended at once."""
    pids = guardian.copies.end(why)
    if not guardian.copying and not guardian.syncing and not pids:
        return
    if guardian.syncing and not guardian.copying:  # a periodic sync: what it delivered stays
        guardian._log(
            ops.GuardSync(
                **guardian.who,
                ok=False,
                final=False,
                detail=f"the sync was cut: {why}",
                ended=tuple(pids),
            )
        )
        return
    detail = f"the copy was cut: {why}"
    guardian._log(
        ops.GuardCopy(**guardian.who, ok=False, detail=detail, results=MISSING, ended=tuple(pids))
    )
    guardian._note_results(MISSING, detail)
    guardian.say(f"gpuops guard: {guardian.name}: results not delivered ({detail})")
    guardian.alarms.raise_alarm(a.copy_failed(guardian, f"results not delivered ({detail})"))


def results_outcome(copied: Copied) -> tuple[str, str]:
    """How a copy that ran to its end is recorded on the rental (M17): delivered and where,
    none (the job made no results directory), or missing and why. Pure."""
    if not copied.error:
        return DELIVERED, str(copied.destination)
    return (NO_RESULTS if copied.none_made else MISSING), copied.error


def stopped(guardian: Guardian, signum: int) -> NoReturn:
    """A guardian stopped by a signal: its lease given up first (``release``); then a loud
    exit."""
    release(guardian, signum)
    guardian.say(
        f"gpuops guard: {guardian.name}: stopped by {signal.Signals(signum).name}; until another guardian takes "
        "over, only the box's own ceiling (its deadline plus "
        f"{timing.BOX_CEILING_GRACE_S / 60:.0f} min, M14) ends it: run "
        f"`gpuops guard {guardian.name}`"
    )
    raise SystemExit(128 + signum)


def install_signal_handlers(guardian: Guardian) -> None:
    """SIGTERM and SIGINT end the guardian loudly (event log and stderr), never silently,
    its lease given up (``stopped``); SIGHUP, which a closing terminal sends, is ignored."""

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped(guardian, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
