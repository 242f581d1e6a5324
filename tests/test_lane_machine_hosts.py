"""The lane's state machine (tests/test_lane_machine.py) over two hosts and an ``s3://`` state:
alice works on host a, bob on host b, each with a store client of its own (its own boto3
client, ``S3Store``) over one shared state in the S3 stand-in (moto's server on loopback), its
own event log, and its own clock: host b's runs ahead of or behind the world's, and steps.
Every rule of the one-host machine runs here too: claims, installs, starts with stockouts and
crashes, releases, a third operator's boots, the board lost or edited by hand at any step and
repaired by either operator, storage refusing the job's result uploads for a while. A host
sees the other's claim only through the shared state and the instance (L12, L13).

The verdicts ask FakeGCE (its instance status, its labels, its bucket): never two jobs on one
claim, never an install over someone else's claim, never `succeeded` with results missing, the
VM off hours after any step, plus the board's parse and its agreement with the label.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule, run_state_machine_as_test

from fakes.s3 import CREDENTIALS, REGION, serve_s3
from gpuops.clock import Clock, WithSleep
from gpuops.events import EventLog
from gpuops.lane.runner import Lane, LaneConfig
from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter
from gpuops.store.base import Store
from gpuops.store.s3 import S3Store
from tests.lane_world import BASE
from tests.test_lane_machine import JOBS, OPERATORS, REWRITTEN, LaneMachine

HOSTS = {"alice": "a", "bob": "b"}
# Host b's clock against the world's: a few minutes either way, as two laptops' clocks drift
# (the soak's team allows up to 15 minutes; a lane's decisions read ages of minutes and hours).
SKEWS_S = (-420.0, 0.0, 300.0)


class HostClock:
    """One host's clock: the world's time plus this host's ``skew_s`` (which a rule steps),
    the world's monotonic time, waits that move the world."""

    def __init__(self, world: Clock, skew_s: float) -> None:
        self.world, self.skew_s = world, skew_s

    def wall(self) -> float:
        return self.world.wall() + self.skew_s

    def monotonic(self) -> float:
        return self.world.monotonic()

    def sleep(self, seconds: float) -> None:
        self.world.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return self.world.wait(event, seconds)


class TeeLog(EventLog):
    """A host's own event log, each event also told to the machine, in the order the hosts
    wrote them (the machine's view of what every host did; the product reads neither)."""

    def __init__(self, tee: list[tuple[str, dict[str, Any]]], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tee = tee

    def append(self, kind: str, /, **payload: object) -> Any:
        event = super().append(kind, **payload)
        self._tee.append((kind, dict(event["payload"])))
        return event


class TwoHostLaneMachine(LaneMachine):
    endpoint = ""  # the S3 stand-in's URL, set by the test before any machine is built
    bucket = ""

    def new_store(self) -> Store:
        """Host a's client of the shared state: the rules that lose or hand-edit the board
        use it, as a person on that host would (any host's client reaches the same object)."""
        self.prefix = f"lane-hosts/{uuid.uuid4().hex}"  # each run's own state
        return self.host_store()

    def host_store(self) -> S3Store:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        return S3Store(self.bucket, self.prefix, client=client)

    def new_lanes(self) -> dict[str, Lane]:
        """alice's Lane on host a (the world's clock), bob's on host b (a skewed one): each
        its own store client, event log, adapters and boot ids."""
        self.tee: list[tuple[str, dict[str, Any]]] = []
        self.copies: list[bytes] = []  # the board's bytes as someone kept them
        self.by_hand: bytes | None = None  # the bytes a person last put in the board's place
        self.clocks = {op: HostClock(self.world.clock, 0.0) for op in OPERATORS}
        stores = {"alice": self.world.store}
        return {op: self._host_lane(op, stores.get(op) or self.host_store()) for op in OPERATORS}

    def _host_lane(self, operator: str, store: Store) -> Lane:
        host, s = HOSTS[operator], self.world.fake.scenario
        clock = WithSleep(self.clocks[operator], self.world.advance)
        events = TeeLog(
            self.tee,
            self.world.events_path.with_name(f"events-{host}.jsonl"),
            operator,
            clock=clock,
        )
        boots = itertools.count(1)
        return Lane(
            store,
            events,
            operator,
            GceAdapter(s.project, s.zone, events=events, endpoint=BASE, clock=clock),
            GcsAdapter(s.bucket, s.project, endpoint=BASE),
            LaneConfig(s.instance, s.bucket),
            clock=clock,
            new_boot_id=lambda: f"{host}boot{next(boots)}",
            progress=self.world.lines.append,
        )

    def logged(self) -> list[tuple[str, dict[str, Any]]]:
        return list(self.tee)

    def starters(self, attempt: str) -> tuple[str, ...]:
        """The operator whose host named the attempt (host a's ids start `a`, b's `b`)."""
        return tuple(op for op, host in HOSTS.items() if attempt.startswith(f"{host}boot"))

    @rule()
    def someone_keeps_a_copy_of_the_board(self) -> None:
        """A person or a sync tool copies the board's bytes aside (to put back later)."""
        got = self.world.store.get(self.lanes["alice"].key)
        if got is not None:
            self.copies.append(got.data)

    def put_back(self, data: bytes) -> None:
        """Bytes written over the board past gpuops (a plain put; a lost board recreated)."""
        store, key = self.world.store, self.lanes["alice"].key
        got = store.get(key)
        if got is None:
            store.create(key, data)
        else:
            store.put(key, data, got.version)
        self.rewritten()

    def mark_rewritten(self, attempt: int) -> None:
        """On two hosts the machine's log is the tee: the marker goes in it, in order."""
        self.tee.append((REWRITTEN, {"attempt": attempt}))

    @rule(oldest=st.booleans())
    def an_old_copy_of_the_board_is_put_back(self, oldest: bool) -> None:
        """A kept copy restored over the board (a backup, a sync tool's stale side): a board
        that parses and names a claim that may be long over, or someone else's (L13)."""
        if self.copies:
            self.put_back(self.copies[0 if oldest else -1])

    @rule()
    def the_board_is_handed_over_by_hand(self) -> None:
        """A person edits the state line's owner to the other operator ("she said I could
        have it"): a board that parses, whose claim no label holds (L13)."""
        got = self.world.store.get(self.lanes["alice"].key)
        if got is None:
            return
        text = got.data.decode("utf-8", "replace")
        for op in OPERATORS:
            other = next(o for o in OPERATORS if o != op)
            if f" owner={op} " in text.split("\n", 1)[0]:
                self.put_back(text.replace(f" owner={op} ", f" owner={other} ", 1).encode())
                return

    @initialize(
        job=st.sampled_from(JOBS),
        how=st.sampled_from(["lost", "garbage", "byte", "handed", "handed", "none"]),
        at=st.integers(0, 400),
        repairs=st.integers(0, 2),
        other_job=st.sampled_from(JOBS),
    )
    def alice_holds_the_lane_with_a_script(  # type: ignore[override]
        self, job: str, how: str, at: int, repairs: int, other_job: str
    ) -> None:
        """Every run starts where the two hosts meet: alice's claim with a script (host a),
        then, mostly, her board lost, edited by hand or handed to bob by hand, and bob on
        host b repairing, claiming, and the board's holder installing and starting."""
        super().alice_holds_the_lane_with_a_script(job)
        self.someone_keeps_a_copy_of_the_board()
        if how != "none":
            self.the_board_goes_and_the_other_host_moves_in(how, at, repairs, other_job)

    @rule(
        how=st.sampled_from(["lost", "garbage", "byte", "old", "handed"]),
        at=st.integers(0, 400),
        repairs=st.integers(0, 2),
        job=st.sampled_from(JOBS),
    )
    def the_board_goes_and_the_other_host_moves_in(
        self, how: str, at: int, repairs: int, job: str
    ) -> None:
        """While one operator holds the lane, its board is lost, edited by hand (a byte,
        garbage, its owner changed) or an old copy of it put back; on the other host, the
        other operator repairs it (none to twice), claims, and the board's holder then
        installs and starts: whatever the board now says, the VM goes to no job
        but the claim the instance's label holds (L12, L13: the other rules' verdicts)."""
        holder = self.board().owner
        other = next((op for op in OPERATORS if op != holder), "bob")
        if how == "lost":
            self.the_board_is_lost()
        elif how == "old":
            self.an_old_copy_of_the_board_is_put_back(oldest=True)
        elif how == "handed":
            self.the_board_is_handed_over_by_hand()
        else:
            self.the_board_is_edited_by_hand(garbage=how == "garbage", at=at)
        for _ in range(repairs):
            self.repair(other)
        self.claim(other, job)
        self.install(holder=True, right_job=True, typo=False)
        self.start(holder=True, stockouts=0, crash=False)

    @rule(skew_s=st.sampled_from(SKEWS_S))
    def host_b_s_clock_steps(self, skew_s: float) -> None:
        """Host b's clock is set to another offset from the world's (drift, a step by NTP)."""
        self.clocks["bob"].skew_s = skew_s


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    """The S3 stand-in, one for the module: each machine run takes a prefix of its own."""
    server = serve_s3()
    try:
        yield server
    finally:
        server.close()


def test_two_hosts_over_one_s3_state_never_share_a_claim_and_leave_the_vm_off_l12_l13(s3):
    """L12, L13 over two hosts: separate store clients over one s3:// state, separate clocks,
    the board lost or edited by hand at any step, repairs by either operator, failed result
    uploads; judged by FakeGCE's instance, labels and bucket."""
    TwoHostLaneMachine.endpoint, TwoHostLaneMachine.bucket = s3.url, s3.bucket
    run_state_machine_as_test(
        TwoHostLaneMachine,
        settings=settings(
            max_examples=min(settings.default.max_examples, 6),
            stateful_step_count=10,
            deadline=None,
        ),
    )
