"""A GPU name typed in another casing rents the market's spelling; one no offer uses is a usage
error listing the nearest names (exit 2), never a stockout (exit 4) retried in vain."""

from __future__ import annotations

import pytest
from market_world import World, request, scenario  # noqa: F401
from test_rent import world  # noqa: F401  (world is a fixture)

from gpuops.errors import UsageError
from gpuops.market.rent import RentRequest
from gpuops.market.rentals import LIVE


def test_rent_with_a_lower_case_gpu_name_rents_the_market_spelling(world: World):
    """M1: `rtx 4090` races the RTX 4090 offers, logged under the market's spelling."""
    market = world.market()

    rental = market.rent(RentRequest(name="job", gpu_name="rtx 4090", hours=2.0, race_k=3))

    assert rental.state == LIVE and rental.gpu_name == "RTX 4090"
    (selection,) = world.events.kinds("market.selection")
    assert selection["gpu_name"] == "RTX 4090"


@pytest.mark.fault(
    "a GPU name typo (`RTX 9999`) looked like a stockout",
    handled="usage error (exit 2) naming the nearest known GPUs; nothing is created, no rental "
    "is written and no guardian started",
)
def test_rent_with_a_gpu_name_no_offer_uses_is_a_usage_error_and_creates_nothing(world: World):
    """M1: RTX 9999 is exit 2 listing RTX 4090; no create is sent, no rental is written and
    no owner is started (`on_race`, where the CLI spawns the guardian, never runs)."""
    market = world.market()
    owners: list[str] = []

    with pytest.raises(UsageError, match=r"'RTX 9999' in any casing; nearest known: 'RTX 4090'"):
        market.rent(
            RentRequest(name="job", gpu_name="RTX 9999", hours=2.0, race_k=3),
            on_race=lambda rental: owners.append(rental.name),
        )

    assert world.creates() == 0 and world.alive() == []
    assert market.rentals.get("job") is None and owners == []


@pytest.mark.parametrize("world", [scenario()], indirect=True)
def test_an_empty_market_is_still_a_stockout_not_a_typo(world: World):
    """M1: with no offers at all, a correct name is unavailable (exit 4), not a usage error."""
    from gpuops.errors import Unavailable

    with pytest.raises(Unavailable) as caught:
        world.market().rent(request())

    assert caught.value.exit_code == 4


def _with_a_3090() -> dict:
    doc = scenario("healthy", "healthy")
    doc["vast"]["offers"][1]["gpu_name"] = "RTX 3090"
    return doc


@pytest.mark.parametrize("world", [_with_a_3090()], indirect=True)
@pytest.mark.fault(
    "every offer of a real GPU is rented: it looked like a typo (exit 2, no offer names it)",
    handled="capacity (exit 4) naming the GPU; a name no offer uses, rented or not, stays a typo",
)
def test_a_gpu_whose_offers_are_all_rented_is_capacity_not_a_typo(world: World):
    """M1: with every RTX 4090 offer rented (an RTX 3090 still listed), `rent` is
    CapacityExhausted (exit 4) in any casing, nothing is created; RTX 9999 is still the usage
    error listing the known names."""
    from gpuops.errors import CapacityExhausted

    for offer in world.fake.offers.values():
        if offer.spec.fields["gpu_name"] == "RTX 4090":
            offer.taken = True  # rented by someone else: listed only under rented=true
    market = world.market()

    with pytest.raises(CapacityExhausted) as caught:
        market.rent(RentRequest(name="job", gpu_name="rtx 4090", hours=2.0, race_k=3))

    assert caught.value.exit_code == 4
    assert str(caught.value) == (
        "vast has no capacity: every RTX 4090 offer is rented now; try again later, or another GPU"
    )
    assert world.creates() == 0 and world.alive() == []
    with pytest.raises(UsageError, match="'RTX 9999' in any casing"):
        market.rent(RentRequest(name="job2", gpu_name="RTX 9999", hours=2.0, race_k=3))
