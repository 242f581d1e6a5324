"""Renting, destroying and sweeping against FakeVast through the real adapter (M1-M4, M8, M9, M12).

The provider is FakeVast served in-process; the adapter is the real one over the real `vastai`
client; the probe verdict of each box comes from its offer's scripted fate (the probe itself is
tested on recordings in test_probe.py and through the fake ssh in test_ssh.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from market_world import World, fake_vast, request, scenario

from fakes.vast import FakeClock
from gpuops.clock import WithSleep
from gpuops.errors import NameTaken, NotOwned, Refused, Unavailable
from gpuops.ledger import GONE_BY_SHOW, BoxState
from gpuops.market.ending import destroy_rental
from gpuops.market.rent import RentRequest
from gpuops.market.rentals import LIVE, RELEASED
from gpuops.market.sweep import sweep
from gpuops.market.teardown import Ending, Outcome, exit_code


@pytest.fixture
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    with fake_vast(getattr(request, "param", scenario("taken", "ssh-auth", "healthy"))) as fake:
        yield World(fake)


@pytest.mark.fault(
    "offers taken between search and rent; unhealthy listed boxes",
    handled="race several offers, probe each, keep the first healthy box, destroy and confirm the losers (M1)",
)
def test_rent_keeps_the_first_healthy_box_and_destroys_every_loser(world):
    """M1: taken, auth-failing and healthy offers race; one box survives, the rest are gone."""
    market = world.market()

    rental = market.rent(request())

    assert rental.state == LIVE
    assert rental.offer_id == 1002
    assert world.alive() == [int(rental.instance_id)]
    live = [r for r in market.ledger.records() if r.active]
    assert [(r.name, r.state) for r in live] == [(rental.box, BoxState.LIVE)]
    assert rental.deadline_at == pytest.approx(rental.started_at + 2 * 3600.0, abs=120)
    # M16: every record, and every event of the race, names this incarnation
    assert rental.rental_id and {r.rental_id for r in market.ledger.records()} == {rental.rental_id}
    named = [
        e["rental_id"]
        for kind in ("market.create", "market.probe", "market.rent.done", "ledger.transition")
        for e in world.events.kinds(kind)
    ]
    assert named and set(named) == {rental.rental_id}


def test_every_offer_decision_is_logged_with_propensities(world):
    """M11: the full ranked candidate set and each pick's propensity are in the log."""
    world.market().rent(request())

    [selection] = world.events.kinds("market.selection")

    assert [c["id"] for c in selection["candidates"]] == [1000, 1001, 1002]
    assert [p["id"] for p in selection["picks"]] == [1000, 1001, 1002]
    assert all(0 < p["propensity"] <= 1 for p in selection["picks"])


def test_an_auth_failure_is_never_quarantined(world):
    """M2: the box that refused our key is destroyed but its machine is not blamed."""
    market = world.market()
    market.rent(request())

    assert market.quarantine.machines() == frozenset()


@pytest.mark.parametrize("world", [scenario("slow-disk", "healthy")], indirect=True)
@pytest.mark.fault(
    "a host with a real fault (slow disk, no GPU)",
    handled="quarantined for a day, then back in the pool (M2)",
)
def test_a_host_fault_is_quarantined_and_the_pool_heals_later(world):
    """M2: a slow disk quarantines its machine; the next rent leaves it out."""
    market = world.market()

    rental = market.rent(request(k=2))

    assert rental.offer_id == 1001
    assert market.quarantine.machines() == {500}


@pytest.mark.parametrize("world", [scenario("ssh-auth", "ssh-auth", "ssh-auth")], indirect=True)
@pytest.mark.fault(
    "every SSH probe failed on auth because our key was not registered",
    handled="the race stops and blames our key; no host is quarantined for it (M2)",
)
def test_when_every_probe_fails_on_auth_the_race_stops_and_blames_our_key(world):
    """M2: all-auth failures stop the race with exit 3 and quarantine nothing."""
    market = world.market()

    with pytest.raises(Refused, match="our key is the problem") as caught:
        market.rent(request())

    assert caught.value.rule == "M2"
    assert world.alive() == []
    assert market.quarantine.machines() == frozenset()
    assert [r for r in market.ledger.records() if r.active] == []


@pytest.mark.fault(
    "a crash-looping watcher re-ran rent on every restart",
    handled="rent is idempotent on a name: the live box is returned, nothing is created (M8)",
)
def test_renting_again_returns_the_live_box_and_never_creates(world):
    """M8: a re-run (a restarted watcher, another process) never rents again."""
    first = world.market().rent(request())
    creates = world.creates()

    again = world.market().rent(request())

    assert again.instance_id == first.instance_id
    assert world.creates() == creates
    assert world.alive() == [int(first.instance_id)]


@pytest.mark.fault(
    "`rent NAME` rerun with another --gpu or --hours returned the old box as if it were asked for",
    handled="refused (M8, exit 3) naming each difference; the box and its deadline are kept",
)
def test_renting_again_with_another_gpu_or_hours_is_refused_and_keeps_the_box_m8(world):
    """M8: a rerun asking another GPU or other hours is refused naming what differs; the
    same request, in another casing, still returns the box; the fake made no other box."""
    first = world.market().rent(request())
    creates = world.creates()

    with pytest.raises(Refused) as gpu:
        world.market().rent(RentRequest(name="job", gpu_name="RTX 3090", hours=2.0))
    with pytest.raises(Refused) as hours:
        world.market().rent(RentRequest(name="job", gpu_name="RTX 4090", hours=5.0))
    again = world.market().rent(RentRequest(name="job", gpu_name="rtx 4090", hours=2.0))

    assert gpu.value.rule == hours.value.rule == "M8" and gpu.value.exit_code == 3
    assert "asks --gpu 'RTX 3090', not its 'RTX 4090'" in str(gpu.value)
    assert "asks --hours 5, not its 2: one name, one box" in str(hours.value)
    assert again.instance_id == first.instance_id
    assert again.deadline_at == first.deadline_at
    assert world.creates() == creates and world.alive() == [int(first.instance_id)]


def test_another_operator_cannot_rent_or_destroy_the_name(world):
    """M3: bob can neither rent alice's name nor destroy her box."""
    world.market("alice").rent(request())
    bob = world.market("bob")

    with pytest.raises(NameTaken):
        bob.rent(request())
    with pytest.raises(NotOwned):
        destroy_rental(bob, "job")
    assert len(world.alive()) == 1


@pytest.mark.parametrize(
    "world",
    [{**scenario("healthy"), "vast": {**scenario("healthy")["vast"], "ssh_keys": []}}],
    indirect=True,
)
@pytest.mark.fault(
    "an SSH key the account does not know",
    handled="refused before any create (exit 3, M9)",
)
def test_an_unregistered_key_is_refused_before_any_create(world):
    """M9: without our key on the account nothing is rented (exit 3)."""
    with pytest.raises(Refused, match="not registered") as caught:
        world.market().rent(request())

    assert caught.value.rule == "M9"
    assert world.creates() == 0
    assert world.market().rentals.get("job") is None


def test_destroy_confirms_gone_by_asking_for_the_box_and_releases(world):
    """M4: destroy, ask for that instance, release only when it answers gone."""
    market = world.market()
    rental = market.rent(request())

    outcomes = destroy_rental(market, "job")

    assert outcomes == [
        Outcome(rental.box, Ending.GONE, f"instance {rental.instance_id} confirmed gone")
    ]
    assert world.alive() == []
    assert market.rentals.get("job").state == RELEASED
    assert market.ledger.get(rental.box).state is BoxState.RELEASED


@pytest.mark.fault(
    "a destroy call fails",
    handled="the record stays on the retry list; sweep finishes it; nothing is released before the provider confirms (M4)",
)
def test_a_failing_destroy_stays_on_the_retry_list_and_sweep_finishes_it(world):
    """M4: a destroy that fails keeps the record pending; a later sweep destroys and releases."""
    market = world.market()
    rental = market.rent(request())
    from fakes.scenario import DestroyFailure

    world.fake.add_destroy_failure(DestroyFailure(instance=int(rental.instance_id), count=10))

    outcomes = destroy_rental(market, "job")

    assert [o.ending for o in outcomes] == [Ending.PENDING]
    assert exit_code(outcomes) == 4  # M13: `gpuops destroy` says the box still bills
    assert [r.name for r in market.ledger.retry_list()] == [rental.box]
    assert market.rentals.get("job").state == LIVE
    world.fake.instances[int(rental.instance_id)]  # still there, still billing
    world.fake.clear_faults()

    report = sweep(world.market())

    assert report.retried == [
        Outcome(rental.box, Ending.GONE, f"instance {rental.instance_id} confirmed gone")
    ]
    assert market.ledger.retry_list() == []
    assert market.rentals.get("job").state == RELEASED  # M13: the rental follows its records
    assert world.alive() == []


def test_sweep_reports_a_box_no_ledger_owns_and_never_touches_it(world):
    """M3: an instance on the account without our label is reported, not destroyed."""
    stranger = world.fake.create(1002, {"label": "someone-else", "image": "x", "disk": 10})

    report = sweep(world.market())

    assert report.unowned == [f"instance {stranger.id} label 'someone-else': no ledger owns it"]
    assert world.alive() == [stranger.id]


@pytest.mark.parametrize(
    "world",
    [
        {
            **scenario("healthy"),
            "vast": {
                **scenario("healthy")["vast"],
                "faults": {"lost_creates": [{"offer": 1000, "answer": 503, "count": 1}]},
            },
        }
    ],
    indirect=True,
)
@pytest.mark.fault(
    "a create whose answer was lost (unclear create)",
    handled="never retried blindly: reconciled by the intent id in its label (M12)",
)
def test_a_create_whose_answer_is_lost_is_reconciled_by_its_label(world):
    """M12: the create is not retried; the box it made is found by label and adopted."""
    market = world.market()

    rental = market.rent(request(k=1))

    assert world.creates() == 1
    assert rental.state == LIVE
    assert world.alive() == [int(rental.instance_id)]


@pytest.mark.parametrize("world", [scenario("healthy", "healthy", "healthy")], indirect=True)
@pytest.mark.fault(
    "back-to-back creates drew 429s",
    handled="creates are paced (M12)",
)
def test_creates_are_paced_never_back_to_back(world):
    """M12: consecutive creates are at least CREATE_PACING_S apart on the clock."""
    from gpuops import timing

    world.market().rent(request())

    times = [call.at for call in world.fake.calls if call.route == "create"]
    assert len(times) == 3
    assert all(b - a >= timing.CREATE_PACING_S for a, b in zip(times, times[1:], strict=False))


@pytest.mark.parametrize(
    "world",
    [scenario("taken", "healthy", "healthy", "healthy", endpoint_intervals="contract")],
    indirect=True,
)
@pytest.mark.fault(
    "Vast's per-endpoint rate limits (a minimum interval per key, 429 with no Retry-After)",
    handled="creates are paced to create's documented interval; reads retried after a 429",
)
def test_a_race_under_vasts_documented_endpoint_intervals_never_draws_a_429_on_create_m12_h6(
    world,
):
    """M12/H6: against every route's documented minimum interval (create 4.5 s, show 2 s, ...),
    a race of three sends its three creates spaced at least create's interval, and
    none is answered 429 (a create is never retried: a 429 would lose a candidate)."""
    rental = world.market().rent(request())

    creates = [call for call in world.fake.calls if call.route == "create"]
    assert rental.state == LIVE
    assert [call.status for call in creates] == [410, 200, 200]


def _one_machine_twice() -> dict[str, Any]:
    """A market where search lists offer 1002 twice (vast-cli#260), offers 1000 and 1001 are
    on one machine, and Vast accepts a second purchase of one offer (skypilot#9117)."""
    doc = scenario("ssh-auth", "ssh-auth", "no-gpu", "healthy", "healthy")
    offers = doc["vast"]["offers"]
    offers[1]["machine_id"] = offers[0]["machine_id"]
    offers[2]["dph_total"] = 0.10  # the cheapest, listed twice
    doc["vast"]["duplicate_purchases"] = True
    doc["vast"]["faults"] = {"duplicate_listings": [1002]}
    return doc


@pytest.mark.parametrize("world", [_one_machine_twice()], indirect=True)
@pytest.mark.fault(
    "search lists one machine twice; Vast accepts two purchases of one offer, the later failing unseen",
    handled="the race keeps one candidate per offer and per machine: never two creates on either",
)
def test_the_race_never_creates_twice_on_one_offer_or_one_machine_h6(world):
    """vast-cli#260, skypilot#9117: with an offer listed twice and two offers on one machine,
    every create is on a distinct offer and a distinct machine, so no purchase is doubled."""
    rental = world.market().rent(request(k=3))

    boxes = list(world.fake.instances.values())
    offers = [box.offer_id for box in boxes]
    machines = [box.offer_row["machine_id"] for box in boxes]
    assert rental.state == LIVE and rental.offer_id == 1003
    assert world.creates() == len(boxes) == 3
    assert len(set(offers)) == len(offers) and len(set(machines)) == len(machines)
    assert all(box.duplicate_of is None for box in boxes)
    removed = world.events.kinds("market.selection")[0]["removed"]
    assert {"id": 1002, "reasons": ["listed twice"]} in removed
    assert {"id": 1001, "reasons": ["machine 500 is offer 1000's, ranked first"]} in removed


@pytest.mark.parametrize("world", [scenario("no-gpu")], indirect=True)
def test_a_race_with_no_winner_fails_loudly_and_leaves_nothing(world):
    """No healthy box: exit 4 with a reason, every box destroyed, nothing left active."""
    market = world.market()

    with pytest.raises(Unavailable, match="no candidate passed"):
        market.rent(request(k=1))

    assert world.alive() == []
    assert [r for r in market.ledger.records() if r.active] == []


@pytest.mark.parametrize("finish", ["destroy", "sweep"])
def test_a_release_cut_off_by_a_crash_is_finished_by_destroy_or_sweep(world, finish):
    """M4: a box confirmed gone whose release a crash cut off is released by the next
    `destroy` or `sweep`, without another destroy call."""
    market = world.market()
    rental = market.rent(request())
    box = rental.box or ""
    market.ledger.begin_destroy(box)
    market.vast.destroy(rental.instance_id or "")
    market.ledger.confirm_gone(box, GONE_BY_SHOW)
    destroys = sum(1 for call in world.fake.calls if call.route == "destroy")

    if finish == "destroy":
        lines = destroy_rental(market, "job")
        assert lines == [
            Outcome(box, Ending.GONE, f"instance {rental.instance_id} was confirmed gone; released")
        ]
        assert market.rentals.get("job").state == RELEASED
    else:
        report = sweep(market)
        assert report.retried == [
            Outcome(box, Ending.GONE, f"instance {rental.instance_id} was confirmed gone; released")
        ]
    assert market.ledger.get(box).state is BoxState.RELEASED
    assert sum(1 for call in world.fake.calls if call.route == "destroy") == destroys


def test_a_pace_spaces_calls_across_threads_and_a_retry_wait_holds_them_all():
    """M4 at scale: a sweep's calls start one per interval, and the adapter's 429 wait (the
    pace's hold) delays every later call, not only the retrying one."""
    from gpuops.market.pacing import Pace

    now = FakeClock(100.0)
    slept: list[float] = []
    pace = Pace(0.5, clock=WithSleep(now, slept.append))
    pace.take()
    pace.take()
    pace.take()
    assert slept == [0.5, 1.0]  # the second call waits one interval, the third two
    slept.clear()
    now.advance(100.0)
    pace.hold(3.0)
    pace.take()
    assert slept == [3.0, 3.0]  # the next call starts only when the hold is over
