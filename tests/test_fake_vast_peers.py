"""A peer on the default scenario: the real vastai SDK driven as SkyPilot 0.14.1 drives it (H4).

SkyPilot's Vast catalog is built by sky/catalog/data_fetchers/fetch_vast.py: one search with
``georegion = true chunked = true inet_down >= 100 disk_space >= 80``, where vastai's
``chunked`` keeps only offers with ``cpu_ram`` >= 65,536 MB and ``cpu_cores`` >= 32 (and rounds
them down to those); offers are grouped into instance types ``{n}x-{gpu}-{cores}-{ram}``, priced
at their median, and a type is written for a region only when two offers at or below that price
share it. Its provisioner (sky/provision/vast/utils.py ``launch``) searches again with the
type's filters, creates the first offer, shows it, and lists until it runs with an ssh port;
terminate destroys it. Each step here is that call, through the SDK SkyPilot uses
(``vastai_sdk.VastAI``, vastai 1.9.1), against FakeVast on the default scenario.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from fakes.scenario import DEFAULT_SCENARIO, load_scenario
from fakes.vast import FakeClock, FakeVast

BASE = "https://console.vast.ai"
CATALOG_QUERY = "georegion = true chunked = true inet_down >= 100 disk_space >= 80"


@pytest.fixture
def peer() -> Any:
    """The default scenario and the SDK SkyPilot builds, each call spaced past the scenario's
    endpoint intervals (its rate limits), as a peer that waits would be."""
    from vastai.sdk import VastAI

    fake = FakeVast(load_scenario(DEFAULT_SCENARIO), clock=FakeClock())
    longest = max((s for _, s in fake.scenario.endpoint_intervals), default=0.0)

    def spaced(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        fake.advance(longest)
        return call(*args, **kwargs)

    with fake.activate(BASE):
        yield fake, VastAI(api_key=fake.api_key, server_url=BASE), spaced


def catalog_rows(offers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows fetch_vast.py writes for these (chunked, georegion) offers: per instance type,
    those at or below the median price, one row per (type, continent, hosting type) met twice."""
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for offer in offers:
        name = re.sub(r"\s", "_", str(offer["gpu_name"]))
        kind = f"{offer['num_gpus']}x-{name}-{offer['cpu_cores']}-{offer['cpu_ram']}"
        by_type[kind].append(
            {
                "InstanceType": kind,
                "Price": offer["search"]["totalHour"],
                "Region": offer["geolocation"],
                "HostingType": offer.get("hosting_type", 0),
            }
        )
    seen: set[str] = set()
    rows = []
    for entries in by_type.values():
        prices = sorted(e["Price"] for e in entries)
        target = prices[math.ceil(0.5 * len(prices)) - 1]
        for entry in (e for e in entries if e["Price"] <= target):
            stub = f"{entry['InstanceType']} {entry['Region'][-2:]} {entry['HostingType']}"
            if stub in seen and f"{stub}#print" not in seen:
                rows.append({**entry, "Price": target})
                seen.add(f"{stub}#print")
            seen.add(stub)
    return rows


def test_skypilots_catalog_search_on_the_default_scenario_yields_an_rtx_4090_type(peer):
    """The catalog's search keeps offers past the 65,536 MB RAM cut, among them the healthy
    RTX 4090, and two of them at or below the median price share a continent: SkyPilot's
    catalog has an RTX 4090 instance type to offer (it had none with every healthy host at
    the recorded 64,301 MB)."""
    fake, vast, spaced = peer

    offers = spaced(vast.search_offers, query=CATALOG_QUERY, limit=10000)
    rows = catalog_rows(offers)

    assert any(fake.offers[o["id"]].fate.kind == "healthy" for o in offers)
    assert all(o["cpu_ram"] == 65536 and o["cpu_cores"] == 32 for o in offers)  # chunked
    assert [r["InstanceType"] for r in rows] == ["1x-RTX_4090-32-65536"]
    assert rows[0]["Region"].endswith(", NA")


def test_skypilots_provisioner_launches_the_catalogs_type_sees_it_run_and_terminates_it(peer):
    """launch: the type's search, create with SkyPilot's body (env as a dict, its onstart,
    label NAME-head), show; the list reports it RUNNING with ssh_host, ssh_port and
    local_ipaddrs (get_cluster_info reads them); destroy; then no instance is listed."""
    fake, vast, spaced = peer
    (row,) = catalog_rows(spaced(vast.search_offers, query=CATALOG_QUERY, limit=10000))
    ram_gb = float(row["InstanceType"].split("-")[-1]) / 1024
    query = (
        f'chunked=true georegion=true geolocation="{row["Region"][-2:]}" disk_space>=80 '
        f'num_gpus=1 gpu_name="RTX 4090" cpu_ram>="{ram_gb}"'
    )

    (first, *_) = spaced(vast.search_offers, query=query)
    made = spaced(
        vast.create_instance,
        id=first["id"], image="vastai/base-image", disk=80, label="peer-c0-head",
        onstart_cmd="touch ~/.no_auto_tmux", env={"__SOURCE": "skypilot"},
    )  # fmt: skip
    shown = spaced(vast.show_instance, id=made["new_contract"])
    fake.advance(fake.scenario.provisioning_s + fake.scenario.loading_s)
    (listed,) = spaced(vast.show_instances)
    spaced(vast.destroy_instance, id=shown["id"])
    fake.advance(fake.scenario.destroy_lag_s + fake.scenario.list_lag_s)
    left = spaced(vast.show_instances)

    assert first["cpu_ram"] >= 65536 and first["gpu_name"] == "RTX 4090"
    assert shown["id"] == made["new_contract"] and shown["label"] == "peer-c0-head"
    assert listed["actual_status"] == "running" and listed["label"] == "peer-c0-head"
    assert listed["ssh_host"] and listed["ssh_port"] and listed["local_ipaddrs"].strip()
    assert listed["extra_env"] == {"__SOURCE": "skypilot"}
    assert left == []
