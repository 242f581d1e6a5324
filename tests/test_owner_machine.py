"""A Hypothesis state machine over rent, destroy, guardians and sweep with every fault FakeVast
can script and a death or an interrupt at any provider call or store write (M13, M12, M4, H5),
for a team: two operators (alice, bob) on two hosts over one state, host B's clock up to
CLOCK_SKEW_S off the provider's, the names shared, so either may rent, destroy, guard or sweep
a name the other holds or held (M3, M16, M17).

After every step, asked of the fake: every box of ours that bills belongs to an active ledger
record (owned), no stranger's box was destroyed, nothing was released while its box billed,
and no kept box ended before its deadline as its renter's host saw it unless its owner
destroyed it. A `destroy` by the other operator ends nothing; after `destroy` or a guardian
says 0, nothing of that operator's rental bills. When the owners act (the guardians that rent
started, each operator's sweep for the rest, from either host) and the clock passes every
deadline plus OWNER_GRACE_S plus the skew, nothing of ours bills at all.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from soak import BASE, FATES, KEY, Disk, Killed, KilledMarket, Tripwire, WiredStore, WiredVast
from store_fakes import Events
from test_guard import Skewed

from fakes.scenario import DestroyFailure, LostCreate, RateLimitBurst, parse_scenario
from fakes.vast import FakeClock, FakeVast
from gpuops import timing
from gpuops.errors import GpuopsError, Interrupted
from gpuops.ledger import Ledger
from gpuops.market import jobs
from gpuops.market.ending import destroy_rental
from gpuops.market.guard import Guardian
from gpuops.market.guardian import schedule
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import Rentals, rental_of
from gpuops.market.results import LocalResults
from gpuops.market.sweep import sweep
from gpuops.market.teardown import exit_code, intent_of
from gpuops.model import Instance, Verdict
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings

NAMES = ("job-a", "job-b")
OPERATORS = ("alice", "bob")
HOSTS = ("hostA", "hostB")
HOURS = 1.0  # longer than time passing between steps: an early end shows


class Audit(Events):
    """Keeps every event and checks each release against the fake as it happens."""

    def __init__(self) -> None:
        super().__init__()
        self.fake: FakeVast | None = None
        self.premature: list[str] = []

    def append(self, kind: str, /, **payload: Any) -> None:
        super().append(kind, **payload)
        if kind == "ledger.transition" and payload.get("after") == "released":
            box = payload.get("instance_id")
            if box and self.fake is not None and self.fake.show(int(box)) is not None:
                self.premature.append(f"{payload['name']} released while {box} billed")


class OwnerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.wire = Tripwire()
        self.store = WiredStore(Disk(self.wire))
        self.audit = Audit()
        self.fake: FakeVast | None = None
        self.active: Any = None
        self.stranger = 0
        self.guarded: set[str] = set()
        self.deadlines: dict[str, float] = {}  # each name's latest race, on the provider's clock
        self.owners: dict[str, str] = {}  # who raced each name last
        self.skew = {"hostA": 0.0, "hostB": 0.0}
        # every kept box seen: its name, and its copy-then-destroy time on the provider's clock
        self.kept: dict[int, tuple[str, float]] = {}
        self.ended_by_owner: set[int] = set()  # kept boxes their owner's destroy was asked to end
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuops-owner-machine-"))

    @precondition(lambda self: self.fake is None)
    @rule(
        fates=st.lists(st.sampled_from(sorted(FATES)), min_size=2, max_size=5),
        skew_s=st.sampled_from([0.0, timing.CLOCK_SKEW_S, -timing.CLOCK_SKEW_S, 240.0]),
    )
    def open_market(self, fates: list[str], skew_s: float) -> None:
        self.skew["hostB"] = skew_s
        offers = [
            {"id": 5000 + i, "machine_id": 600 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
             "dph_total": 0.3 + i / 100, "reliability": 0.995, "disk_bw": 2000.0, "fate": fate}
            for i, fate in enumerate(fates)
        ]  # fmt: skip
        stranger = {**offers[0], "id": 5999, "machine_id": 699, "fate": "healthy"}
        doc = {"vast": {"api_key": "k-soak", "ssh_keys": [KEY], "offers": [*offers, stranger]}}
        self.fake = FakeVast(parse_scenario(doc), clock=FakeClock())
        self.audit.fake = self.fake
        self.active = self.fake.activate(BASE)
        self.active.__enter__()
        self.stranger = self.fake.create(5999, {"label": "not-ours", "image": "x", "disk": 5}).id

    def teardown(self) -> None:
        if self.active is not None:
            self.active.__exit__(None, None, None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def market(self, operator: str = "alice", host: str = "hostA") -> Market:
        assert self.fake is not None
        fake = self.fake
        clock = Skewed(fake, self.skew[host])

        def probe(instance: Instance, box: str) -> Verdict:
            return FATES[fake.instances[int(instance.instance_id)].fate.kind]

        adapter = VastAdapter(
            api_key="k-soak", base_url=BASE, clock=fake.ticking()
        )
        return KilledMarket(
            WiredVast(adapter, self.wire),  # type: ignore[arg-type]
            Ledger(self.store, self.audit, operator, clock=clock),
            self.audit,
            probe=probe,
            public_key=KEY,
            clock=clock,
            rng=random.Random(1),
            host=host,
        )

    def billing(self, name: str | None = None, owner: str | None = None) -> list[int]:
        """Our boxes the fake still bills: of one name (and one owner's records), or all."""
        assert self.fake is not None
        records = {r.intent_id: r for r in Ledger(self.store, Events(), "auditor").records()}
        out = []
        for box in self.fake.boxes():
            record = records.get(intent_of(box.label) or "")
            if box.id == self.stranger or intent_of(box.label) is None:
                continue
            if owner is not None and (record is None or record.owner != owner):
                continue
            if name is None or (record is not None and rental_of(record.name) == name):
                out.append(box.id)
        return out

    def rental(self, name: str) -> Any:
        return Rentals(self.store, "auditor").get(name)

    # --- the provider misbehaves ---------------------------------------------------------
    @precondition(lambda self: self.fake is not None)
    @rule(offer=st.integers(0, 4), close=st.booleans())
    def the_next_create_on_an_offer_loses_its_answer(self, offer: int, close: bool) -> None:
        assert self.fake is not None
        self.fake.add_lost_create(LostCreate(5000 + offer, "close" if close else 503))

    @precondition(lambda self: self.fake is not None)
    @rule(count=st.integers(1, 3))
    def lists_answer_empty_for_a_while(self, count: int) -> None:
        assert self.fake is not None
        self.fake.answer_lists_empty(count)

    @precondition(lambda self: self.fake is not None)
    @rule(count=st.integers(1, 2))
    def creates_are_rate_limited(self, count: int) -> None:
        assert self.fake is not None
        self.fake.add_rate_limit(RateLimitBurst(count, route="create"))

    @precondition(lambda self: self.fake is not None)
    @rule(offer=st.integers(0, 4), count=st.integers(1, 3))
    def destroys_fail(self, offer: int, count: int) -> None:
        assert self.fake is not None
        self.fake.add_destroy_failure(DestroyFailure(count, offer=5000 + offer))

    # --- gpuops, dying anywhere ----------------------------------------------------------
    def attempt(self, crash_at: int | None, after: bool, how: str, act: Any) -> Any:
        fire = Killed if how == "kill" else (lambda: Interrupted(2))
        self.wire.arm(crash_at, after, fire)
        try:
            return act()
        except (Killed, Interrupted, GpuopsError):
            return None
        finally:
            self.wire.arm(None, False, Killed)

    @precondition(lambda self: self.fake is not None)
    @rule(
        name=st.sampled_from(NAMES),
        op=st.sampled_from(OPERATORS),
        host=st.sampled_from(HOSTS),
        k=st.integers(1, 3),
        crash_at=st.one_of(st.none(), st.integers(1, 50)),
        after=st.booleans(),
        how=st.sampled_from(["kill", "interrupt"]),
        guarded=st.booleans(),
    )
    def rent(
        self,
        name: str,
        op: str,
        host: str,
        k: int,
        crash_at: int | None,
        after: bool,
        how: str,
        guarded: bool,
    ) -> None:
        def started(rental: Any) -> None:
            # its deadline on the provider's clock: the renter's host read it skewed
            self.deadlines[name] = rental.deadline_at - self.skew[host]
            self.owners[name] = op
            (self.guarded.add if guarded else self.guarded.discard)(name)

        request = RentRequest(name, "RTX 4090", HOURS, race_k=k)
        self.attempt(
            crash_at, after, how, lambda: self.market(op, host).rent(request, on_race=started)
        )

    @precondition(lambda self: self.fake is not None)
    @rule(
        name=st.sampled_from(NAMES),
        op=st.sampled_from(OPERATORS),
        host=st.sampled_from(HOSTS),
        crash_at=st.one_of(st.none(), st.integers(1, 8)),
    )
    def destroy(self, name: str, op: str, host: str, crash_at: int | None) -> None:
        current = self.rental(name)
        theirs = current is not None and current.owner != op
        before = self.billing(name)
        if not theirs:
            self.ended_by_owner |= {i for i, (n, _) in self.kept.items() if n == name}
        outcomes = self.attempt(
            crash_at, False, "kill", lambda: destroy_rental(self.market(op, host), name)
        )
        if theirs:  # M3: another operator's destroy ends nothing of the name
            assert self.billing(name) == before, f"{op}'s destroy of {name} ended a box"
        elif outcomes is not None and exit_code(outcomes) == 0:
            assert self.billing(name, op) == [], f"destroy {name} said 0 while it billed"

    @precondition(lambda self: self.fake is not None)
    @rule(minutes=st.integers(1, 20))
    def time_passes(self, minutes: int) -> None:
        assert self.fake is not None
        self.fake.advance(minutes * 60.0)

    @precondition(lambda self: self.fake is not None and bool(self.deadlines))
    @rule(crash_at=st.one_of(st.none(), st.integers(1, 30)))
    def the_owners_act_and_every_deadline_passes(self, crash_at: int | None) -> None:
        """Each guarded rental's guardian runs to its exit (killed once, maybe, then its
        successor); sweep serves the rest; past every deadline plus the grace, nothing bills."""
        assert self.fake is not None
        for name in sorted(self.deadlines):
            if name not in self.guarded:
                continue
            op = self.owners[name]
            for attempt in range(2):
                host = HOSTS[(attempt + len(name)) % 2]  # killed on one host, its successor on the other
                guardian = Guardian(
                    self.market(op, host), name,
                    shell=jobs.BoxShell(self.tmp / "local", self.tmp / "id", Settings.from_environ().ssh()),
                    results=LocalResults(self.tmp / "results"),
                    me=f"{op}/{host}/{attempt}/{name}",
                    clock=Skewed(self.fake, self.skew[host]), say=lambda line: None,
                )  # fmt: skip
                code = self.attempt(crash_at if attempt == 0 else None, True, "kill", guardian.run)
                if code is None and attempt == 0:
                    continue  # killed: its successor takes over
                if code == 0:
                    assert self.billing(name, op) == [], f"guardian of {name} said 0 while it billed"
                break
        # a host whose clock runs behind the renter's sees a deadline that much later (M17)
        limit = max(self.deadlines.values()) + timing.OWNER_GRACE_S + abs(self.skew["hostB"])
        self.fake.advance(max(0.0, max(self.deadlines.values()) - self.fake.now()))
        self.fake.clear_faults()  # the provider recovers; the owners must not have given up
        while True:  # cron's sweep, on each host, up to and at the limit
            for op, host in zip(OPERATORS, reversed(HOSTS), strict=True):
                sweep(self.market(op, host))
            if self.fake.now() >= limit or not self.billing():
                break
            self.fake.advance(min(timing.OWNER_GRACE_S / 3, limit - self.fake.now()))
        assert self.billing() == [], f"billing past deadline + grace + skew: {self.billing()}"
        self.deadlines.clear()

    # --- always ---------------------------------------------------------------------------
    @invariant()
    def every_box_of_ours_that_bills_is_owned_by_an_active_record(self) -> None:
        if self.fake is None:
            return
        active = {
            r.intent_id for r in Ledger(self.store, Events(), "auditor").records() if r.active
        }
        for box in self.fake.boxes():
            if box.id != self.stranger:
                assert intent_of(box.label) in active, f"instance {box.id} has no owner"

    @invariant()
    def a_strangers_box_is_never_touched(self) -> None:
        if self.fake is not None:
            assert self.fake.instances[self.stranger].destroyed_at is None

    @invariant()
    def nothing_is_released_while_its_box_bills(self) -> None:
        assert self.audit.premature == []

    @invariant()
    def no_kept_box_ends_before_its_deadline_as_its_renter_saw_it(self) -> None:
        """M17: a guardian or a sweep on a host whose clock is off the renter's never ends a
        kept box before its copy-then-destroy time; only its owner's `destroy` may."""
        if self.fake is None:
            return
        for name, deadline in self.deadlines.items():  # remember each kept box as it is kept
            rental = self.rental(name)
            if rental is not None and rental.instance_id is not None and rental.started_at:
                skew = deadline - rental.deadline_at  # the renter's host's, undone
                copy_at, _ = schedule(rental.started_at + skew, deadline)
                self.kept.setdefault(int(rental.instance_id), (name, copy_at))
        for instance, (name, copy_at) in self.kept.items():
            ended = self.fake.instances[instance].destroyed_at
            if ended is not None and instance not in self.ended_by_owner:
                assert ended >= copy_at, f"{name}'s box {instance} ended {copy_at - ended:.0f} s early"


TestOwnerMachine = OwnerMachine.TestCase
TestOwnerMachine.settings = settings(
    max_examples=min(settings.default.max_examples, 25), stateful_step_count=10, deadline=None
)
