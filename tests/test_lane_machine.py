"""A Hypothesis state machine over the lane: two gpuops operators and a third operator's
own boots (every boot runs its installed script for real), with claims, installs (good and typo'd), starts, stockouts, crashes mid-start,
releases and time passing, against FakeGCE through the real SDK clients.

Invariants: no gpuops start while the instance runs anyone's boot (L2); no script installed
for a job its installer has not claimed (L4), nor while the instance's own claim label holds
anyone else's claim (L13, judged from FakeGCE's labels), no boot but under a claim its
starter holds and never two jobs booted under one claim (L13, FakeGCE's labels at each boot);
the board always parses to exactly one
state (L3) and, when present, agrees with the label (a held board's epoch is the label's, a
free board's label holds nothing); no retry is lost to a crash (L11): the board's attempt count
is every attempt begun. The board can be lost or edited by hand (a byte changed, garbage) at
any step and repaired by either operator; storage can refuse the job's result uploads for a
while. Asked of FakeGCE: a job `lane watch` calls succeeded has every result it made in the
bucket (L9), and hours after any step the VM is off, whatever path its boot took (L12).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.inprocess import activate
from fakes.gce.server import serve_http
from fakes.vast.clock import FakeClock
from gpuops import event_ops as ops
from gpuops import event_types as ev
from gpuops.errors import GpuopsError, Refused
from gpuops.events import read_events
from gpuops.lane import board as b
from gpuops.lane import decide as d
from gpuops.lane import script
from gpuops.lane.runner import Lane
from gpuops.store.base import Store
from gpuops.store.memory import MemoryStore
from tests.lane_world import BASE, World

OPERATORS = ("alice", "bob")
JOBS = ("portraits", "validation")
RESULTS = 2  # the files each job's workload uploads (LaneScenario.results)
COMMAND = 'python3 "$WORK/job.py"'  # the fake VM's workload: writes RESULTS result files


# Mostly True: most steps are the holder's, right-job, well-formed, so runs reach deep states.
_mostly = st.integers(0, 3).map(lambda n: n > 0)


# What a machine logs (beside the hosts' events) when a person replaced the board's bytes with
# a board that parses: its attempt count is the one L11 is judged from, from then on.
REWRITTEN = "machine.board_rewritten"


class Crash(Exception):
    """The runner's process dies (not a GpuopsError: nothing inside catches it)."""


class LaneMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._env = os.environ.get("STORAGE_EMULATOR_HOST")
        os.environ["STORAGE_EMULATOR_HOST"] = BASE
        self._tmp = tempfile.TemporaryDirectory()
        clock = FakeClock()
        fake = FakeGCE(LaneScenario(job_runtime_s=90.0, results=RESULTS), clock)
        self._server = serve_http(fake, ticker=False, boot_root=Path(self._tmp.name) / "boots")
        self._mock = activate(fake, BASE)
        self._mock.__enter__()
        self.world = World(fake, clock, self.new_store(), Path(self._tmp.name) / "events.jsonl")
        self.lanes = self.new_lanes()
        self.starts_seen: list[str] = []  # the instance status at each start gpuops sent
        # each boot gpuops started: the instance's claim label, the job and the attempt its
        # metadata names
        self.boots_seen: list[tuple[d.VmClaim, str, str]] = []
        # a board a person put in place that parses: (events logged before it, its attempt)
        self.rewrites: list[tuple[int, int]] = []
        self.by_hand: bytes | None = None  # the bytes a person last put in the board's place
        real_start, real_power_on = fake.start, fake._power_on

        def recording_start():  # type: ignore[no-untyped-def]
            self.starts_seen.append(fake.status)
            return real_start()

        def recording_power_on(*args, **kwargs):  # type: ignore[no-untyped-def]
            if fake.metadata.get(script.ATTEMPT_KEY) != "foreign":  # a third operator's own
                job = fake.metadata.get(script.JOB_KEY, "")
                attempt = fake.metadata.get(script.ATTEMPT_KEY, "")
                self.boots_seen.append((d.vm_claim(fake.labels), job, attempt))
            return real_power_on(*args, **kwargs)

        fake.start = recording_start  # type: ignore[method-assign]
        fake._power_on = recording_power_on  # type: ignore[method-assign]

    def new_store(self) -> Store:
        """The shared state: here one in-memory store every operator's Lane uses."""
        return MemoryStore()

    def new_lanes(self) -> dict[str, Lane]:
        """Each operator's Lane: here all on one host, one event log."""
        return {op: self.world.lane(op) for op in OPERATORS}

    def starters(self, attempt: str) -> tuple[str, ...]:
        """Who may have started the boot of ``attempt`` (an attempt id): here any operator
        (one host's boot ids do not say whose they are)."""
        return OPERATORS

    def logged(self) -> list[tuple[str, dict[str, Any]]]:
        """(kind, payload) of every event the operators' Lanes logged, in order, with a
        REWRITTEN marker where a person put a board that parses in place."""
        rows = self._events()
        for at, attempt in reversed(self.rewrites):  # the latest first: earlier places hold
            rows.insert(at, (REWRITTEN, {"attempt": attempt}))
        return rows

    def _events(self) -> list[tuple[str, dict[str, Any]]]:
        path = self.world.events_path
        return [(e["kind"], e["payload"]) for e in read_events(path)] if path.exists() else []

    def rewritten(self) -> None:
        """The board's bytes were replaced past gpuops: a board that parses now counts the
        attempts it says (a flipped digit may leave one that does; see REWRITTEN)."""
        got = self.world.store.get(self.lanes["alice"].key)
        self.by_hand = None if got is None else got.data
        try:
            board = self.lanes["alice"].read()[0]
        except GpuopsError:
            return
        self.mark_rewritten(board.attempt)

    def mark_rewritten(self, attempt: int) -> None:
        """A REWRITTEN marker where the log stands now (``logged`` puts it in its place)."""
        self.rewrites.append((len(self._events()), attempt))

    def teardown(self) -> None:
        self._mock.__exit__(None, None, None)
        self._server.close()  # every boot's processes die with the world
        self._tmp.cleanup()
        if self._env is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = self._env

    @initialize(job=st.sampled_from(JOBS))
    def alice_holds_the_lane_with_a_script(self, job: str) -> None:
        """Every run starts where the interesting steps are: a claim with a script."""
        self.lanes["alice"].claim(job)
        self.lanes["alice"].install(job, script.render(job, "gpuops-lane-jobs", COMMAND))

    def board(self) -> b.Board:
        """The board; a lost one not yet repaired reads as a free placeholder here (the rules
        only use it to pick operators and jobs: every command still reads the real one)."""
        try:
            return self.lanes["alice"].read()[0]
        except Refused:
            return b.Board("gpu-lane", "gpu-lane", 0.0)

    @rule()
    def the_board_is_lost(self) -> None:
        """The board object deleted (by hand, by a careless script) at any step (L12)."""
        got = self.world.store.get(self.lanes["alice"].key)
        if got is not None:
            self.world.store.delete(got.key, got.version)

    @rule(garbage=st.booleans(), at=st.integers(0, 400))
    def the_board_is_edited_by_hand(self, garbage: bool, at: int) -> None:
        """One byte of the stored board changed, or garbage put in its place, past gpuops (a
        hand in an editor, a careless script): every command must read it as unknown (L12)."""
        got = self.world.store.get(self.lanes["alice"].key)
        if got is None:
            return
        data = bytearray(got.data)
        if garbage or not data:
            data = bytearray(b"\x00garbage\xff")
        else:
            data[at % len(data)] ^= 0x01
        self.world.store.put(got.key, bytes(data), got.version)
        self.rewritten()

    @rule(seconds=st.sampled_from([60.0, 600.0]))  # a boot's retries sleep real seconds: rare
    def storage_refuses_result_uploads_for_a_while(self, seconds: float) -> None:
        """Every write under jobs/ is answered 503 for a while, from the next one on (L9)."""
        fake = self.world.fake
        fake.scenario = dataclasses.replace(
            fake.scenario, gcs_write_outage_prefix="jobs/", gcs_write_outage_s=seconds
        )
        fake._outage_from = None

    @rule()
    def the_holder_runs_its_job(self) -> None:
        """The common path, made common: the holder of a claimed lane starts its job and
        watches it to its end (L9), through whatever storage outage an earlier step began."""
        board = self.board()
        if board.state != b.CLAIMED or board.owner not in OPERATORS:
            return
        try:
            self.lanes[board.owner].start(board.job or "portraits", max_attempts=2)
        except GpuopsError:
            pass
        self.watch(board.owner)

    @rule(op=st.sampled_from(OPERATORS))
    def watch(self, op: str) -> None:
        """L9: a job watch calls succeeded has every result its workload made in the bucket,
        as FakeGCE's own objects show."""
        job = self.board().job
        if job is None:
            return
        try:
            verdict = self.lanes[op].watch(job, timeout_s=1800.0)
        except GpuopsError:
            return
        if verdict is d.Verdict.SUCCEEDED:
            prefix = f"jobs/{job}/results/"
            stored = [n for n in self.world.fake.objects if n.startswith(prefix)]
            assert len(stored) >= RESULTS, f"succeeded with {len(stored)} of {RESULTS} results"

    @rule()
    def hours_pass(self) -> None:
        """L12: whatever path the last boot took (a crash, a typo refused, a failed upload, a
        third operator's job), hours later the VM is off: nothing bills unwatched."""
        self.world.advance(3 * 3600.0)
        assert self.world.fake.status == "TERMINATED", self.world.fake.status

    @rule(op=st.sampled_from(OPERATORS))
    def repair(self, op: str) -> None:
        try:
            self.lanes[op].repair()
        except GpuopsError:
            return

    @rule(op=st.sampled_from(OPERATORS), job=st.sampled_from(JOBS))
    def claim(self, op: str, job: str) -> None:
        try:
            self.lanes[op].claim(job)
        except GpuopsError:
            return

    def who(self, holder: bool) -> str:
        """The lane's holder (most steps), or the other operator. A claim rebuilt by a repair
        may be held by `unknown` (a boot gpuops did not start): then alice acts, as neither."""
        owner = self.board().owner
        owner = owner if owner in OPERATORS else "alice"
        return owner if holder else next(op for op in OPERATORS if op != owner)

    @rule(holder=_mostly, right_job=_mostly, typo=st.integers(0, 3).map(lambda n: n == 0))
    def install(self, holder: bool, right_job: bool, typo: bool) -> None:
        op = self.who(holder)
        held = self.board().job or "portraits"
        job = held if right_job else next(j for j in JOBS if j != held)
        text = script.render(job, "gpuops-lane-jobs", COMMAND)
        if typo:
            text = text.replace(f'JOB="{job}"', f'JOB="{job}x"')
        before = dict(self.world.fake.metadata)
        try:
            self.lanes[op].install(job, text)
        except GpuopsError:
            assert self.world.fake.metadata == before
            return
        board = self.board()
        assert not typo
        assert (board.owner, board.job) == (op, job), "L4: installed without the claim"
        label = d.vm_claim(self.world.fake.labels)
        assert label.held and label.token == d.holder_token(op, job), "L13: over another claim"
        assert label.epoch == board.epoch

    @rule(holder=_mostly, stockouts=st.integers(0, 2), crash=st.booleans())
    def start(self, holder: bool, stockouts: int, crash: bool) -> None:
        fake, lane = self.world.fake, self.lanes[self.who(holder)]
        fake._starts[:0] = ["stockout"] * stockouts
        real = lane.gce.start
        if crash:

            def crashing(instance: str) -> None:
                raise Crash

            lane.gce.start = crashing  # type: ignore[method-assign]
        try:
            lane.start(self.board().job or "portraits", max_attempts=2)
        except (GpuopsError, Crash):
            pass
        finally:
            lane.gce.start = real  # type: ignore[method-assign]

    @rule(holder=_mostly, now=st.integers(0, 3).map(lambda n: n == 0))
    def release(self, holder: bool, now: bool) -> None:
        """Rarely: a claim released at once would keep most runs near a free lane."""
        board = self.board()
        if not now:
            return
        try:
            self.lanes[self.who(holder)].release(board.job or "portraits")
        except GpuopsError:
            return

    @rule()
    def third_operator_boots(self) -> None:
        if self.world.fake.status == "TERMINATED":
            self.world.fake.foreign_start("their-batch", runtime_s=60.0)

    @rule(seconds=st.sampled_from([10.0, 120.0, 900.0]))
    def time_passes(self, seconds: float) -> None:
        self.world.advance(seconds)

    @invariant()
    def no_start_while_a_boot_runs(self) -> None:
        """L2: every start gpuops sent found the instance TERMINATED."""
        assert set(self.starts_seen) <= {"TERMINATED"}, self.starts_seen

    @invariant()
    def the_board_parses_to_exactly_one_state(self) -> None:
        """L3: the stored board parses (a missing one is judged by L12, never assumed free)."""
        try:
            board = self.lanes["alice"].read()[0]
        except Refused:
            return  # missing or edited by hand: unknown, every command refuses (L12)
        assert board.state in b.STATES

    @invariant()
    def the_board_agrees_with_the_instances_claim_label(self) -> None:
        """L13: a held board's epoch is the one the label holds; a free board's label holds
        no claim (a lost board is judged by L12 instead). A board a person put there (a
        flipped byte that still parses) may name any claim, and is judged by the fence."""
        got = self.world.store.get(self.lanes["alice"].key)
        if got is not None and got.data == self.by_hand:
            return
        try:
            board = self.lanes["alice"].read()[0]
        except Refused:
            return  # missing or unreadable: judged by L12 instead
        label = d.vm_claim(self.world.fake.labels)
        if board.state == b.FREE:
            assert not label.held, (board, label)
        else:
            assert label.held and label.epoch == board.epoch, (board, label)

    @invariant()
    def every_boot_runs_under_a_held_claim_and_one_claim_runs_one_job(self) -> None:
        """L13, from FakeGCE's own record: every boot gpuops started found the instance's
        label holding a readable claim of the job it runs by the operator who started it
        (their token), and no claim epoch ever booted two jobs (never two jobs on one claim)."""
        jobs: dict[int, str] = {}
        for label, job, attempt in self.boots_seen:
            assert label.held and label.readable, (label, job)
            starters = {d.holder_token(op, job) for op in self.starters(attempt)}
            assert label.token in starters, ("L13: booted over another's claim", label, job)
            assert jobs.setdefault(label.epoch, job) == job, (label.epoch, jobs[label.epoch], job)

    @invariant()
    def no_retry_is_lost_to_a_crash(self) -> None:
        """L11: the board counts every attempt begun under this claim, crashes included (or,
        while a board whose bytes a person replaced stands, the count that board says, plus
        the attempts begun since: a repair from the journal restores the whole count)."""
        begun = rebased = 0  # from the event log, written apart from the store
        for kind, payload in self.logged():
            event = ev.decode(kind, payload)  # the runner's events, read through their types
            if isinstance(event, ops.LaneClaim | ev.LaneJobEnd):
                begun = rebased = 0
            elif kind == REWRITTEN:  # the board's bytes replaced by hand: its count from then
                rebased = int(payload["attempt"])
            elif isinstance(event, ops.LaneBoard) and event.state == b.STARTING:
                begun, rebased = begun + 1, rebased + 1
            else:
                assert event is not None or kind == REWRITTEN, (kind, payload)
        board = self.board()
        if board.state != b.FREE:
            assert board.attempt in (begun, rebased), (board, begun, rebased)


TestLaneMachine = LaneMachine.TestCase
TestLaneMachine.settings = settings(
    max_examples=min(settings.default.max_examples, 15), stateful_step_count=12, deadline=None
)
