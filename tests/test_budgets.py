"""Team budgets through the real market and store against FakeVast (M15): two operators share
one state, and bob's box counts against the team's limit when alice rents."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from market_world import BASE, World, fake_vast, request, scenario

from gpuops.errors import Refused
from gpuops.market.budgets import Budgets
from gpuops.market.rent import Market
from gpuops.providers.vast import VastAdapter


class Heard:
    def __init__(self) -> None:
        self.alarms: list[object] = []

    def raise_alarm(self, alarm: object) -> None:
        self.alarms.append(alarm)


class BudgetWorld(World):
    heard: Heard

    def market(self, operator: str = "alice", **kwargs: object) -> Market:
        budgets = Budgets(self.store, operator, clock=self.fake.ticking(), alarms=self.heard)
        return super().market(operator, budget=budgets, **kwargs)


@pytest.fixture
def world() -> Iterator[BudgetWorld]:
    with fake_vast(scenario("healthy", "healthy", "healthy")) as fake:
        w = BudgetWorld(fake)
        w.heard = Heard()
        yield w


def test_bobs_box_counts_against_the_team_limit_and_alice_is_refused_before_any_create_m15(
    world,
):
    """M15: with bob's box live, alice's rental whose worst case would cross the team's daily
    limit is refused (naming M15 and the figures) before any create; the fake made no box."""
    Budgets(world.store, "alice").set_limits(team_day=1.2)
    world.market("bob").rent(request("b1", k=1))  # $0.30/h for 2 h: about $0.60 committed
    creates, alive = world.creates(), world.alive()
    with pytest.raises(Refused) as refused:
        world.market("alice").rent(request("a1", k=1))  # the dearest offer: $0.32/h, 2 h
    assert refused.value.rule == "M15"
    assert "the team's budget of $1.20 per day" in str(refused.value)
    assert "committed" in str(refused.value) and "$0.64 for this rental" in str(refused.value)
    assert world.creates() == creates and world.alive() == alive  # the fake's own record
    assert world.market("alice").rentals.get("a1") is None  # refused before anything is written
    Budgets(world.store, "alice").set_limits(team_day=0.7)  # alone, alice would fit: bob counts
    with pytest.raises(Refused):
        world.market("alice").rent(request("a1", k=1))
    bobs = Budgets(world.store, "bob").snapshot()
    assert [s.operator for s in bobs.spends] == ["bob"]  # from the provider's row
    shown = VastAdapter(api_key="k-test", base_url=BASE).show(bobs.spends[0].instance_id)
    assert shown is not None and bobs.spends[0].start_s == shown.start_date


def test_a_rental_inside_every_limit_goes_ahead_and_a_threshold_is_an_alarm_m15(world):
    """M15/O1: under the limits a rental is kept; spent + committed past 80% of a limit is
    raised as an alarm naming the threshold."""
    Budgets(world.store, "alice").set_limits(team_day=0.7, operator="alice", day=10.0)
    world.market("alice").rent(request("a1", k=1))
    assert len(world.alive()) == 1
    world.market("alice").budget.check_rent("a2", 0.0, 0.0, None)  # type: ignore[union-attr]
    subjects = [a.subject for a in world.heard.alarms]  # type: ignore[attr-defined]
    assert any("team at 80% of $0.70 per day" in s for s in subjects)


def test_limits_set_one_at_a_time_keep_the_others(world):
    """M15: `budget set` changes only what it is given; who set it is recorded."""
    budgets = Budgets(world.store, "alice")
    budgets.set_limits(team_day=5.0)
    budgets.set_limits(team_month=50.0)
    Budgets(world.store, "bob").set_limits(operator="carol", month=7.0)
    now = budgets.snapshot()
    assert (now.team.usd_per_day, now.team.usd_per_month) == (5.0, 50.0)
    assert now.operators["carol"].usd_per_month == 7.0
    assert now.operators["carol"].usd_per_day is None and now.operators["carol"].set_by == "bob"
