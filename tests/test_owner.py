"""No billed box without a live owner that ends it (M13, M12): kills mid-race, interrupts,
unclear creates, and exit codes from typed outcomes.

The provider is FakeVast in-process through the real adapter; every check asks the fake which
boxes still bill, never what gpuops printed. A process killed mid-race is modelled by a probe
that raises `Killed` with the rent's own cleanup disabled: nothing after that point runs, as
after a SIGKILL (tests/test_owner_process.py does the same to real processes).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import market_world
import pytest
from market_world import API_KEY, KEY, fake_vast, offer

from gpuops import timing
from gpuops.clock import WithSleep
from gpuops.errors import GpuopsError, Interrupted, StillRunning
from gpuops.ledger import BoxState
from gpuops.market import guardian as g
from gpuops.market import jobs
from gpuops.market.ending import destroy_rental
from gpuops.market.guard import Guardian
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import FAILED, LIVE, RACING, RELEASED
from gpuops.market.results import LocalResults
from gpuops.market.sweep import sweep
from gpuops.market.teardown import Ending, exit_code
from gpuops.model import Instance, Verdict
from gpuops.procs import interrupts_held, interrupts_raised
from gpuops.settings import Settings

HOURS = 0.5


class Killed(BaseException):
    """The rent process died here (SIGKILL): nothing after this line of it runs."""


def scenario(n: int = 3, **faults: Any) -> dict[str, Any]:
    offers = [offer(i, first_id=3000, first_machine=800) for i in range(n)]
    doc: dict[str, Any] = {"vast": {"api_key": API_KEY, "ssh_keys": [KEY], "offers": offers}}
    if faults:
        doc["vast"]["faults"] = faults
    return doc


@dataclass
class World(market_world.World):
    said: list[str] = field(default_factory=list)

    def market(self, probe: Any = None) -> Market:  # type: ignore[override]
        return super().market(
            probe=probe or (lambda instance, box: Verdict.PASS),
            seed=5,
            progress=self.said.append,
        )

    def killed_mid_race(self, k: int = 3) -> Market:
        """Rent until the first probe, then die there with the boxes created and none kept."""

        def probe(instance: Instance, box: str) -> Verdict:
            raise Killed

        market = self.market(probe)
        market._abandon = lambda rental, why: []  # type: ignore[method-assign]  # SIGKILL: no cleanup
        with pytest.raises(Killed):
            market.rent(request(k=k))
        return self.market()

    def guardian(self, market: Market) -> Guardian:
        return Guardian(
            market,
            "job",
            shell=jobs.BoxShell(
                self.tmp / "local", self.tmp / "id_ed25519", Settings.from_environ().ssh()
            ),
            results=LocalResults(self.tmp / "results"),
            me="alice/host/1/guard",
            clock=self.fake.ticking(),
            say=self.said.append,
        )


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    with fake_vast(getattr(request, "param", scenario())) as fake:
        yield World(fake, tmp=tmp_path)


def request(name: str = "job", k: int = 3) -> RentRequest:
    return RentRequest(name=name, gpu_name="RTX 4090", hours=HOURS, race_k=k)


def test_the_deadline_is_written_before_the_first_create_and_the_owner_runs_then_m13(world):
    """M13: the rental holds its deadline, and on_race (the guardian's start) runs, before any
    create is sent."""
    seen: list[tuple[str, float | None, int]] = []
    market = world.market()

    market.rent(
        request(), on_race=lambda r: seen.append((r.state, r.deadline_at, len(world.create_calls())))
    )

    ((state, deadline, creates),) = seen
    assert state == RACING and creates == 0
    assert deadline == pytest.approx(market.rentals.get("job").deadline_at)


def test_a_rent_killed_after_its_creates_is_ended_by_its_guardian_by_the_deadline_m13(world):
    """M13: rent dies between its creates and keeping a box; the rental's guardian, bound to the
    racing rental, ends every candidate by the deadline and exits 0 only once all are gone."""
    market = world.killed_mid_race(k=3)
    assert len(world.billing()) == 3  # three candidates bill, no box was kept
    deadline = market.rentals.get("job").deadline_at

    code = world.guardian(market).run()

    assert code == g.GONE
    assert world.billing() == []
    assert world.fake.now() <= deadline + timing.OWNER_GRACE_S
    assert market.rentals.get("job").state == FAILED  # its racer died: the race failed
    assert all(not r.active for r in market.ledger.records())


def test_sweep_ends_a_killed_races_candidates_past_the_deadline_with_no_guardian_m13(world):
    """M13: with no guardian at all, sweep ends every record of ours past its rental's
    deadline whatever state the rental is in (here still `racing`)."""
    market = world.killed_mid_race(k=2)
    assert market.rentals.get("job").state == RACING

    early = sweep(market)
    assert early.expired == [] and len(world.billing()) == 2  # before the deadline: the race's

    world.fake.advance(HOURS * 3600.0)
    report = sweep(world.market())

    assert [o.ending for o in report.expired] == [Ending.GONE, Ending.GONE]
    assert exit_code(report.expired) == 0
    assert world.billing() == []
    assert market.rentals.get("job").state == RELEASED


def test_an_interrupted_rent_destroys_its_candidates_with_confirmation_before_it_exits_m13(world):
    """M13: Ctrl-C (or SIGTERM, or a closed terminal) during the race destroys that race's
    candidates, confirmed gone, says so, and leaves with the signal's exit code."""

    def probe(instance: Instance, box: str) -> Verdict:
        raise Interrupted(signal.SIGINT)

    market = world.market(probe)

    with pytest.raises(Interrupted) as raised:
        market.rent(request(k=3))

    assert raised.value.exit_code == 130
    assert world.billing() == []
    assert market.rentals.get("job").state == FAILED
    assert all(r.state is BoxState.RELEASED for r in market.ledger.records())
    assert any("interrupted: 3 box(es) of this race ended" in line for line in world.said)


def _lagging_list() -> dict[str, Any]:
    doc = scenario()
    doc["vast"]["list_lag_s"] = 600.0  # a new box is missing from the list for ten minutes
    return doc


@pytest.mark.parametrize("world", [_lagging_list()], indirect=True)
def test_an_interrupt_while_a_create_is_on_the_wire_waits_for_its_answer_and_ends_its_box_m13(
    world,
):
    """M13: Ctrl-C arrives while the first create is on the wire (Vast has made the box, its
    answer is not read yet) and the list lags: rent waits for the answer, records the box, and
    only then stops, ending it by id, confirmed gone; no create follows, and no intent is left
    for a guardian to look for by label."""
    market = world.market()
    create = market.vast.create

    def interrupted_on_the_wire(*args: Any, **kwargs: Any) -> str:
        made = create(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # its handler runs here, before the answer is read
        return made

    market.vast.create = interrupted_on_the_wire  # type: ignore[method-assign]
    with interrupts_raised(), pytest.raises(Interrupted) as raised:
        market.rent(request(k=3))

    assert raised.value.exit_code == 130
    assert world.billing() == []
    assert len(world.create_calls()) == 1
    assert [r.state for r in market.ledger.records()] == [BoxState.RELEASED]
    assert any("interrupted: 1 box(es) of this race ended" in line for line in world.said)


def test_an_interrupt_before_a_create_is_sent_releases_its_intent_and_sends_none_m13(world):
    """M13: Ctrl-C arrives once the first intent is written, before its create is sent: the
    intent is released (no create was sent) and rent stops; nothing was made, and nothing is
    left for a guardian to look for."""
    market = world.market()
    record_intent = market.ledger.record_intent

    def interrupted_after_the_intent(*args: Any, **kwargs: Any) -> Any:
        written = record_intent(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return written

    market.ledger.record_intent = interrupted_after_the_intent  # type: ignore[method-assign]
    with interrupts_raised(), pytest.raises(Interrupted):
        market.rent(request(k=3))

    assert world.create_calls() == [] and world.billing() == []
    assert [r.state for r in market.ledger.records()] == [BoxState.RELEASED]
    assert market.rentals.get("job").state == FAILED


def test_a_held_interrupt_is_raised_when_the_block_ends_and_a_second_at_once():
    """procs.interrupts_held: under interrupts_raised, the first interrupt inside the block
    waits for its end (whatever it ended with), a second is raised at once; outside a hold,
    and with no handler of ours, nothing is held."""
    steps: list[str] = []
    with interrupts_raised():
        with pytest.raises(Interrupted) as held, interrupts_held():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after the first")
        assert held.value.exit_code == 128 + signal.SIGTERM
        with pytest.raises(Interrupted) as ended, interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            raise ValueError("the block's own failure")
        assert ended.value.exit_code == 130 and isinstance(ended.value.__context__, ValueError)
        with pytest.raises(Interrupted), interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("held")
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("never")
        with interrupts_held():
            steps.append("nothing held")
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("never either")
    # Python's own handler, whatever this worker was left with (a test runner may ignore SIGINT)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), interrupts_held():
            os.kill(os.getpid(), signal.SIGINT)
            steps.append("never, again")
    finally:
        signal.signal(signal.SIGINT, before)

    assert steps == ["after the first", "held", "nothing held"]


def test_a_second_interrupt_leaves_the_rest_to_the_guardian_which_ends_it_m13(world):
    """M13: a second Ctrl-C during the clean-up stops it and says the guardian ends the rest;
    the guardian then does, by the deadline."""

    def probe(instance: Instance, box: str) -> Verdict:
        raise Interrupted(signal.SIGINT)

    market = world.market(probe)
    destroy = market.vast.destroy

    def interrupted_again(instance_id: str) -> None:
        market.vast.destroy = destroy  # type: ignore[method-assign]
        raise Interrupted(signal.SIGINT)

    market.vast.destroy = interrupted_again  # type: ignore[method-assign]

    with pytest.raises(Interrupted):
        market.rent(request(k=3))

    assert len(world.billing()) == 3
    assert any("left to its guardian" in line for line in world.said)
    assert world.guardian(world.market()).run() == g.GONE
    assert world.billing() == []


@pytest.mark.parametrize(
    "world", [scenario(lost_creates=[{"offer": 3000, "answer": "close"}])], indirect=True
)
def test_an_unclear_create_holds_every_other_create_until_its_box_is_found_m12(world):
    """M12: the create's connection closes and the first look-up by label answers empty; no
    other create is sent until a later look-up finds the box, which then races as any other."""
    world.fake.answer_lists_empty(1)
    market = world.market()

    rental = market.rent(request(k=3))

    routes = [c.route for c in world.fake.calls if c.route in ("create", "list")]
    first = routes.index("create")
    assert routes[first : first + 4] == ["create", "list", "list", "create"]
    assert rental.instance_id is not None
    assert len(world.billing()) == 1  # the losers, the found box among them, were destroyed


@pytest.mark.parametrize(
    "world", [scenario(lost_creates=[{"offer": 3000, "answer": "close"}])], indirect=True
)
def test_an_unclear_create_never_found_stops_rent_with_exit_5_and_its_owner_keeps_looking_m12(
    world,
):
    """M12/M13: while no look-up finds the box, rent sends no other create and exits 5 naming
    the intent; the guardian never exits 0 while it is unresolved, and once the list shows the
    box, the guardian destroys it."""
    world.fake.answer_lists_empty(None)  # the list misses the new box, for now
    market = world.market()

    with pytest.raises(StillRunning, match="unresolved after 4 look-ups"):
        market.rent(request(k=3))

    assert len(world.create_calls()) == 1
    assert len(world.billing()) == 1  # the unclear box bills
    guardian = world.guardian(world.market())
    for _ in range(50):  # well past the deadline: still looking, never a clean exit
        assert guardian.step() is None
    assert len(world.billing()) == 1

    world.fake.clear_faults()  # the list catches up
    assert guardian.run() == g.GONE
    assert world.billing() == []


@pytest.mark.parametrize(
    "world", [scenario(rate_limits=[{"count": 1, "route": "create"}])], indirect=True
)
def test_a_429_on_create_is_looked_up_by_label_before_its_intent_is_released_m12(world):
    """M12: a 429 is a refusal only once a look-up by label has found no box."""
    market = world.market()

    market.rent(request(k=1))

    routes = [(c.route, c.status) for c in world.fake.calls if c.route in ("create", "list")]
    assert routes[:2] == [("create", 429), ("list", 200)]


def test_destroy_exits_0_only_when_every_box_is_confirmed_gone_m13(world):
    """M13: a destroy left on the retry list is exit 4, however its text reads."""
    from fakes.scenario import DestroyFailure

    market = world.market()
    rental = market.rent(request(k=1))
    world.fake.add_destroy_failure(DestroyFailure(instance=int(rental.instance_id), count=100))

    outcomes = destroy_rental(market, "job")

    assert exit_code(outcomes) == 4
    assert world.billing() == [int(rental.instance_id)]
    world.fake.clear_faults()
    assert exit_code(destroy_rental(market, "job")) == 0
    assert world.billing() == []


def test_a_race_its_guardian_ended_at_the_deadline_never_comes_back_live_m13(world):
    """M13: the guardian ends a race still probing at its deadline; the race's kept box is then
    refused (exit 5), and nothing bills."""
    ended: list[int] = []

    def probe(instance: Instance, box: str) -> Verdict:
        if not ended:
            world.fake.advance(HOURS * 3600.0)
            ended.append(exit_code(destroy_rental(world.market(), "job")))
        return Verdict.PASS

    with pytest.raises(StillRunning, match="no longer racing"):
        world.market(probe).rent(request(k=1))

    assert ended == [0]
    assert world.billing() == []
    assert world.market().rentals.get("job").state == RELEASED


def test_a_race_makes_no_create_once_its_guardian_starts_ending_it_m13(world):
    """M13: past the deadline minus its margin the race sends no create: its owner is ending it."""
    fails = iter([Verdict.NO_GPU, Verdict.NO_GPU])

    def probe(instance: Instance, box: str) -> Verdict:
        world.fake.advance(HOURS * 3600.0)  # the probe outlasts the rental
        return next(fails)

    with pytest.raises(Exception, match="deadline is near"):
        world.market(probe).rent(request(k=1))

    assert len(world.create_calls()) == 1
    assert world.billing() == []


@pytest.mark.parametrize(
    "world",
    [
        {
            **scenario(2),
            # a boot longer than the creates' spacing and shorter than it plus a poll: the
            # first box is not up when the second is created, and both are at the next poll
            "vast": {**scenario(2)["vast"], "boot": {
                "provisioning_s": (timing.CREATE_PACING_S + timing.RACE_POLL_S) / 2 - 1,
                "loading_s": 1,
            }},
        }
    ],
    indirect=True,
)  # fmt: skip
def test_boxes_that_are_up_together_are_probed_together_m1(world):
    """M1: two candidates up in the same round are probed at once, not one after the other:
    each probe waits for the other to start (it would time out if they ran in turn)."""
    both = threading.Barrier(2, timeout=30)

    def probe(instance: Instance, box: str) -> Verdict:
        both.wait()
        return Verdict.PASS

    rental = world.market(probe).rent(request(k=2))

    assert rental.instance_id is not None
    assert len(world.billing()) == 1


@pytest.mark.parametrize(
    "world",
    [
        {
            "vast": {
                **scenario(2)["vast"],
                "boot": {"provisioning_s": 1, "loading_s": 1},
                "faults": {
                    "lost_creates": [{"offer": 3001, "answer": 503}],
                    "empty_list": {"count": 2},
                },
            }
        }
    ],
    indirect=True,
)
def test_a_winner_kept_while_a_create_is_unclear_finds_that_box_and_destroys_it_m12(world):
    """M12/M13: a box passes while a later create's answer was lost; the race keeps the
    winner, looks the unclear create up by label until it finds it, and destroys it as a
    loser; no record is left stuck (the soak found one destroying with no instance)."""
    market = world.market()

    rental = market.rent(request(k=2))

    assert world.billing() == [int(rental.instance_id)]
    left = [r for r in market.ledger.records() if r.active]
    assert [r.name for r in left] == [rental.box]


def test_two_rents_sharing_one_state_never_both_race_one_name_m8(tmp_path):
    """M8: two rent processes (different racer ids, one operator, each with its own store
    object on one state directory) begin the same race at the same instant: exactly one races,
    the other is told who does, every time. The race is decided by the store's create-if-absent
    alone, which S3 gives by its conditional writes (tests/test_store_contract.py); moto's
    in-memory S3 is not atomic against a concurrent conditional put (one double win in about
    sixty tries here), so this runs on the local store."""
    from gpuops.market.rentals import RaceInProgress, Rentals
    from gpuops.store.local import LocalStore

    hosts = [Rentals(LocalStore(tmp_path / "state"), "alice") for _ in range(2)]
    for n in range(40):
        name = f"job-{n}"
        start = threading.Barrier(2)
        won: list[str] = []
        told: list[str] = []

        def begin(
            rentals: Rentals,
            racer: str,
            name: str = name,
            start: threading.Barrier = start,
            won: list[str] = won,
            told: list[str] = told,
        ) -> None:
            start.wait()
            try:
                won.append(rentals.begin_race(name, 100.0, racer=racer).racer or "")
            except RaceInProgress as busy:
                told.append(busy.racer)

        threads = [
            threading.Thread(target=begin, args=(hosts[i], f"alice/host{i}/1/x")) for i in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert len(won) == 1 and told == won, (won, told)
        assert hosts[0].get(name).racer == won[0]


def test_a_rent_whose_search_fails_writes_nothing_and_starts_no_owner_m8(world):
    """M8/M13: a rent that ends in an error before any create (here the search answers 429
    until the retries run out) writes no rental and starts no guardian (its offers are chosen
    before anything is written), so the next rent races at once instead of waiting a whole
    RACER_TTL_S for a racer that is gone."""
    from fakes.scenario import RateLimitBurst

    world.fake.add_rate_limit(RateLimitBurst(50, route="search"))
    market = world.market()
    owners: list[str] = []

    with pytest.raises(GpuopsError):
        market.rent(request(k=1), on_race=lambda rental: owners.append(rental.name))

    assert market.rentals.get("job") is None and owners == []
    assert world.fake.instances == {}  # the fake's own record: no create was sent
    world.fake.clear_faults()
    started = world.fake.now()
    assert world.market().rent(request(k=1)).state == "live"
    assert world.fake.now() - started < timing.RACER_TTL_S


def test_destroy_during_a_race_stops_it_before_its_next_create_m13(world):
    """M13: `gpuops destroy job` from another process while the race probes its first box:
    that box is destroyed and the rental released; the race then sends no further create
    (it writes its next intent, sees the rental ended, and stops with exit 3), and nothing
    bills, by the fake's own record."""
    destroyed: list[list[Any]] = []

    def probe(instance: Instance, box: str) -> Verdict:
        if not destroyed:  # another process: `gpuops destroy job`
            destroyed.append(destroy_rental(world.market(), "job"))
        return Verdict.NO_GPU  # this box failed: the race would replace it

    with pytest.raises(GpuopsError, match="ended while racing") as stopped:
        world.market(probe).rent(request(k=1))

    assert stopped.value.exit_code == 3
    assert [o.ending for o in destroyed[0]] == [Ending.GONE]
    assert len(world.create_calls()) == 1  # no create after the destroy
    assert world.billing() == []
    assert world.market().rentals.get("job").state == RELEASED


def test_a_rerun_on_the_racers_own_host_whose_process_is_gone_takes_over_at_once_m8(world):
    """M8: a rent killed mid-race on this host left the rental racing; a rerun here asks the
    racer's process, finds it gone, and takes the race over at once instead of waiting
    RACER_TTL_S for a heartbeat that will never move."""
    market = world.market()
    dead = f"alice/{market.host}/999999999/x"  # no such process
    market.rentals.begin_race("job", world.fake.now() + HOURS * 3600.0, racer=dead)
    started = world.fake.now()

    rental = world.market().rent(request(k=1))

    assert rental.state == LIVE and rental.racer != dead
    assert world.fake.now() - started < timing.RACER_TTL_S
    assert any("stopped racing for it; taking over" in line for line in world.said)


def _racing_with_every_offer(world: World, racer: Market) -> None:
    """``racer`` begins its race of "job", and its creates hold every offer."""
    racer.rentals.begin_race("job", world.fake.now() + HOURS * 3600.0, racer=racer.racer)
    for offer_state in world.fake.offers.values():
        offer_state.taken = True


def _waiting_rent(world: World, racer: Market) -> tuple[Market, list[float]]:
    """A second rent of the name, and its naps: at its first poll the offers are free again
    and ``racer`` rents, keeping its box."""
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 1:
            for offer_state in world.fake.offers.values():
                offer_state.taken = False
            racer.rent(request(k=1))
        world.fake.advance(seconds)

    waiter = market_world.World.market(
        world, probe=lambda instance, box: Verdict.PASS, seed=5, progress=world.said.append,
        clock=WithSleep(world.fake.clock, nap),
    )  # fmt: skip
    return waiter, naps


def test_a_rent_started_once_the_racers_creates_took_every_offer_waits_for_its_box_m8(world):
    """M8: a second `rent NAME` that starts after the racer's creates have taken every offer
    (a second process started late on a loaded host) waits for the racer's box and returns
    it: it does not search the emptied market and exit 4 while the name's race goes on."""
    racer = world.market()
    _racing_with_every_offer(world, racer)
    waiter, naps = _waiting_rent(world, racer)
    rental = waiter.rent(request(k=1))

    assert rental.state == LIVE and rental.racer == racer.racer
    assert world.billing() == [int(rental.instance_id)]
    assert len(world.create_calls()) == 1  # the racer's one create; the waiter sent none
    assert any("is racing for it now" in line for line in world.said)
    assert naps == [timing.RACE_POLL_S]


def test_a_rent_whose_search_ran_while_another_began_racing_waits_for_its_box_m8(world):
    """M8: the second `rent NAME` looked for a racer, found none, and searched; in between the
    first began its race and its creates took every offer (two processes started together on
    a loaded host). The search finds nothing, and the second waits for the racer's box and
    returns it, instead of exiting 4 beside a race of its own name."""
    racer = world.market()
    waiter, _ = _waiting_rent(world, racer)
    real_search = waiter.vast.search_offers

    def search(**query: Any) -> Any:  # meanwhile the racer begins and takes every offer
        _racing_with_every_offer(world, racer)
        return real_search(**query)

    waiter.vast.search_offers = search  # type: ignore[method-assign]
    rental = waiter.rent(request(k=1))

    assert rental.state == LIVE and rental.racer == racer.racer
    assert world.billing() == [int(rental.instance_id)]
    assert len(world.create_calls()) == 1  # the racer's one create; the waiter sent none
    assert any("is racing for it now" in line for line in world.said)


def test_a_rent_waits_for_another_racer_before_searching_then_takes_over_once_it_stops_m8(world):
    """M8: while another rent of ours races the name, a rerun neither searches nor writes;
    once that racer's heartbeat has stood still for RACER_TTL_S on the rerun's own clock, it
    searches and races itself."""
    other = f"alice/elsewhere/{os.getpid()}/x"  # another host's: only its heartbeat tells
    market = world.market()
    market.rentals.begin_race("job", world.fake.now() + HOURS * 3600.0, racer=other)
    searched: list[float] = []
    real_search = market.vast.search_offers

    def search(**query: Any) -> Any:
        searched.append(world.fake.now())
        return real_search(**query)

    market.vast.search_offers = search  # type: ignore[method-assign]
    started = world.fake.now()

    rental = market.rent(request(k=1))

    assert rental.state == LIVE and rental.racer == market.racer
    assert len(searched) == 1 and searched[0] - started >= timing.RACER_TTL_S
    assert any(f"{other} stopped racing for it; taking over" in line for line in world.said)


@pytest.mark.parametrize(
    "world",
    [scenario(1, lost_creates=[{"offer": 3000, "answer": 503, "creates": False, "count": 9}])],
    indirect=True,
)
def test_a_create_that_made_nothing_blocks_its_name_only_for_a_bounded_time_m13(world):
    """M13: a create answered 503 that created nothing: rent exits 5, and so does `destroy`
    while the window lasts; past UNCLEAR_CREATE_WINDOW_S of look-ups the intent is recorded
    as never created (loudly, in the event log), `destroy` and `sweep` exit 0, and `rent`
    races the name again; nothing ever billed, by the fake's own record."""
    with pytest.raises(StillRunning):
        world.market().rent(request(k=1))
    assert world.billing() == [] and len(world.create_calls()) == 1

    assert exit_code(destroy_rental(world.market(), "job")) == 5  # still looking
    world.fake.advance(timing.UNCLEAR_CREATE_WINDOW_S)
    outcomes = destroy_rental(world.market(), "job")

    assert [o.ending for o in outcomes] == [Ending.GIVEN_UP] and exit_code(outcomes) == 0
    assert [e["name"] for k, e in world.events.events if k == "ledger.never_found"] == ["job+1-0"]
    assert exit_code(sweep(world.market()).unresolved) == 0
    world.fake.clear_faults()
    rental = world.market().rent(request(k=1))
    assert rental.state == LIVE and world.billing() == [int(rental.instance_id)]
    assert exit_code(destroy_rental(world.market(), "job")) == 0
    assert world.billing() == []


@pytest.mark.parametrize(
    "world",
    [scenario(1, lost_creates=[{"offer": 3000, "answer": 503, "creates": False}])],
    indirect=True,
)
def test_a_box_that_turns_up_with_a_given_up_intents_label_is_still_ended_by_sweep_m13(world):
    """M13: after an intent was recorded as never created, a box carrying its label appears
    (the create landed after all): sweep ends it, confirmed gone, and reports no unowned box;
    a guardian that gave up on it exits loudly, never 0."""
    from gpuops.market.teardown import label_for

    with pytest.raises(StillRunning):
        world.market().rent(request(k=1))
    world.fake.advance(timing.UNCLEAR_CREATE_WINDOW_S)
    code = world.guardian(world.market()).run()
    assert code == 1  # released, but never confirmed gone: loud
    (given,) = [p for k, p in world.events.events if k == "guard.given_up"]
    intent = world.market().ledger.get("job+1-0").intent_id
    late = world.fake.create(3000, {"label": label_for(intent), "image": "x", "disk": 16}).id

    report = sweep(world.market())

    assert [o.ending for o in report.expired] == [Ending.GONE] and report.unowned == []
    assert world.billing() == [] and world.fake.instances[late].destroyed_at is not None


def test_a_racer_whose_heartbeat_stopped_has_its_boxes_ended_by_the_guardian_then_m13(world):
    """M13: rent is killed mid-race with three candidates billing; its heartbeat stands still,
    and its guardian ends them RACER_TTL_S (plus a poll or two) after it last beat, by the
    fake's own record, not at the deadline hours later; then it exits 0."""
    market = world.killed_mid_race(k=3)
    assert len(world.billing()) == 3
    rental = market.rentals.get("job")
    died_at = world.fake.now()
    guardian = world.guardian(market)

    while world.billing():
        assert guardian.step() is None
        assert world.fake.now() - died_at <= timing.RACER_TTL_S + timing.DESTROY_CONFIRM_TIMEOUT_S

    assert world.fake.now() < rental.deadline_at - timing.DEADLINE_MARGIN_S  # long before it
    (ended,) = [p for k, p in world.events.events if k == "guard.race_ended"]
    assert len(ended["ended"]) == 3 and market.rentals.get("job").state != RACING
    assert guardian.run() == g.GONE
