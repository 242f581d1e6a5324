"""No state lies (M4, M8, M13): a rental whose box is gone is never shown or returned live,
whoever died between which two writes. Judged by FakeVast's own record."""

from __future__ import annotations

from test_guard import World, world  # noqa: F401  (the fixture)
from test_guard_faults import market_of, rent, two_offers

import pytest

from gpuops.ledger import BoxState
from gpuops.market.rent import RentRequest
from gpuops.market.sweep import sweep
from gpuops.market.rentals import LIVE, RELEASED
from gpuops.market.teardown import destroy_box


def kill_destroy_after_its_last_record(world: World, name: str) -> None:
    """`gpuops destroy NAME` killed after it released the last box record and before it
    wrote the rental: every record released, the rental still live."""
    market = market_of(world, "alice")
    rental = market.rentals.get(name)
    assert rental is not None and rental.box is not None
    assert destroy_box(market.vast, market.ledger, rental.box).released


@pytest.mark.parametrize("world", [two_offers()], indirect=True)
def test_a_live_rental_whose_destroy_died_before_its_last_write_is_released_by_sweep_m13(world):
    """M13: destroy killed after its records were released: the next `sweep` (long before
    the deadline) releases the rental, so `boxes` stops showing spend on a gone box."""
    rent(world, "alice", "job", hours=24.0)
    kill_destroy_after_its_last_record(world, "job")
    market = market_of(world, "alice")
    assert market.rentals.get("job").state == LIVE and world.alive() == []

    sweep(market)

    assert market.rentals.get("job").state == RELEASED


@pytest.mark.parametrize("world", [two_offers()], indirect=True)
def test_rent_never_returns_a_live_rental_whose_box_is_gone_m8(world):
    """M8/M13: `rent NAME` on a rental whose destroy died before its last write, or whose box
    the provider no longer shows (destroyed outside gpuops), races afresh: the rental it
    returns is one whose box FakeVast shows running."""
    first = rent(world, "alice", "job", hours=24.0)
    kill_destroy_after_its_last_record(world, "job")
    market = market_of(world, "alice")

    again = market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=24.0, race_k=1))

    assert again.state == LIVE and again.instance_id != first
    assert world.alive() == [int(again.instance_id)]
    market.vast.destroy(str(again.instance_id))  # a person's `vastai destroy instance`
    third = market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=24.0, race_k=1))
    assert third.instance_id not in (first, again.instance_id)
    assert world.alive() == [int(third.instance_id)]
    old = [r for r in market.ledger.records() if r.instance_id == again.instance_id]
    assert [r.state for r in old] == [BoxState.RELEASED]  # confirmed gone, then released
