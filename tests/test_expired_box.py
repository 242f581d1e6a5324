"""A Vast box whose contract ended: stopped by Vast, deleted 48 h later (H6). The race never
rents an offer whose contract ends before the deadline plus CONTRACT_END_MARGIN_S; a box that
expired anyway (its deadline moved past its contract) is recognised by `watch`, `boxes` and
its guardian, which still destroys it and confirms it gone. On FakeVast and the fake ssh."""

from __future__ import annotations

import copy

import pytest
from test_guard import OFFER, World, scenario, world  # noqa: F401  (world is a fixture)

from fakes.scenario import parse_offer
from fakes.vast.clock import RECORDED_EPOCH
from gpuops import timing
from gpuops.market import guardian as g
from gpuops.market import jobs
from gpuops.market import watchdog as w
from gpuops.market.rent import RentRequest
from gpuops.model import InstanceStatus

HOURS = 1.0
# the offer's contract outlasts a one-hour rental by the margin, and 60 s more
END = RECORDED_EPOCH + HOURS * 3600.0 + timing.CONTRACT_END_MARGIN_S + 60.0


def _ending() -> dict[str, object]:
    doc = copy.deepcopy(scenario())
    doc["vast"]["offers"][0]["end_date"] = END
    return doc


@pytest.mark.parametrize("world", [_ending()], indirect=True)
def test_an_offer_whose_contract_ends_before_the_deadline_plus_the_margin_is_never_rented_h6(
    world: World,
):
    """A cheaper offer whose contract ends within the rental's hours plus the margin is left
    out with its reason; the one that outlasts them is rented and its end recorded."""
    short = dict(world.fake.offers[OFFER].spec.fields)
    short.update(id=OFFER + 1, machine_id=777, dph_total=0.1, end_date=END - 120.0)
    world.fake.add_offer(parse_offer(short))
    market = world.market()

    rental = market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=HOURS, race_k=2))

    assert rental.offer_id == OFFER and rental.contract_end_at == END
    assert [b.offer_id for b in world.fake.instances.values()] == [OFFER]
    (selection,) = world.events.kinds("market.selection")
    assert {"id": OFFER + 1, "reasons": ["contract end 0.0 h too soon"]} in selection["removed"]


@pytest.mark.parametrize("world", [_ending()], indirect=True)
def test_an_expired_box_is_dead_to_watch_and_its_guardian_destroys_it_confirmed_gone_h6(
    world: World,
):
    """The deadline moved past the contract's end: at that end Vast stops the box; `watch`
    judges the job dead (a stopped box runs nothing), the guardian records its results as
    missing because the box is stopped, destroys it and confirms it gone."""
    market = world.rent(hours=HOURS)
    world.run_job(market, "mkdir -p results && echo 1 > results/x")
    rental = market.rentals.get("job")
    assert rental is not None and rental.instance_id is not None
    market.rentals.update("job", deadline_at=END + 3600.0)  # `guard --hours` past the contract
    world.fake.advance(END - world.fake.now())
    shown = market.vast.show(rental.instance_id)
    assert shown is not None and shown.actual_status is InstanceStatus.STOPPED

    status = jobs.observe("job", shown, world.shell())

    assert status.state is w.JobState.DEAD and w.watch_exit_code(status) == 6
    assert status.detail.startswith("the box is stopped: expired at its contract's end")
    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE
    assert world.alive() == []
    (copied,) = world.events.kinds("guard.copy")
    assert copied["results"] == "missing" and "the box is stopped (expired" in copied["detail"]
    assert world.events.kinds("guard.confirmed_gone")


def test_boxes_marks_a_live_rental_whose_contract_has_ended_as_expired_h6(
    tmp_path, capsys, monkeypatch
):
    """`boxes` reads the store only: a live rental past its recorded contract end is EXPIRED
    (in text and as ``expired`` in JSON); one whose contract still runs, or never said, is not."""
    import dataclasses
    import json
    import os
    import time

    from gpuops import cli
    from gpuops.market.rentals import Rental
    from gpuops.store.local import LocalStore

    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    store = LocalStore(str(tmp_path / "state"))
    now = time.time()  # boxes reads the real clock
    for name, end in (("ended", now - 60.0), ("running", now + 86400.0), ("unsaid", None)):
        record = Rental(name=name, owner="alice", state="live", race=1, contract_end_at=end)
        store.create(f"market/rentals/{name}", json.dumps(dataclasses.asdict(record)).encode())
    base = ["--state", str(tmp_path / "state"), "--operator", "alice"]

    assert cli.main([*base, "--json", "boxes"]) == 0
    rows = {r["name"]: r["expired"] for r in json.loads(capsys.readouterr().out)["rentals"]}
    assert cli.main([*base, "boxes"]) == 0
    text = capsys.readouterr().out

    assert rows == {"ended": True, "running": False, "unsaid": False}
    (line,) = [line for line in text.splitlines() if "EXPIRED" in line]
    assert line.startswith("ended ") and "its contract ended" in line


def test_offers_leaves_out_an_offer_whose_contract_ends_within_the_margin_and_says_so_h6(
    tmp_path, monkeypatch, capfdbinary
):
    """`offers` reads the real clock: an offer whose contract ends within
    CONTRACT_END_MARGIN_S is left out, counted in its own line (and `contract_ended` in JSON),
    its reason shown by --all; one whose contract runs a day more is listed."""
    import json
    import time

    from test_daily import gpuops as run_cli
    from test_daily import offers
    from test_daily import world as daily_world

    from fakes.vast import FakeClock

    doc = offers(0.30, 0.40)
    doc["vast"]["offers"][0]["end_date"] = time.time() + timing.CONTRACT_END_MARGIN_S - 600.0
    doc["vast"]["offers"][1]["end_date"] = time.time() + 86400.0
    with daily_world(tmp_path, monkeypatch, doc, FakeClock()) as day:
        code, out, err = run_cli(capfdbinary, "offers", "--all", state=day.state)
        json_code, json_out, _ = run_cli(capfdbinary, "--json", "offers", state=day.state)

    text = out.decode()
    assert code == 0 and json_code == 0, err
    assert "1 left out for their contract end (within 1 h)" in text
    assert "REMOVED: contract end 0.2 h too soon" in text
    listed = json.loads(json_out)
    assert [o["id"] for o in listed["offers"]] == [doc["vast"]["offers"][1]["id"]]
    assert listed["contract_ended"] == 1
