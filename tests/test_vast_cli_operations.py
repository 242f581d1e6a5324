"""The vastai 1.9.1 CLI's operations that gpuops or a peer uses, against served FakeVast: each
works as Vast documents it, or is loud (a 400 that says what is not modelled), never a silent
success (H4).

The fake runs as `gpuops fakes serve` runs it, on the exported clock, and the CLI (an unscaled
client) is pointed at its real-clock view, `$VAST_URL/real-clock`. One driver process runs
every command (tests/test_vast_cli_contract.py's DRIVER: a fork per command); the CLI exits 0
on most failures, so each answer is judged by what it printed.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_vast_cli_contract import DRIVER, STORY_TIMEOUT_S, Said

from fakes.scenario import DEFAULT_SCENARIO, load_scenario
from fakes.vast import ExportedClock, FakeVast, serve_http
from fakes.vast.routes import REAL_CLOCK

OFFER = 18432117  # the default scenario's healthy RTX 4090
FIRST_ID = 1234568
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB laptop"
CREATE = ["create", "instance", str(OFFER), "--image", "img", "--disk", "20", "--raw"]
STEPS: list[tuple[str, list[str]]] = [
    ("key_create", ["create", "ssh-key", KEY, "--raw"]),
    ("key_bad", ["create", "ssh-key", "not a key", "--raw"]),
    ("keys", ["show", "ssh-keys", "--raw"]),
    ("search", ["search", "offers", "--raw", "gpu_name=RTX_4090"]),
    ("search_bid", ["search", "offers", "--type", "bid", "--raw", "gpu_name=RTX_4090"]),
    ("search_reserved", ["search", "offers", "--type", "reserved", "--raw"]),
    ("create_bid", [*CREATE, "--bid_price", "0.22"]),
    ("create", CREATE),
    ("show", ["show", "instance", str(FIRST_ID), "--raw"]),
    ("stop", ["stop", "instance", str(FIRST_ID), "--raw"]),
    ("start", ["start", "instance", str(FIRST_ID), "--raw"]),
]


@dataclasses.dataclass
class Ran:
    said: dict[str, Said]
    fake: FakeVast
    before: float
    after: float


@pytest.fixture(scope="module")
def ran() -> Iterator[Ran]:
    """Every step, once, against one fake on the exported clock, through /real-clock."""
    loaded = load_scenario(DEFAULT_SCENARIO)
    # back to back, as fast as the machine allows: the per-endpoint intervals are not the point
    scenario = dataclasses.replace(
        loaded, vast=dataclasses.replace(loaded.vast, endpoint_intervals=())
    )
    fake = FakeVast(scenario, clock=ExportedClock(scenario.time_scale))
    with serve_http(fake) as server:
        url = server.url + REAL_CLOCK
        argvs = [["--url", url, "--api-key", fake.api_key, *argv] for _, argv in STEPS]
        before = time.time()
        done = subprocess.run(
            [sys.executable, "-c", DRIVER],
            input=json.dumps(argvs), capture_output=True, text=True, timeout=STORY_TIMEOUT_S,
        )  # fmt: skip
        after = time.time()
    assert done.returncode == 0, done.stderr
    said = {name: Said(**r) for (name, _), r in zip(STEPS, json.loads(done.stdout), strict=True)}
    yield Ran(said, fake, before, after)


def _loud(said: Said, *words: str) -> dict[str, Any]:
    """The CLI's report of a 400 (on stderr, exit 0): its JSON, which says ``words``."""
    report = json.loads(said.err.strip().splitlines()[-1])
    assert report["status_code"] == 400, said
    assert all(w in report["msg"] for w in words), report
    return dict(report)


def test_ssh_key_create_registers_and_lists_and_a_bad_key_is_a_400(ran):
    """`create ssh-key KEY` registers it (listed by `show ssh-keys`); "not a key" is the
    documented 400 naming why, and is never listed."""
    keys = [k["key"] for k in ran.said["keys"].json()]

    assert "ssh-key created" in ran.said["key_create"].out
    _loud(ran.said["key_bad"], "not an SSH public key")
    assert KEY in keys and "not a key" not in keys


def test_search_type_bid_prints_each_offer_at_its_min_bid_plus_the_disk_price(ran):
    """`search offers --type bid`: the same offers, each at min_bid plus the on-demand row's
    disk price, cheaper than on demand."""
    on_demand = {o["id"]: o for o in ran.said["search"].json()}
    bid = {o["id"]: o for o in ran.said["search_bid"].json()}

    assert set(bid) == set(on_demand) and len(bid) > 3
    for offer_id, row in bid.items():
        od = on_demand[offer_id]
        assert row["dph_total"] == round(od["min_bid"] + od["dph_total"] - od["dph_base"], 6)
        assert row["dph_total"] < od["dph_total"]


def test_a_bid_create_and_a_reserved_search_are_loud_400s_that_rent_nothing(ran):
    """`create instance --bid_price` (interruptible) and `search offers --type reserved` are
    not modelled: each a 400 saying so, and the bid rents no box; the plain create does."""
    _loud(ran.said["create_bid"], "interruptible", "0.22")
    _loud(ran.said["search_reserved"], "reserved")

    assert [c.status for c in ran.fake.calls if c.route == "create"] == [400, 200]
    assert ran.said["create"].json()["new_contract"] == FIRST_ID
    assert list(ran.fake.instances) == [FIRST_ID]


def test_stop_and_start_are_loud_and_leave_the_box_as_it_was(ran):
    """`stop instance` and `start instance` (not modelled) are each a 400 saying so, never a
    silent success: the box is never stopped."""
    _loud(ran.said["stop"], "not modelled")
    _loud(ran.said["start"], "not modelled")

    box = ran.fake.instances[FIRST_ID]
    assert box.destroyed_at is None and ran.fake.status(box) != "stopped"


def test_the_cli_on_the_real_clock_view_reads_start_date_on_its_own_clock(ran):
    """Through /real-clock the box started between the story's real start and end, though the
    fake's own (exported, x10) clock is ahead of the real one."""
    shown = ran.said["show"].json()
    box = ran.fake.instances[FIRST_ID]

    assert ran.before <= shown["start_date"] <= ran.after
    assert box.created_at > shown["start_date"]  # the exported clock's time, not the CLI's
