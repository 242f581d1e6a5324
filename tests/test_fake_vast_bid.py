"""FakeVast's interruptible (bid) pricing, and gpuops' rental on Vast's documented default.

``vastai search offers --type bid`` asks for interruptible prices: each offer at its ``min_bid``
plus the disk price (vast-ai/vast-cli PR #403's SKILL.md; dstackai/gpuhunt PR #242; the exact
formula is reconstructed, docs/fakes.md). A create without ``price`` is on demand, billed at the
offer's ``dph_total``; a create with one (a bid: an interruptible rental, not modelled) is the
fake's loud 400. gpuops searches on demand and never sends a price.
"""

from __future__ import annotations

import json

import pytest
import requests

from fakes.scenario import parse_scenario
from fakes.seam import Reply, Request
from fakes.vast import FakeClock, FakeVast
from gpuops.clock import SYSTEM, WithSleep
from gpuops.providers.vast import VastAdapter

BASE = "https://console.vast.ai"
KEY = "fake-key-bid"
# Two offers: one with the recorded offer's own prices (dph_base 0.36, disk 0.0112 an hour,
# min_bid 0.21), one that gives only dph_total (its min_bid follows the recorded ratio).
RECORDED = 18432117
PLAIN = 18437120


@pytest.fixture
def fake() -> FakeVast:
    offers = [
        {"id": RECORDED, "machine_id": 31218, "gpu_name": "RTX 4090", "gpu_ram": 24564,
         "dph_total": 0.3712, "dph_base": 0.36, "min_bid": 0.21, "reliability": 0.9964,
         "disk_bw": 2875.4, "fate": "healthy"},
        {"id": PLAIN, "machine_id": 32005, "gpu_name": "RTX 4090", "gpu_ram": 24564,
         "dph_total": 0.48, "reliability": 0.9937, "disk_bw": 1980.5, "fate": "healthy"},
    ]  # fmt: skip
    doc = {"vast": {"api_key": KEY, "boot": {"provisioning_s": 10, "loading_s": 20},
                    "offers": offers}}  # fmt: skip
    return FakeVast(parse_scenario(doc), clock=FakeClock())


def search(kind: str, **query: object) -> dict[int, dict[str, object]]:
    body = {"type": kind, "order": [["score", "desc"]], "allocated_storage": 5.0, **query}
    answer = requests.post(f"{BASE}/api/v0/bundles/", json=body, headers=_auth(), timeout=5)
    answer.raise_for_status()
    return {int(row["id"]): row for row in answer.json()["offers"]}


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


def test_a_bid_search_prices_each_offer_at_its_min_bid_plus_the_disk_price(fake):
    """`--type bid`: dph_total is min_bid plus the on-demand row's disk price (dph_total -
    dph_base), and the search pricing object says the same; on demand it is dph_total."""
    with fake.activate(BASE):
        on_demand, bid = search("on-demand"), search("bid")

    row = bid[RECORDED]
    assert on_demand[RECORDED]["dph_total"] == 0.3712
    assert row["dph_total"] == round(0.21 + (0.3712 - 0.36), 6) == 0.2212
    assert row["dph_base"] == row["min_bid"] == 0.21
    assert row["search"]["totalHour"] == 0.2212 and row["search"]["diskHour"] == 0.0112
    assert row["dlperf_per_dphtotal"] > on_demand[RECORDED]["dlperf_per_dphtotal"]


def test_every_offer_is_cheaper_bid_than_on_demand_even_one_that_gives_no_min_bid(fake):
    """The same offers answer both searches, each cheaper as a bid; an offer whose scenario
    gives no min_bid gets the recorded ratio of min_bid to dph_base (0.21 / 0.36)."""
    with fake.activate(BASE):
        on_demand, bid = search("on-demand"), search("bid")

    assert set(bid) == set(on_demand) == {RECORDED, PLAIN}
    assert all(bid[i]["dph_total"] < on_demand[i]["dph_total"] for i in bid)
    assert on_demand[PLAIN]["min_bid"] == bid[PLAIN]["dph_total"] == round(0.48 * 0.21 / 0.36, 4)


def test_a_bid_search_filters_and_orders_on_the_bid_price(fake):
    """A price cut in a bid search is judged at the bid price: at most $0.25 an hour, only
    the interruptible price of the recorded offer (0.2212) passes; on demand, none does."""
    cut = {"dph_total": {"lte": 0.25}}
    with fake.activate(BASE):
        assert set(search("bid", **cut)) == {RECORDED}
        assert search("on-demand", **cut) == {}
        by_price = search("bid", order=[["dph_total", "asc"]])

    assert list(by_price) == sorted(by_price, key=lambda i: float(by_price[i]["dph_total"]))


def test_a_create_that_bids_a_price_is_a_loud_400_and_rents_nothing(fake):
    """A create with price (vastai --bid_price: an interruptible rental) is not modelled: the
    fake's own 400 says so, and no box exists; price null is an on-demand rental."""
    body = {"client_id": "me", "image": "img", "disk": 20.0, "price": 0.22, "label": "bid"}
    with fake.activate(BASE):
        refused = requests.put(f"{BASE}/api/v0/asks/{RECORDED}/", json=body, headers=_auth(),
                               timeout=5)  # fmt: skip
        rented = requests.put(f"{BASE}/api/v0/asks/{RECORDED}/", json={**body, "price": None},
                              headers=_auth(), timeout=5)  # fmt: skip

    assert refused.status_code == 400
    assert refused.json()["error"] == "fake_vast_bad_request"
    assert "interruptible" in refused.json()["msg"] and "0.22" in refused.json()["msg"]
    assert rented.status_code == 200
    assert [box.label for box in fake.instances.values()] == ["bid"]


def test_gpuops_rents_on_demand_never_sending_a_price_and_is_billed_at_dph_total(fake):
    """gpuops searches on demand (it sees 0.3712, not the 0.2212 bid price), its create body
    carries no price (Vast's documented default: on demand), and the box is billed at the
    offer's on-demand dph_total, not interruptible (is_bid false)."""
    sent: list[dict[str, object]] = []

    def tap(route: str, request: Request, reply: Reply) -> None:
        if route in ("search", "create"):
            sent.append({"route": route, **json.loads(request.body)})

    fake.taps.append(tap)
    vast = VastAdapter(api_key=KEY, base_url=BASE, clock=WithSleep(SYSTEM, fake.advance))
    with fake.activate(BASE):
        bid = search("bid")
        (seen,) = [o for o in vast.search_offers("RTX 4090") if o.id == RECORDED]
        box = vast.create(RECORDED, label="gpuops:od", image="img", disk_gb=20.0)
        shown = requests.get(f"{BASE}/api/v0/instances/{box}/", headers=_auth(), timeout=5)
    (searched,) = [s for s in sent if s["route"] == "search" and s["type"] != "bid"]
    (created,) = [s for s in sent if s["route"] == "create"]
    row = shown.json()["instances"]

    assert bid[RECORDED]["dph_total"] == 0.2212 and seen.dph_total == 0.3712
    assert searched["type"] == "on-demand"
    assert created.get("price") is None
    assert row["dph_total"] == 0.3712 and row["is_bid"] is False
