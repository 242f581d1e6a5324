"""The lane's shell: reads the board, the instance and the bucket, applies decide.py's answers.

Every board change goes through ``_transition``: read with version, apply a pure transition
from board.py, compare-and-swap, re-read and re-decide on a lost race (L3). The retry state
lives in the board line itself, so any later `lane start`, from any process or host sharing
the store, resumes exactly where a dead one stopped (L11). There is no stop and no delete
anywhere (L1). A board that is missing or unreadable is never read as free while the instance,
its metadata, its claim label or a recent claim-journal entry says somebody holds the lane;
``repair`` rebuilds it from that evidence (L12). Every claim carries an epoch that the
instance's own label carries too, and install and start act only under it (L13). A job that
ended while its VM runs on is a billing alarm, never silence.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    CapacityExhausted,
    CorruptState,
    GpuopsError,
    JobFailed,
    QuotaExceeded,
    Refused,
    StateError,
    StillRunning,
    Unavailable,
    UsageError,
    VersionConflict,
)
from gpuops.events import EventLog
from gpuops.lane import board as b
from gpuops.lane import decide as d
from gpuops.lane import script as s
from gpuops.lane.journal import CODEC as JOURNAL
from gpuops.lane.journal import JournalEntry
from gpuops.lane.stored import BOARD_HISTORY_LINES as BOARD_HISTORY_LINES
from gpuops.lane.stored import BoardCodec as BoardCodec
from gpuops.lane.stored import BoardFile, StoredLane
from gpuops.lane.stored import LaneConfig as LaneConfig
from gpuops.secrets import scrub_text
from gpuops.store.base import Store
from gpuops.store.records import CAS_ATTEMPTS, NO_CHANGE, NoChange, Records

if TYPE_CHECKING:  # imported where used: `lane board` needs none of them
    from gpuops.alarms import Alarms
    from gpuops.lane.cost import JobCost, Released, Watched
    from gpuops.providers.gce import LaneInstance

METADATA_TRIES = 3
# A VM on its way to TERMINATED: `lane watch` waits these out before it exits, so that a
# `lane release` right after it is not refused (L1: released only once TERMINATED).
POWERING_OFF = frozenset({"STOPPING", "PENDING_STOP"})


class Compute(Protocol):
    def get(self, instance: str) -> LaneInstance: ...
    def set_metadata(self, instance: str, items: dict[str, str], fingerprint: str) -> None: ...
    def set_labels(self, instance: str, labels: dict[str, str], fingerprint: str) -> None: ...
    def start(self, instance: str) -> None: ...
    def set_run_ceiling(
        self, instance: str, current: Mapping[str, Any], max_run_s: float
    ) -> None: ...


class Bucket(Protocol):
    def list(self, prefix: str) -> list[str]: ...
    def objects(self, prefix: str) -> dict[str, tuple[int, str | None]]: ...
    def read(self, name: str) -> bytes | None: ...
    def updated(self, name: str) -> float | None: ...


class Lane(StoredLane):
    """The lane's commands: the store's board (``StoredLane``) with the instance, the bucket
    and the event log behind it."""

    def __init__(
        self,
        store: Store,
        events: EventLog,
        operator: str,
        gce: Compute,
        gcs: Bucket,
        config: LaneConfig,
        *,
        clock: Clock = SYSTEM,
        new_boot_id: Callable[[], str] = lambda: os.urandom(6).hex(),
        progress: Callable[[str], None] = lambda line: None,
        alarms: Alarms | None = None,
    ) -> None:
        if alarms is None:
            from gpuops.alarms import silent

            alarms = silent(events)
        # alarms: O1, heard by a person, never in the way
        super().__init__(
            store, config, clock=clock, alarms=alarms, fresh=self._fresh, operator=operator
        )
        self.events = events
        self.gce, self.gcs = gce, gcs
        self.new_boot_id, self.progress = new_boot_id, progress
        self.journals = Records(store, "lane/", JOURNAL)

    # --- the board ------------------------------------------------------------------------------
    def _fresh(self) -> b.Board:
        """A free board for a lane that has none, if the evidence allows it (L12). It goes on
        from the highest revision the journal or the history holds, so that its writes are
        journalled (the journal never goes back a revision) and its history entries never
        share a name with the lost board's."""
        from gpuops.lane import history as h

        ev = self.evidence()
        d.check_claimable_without_board(ev, self.config.instance)
        revision = max(ev.event_revision, h.last_revision(self.store, self.config.instance))
        return b.Board(
            self.config.instance, self.config.instance, self.clock.wall(), revision=revision
        )

    def evidence(self) -> d.Evidence:
        """What the instance (status, metadata, claim label) and the claim journal in the
        shared store say about a claim (L12, L13), board aside. No log is scanned: the
        journal is what every host sees. An unreadable journal is a sign of a claim."""
        return self._evidence_of(self.gce.get(self.config.instance))

    def _evidence_of(self, inst: LaneInstance) -> d.Evidence:
        ev = d.Evidence(
            inst.status_raw,
            metadata_job=inst.metadata.get(s.JOB_KEY) or None,
            metadata_attempt=inst.metadata.get(s.ATTEMPT_KEY) or None,
            label=d.vm_claim(inst.labels),
        )
        try:
            found = self.store.get(self.journal_key)
            entry = None if found is None else JOURNAL.decode(found.key, found.data)
        except CorruptState:
            return dataclasses.replace(ev, journal_unreadable=True)
        if entry is None:
            return ev
        return dataclasses.replace(
            ev,
            event_state=entry.state,
            event_owner=entry.owner,
            event_job=entry.job,
            event_attempt=entry.attempt,
            event_revision=entry.revision,
            event_age_s=max(0.0, self.clock.wall() - entry.at),
        )

    def repair(self) -> tuple[b.Board, list[str]]:
        """Rebuild a missing or unreadable state line from the evidence (L12). The signs
        found are returned with the board written; a corrupt file is copied aside first."""
        got, problem = self._raw()
        if got is not None:
            return got[0], []  # readable: nothing to repair
        board, signs = self._repaired_and_fenced()
        from gpuops.lane import history as h

        # past every revision the history holds too (the journal may be the part that is lost)
        recorded = h.last_revision(self.store, self.config.instance)
        board = dataclasses.replace(board, revision=max(board.revision, recorded + 1))
        stamp = b.stamp(self.clock.wall())
        what = "repaired the state line from: " + (
            "; ".join(signs) if signs else "no sign of any claim"
        )
        line = f"{stamp} {self.operator}: {what}"

        def rebuilt(current: BoardFile | None) -> BoardFile | NoChange:
            if current is not None and self._rewound(current.board) is None:
                return NO_CHANGE  # repaired meanwhile: readable now, nothing to do
            return BoardFile(board, (line,))  # absent, unreadable (None) or rewound

        def aside(key: str) -> str:  # the replaced file, kept byte for byte
            return f"{key}.corrupt-{stamp.replace(':', '').replace('-', '')}"

        done = self.boards.replace(self._name, rebuilt, aside=aside)
        if not done.written and done.before is not None:
            return done.before.board, []
        self._log_board(board, "repaired", what, repaired=True)
        return board, signs

    def _repaired_and_fenced(self) -> tuple[b.Board, list[str]]:
        """The board rebuilt from the evidence, and the signs it was rebuilt from. A held board
        whose instance label holds no claim takes the label first, for the claim it names,
        under the label fingerprint (L13): from then on a stale board on any host is refused
        by the VM itself. A lost race on the label reads the evidence again."""
        for _ in range(METADATA_TRIES):
            inst = self.gce.get(self.config.instance)
            ev = self._evidence_of(inst)
            board = d.repaired(self.config.instance, self.config.instance, ev, self.clock.wall())
            epoch = d.repair_epoch(board, d.vm_claim(inst.labels))
            if epoch is None:
                return board, d.claim_signs(ev)
            token = d.holder_token(board.owner, board.job)
            labels = {**inst.labels, d.CLAIM_LABEL: d.claim_label(epoch, token)}
            try:
                self.gce.set_labels(self.config.instance, labels, inst.label_fingerprint)
            except VersionConflict:
                continue
            return dataclasses.replace(board, epoch=epoch), d.claim_signs(ev)
        raise StateError(f"instance {self.config.instance}: label fingerprint kept changing")

    def _log_board(
        self,
        board: b.Board,
        kind: str,
        what: str,
        *,
        claim: b.Board | None = None,
        ended: tuple[str, float, JobCost] | None = None,
        repaired: bool = False,
    ) -> None:
        """Every board write goes to the claim journal in the shared store (the evidence a
        later repair reads, on any host: L12), to the lane's history there (``kind``, what it
        did, the ``claim`` it concerned, a job's end and cost) and to the event log."""
        from gpuops import event_ops as ops
        from gpuops.event_base import write

        self._journal(board, repaired=repaired)
        self._record(board, kind, what, claim=claim, ended=ended)
        write(
            self.events,
            ops.LaneBoard(
                lane=board.lane,
                state=board.state,
                owner=board.owner,
                job=board.job,
                attempt=board.attempt,
                revision=board.revision,
                repaired=repaired,
            ),
        )

    def _record(
        self,
        board: b.Board,
        kind: str,
        what: str,
        *,
        claim: b.Board | None = None,
        ended: tuple[str, float, JobCost] | None = None,
        first: int = 0,
    ) -> None:
        """One history entry (create-if-absent, never over another's; history.py)."""
        from gpuops.lane import history as h

        entry = h.entry(
            kind,
            scrub_text(what),
            board,
            board if claim is None else claim,
            self.clock.wall(),
            self.operator,
            ended,
        )
        h.append(self.store, self.config.instance, entry, first=first)

    def _journal(self, board: b.Board, *, repaired: bool) -> None:
        """The board's write, in the journal (compare-and-swap on the raw object, so an
        unreadable journal is replaced too); never over an entry of a later revision."""
        entry = JournalEntry(
            board.lane,
            board.state,
            board.owner,
            board.job,
            board.attempt,
            board.revision,
            board.epoch,
            self.clock.wall(),
            self.operator,
            repaired,
        )

        def write(current: JournalEntry | None) -> JournalEntry | NoChange:
            if current is not None and current.revision > board.revision:
                return NO_CHANGE  # a later write finished first: it stays
            return entry  # absent or unreadable (None): this write replaces it

        try:
            self.journals.replace(self._journal_name, write)
        except VersionConflict:
            raise StateError(
                f"{self.journal_key}: lost {CAS_ATTEMPTS} compare-and-swap races"
            ) from None

    @property
    def _journal_name(self) -> str:
        return self.journal_key.removeprefix("lane/")

    def _transition(
        self,
        change: Callable[[b.Board], b.Board],
        prose: str,
        fresh: b.Board | None = None,
        *,
        kind: str,
        ended: tuple[str, float, JobCost] | None = None,
    ) -> b.Board:
        """Read, apply ``change``, compare-and-swap; a lost race re-reads and re-decides (L3).
        ``fresh``: the board an absent one starts from, when the caller already decided it may
        (a claim that has just written its own epoch into the instance's label). ``kind`` and
        ``ended`` (a released job's outcome, wait and cost) go into the history entry, whose
        claim is the board written, or the one it replaced when it holds none (a release)."""
        seen: list[b.Board] = []

        def step(current: BoardFile | None) -> BoardFile | NoChange:
            if current is None:
                board = self._fresh() if fresh is None else fresh
            else:
                board = current.board
            history = () if current is None else current.history
            seen.append(board)
            new = change(board)
            if new == board:
                return NO_CHANGE
            line = f"{b.stamp(self.clock.wall())} {self.operator}: {prose}"
            return BoardFile(new, (*history, line))

        try:
            done = self.boards.update(self._name, step)
        except CorruptState as exc:
            problem = f"lane board {self.key} has no readable state line ({exc.reason})"
            raise self._unknown(problem) from exc
        except VersionConflict:
            raise StateError(
                f"{self.key}: lost {CAS_ATTEMPTS} compare-and-swap races in a row"
            ) from None
        if not done.written or done.after is None:
            return seen[-1]
        after = done.after.board
        claim = after if after.job is not None else seen[-1]
        self._log_board(after, kind, prose, claim=claim, ended=ended)
        return after

    # --- commands -------------------------------------------------------------------------------
    def claim(self, job: str) -> b.Board:
        """free -> claimed: first the claim's epoch on the instance's own label, under its
        label fingerprint (L13), then the board. A label that already holds a claim refuses
        a board that says free (it is stale, rebuilt or lost)."""
        from gpuops import event_ops as ops
        from gpuops.event_base import write

        before = self.read()[0]
        epoch: int | None = None
        if before.state == b.FREE:
            b.check_job(job)
            epoch = self._claim_label(before, job)
        after = self._transition(
            lambda bd: b.claim(bd, self.operator, job, self.clock.wall(), epoch),
            f"claimed the lane for {job} (epoch {epoch})",
            fresh=before if epoch is not None else None,
            kind="claimed",
        )
        if after.revision != before.revision:
            write(self.events, ops.LaneClaim(lane=after.lane, job=job, revision=after.revision))
        return after

    def _claim_label(self, board: b.Board, job: str) -> int:
        """Write this claim's epoch into the instance's label (compare-and-swap on its label
        fingerprint; a lost race re-reads and decides again). The epoch."""
        for _ in range(METADATA_TRIES):
            inst = self.gce.get(self.config.instance)
            vm = d.vm_claim(inst.labels)
            epoch = d.claim_epoch(board, vm, self.operator, job)
            if vm.held:
                return epoch  # our own claim, its board write lost: resumed
            token = d.holder_token(self.operator, job)
            labels = {**inst.labels, d.CLAIM_LABEL: d.claim_label(epoch, token)}
            try:
                self.gce.set_labels(self.config.instance, labels, inst.label_fingerprint)
                return epoch
            except VersionConflict:
                continue  # another claimant moved the label first: read it again
        raise StateError(f"instance {self.config.instance}: label fingerprint kept changing")

    def _release_label(self, board: b.Board) -> None:
        """This claim's epoch, released, on the instance's label (L13): only while the label
        holds this claim; already released, nothing is written."""
        for _ in range(METADATA_TRIES):
            inst = self.gce.get(self.config.instance)
            value = d.release_label(board, d.vm_claim(inst.labels))
            if value is None:
                return
            labels = {**inst.labels, d.CLAIM_LABEL: value}
            try:
                self.gce.set_labels(self.config.instance, labels, inst.label_fingerprint)
                return
            except VersionConflict:
                continue
        raise StateError(f"instance {self.config.instance}: label fingerprint kept changing")

    def install(self, job: str, script_text: str, *, max_hours: float | None = None) -> None:
        """Lint, check staged inputs, set the metadata by fingerprint (L4, L10, L5, L6), then
        the provider-native ceiling: GCE stops the VM after ``max_hours`` (default: the
        script's declared length, else timing.DEFAULT_MAX_RUN_S) if its script never does. A
        ceiling outside GCE's bounds is a usage error before anything is read or sent."""
        from gpuops import event_ops as ops
        from gpuops.event_base import write

        max_run_s = d.run_ceiling_s(max_hours, s.declared_hours(script_text))
        from gpuops.providers.gce import metadata_too_large  # GCE's size limits, before a call

        too_large = metadata_too_large({s.SCRIPT_KEY: script_text, s.JOB_KEY: job})
        if too_large is not None:
            raise UsageError(f"the startup script cannot be installed: {too_large}")
        board, _, _ = self.read()
        if board.state != b.CLAIMED or board.owner != self.operator or board.job != job:
            raise Refused(
                "L4",
                f"lane {board.lane} is {board.state} (owner {board.owner!r}, job {board.job!r}): "
                f"only the claimant of {job!r} installs its script, before it starts",
            )
        findings = s.lint(script_text, job)
        if findings:
            raise Refused(findings[0].rule, "; ".join(f"{f.rule}: {f.message}" for f in findings))
        staged = [n.rsplit("/", 1)[-1] for n in self.gcs.list(f"jobs/{job}/inputs/")]
        missing = s.missing_inputs(script_text, staged)
        if missing:
            raise Refused(
                "L10",
                f"the script fetches {', '.join(missing)} unconditionally, but nothing by that "
                f"name is staged under gs://{self.config.bucket}/jobs/{job}/inputs/",
            )
        inst = self._set_metadata(
            {s.SCRIPT_KEY: script_text, s.JOB_KEY: job}, need_terminated=True, fence=board
        )
        self.gce.set_run_ceiling(self.config.instance, inst.scheduling, max_run_s)
        write(
            self.events,
            ops.LaneInstall(lane=board.lane, job=job, chars=len(script_text), max_run_s=max_run_s),
        )
        what = (
            f"installed the script for {job} ({len(script_text)} chars; "
            f"run ceiling {max_run_s / 3600:g} h)"
        )
        self._record(board, "installed", what, first=1)  # after the board's own revision

    def _set_metadata(
        self, items: dict[str, str], *, need_terminated: bool, fence: b.Board | None = None
    ) -> LaneInstance:
        """Merge ``items`` into the metadata by fingerprint; with ``fence``, only while the
        instance's label holds that board's claim (L13), checked on every read."""
        for _ in range(METADATA_TRIES):
            inst = self.gce.get(self.config.instance)
            if fence is not None:
                d.check_epoch(fence, d.vm_claim(inst.labels))
            if need_terminated and inst.status_raw != d.TERMINATED:
                raise Refused(
                    "L2",
                    f"instance {inst.name} is {inst.status_raw}: its metadata is not changed "
                    "while a boot you did not start may be running",
                )
            merged = {**inst.metadata, **items}
            try:
                self.gce.set_metadata(self.config.instance, merged, inst.fingerprint)
                return inst
            except VersionConflict:
                continue  # another writer changed the metadata: re-read, check again
        raise StateError(f"instance {self.config.instance}: metadata fingerprint kept changing")

    def start(self, job: str, *, max_attempts: int = 20) -> b.Board:
        """Start this job's boot, retrying stockouts with the claim held (L2, L7, L11)."""
        tries = 0
        waiting_since: float | None = None
        while True:
            board, _, _ = self.read()
            d.check_holder(board, self.operator, job)  # the board first: no provider call
            inst = self.gce.get(self.config.instance)
            step = d.start_step(board, self.operator, job, inst.status_raw)
            if step is d.Step.ALREADY_RUNNING:
                self.progress(f"job {job} is already running (attempt {board.attempt})")
                return board
            if step is d.Step.WAIT_STOPPING:
                waiting_since = self.clock.wall() if waiting_since is None else waiting_since
                if d.stop_wait_over(self.clock.wall() - waiting_since):
                    raise Unavailable(
                        f"instance {inst.name} stayed {inst.status_raw} for "
                        f"{timing.GCE_OPERATION_TIMEOUT_S:g} s; the claim is kept, and gpuops "
                        "does not stop or reset it: run `lane start` again later (L1, L7)"
                    )
                self.progress(f"instance is {inst.status_raw}; waiting for TERMINATED")
                self.clock.sleep(timing.LANE_POLL_S)
                continue
            waiting_since = None
            if step is d.Step.CHECK_BOOT:
                self.progress(f"resuming attempt {board.attempt}: looking for its boot marker")
                result = self._await_boot(job, board)
                if result is not None:
                    return result
                tries += 1
                continue
            if not d.retry_stockout(tries, max_attempts):
                raise Unavailable(
                    f"lane {board.lane}: no successful start in {tries} attempts; the claim is "
                    f"kept (attempt {board.attempt}, {board.stockouts} stockouts); run "
                    f"`gpuops lane start --job {job}` again to resume (L7, L11)"
                )
            tries += 1
            self._attempt(job, inst)
            board, _, _ = self.read()
            if board.state == b.STARTING:
                result = self._await_boot(job, board)
                if result is not None:
                    return result
            elif d.retry_stockout(tries, max_attempts):
                self.progress(f"waiting {timing.STOCKOUT_RETRY_S:g} s before the next attempt")
                self.clock.sleep(timing.STOCKOUT_RETRY_S)

    def _attempt(self, job: str, inst: LaneInstance) -> None:
        """One start: verify the installed script, record the attempt, TERMINATED, start."""
        if inst.metadata.get(s.JOB_KEY) != job or s.lint(inst.metadata.get(s.SCRIPT_KEY, ""), job):
            raise Refused(
                "L4",
                f"the script installed on {inst.name} is not a clean script for {job!r}: "
                f"run `gpuops lane install --job {job} FILE` first",
            )
        d.check_run_ceiling(inst.scheduling)  # L12: GCE's own power-off, before any start
        d.check_epoch(self.read()[0], d.vm_claim(inst.labels))  # L13, before the attempt
        boot = self.new_boot_id()
        board = self._transition(
            lambda bd: b.begin_attempt(bd, self.operator, job, boot, self.clock.wall()),
            f"start attempt for {job} (boot {boot})",
            kind="attempt",
        )
        try:
            self._set_metadata(  # L2 and L13, just before
                {s.ATTEMPT_KEY: boot}, need_terminated=True, fence=board
            )
            self.gce.start(self.config.instance)
        except (CapacityExhausted, QuotaExceeded) as exc:
            outcome = "stockout" if isinstance(exc, CapacityExhausted) else "quota"
            change = b.stockout if outcome == "stockout" else b.attempt_failed
            board = self._transition(
                lambda bd: change(bd, self.clock.wall()), f"{outcome}: {exc}", kind=outcome
            )
            self._start_event(board, job, board.attempt, outcome)
            self.progress(f"attempt {board.attempt}: {outcome}; the claim is kept (L7)")
            return
        except GpuopsError as exc:
            outcome = "refused" if isinstance(exc, Refused) else "error"
            self._transition(
                lambda bd: b.attempt_failed(bd, self.clock.wall()),
                f"{outcome}: {exc}",
                kind=outcome,
            )
            self._start_event(board, job, board.attempt, outcome)
            raise
        self.progress(f"attempt {board.attempt}: start sent; waiting for boot marker {boot}")

    def _await_boot(self, job: str, board: b.Board) -> b.Board | None:
        """Poll for this attempt's boot marker; the board if ours, None to try again."""
        assert board.boot is not None
        marker = f"jobs/{job}/boot/{board.boot}"
        while True:
            seen = self.gcs.read(marker) is not None
            status = self.gce.get(self.config.instance).status_raw
            verdict = d.boot_verdict(seen, self.clock.wall() - board.since, status)
            if verdict is d.Boot.WAIT:
                self.clock.sleep(timing.LANE_POLL_S)
                continue
            break
        if verdict is d.Boot.OURS:
            done = self._transition(
                lambda bd: b.booted(bd, self.clock.wall()), f"{job} booted", kind="started"
            )
            self._start_event(done, job, done.attempt, "started")
            self.progress(f"attempt {done.attempt}: boot marker {board.boot} seen; {job} runs")
            return done
        failed = self._transition(
            lambda bd: b.attempt_failed(bd, self.clock.wall()),
            f"attempt {board.attempt}: {verdict.value}",
            kind=verdict.value,
        )
        self._start_event(failed, job, board.attempt, "noop" if verdict is d.Boot.NOOP else "error")
        if verdict is d.Boot.NOOP:
            raise Refused(
                "L2",
                f"instance {board.instance} is {status} but boot marker {board.boot} never "
                "appeared: the start was a silent no-op on somebody else's boot. It is not your "
                "job, and gpuops will not stop it. Your claim is kept.",
            )
        return None

    def _start_event(self, board: b.Board, job: str, attempt: int, outcome: str) -> None:
        from gpuops import event_types as ev

        start = ev.LaneStart(lane=board.lane, job=job, attempt=attempt, outcome=outcome)
        self.events.append(start.KIND, **start.to_payload())

    def watch(self, job: str, *, timeout_s: float = timing.LANE_WATCH_TIMEOUT_S) -> d.Verdict:
        """Report stages until the job ends; a timeout is StillRunning (exit 5), never failed."""
        return self.watch_job(job, timeout_s=timeout_s).verdict

    def watch_job(self, job: str, *, timeout_s: float = timing.LANE_WATCH_TIMEOUT_S) -> Watched:
        """Report stages, with the job's cost so far, until the job ends; then its final cost
        (running until its status file's last write). A timeout is StillRunning (exit 5),
        never failed.

        The status is read again after the instance's state, so a job that ends between the
        two reads is judged by its final status, never reported as a breach (L9). A job that
        ended while its VM keeps running past the power-off grace is a billing alarm (L12).
        """
        deadline = self.clock.wall() + timeout_s
        last: tuple[str, str] | None = None
        said = self.clock.wall()
        while True:
            board, _, _ = self.read()
            attempt = board.boot if board.job == job else None
            status = self._status(job)
            inst = self.gce.get(self.config.instance).status_raw
            verdict, missing = self._judge(job, status, attempt, inst)
            if verdict in (d.Verdict.UNKNOWN, d.Verdict.RUNNING):
                status = self._status(job)  # the job may have ended between the two reads
                verdict, missing = self._judge(job, status, attempt, inst)
            shown = (status.stage, status.reason) if status else None
            now = self.clock.wall()
            if shown != last or now - said >= timing.WATCH_POLL_S:
                so_far = (
                    f"; cost so far {self.job_cost(board, None, now).explained()}"
                    if board.job == job
                    else ""
                )
                self.progress(
                    (
                        f"{job}: stage {shown[0]} {shown[1]}".rstrip() + f" (instance {inst})"
                        if shown
                        else f"{job}: no status file yet (instance {inst})"
                    )
                    + so_far
                )
                last, said = shown, now
            if verdict in (d.Verdict.SUCCEEDED, d.Verdict.FAILED):
                from gpuops.lane.cost import PRICE_NOTE, Watched

                ended_at = self._await_power_off(job, verdict, status)
                cost = None
                if board.job == job:
                    cost = self.job_cost(board, ended_at, self.clock.wall())
                    self.progress(
                        f"{job}: {verdict.value}; cost {cost.explained()} {PRICE_NOTE}; "
                        "the disk bills until `gpuops lane release`"
                    )
                if verdict is d.Verdict.FAILED:
                    raise JobFailed(self._failure(job, status, missing))
                return Watched(verdict, cost)
            if verdict is d.Verdict.UNKNOWN and inst == d.TERMINATED and not (attempt or status):
                raise StillRunning(
                    f"job {job} was not started: the board has no attempt of it (lane "
                    f"{board.lane} is {board.state}"
                    + (f", job {board.job}" if board.job else "")
                    + f"); nothing to watch: run `gpuops lane start --job {job}`"
                )
            if verdict is d.Verdict.UNKNOWN and inst == d.TERMINATED:
                stage = f"{shown[0]} {shown[1]}".strip() if shown else "no status file"
                raise StillRunning(
                    f"job {job}: the instance is TERMINATED but this attempt's status file "
                    f"never ended (last: {stage}); look under gs://{self.config.bucket}/jobs/ "
                    "and the serial output before calling it failed"
                )
            if now >= deadline:
                raise StillRunning(
                    f"watch timed out after {timeout_s:g} s; job {job} is at stage "
                    f"{shown[0] if shown else 'unknown'}: not a failure (L9); watch again later"
                )
            self.clock.sleep(timing.LANE_POLL_S)

    def _judge(
        self, job: str, status: d.Status | None, attempt: str | None, inst: str
    ) -> tuple[d.Verdict, list[str]]:
        """The verdict and what storage lacks (L9): a status that says succeeded is checked
        against this attempt's manifest and the objects under results/."""
        missing: list[str] = []
        if status is not None and status.stage == "succeeded" and status.attempt == attempt:
            prefix = f"jobs/{job}/results/"
            stored = {
                name.removeprefix(prefix): d.StoredResult(size, md5)
                for name, (size, md5) in self.gcs.objects(prefix).items()
            }
            manifest = self.gcs.read(f"jobs/{job}/{s.MANIFEST}")
            missing = d.results_missing(manifest, attempt, stored)
        return d.job_verdict(status, attempt, inst, missing=missing), missing

    def _failure(self, job: str, status: d.Status | None, missing: list[str]) -> str:
        if missing:
            return (
                f"job {job} failed: its status says succeeded but storage does not hold its "
                f"results (L9): {'; '.join(missing)}"
            )
        return f"job {job} failed: {status.reason if status else ''}".rstrip()

    def _status(self, job: str) -> d.Status | None:
        raw = self.gcs.read(f"jobs/{job}/status")
        return d.parse_status(raw.decode("utf-8", "replace")) if raw is not None else None

    def _await_power_off(
        self, job: str, verdict: d.Verdict, status: d.Status | None
    ) -> float | None:
        """After the job's end, its script powers the VM off; watch waits until TERMINATED
        (through STOPPING), so the release that follows is not refused. If it never powers
        off, say so loudly (gpuops never stops it, L1): a billing alarm, exit 5 (succeeded)
        or 6 (failed). When the job ended: its status file's last write."""
        from gpuops import event_ops as ops
        from gpuops.event_base import write

        ended = self.gcs.updated(f"jobs/{job}/status")
        stopping_since: float | None = None
        while True:
            inst = self.gce.get(self.config.instance).status_raw
            if inst in POWERING_OFF:  # not yet TERMINATED: a release now would be refused
                stopping_since = self.clock.wall() if stopping_since is None else stopping_since
                if self.clock.wall() - stopping_since >= timing.GCE_OPERATION_TIMEOUT_S:
                    raise StillRunning(
                        f"job {job} ended ({verdict.value}) but instance "
                        f"{self.config.instance} stayed {inst} for "
                        f"{timing.GCE_OPERATION_TIMEOUT_S:g} s; watch again for TERMINATED"
                    )
                self.progress(f"{job}: {verdict.value}; instance is {inst}, waiting for TERMINATED")
                self.clock.sleep(timing.LANE_POLL_S)
                continue
            if inst not in d.BOOTING:
                return ended
            if d.billing_alarm(verdict, inst, ended, self.clock.wall()):
                message = self._alarm(job, verdict, inst, ended)
                write(self.events, ops.LaneBillingAlarm(lane=self.config.instance, job=job))
                from gpuops.alarms import lane_billing

                self.alarms.raise_alarm(lane_billing(self.config.instance, job, ended, message))
                if verdict is d.Verdict.FAILED:
                    raise JobFailed(message)
                raise StillRunning(message)
            self.progress(f"{job}: {verdict.value}; waiting for its script to power off ({inst})")
            self.clock.sleep(timing.LANE_POLL_S)

    def _alarm(self, job: str, verdict: d.Verdict, inst: str, ended: float | None) -> str:
        since = 0.0 if ended is None else self.clock.wall() - ended
        return (
            f"BILLING ALARM: job {job} ended ({verdict.value}) {since:.0f} s ago but instance "
            f"{self.config.instance} is still {inst}: its script never powered it off, so it "
            "bills until a human powers it off; gpuops never stops it (L1, L12)"
        )

    def release(self, job: str) -> b.Board:
        """Only the claimant, only once the instance is TERMINATED (L1, L3)."""
        return self.release_job(job).board

    def release_job(self, job: str) -> Released:
        """``release``, and the job it ended: outcome, attempts, and its cost, in the history
        entry of the release and the lane.job_end event alike."""
        before, _, _ = self.read()
        inst = self.gce.get(self.config.instance).status_raw
        now = self.clock.wall()
        b.release(before, self.operator, job, inst == d.TERMINATED, now)  # refusals first
        verdict = self._judge(job, self._status(job), before.boot, inst)[0].value
        outcome = verdict if verdict in ("succeeded", "failed") else "unknown"
        # A job that ended ran until its last status write, not until this release.
        ended_at = self.gcs.updated(f"jobs/{job}/status") if verdict != "unknown" else None
        cost = self.job_cost(before, ended_at, now)
        waiting_s = (
            0.0
            if before.started is None or before.claimed is None
            else before.started - before.claimed
        )
        self._release_label(before)  # L13: the VM's label first; a rerun finishes the board
        after = self._transition(
            lambda bd: b.release(bd, self.operator, job, inst == d.TERMINATED, now),
            f"released the lane after {job}; back to free",
            kind="released",
            ended=(outcome, waiting_s, cost),
        )
        self._clear_job_metadata()
        from gpuops import event_types as ev

        end_event = ev.LaneJobEnd(
            lane=before.lane,
            job=job,
            attempts=before.attempt,
            stockouts=before.stockouts,
            waiting_s=waiting_s,
            running_s=cost.running_s,
            cost_usd=cost.cost_usd,
            outcome=outcome,
        )
        self.events.append(end_event.KIND, **end_event.to_payload())
        from gpuops.lane.cost import Released

        return Released(after, job, outcome, before.attempt, before.stockouts, waiting_s, cost)

    def _clear_job_metadata(self) -> None:
        """A released lane's instance names no job or attempt: its metadata is evidence of a
        claim only while one is held (L12). Only while TERMINATED; the script stays."""
        try:
            inst = self.gce.get(self.config.instance)
            if s.JOB_KEY not in inst.metadata and s.ATTEMPT_KEY not in inst.metadata:
                return
            items = {k: v for k, v in inst.metadata.items() if k not in (s.JOB_KEY, s.ATTEMPT_KEY)}
            self.gce.set_metadata(self.config.instance, items, inst.fingerprint)
        except (Refused, VersionConflict, Unavailable) as exc:
            self.progress(f"the instance still names the released job in its metadata: {exc}")

    def job_cost(self, board: b.Board, ended_at: float | None, now: float) -> JobCost:
        """What ``board``'s job cost by ``now`` (``_spent``) at the lane's configured prices
        (``cost``), with the figures it came from."""
        from gpuops.lane.cost import JobCost

        running_s, held_s = self._spent(board, ended_at, now)
        return JobCost(
            running_s,
            held_s,
            self.config.usd_per_hour,
            self.config.disk_usd_per_day,
            self.cost(running_s, held_s),
        )

    def view(self, *, live: bool = False) -> dict[str, Any]:
        """The board for humans and --json (``StoredLane.view``: the store alone, no provider
        call, no Google SDK import); with ``live``, the instance, the last log line and the
        billing alarm (L12) too."""
        if not live:
            return super().view()
        board, history, _ = self.read()
        now = self.clock.wall()
        view = self._stored_view(board, history, now)
        inst = self.gce.get(self.config.instance).status_raw
        view["status"] = inst
        if board.job:
            log = self.gcs.read(f"jobs/{board.job}/log.txt")
            lines = log.decode("utf-8", "replace").strip().splitlines() if log else []
            view["last_log_line"] = lines[-1] if lines else None
            verdict = self._judge(board.job, self._status(board.job), board.boot, inst)[0]
            view["job_outcome"] = verdict.value
            ended = self.gcs.updated(f"jobs/{board.job}/status")
            if d.billing_alarm(verdict, inst, ended, now):
                view["billing_alarm"] = self._alarm(board.job, verdict, inst, ended)
                from gpuops.alarms import lane_billing

                self.alarms.raise_alarm(
                    lane_billing(self.config.instance, board.job, ended, view["billing_alarm"])
                )
        self._stale_alarm(board, view)
        return view
