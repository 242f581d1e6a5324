"""FakeVast, feature by feature: lifecycle on the injected clock, offer fates, scripted faults,
wire fidelity to recordings/vast, the fake ssh box table, loudness, and the loopback server.

In-process tests drive the clock by hand and never sleep. Loopback tests start a real
ThreadingHTTPServer on 127.0.0.1 and talk to it with the real vastai client.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import requests

from fakes.scenario import (
    DEFAULT_SCENARIO,
    DestroyFailure,
    LostCreate,
    RateLimitBurst,
    ScenarioError,
    load_scenario,
    parse_scenario,
    recorded_offer,
)
from fakes.ssh.boxes import entry_path, load_box, load_table, write_identity
from fakes.ssh.replay import FakeSshError
from fakes.vast import (
    FakeClock,
    FakeVast,
    ScaledClock,
    UnknownRoute,
    known_routes,
    serve_http,
    wire,
)
from fakes.vast.boxtable import write_entry
from fakes.vast.routes import next_token
from fakes.vast.wire import recorded
from gpuops.errors import (
    AuthFailed,
    OfferTaken,
    ProviderUnavailable,
    RateLimited,
    SearchQuotaExceeded,
    UnexpectedResponse,
)
from gpuops.market.probing import probe
from gpuops.market.select import Filter, reasons_to_remove, select
from gpuops.model import InstanceStatus, Verdict
from gpuops.providers import load_recording
from gpuops.providers.ssh import SshEndpoint, known_hosts_path
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings
from gpuops.clock import SYSTEM, WithSleep

ROOT = Path(__file__).resolve().parent.parent
BASE = "https://console.vast.ai"
KEY = "fake-key-T1"
LABEL = "gpuops:intent-aa11"
BOOT_S = 30.0  # provisioning_s + loading_s in the scenarios below
FAKE_SSH = ROOT / "fakes" / "ssh" / "ssh"


def offer(offer_id: int, fate: str = "healthy", **fields: object) -> dict[str, object]:
    """A scenario offer inside the default filter, with ``fields`` replaced."""
    return {
        "id": offer_id,
        "machine_id": 50000 + offer_id,
        "gpu_name": "RTX 4090",
        "gpu_ram": 24564,
        "dph_total": 0.30 + offer_id / 1000,
        "reliability": 0.995,
        "disk_bw": 2500.0,
        "fate": fate,
        **fields,
    }


def scenario(*offers: dict[str, object], **vast: object) -> dict[str, object]:
    return {
        "vast": {
            "api_key": KEY,
            "boot": {"provisioning_s": 10, "loading_s": 20},
            "offers": list(offers) or [offer(1)],
            **vast,
        }
    }


@pytest.fixture
def make(tmp_path):
    """Builds a FakeVast on a FakeClock, its box table in tmp_path/state."""

    def build(doc: dict[str, object]) -> FakeVast:
        return FakeVast(parse_scenario(doc), clock=FakeClock(), state_dir=tmp_path / "state")

    return build


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def vast(sleeps) -> VastAdapter:
    """The real adapter (and vastai client), pointed at BASE, sleeping into ``sleeps``."""
    return VastAdapter(api_key=KEY, base_url=BASE, clock=WithSleep(SYSTEM, sleeps.append))


def rent(vast: VastAdapter, offer_id: int = 1, label: str = LABEL) -> str:
    return vast.create(offer_id, label=label, image="pytorch/pytorch", disk_gb=20.0)


# --- lifecycle on the injected clock ------------------------------------------------------------
def test_a_new_box_is_provisioning_then_loading_then_running_on_the_clock(make, vast):
    """actual_status null for provisioning_s, loading for loading_s, then running."""
    fake = make(scenario())
    with fake.activate(BASE):
        box = rent(vast)
        seen = [vast.show(box).actual_status]
        for step_s in (10.0, 19.0, 1.0):
            fake.advance(step_s)
            seen.append(vast.show(box).actual_status)

    assert seen == [
        InstanceStatus.PROVISIONING,
        InstanceStatus.LOADING,
        InstanceStatus.LOADING,
        InstanceStatus.RUNNING,
    ]


def test_a_dies_after_box_exits_that_many_minutes_after_it_started_running(make, vast):
    """M10: dies-after:5 is running for five minutes, then exited (a fact)."""
    fake = make(scenario(offer(1, "dies-after:5")))
    with fake.activate(BASE):
        box = rent(vast)
        fake.advance(BOOT_S + 299.0)
        before = vast.show(box)
        fake.advance(1.0)
        after = vast.show(box)

    assert before is not None and before.actual_status is InstanceStatus.RUNNING
    assert after is not None and after.actual_status is InstanceStatus.EXITED
    assert after.actual_status.is_terminal_failure


def test_a_created_box_keeps_its_label_image_onstart_disk_and_env(make, vast):
    """M3: the label travels from the create body to every row that shows the box."""
    fake = make(scenario())
    with fake.activate(BASE):
        box = vast.create(1, label=LABEL, image="pytorch/pytorch", disk_gb=32.0, onstart="echo hi")
        listed = vast.list_instances()

    state = fake.instances[int(box)]
    row = wire.instance_row(state, fake.status(state))
    assert listed[0].label == LABEL and listed[0].instance_id == box
    assert (row["image_uuid"], row["onstart"], row["disk_space"]) == (
        "pytorch/pytorch",
        "echo hi",
        32.0,
    )
    assert row["extra_env"] == [] and row["start_date"] == fake.now()


def test_destroy_makes_show_answer_instances_null(make, vast):
    """M4: a destroyed box is gone to show, and gone to the list."""
    fake = make(scenario())
    with fake.activate(BASE):
        box = rent(vast)
        vast.destroy(box)
        shown, listed = vast.show(box), vast.list_instances()

    assert shown is None and listed == []
    assert fake.calls[-2].route == "show" and fake.calls[-2].status == 200


def test_a_destroy_lag_keeps_the_box_visible_until_it_passes(make, vast):
    """provider-formats A.7: GET right after DELETE may still show the row for a while."""
    fake = make(scenario(destroy_lag_s=5))
    with fake.activate(BASE):
        box = rent(vast)
        vast.destroy(box)
        during = vast.show(box)
        fake.advance(5.0)
        after = vast.show(box)

    assert during is not None and after is None


@pytest.mark.parametrize("error", ["no_such_instance", "not_found"])
def test_destroying_a_box_twice_answers_the_scenarios_gone_error(make, vast, error):
    """The second DELETE is the recorded 404 for that error code; the adapter calls it gone."""
    fake = make(scenario(destroy_gone_error=error))
    with fake.activate(BASE) as mock:
        box = rent(vast)
        vast.destroy(box)
        vast.destroy(box)
        body = mock.calls[-1].response.text

    recorded = json.loads(load_recording("vast", f"destroy_404_{error}").body)
    assert json.loads(body) == wire.readdressed(recorded, wire.RECORDED_INSTANCE_ID, int(box))
    assert fake.calls[-1].status == 404


def test_a_rented_offer_leaves_the_search_and_comes_back_after_destroy(make, vast):
    """One offer, one box: renting it again is no_such_ask until our box is destroyed."""
    fake = make(scenario(offer(1), offer(2)))
    with fake.activate(BASE):
        box = rent(vast, 1)
        during = [o.id for o in vast.search_offers()]
        with pytest.raises(OfferTaken):
            rent(vast, 1)
        vast.destroy(box)
        after = [o.id for o in vast.search_offers()]

    assert during == [2] and sorted(after) == [1, 2]


def test_a_second_purchase_of_one_offer_is_accepted_and_that_box_never_runs_h6(make, vast):
    """skypilot-org/skypilot#9117: Vast accepts two purchases of one offer and launches both;
    the later box loads, then exits (its failure never reaches the client); the first runs
    and keeps the offer held."""
    fake = make(scenario(offer(1), duplicate_purchases=True))
    with fake.activate(BASE):
        first = rent(vast, 1)
        second = rent(vast, 1, label="gpuops:intent-bb22")
        fake.advance(BOOT_S - 1)
        loading = vast.show(second).actual_status
        fake.advance(1)
        statuses = (vast.show(first).actual_status, vast.show(second).actual_status)
        listed = [o.id for o in vast.search_offers()]

    assert first != second
    assert fake.instances[int(second)].duplicate_of == int(first)
    assert fake.instances[int(first)].duplicate_of is None
    assert loading is InstanceStatus.LOADING
    assert statuses == (InstanceStatus.RUNNING, InstanceStatus.EXITED)
    assert fake.offers[1].held_by == int(first) and listed == []


def test_without_duplicate_purchases_a_held_offer_is_no_such_ask_410(make, vast):
    """The scenario's default keeps the old refusal: a held offer's second create is 410."""
    fake = make(scenario(offer(1)))
    with fake.activate(BASE):
        rent(vast, 1)
        with pytest.raises(OfferTaken) as taken:
            rent(vast, 1)

    assert taken.value.status == 410 and len(fake.instances) == 1


def test_an_offer_in_duplicate_listings_is_listed_twice_by_search_h6(make, vast):
    """vast-ai/vast-cli#260: search "sometimes returns duplicate machines"."""
    fake = make(scenario(offer(1), offer(2), faults={"duplicate_listings": [2]}))
    with fake.activate(BASE):
        listed = [o.id for o in vast.search_offers()]

    assert sorted(listed) == [1, 2, 2]


def test_at_its_contract_end_a_box_is_stopped_then_deleted_48_hours_later_h6(make, vast):
    """vast.ai/docs/introduction/overview: "Once an instance hits its end date it expires and
    is automatically stopped ... may be deleted 48 hours after expiration". The box's end_date
    is its offer's; stopped, it is still shown and listed (and may be destroyed); 48 h on, it
    is gone, and the ended offer has left the search."""
    from fakes.vast.clock import RECORDED_EPOCH

    end = RECORDED_EPOCH + 3600.0
    fake = make(scenario(offer(1, end_date=end), offer(2, contract_days=2.0)))
    with fake.activate(BASE):
        listed = {o.id: o.end_date for o in vast.search_offers()}
        box = rent(vast, 1)
        fake.advance(BOOT_S)
        running = vast.show(box)
        fake.advance(3600.0 - BOOT_S)
        stopped = vast.show(box)
        listed_then = [i.instance_id for i in vast.list_instances()]
        searched = [o.id for o in vast.search_offers()]
        fake.advance(48 * 3600.0 - 1)
        still = vast.show(box)
        fake.advance(1)
        gone = vast.show(box), vast.list_instances()

    assert listed == {1: end, 2: RECORDED_EPOCH + 2 * 86400.0}
    assert running.actual_status is InstanceStatus.RUNNING
    assert (
        stopped.actual_status is InstanceStatus.STOPPED and stopped.actual_status_raw == "stopped"
    )
    assert listed_then == [box] and searched == [2]
    assert still is not None and still.actual_status is InstanceStatus.STOPPED
    assert gone == (None, [])
    assert list(fake.boxes()) == []


def test_an_expired_box_may_be_destroyed_and_a_deleted_one_is_gone_h6(make, vast):
    """A stopped (expired) box is destroyed like any other; once deleted, a destroy is 404."""
    from fakes.vast.clock import RECORDED_EPOCH

    fake = make(
        scenario(
            offer(1, end_date=RECORDED_EPOCH + 600.0), offer(2, end_date=RECORDED_EPOCH + 600.0)
        )
    )
    with fake.activate(BASE):
        first, second = rent(vast, 1), rent(vast, 2, label="gpuops:intent-cc33")
        fake.advance(600.0)
        vast.destroy(first)
        fake.advance(48 * 3600.0)
        shown = vast.show(first), vast.show(second)

    assert fake.instances[int(first)].destroyed_at == RECORDED_EPOCH + 600.0
    assert shown == (None, None)
    with fake.activate(BASE):
        vast.destroy(second)  # the adapter reads the 404 as already gone
    assert (fake.calls[-1].route, fake.calls[-1].status) == ("destroy", 404)


def test_a_scenario_offer_gives_contract_days_or_end_date_never_both():
    """contract_days and an explicit end_date contradict each other: refused by name."""
    with pytest.raises(ScenarioError, match=r"contract_days: give either"):
        parse_scenario(scenario(offer(1, end_date=1.0, contract_days=1)))
    with pytest.raises(ScenarioError, match=r"contract_days: 0 must be positive"):
        parse_scenario(scenario(offer(1, contract_days=0)))


# --- search ---------------------------------------------------------------------------------------
def test_search_applies_the_filters_order_and_limit_the_sdk_sends(make, vast):
    """gpu_name, reliability and price filters, score order and limit, as Vast would."""
    fake = make(
        scenario(
            offer(1, score=10.0),
            offer(2, score=30.0),
            offer(3, score=20.0, reliability=0.9),
            offer(4, score=40.0, gpu_name="RTX 3090"),
            offer(5, score=50.0, dph_total=9.0),
        )
    )
    with fake.activate(BASE):
        found = vast.search_offers("RTX 4090", 1, min_reliability=0.98, max_dph_total=1.0)
        limited = vast.search_offers(limit=2)

    assert [o.id for o in found] == [2, 1]
    assert [o.id for o in limited] == [5, 4]


def test_search_with_a_filter_on_an_unknown_field_is_refused_by_name(make, vast):
    """A filter the fake cannot honour is Vast's invalid_request, never silently ignored."""
    fake = make(scenario())
    with fake.activate(BASE) as mock:
        mock.assert_all_requests_are_fired = False
        answer = requests.post(
            f"{BASE}/api/v0/bundles/",
            json={"gpu_nmae": {"eq": "RTX 4090"}},
            headers={"Authorization": f"Bearer {KEY}"},
        )

    assert answer.status_code == 400
    assert answer.json() == {
        "error": "invalid_request",
        "msg": "Error in query parameters: gpu_nmae is not a valid search key",
    }


# --- offer fates: taken ---------------------------------------------------------------------------
@pytest.mark.parametrize("status", [400, 404, 410])
def test_a_taken_offer_answers_no_such_ask_with_its_scripted_status(make, vast, status):
    """Taken between search and rent: listed by search, refused at create, then gone."""
    fake = make(scenario(offer(7, "taken", taken_status=status), offer(8)))
    with fake.activate(BASE):
        before = [o.id for o in vast.search_offers()]
        with pytest.raises(OfferTaken) as caught:
            rent(vast, 7)
        after = [o.id for o in vast.search_offers()]

    assert before == [7, 8] and after == [8]
    assert caught.value.status == status and "no_such_ask" in caught.value.body
    assert "1234567" not in caught.value.body and fake.instances == {}


def test_renting_an_offer_the_market_never_had_is_no_such_ask_404(make, vast):
    """An unknown ask id is the documented 404 no_such_ask."""
    fake = make(scenario())
    with fake.activate(BASE), pytest.raises(OfferTaken) as caught:
        rent(vast, 999)

    assert caught.value.status == 404


def test_instances_rented_at_start_are_running_listed_labelled_and_hold_their_offers(make, vast):
    """vast.instances: boxes that exist when the fake starts, as if created one boot ago."""
    doc = scenario(offer(1), offer(2), offer(3))
    doc["vast"]["instances"] = [{"offer": 2, "label": "theirs"}, {"offer": 1, "label": LABEL}]
    fake = make(doc)
    with fake.activate(BASE):
        listed = vast.list_instances()
        shown = vast.show(listed[0].instance_id)
        with pytest.raises(OfferTaken):
            rent(vast, 2)
        third = rent(vast, 3)
    table = load_table(fake.box_table)

    assert [(b.instance_id, b.label) for b in listed] == [("1234568", "theirs"), ("1234569", LABEL)]
    assert shown.actual_status is InstanceStatus.RUNNING and third == "1234570"
    assert {table[k].fate for k in endpoints_of(fake, "1234568")} == {"healthy"}


# --- the v1 list ----------------------------------------------------------------------------------
def test_the_v1_list_serves_25_a_page_with_next_token(make, vast):
    """Thirty boxes: two pages, the second asked for with the first page's next_token."""
    fake = make(scenario(*[offer(n) for n in range(1, 31)]))
    with fake.activate(BASE) as mock:
        boxes = [rent(vast, n) for n in range(1, 31)]
        listed = vast.list_instances()
        pages = [c for c in mock.calls if "/api/v1/instances/" in c.request.url]

    assert [b.instance_id for b in listed] == boxes
    first = json.loads(pages[0].response.text)
    assert len(first["instances"]) == 25 and first["total_instances"] == 30
    assert first["next_token"] == next_token(int(boxes[24]))
    assert "after_token" in pages[1].request.params and len(pages) == 2


def test_paging_the_list_builds_what_it_lists_once_until_a_box_changes(make, vast):
    """Sixty boxes, three pages, one listing; a destroy makes the next page list afresh."""
    fake = make(scenario(*[offer(n) for n in range(1, 61)]))
    with fake.activate(BASE):
        boxes = [rent(vast, n) for n in range(1, 61)]
        listings = []
        real = fake.listing

        def counted():
            listings.append(real())
            return listings[-1]

        fake.listing = counted
        listed = vast.list_instances()
        vast.destroy(boxes[0])
        again = vast.list_instances()

    assert [b.instance_id for b in listed] == boxes and [b.instance_id for b in again] == boxes[1:]
    assert len(listings) == 6 and len({id(x) for x in listings}) == 2


def test_the_list_leaves_out_a_destroyed_box_once_its_destroy_lag_passes(make, vast):
    """The list, like show, reports a destroyed box for destroy_lag_s, then never again."""
    fake = make(scenario(offer(1), offer(2), destroy_lag_s=5))
    with fake.activate(BASE):
        first, second = rent(vast, 1), rent(vast, 2)
        vast.destroy(first)
        during = [b.instance_id for b in vast.list_instances()]
        fake.advance(4.9)
        still = [b.instance_id for b in vast.list_instances()]
        fake.advance(0.1)
        after = [b.instance_id for b in vast.list_instances()]

    assert during == still == [first, second] and after == [second]


def test_a_relabelled_box_is_counted_under_its_new_label(make, vast):
    """The page's label counts follow a label change made between two listings."""
    fake = make(scenario(offer(1), offer(2)))
    with fake.activate(BASE) as mock:
        rent(vast, 1)
        second = rent(vast, 2)
        vast.list_instances()
        fake.label(int(second), "other")
        vast.list_instances()
        page = json.loads(mock.calls[-1].response.text)

    assert page["label_counts"] == {LABEL: 1, "other": 1}


def test_the_list_by_label_finds_only_that_label(make, vast):
    """M12 reconcile: select_filters label eq returns the boxes with that label."""
    fake = make(scenario(offer(1), offer(2), offer(3)))
    with fake.activate(BASE):
        rent(vast, 1, "gpuops:a")
        wanted = rent(vast, 2, "gpuops:b")
        rent(vast, 3, "gpuops:a")
        found = vast.list_instances(label="gpuops:b")

    assert [b.instance_id for b in found] == [wanted]


def test_the_list_by_label_pages_too(make, vast):
    """M12 reconcile over many boxes: a filtered list still pages 25 at a time."""
    fake = make(scenario(*[offer(n) for n in range(1, 31)]))
    with fake.activate(BASE):
        boxes = [rent(vast, n, "gpuops:same") for n in range(1, 31)]
        found = vast.list_instances(label="gpuops:same")

    assert [b.instance_id for b in found] == boxes
    assert [c.route for c in fake.calls].count("list") == 2


def test_an_empty_list_fault_hides_boxes_that_show_still_finds(make, vast):
    """M4: the list may answer empty while the box exists; only show is a confirmation."""
    fake = make(scenario(faults={"empty_list": True}))
    with fake.activate(BASE):
        box = rent(vast)
        listed = vast.list_instances()
        shown = vast.show(box)

    assert listed == [] and shown is not None and shown.instance_id == box


def test_an_empty_list_fault_with_a_count_lies_only_that_many_times(make, vast):
    """empty_list {count: 2}: two empty answers, then the truth."""
    fake = make(scenario(faults={"empty_list": {"count": 2}}))
    with fake.activate(BASE):
        box = rent(vast)
        answers = [[b.instance_id for b in vast.list_instances()] for _ in range(3)]

    assert answers == [[], [], [box]]


# --- ssh keys (M9) --------------------------------------------------------------------------------
def test_keys_registered_at_start_are_listed_and_a_deleted_one_is_left_out(make, vast):
    """M9: the scenario's keys are the account's; deleted_at keys never count."""
    recorded_key = json.loads(load_recording("vast", "ssh_keys_list").body)[0]["key"]
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB x"
    fake = make(
        scenario(ssh_keys=["generated", {"key": other, "deleted_at": "2026-09-21T08:30:00Z"}])
    )
    with fake.activate(BASE):
        keys = vast.list_ssh_keys()

    assert [k.public_key for k in keys] == [recorded_key]


def test_a_scenario_with_no_keys_lists_none_so_a_race_can_be_refused(make, vast):
    """M9: an account with no SSH key: the rent refusal can be tested."""
    fake = make(scenario(ssh_keys=[]))
    with fake.activate(BASE):
        assert vast.list_ssh_keys() == []


def test_registering_a_key_adds_it_to_the_account(make, vast):
    """M9: a registered key is listed afterwards."""
    new = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM+IjJ97AMeE89dcToyadVmtlBR6Ujcoy6iaia4CUO7g me"
    fake = make(scenario(ssh_keys=[]))
    with fake.activate(BASE):
        registered = vast.register_ssh_key(new)
        listed = vast.list_ssh_keys()

    assert listed == [registered] and registered.matches(new)


# --- scripted faults ------------------------------------------------------------------------------
def test_a_429_burst_answers_calls_after_n_for_m_calls_on_its_route(make, vast, sleeps):
    """{after_calls: 1, count: 2, route: show}: show 1 ok, 2-3 are 429 (retried), 4 ok."""
    burst = {"after_calls": 1, "count": 2, "route": "show", "body": "json"}
    fake = make(scenario(faults={"rate_limits": [burst]}))
    with fake.activate(BASE):
        box = rent(vast)
        vast.show(box)
        vast.show(box)

    assert [c.status for c in fake.calls if c.route == "show"] == [200, 429, 429, 200]
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("body", "error", "text"),
    [
        ("plain", RateLimited, "API requests too frequent"),
        ("json", RateLimited, "threshold=4.5"),
        ("json-error", RateLimited, "threshold=3.0"),
        ("search-quota", SearchQuotaExceeded, "resets at 2026-12-01 00:00 UTC"),
    ],
)
def test_a_429_bodys_shape_is_the_recorded_one_the_scenario_names(make, vast, body, error, text):
    """M12: the create is sent once and gets the recorded 429 body of that shape."""
    fake = make(scenario(faults={"rate_limits": [{"count": 1, "body": body}]}))
    with fake.activate(BASE), pytest.raises(error, match=text):
        rent(vast)

    assert [c.route for c in fake.calls] == ["create"] and fake.instances == {}


def test_a_burst_with_retry_after_sends_the_header_the_adapter_honours(make, vast, sleeps):
    """A Retry-After within the backoff cap replaces the adapter's own backoff."""
    fake = make(scenario())
    fake.add_rate_limit(RateLimitBurst(count=1, route="search", retry_after_s=7.0))
    with fake.activate(BASE):
        vast.search_offers()

    assert sleeps == [7.0]


def test_a_destroy_failing_n_times_answers_503_then_destroys(make, vast, sleeps):
    """M4: two 503s on destroy (retried by the adapter), then the box is gone."""
    fake = make(scenario(faults={"destroy_failures": [{"offer": 1, "count": 2}]}))
    with fake.activate(BASE):
        box = rent(vast)
        vast.destroy(box)
        gone = vast.show(box)

    assert [c.status for c in fake.calls if c.route == "destroy"] == [503, 503, 200]
    assert gone is None and len(sleeps) == 2


def test_a_destroy_failing_more_often_than_the_adapter_retries_leaves_the_box(make, vast):
    """M4: a destroy that never lands raises, and the box is still there to retry later."""
    fake = make(scenario())
    fake.add_destroy_failure(DestroyFailure(count=10, instance=1234568))
    with fake.activate(BASE):
        box = rent(vast)
        with pytest.raises(ProviderUnavailable):
            vast.destroy(box)
        still = vast.show(box)

    assert still is not None and list(fake.boxes())


def test_clear_faults_lets_a_stuck_destroy_land(make, vast):
    """M4: once the provider recovers (clear_faults), the retried destroy confirms gone."""
    fake = make(scenario(faults={"destroy_failures": [{"offer": 1, "count": 99}]}))
    with fake.activate(BASE):
        box = rent(vast)
        with pytest.raises(ProviderUnavailable):
            vast.destroy(box)
        fake.clear_faults()
        vast.destroy(box)
        gone = vast.show(box)

    assert gone is None and list(fake.boxes()) == []


@pytest.mark.parametrize("answer", [503, "close"])
def test_a_lost_create_leaves_a_box_that_only_the_label_finds(make, vast, answer):
    """M12: the create is unclear (503 or a closed connection) yet the box exists; one call
    was sent, and reconciling by label finds it."""
    fake = make(scenario(faults={"lost_creates": [{"offer": 1, "answer": answer}]}))
    with fake.activate(BASE):
        with pytest.raises(ProviderUnavailable):
            rent(vast)
        found = vast.list_instances(label=LABEL)

    assert [c.route for c in fake.calls].count("create") == 1
    assert [b.instance_id for b in found] == [str(next(iter(fake.instances)))]


def test_only_the_scripted_number_of_creates_is_lost(make, vast):
    """A lost create fires `count` times; the next create of another box answers normally."""
    fake = make(scenario(offer(1), offer(2)))
    fake.add_lost_create(LostCreate(offer=1, count=1))
    with fake.activate(BASE):
        with pytest.raises(ProviderUnavailable):
            rent(vast, 1)
        second = rent(vast, 2)

    assert second == "1234569"


def test_create_pacing_answers_429_to_back_to_back_creates(make, vast):
    """M12: creates closer than min_interval_s on the fake clock are rate limited."""
    pacing = {"min_interval_s": 2.0}
    fake = make(scenario(offer(1), offer(2), offer(3), faults={"create_pacing": pacing}))
    with fake.activate(BASE):
        rent(vast, 1)
        with pytest.raises(RateLimited):
            rent(vast, 2)
        fake.advance(2.0)
        rent(vast, 3)

    assert [c.status for c in fake.calls] == [200, 429, 200]


# --- loud and locked ------------------------------------------------------------------------------
def test_a_request_without_the_scenarios_key_gets_the_recorded_401(make, sleeps):
    """Every route checks the bearer key; a wrong one is auth_401, AuthFailed, not retried."""
    fake = make(scenario())
    stranger = VastAdapter(api_key="wrong", base_url=BASE, clock=WithSleep(SYSTEM, sleeps.append))
    with fake.activate(BASE) as mock:
        with pytest.raises(AuthFailed):
            stranger.search_offers()
        body = mock.calls[0].response.text

    assert body == load_recording("vast", "auth_401").body
    assert sleeps == [] and fake.calls[0].status == 401


def test_the_key_may_also_come_as_the_api_key_query_parameter(make):
    """provider-formats A.1: the REST docs accept ?api_key= as well as the bearer header."""
    fake = make(scenario())
    with fake.activate(BASE):
        good = requests.get(f"{BASE}/api/v0/ssh/", params={"api_key": KEY})
        bad = requests.get(f"{BASE}/api/v0/ssh/", params={"api_key": "nope"})

    assert (good.status_code, bad.status_code) == (200, 401)


def test_an_unknown_route_raises_in_process_with_every_known_route(make):
    """Loud: a route FakeVast lacks is an error naming the known ones, not a quiet 404."""
    fake = make(scenario())
    with fake.activate(BASE), pytest.raises(UnknownRoute) as caught:
        requests.put(f"{BASE}/api/v0/instances/reboot/1/", json={})

    assert "PUT /api/v0/instances/reboot/1/" in str(caught.value)
    assert "GET /api/v0/instances/{id}/" in str(caught.value)
    assert caught.value.known == known_routes() and len(known_routes()) == 10


# --- wire fidelity: only recorded keys ------------------------------------------------------------
def test_every_rendered_body_has_exactly_the_recorded_keys(make, vast):
    """H1: offers, rows (loading and running), pages and keys keep the recordings' field sets."""
    fake = make(scenario())
    with fake.activate(BASE) as mock:
        vast.search_offers()
        box = rent(vast)
        fake.advance(15.0)
        vast.show(box)
        fake.advance(15.0)
        vast.show(box)
        vast.list_instances()
        vast.list_ssh_keys()
        bodies = [json.loads(c.response.text) for c in mock.calls]

    def recorded(name: str) -> object:
        return json.loads(load_recording("vast", name).body)

    assert set(bodies[0]["offers"][0]) == set(recorded_offer())
    assert set(bodies[2]["instances"]) == set(recorded("show_loading")["instances"])
    assert set(bodies[3]["instances"]) == set(recorded("show_running")["instances"])
    assert set(bodies[4]) == set(recorded("list_instances_page1"))
    assert set(bodies[4]["instances"][0]) == set(recorded("show_running")["instances"])
    assert set(bodies[5][0]) == set(recorded("ssh_keys_list")[0])


def test_the_next_token_has_the_recorded_shape():
    """list_instances_page1's token is base64 of {"values": {"id": 1234571}}."""
    recorded = json.loads(load_recording("vast", "list_instances_page1").body)

    assert next_token(1234571) == recorded["next_token"]


def test_error_bodies_are_recordings_readdressed_to_the_real_id():
    """A no_such_ask about offer 42 reads as the recording would about 42, nothing else."""
    reply = wire.no_such_ask(42, 404)

    assert reply.json()["ask_id"] == 42
    assert (
        reply.json()["msg"]
        == "error 404/3603: no_such_ask Instance type by id 42 is not available."
    )


# --- ssh fates through the fake ssh box table -----------------------------------------------------
@pytest.mark.parametrize(
    ("fate", "box_fate"),
    [
        ("healthy", "healthy"),
        ("ssh-auth", "ssh-auth"),
        ("ssh-auth-transient:2", "ssh-auth-transient:2"),
        ("unreachable", "unreachable"),
        ("slow-disk", "slow-disk"),
        ("no-gpu", "no-gpu"),
        ("low-vram", "low-vram"),
        ("cuda-broken", "cuda-broken"),
        ("dies-after:30", "healthy"),
    ],
)
def test_each_offer_fate_is_written_to_the_box_table_once_the_box_runs(make, vast, fate, box_fate):
    """Both ssh endpoints of a box carry its offer's fate while running, unreachable before."""
    fake = make(scenario(offer(1, fate)))
    with fake.activate(BASE):
        box = vast.show(rent(vast))
        booting = load_table(fake.box_table)
        fake.advance(BOOT_S)
        running = vast.show(box.instance_id)
        table = load_table(fake.box_table)

    proxy = f"{running.ssh_host}:{running.ssh_port}"
    direct = f"{running.public_ipaddr}:{running.direct_ssh_port}"
    assert booting[proxy].fate == "unreachable"
    assert table[proxy].fate == table[direct].fate == box_fate


def test_a_low_vram_box_lists_less_than_the_default_floor(make, vast):
    """low-vram: the offer says 24 GB, the box's nvidia-smi says less than 8 GB."""
    fake = make(scenario(offer(1, "low-vram")))
    with fake.activate(BASE):
        rent(vast)
        fake.advance(BOOT_S)

    (box,) = {b.key: b for b in load_table(fake.box_table).values() if "vast.ai" in b.host}.values()
    assert box.gpu is not None and box.gpu.vram_mb < Filter().vram_floor_mb


def test_a_destroyed_or_dead_box_is_unreachable_over_ssh(make, vast):
    """After destroy, or once dies-after fires, ssh to the box times out."""
    fake = make(scenario(offer(1), offer(2, "dies-after:1")))
    with fake.activate(BASE):
        first, second = rent(vast, 1), rent(vast, 2)
        fake.advance(BOOT_S)
        vast.destroy(first)
        fake.advance(60.0)
        boxes = {b.instance_id: b for b in vast.list_instances()}
        shown = vast.show(second)

    fates = {key: b.fate for key, b in load_table(fake.box_table).items()}
    assert set(fates.values()) == {"unreachable"} and len(fates) == 4
    assert shown is not None and shown.actual_status is InstanceStatus.EXITED
    assert list(boxes) == [second]


def entry_stamps(fake: FakeVast, *keys: str) -> list[tuple[int, int]]:
    """(inode, mtime) of the table itself and of each box entry named."""
    paths = [fake.box_table, *(entry_path(fake.box_table, key) for key in keys)]
    return [(p.stat().st_ino, p.stat().st_mtime_ns) for p in paths]


def endpoints_of(fake: FakeVast, box_id: str) -> tuple[str, str]:
    """The box's proxy and direct ``host:port``, as the box table names them."""
    box = fake.instances[int(box_id)]
    return f"{box.ssh_host}:{box.ssh_port}", f"{box.offer_row['public_ipaddr']}:{box.direct_port}"


def test_a_boxs_entries_are_rewritten_only_when_its_fate_changes(make, vast):
    """Requests between two status changes leave the box's entries and the table alone."""
    fake = make(scenario())
    with fake.activate(BASE):
        box = rent(vast)
        keys = endpoints_of(fake, box)
        written = entry_stamps(fake, *keys)
        vast.show(box)
        fake.advance(5.0)
        same = entry_stamps(fake, *keys)
        fake.advance(BOOT_S)
        rewritten = entry_stamps(fake, *keys)

    assert written == same
    assert rewritten[0] == written[0] and rewritten[1] != written[1] and rewritten[2] != written[2]


def test_creating_or_destroying_a_box_writes_only_that_boxs_entries(make, vast):
    """No whole-table rewrite: another box's entries and the table itself are untouched."""
    fake = make(scenario(offer(1), offer(2)))
    with fake.activate(BASE):
        first = rent(vast, 1)
        fake.advance(BOOT_S)
        keys = endpoints_of(fake, first)
        before = entry_stamps(fake, *keys)
        second = rent(vast, 2)
        fake.advance(BOOT_S)
        vast.destroy(second)
        after = entry_stamps(fake, *keys)
        table = load_table(fake.box_table)

    assert after == before
    assert {table[k].fate for k in endpoints_of(fake, second)} == {"unreachable"}
    assert {table[k].fate for k in keys} == {"healthy"}


def test_a_new_fake_in_the_same_state_dir_starts_with_no_box_of_the_old_one(make, vast):
    """The table is a new world: the entries an earlier fake wrote are gone with it."""
    old = make(scenario())
    with old.activate(BASE):
        rent(vast)

    new = make(scenario())

    assert old.box_table == new.box_table and load_table(new.box_table) == {}


@pytest.fixture
def fake_ssh_env(monkeypatch):
    """GPUOPS_SSH is the fake ssh program, under this interpreter."""
    monkeypatch.setenv("GPUOPS_SSH", str(FAKE_SSH))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_PYTHON", sys.executable)


@pytest.mark.parametrize(
    ("fate", "verdict"),
    [
        ("healthy", Verdict.PASS),
        ("ssh-auth", Verdict.SSH_AUTH),
        ("low-vram", Verdict.LOW_VRAM),
        ("slow-disk", Verdict.SLOW_DISK),
    ],
)
def test_a_probe_through_the_fake_ssh_sees_the_offers_fate(
    make, vast, tmp_path, monkeypatch, fake_ssh_env, fate, verdict
):
    """M1/M2: the real probe, through fakes/ssh/ssh, judges the box as its offer's fate says."""
    fake = make(scenario(offer(1, fate)))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake.box_table))
    with fake.activate(BASE):
        box_id = rent(vast)
        fake.advance(BOOT_S)
        box = vast.show(box_id)
    identity = tmp_path / "id_ed25519"
    write_identity(identity, fake.keys[0].key)  # the account's key, which the box holds

    result = probe(
        SshEndpoint(box.ssh_host, box.ssh_port),
        client=Settings.from_environ().ssh(),
        identity_file=identity,
        known_hosts=known_hosts_path(tmp_path / "gpuops", box_id),
        vram_floor_mb=Filter().vram_floor_mb,
        disk_floor_mb_per_s=Filter().min_disk_mb_per_s,
    )

    assert result.cause is verdict


def test_ssh_auth_transient_refuses_n_times_then_lets_the_probe_in(
    make, vast, tmp_path, monkeypatch, fake_ssh_env
):
    """M2: ssh-auth-transient:1 fails auth once, then the same box probes healthy."""
    fake = make(scenario(offer(1, "ssh-auth-transient:1")))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake.box_table))
    with fake.activate(BASE):
        box_id = rent(vast)
        fake.advance(BOOT_S)
        box = vast.show(box_id)
    identity = tmp_path / "id_ed25519"
    write_identity(identity, fake.keys[0].key)  # the account's key, which the box holds
    endpoint = SshEndpoint(box.public_ipaddr, box.direct_ssh_port)
    floors = {"vram_floor_mb": 8192, "disk_floor_mb_per_s": 500.0}
    known = known_hosts_path(tmp_path / "gpuops", box_id)

    client = Settings.from_environ().ssh()
    verdicts = [probe(endpoint, client=client, identity_file=identity, known_hosts=known,
                      **floors).cause for _ in range(2)]  # fmt: skip

    assert verdicts == [Verdict.SSH_AUTH, Verdict.PASS]


# --- key authorization on the boxes (M9, H4) ------------------------------------------------------
OTHER_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB old-laptop"
)


def _probe_with(
    fake: FakeVast, vast: VastAdapter, tmp_path: Path, public_key: str, offer_id: int = 1
) -> Verdict:
    """Rent ``offer_id``, boot it, and probe it offering ``public_key`` (its .pub half)."""
    with fake.activate(BASE):
        box_id = rent(vast, offer_id)
        fake.advance(BOOT_S)
        box = vast.show(box_id)
    identity = tmp_path / "keys" / "id_ed25519"
    write_identity(identity, public_key)
    return probe(
        SshEndpoint(box.ssh_host, box.ssh_port),
        client=Settings.from_environ().ssh(),
        identity_file=identity,
        known_hosts=known_hosts_path(tmp_path / "gpuops", box_id),
        vram_floor_mb=Filter().vram_floor_mb,
        disk_floor_mb_per_s=Filter().min_disk_mb_per_s,
    ).cause


def test_a_box_rented_on_an_account_with_no_registered_key_refuses_ssh_h4(
    make, vast, tmp_path, monkeypatch, fake_ssh_env
):
    """M9/H4: Vast applies the account's keys at creation; with none registered, a healthy
    box refuses every key (Permission denied (publickey)), so skipping M9 cannot pass."""
    fake = make(scenario(ssh_keys=[]))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake.box_table))

    assert _probe_with(fake, vast, tmp_path, OTHER_KEY) is Verdict.SSH_AUTH


def test_a_key_the_account_does_not_hold_is_refused_and_the_registered_one_gets_in_h4(
    make, vast, tmp_path, monkeypatch, fake_ssh_env
):
    """M9/H4: a healthy box lets in the account's registered key (whatever its comment) and
    refuses any other."""
    registered = recorded("ssh_keys_list")[0]["key"]
    fake = make(scenario(offer(1), offer(2), ssh_keys=[registered]))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake.box_table))

    refused = _probe_with(fake, vast, tmp_path / "a", OTHER_KEY, 1)
    let_in = _probe_with(fake, vast, tmp_path / "b", registered.rsplit(" ", 1)[0] + " renamed", 2)

    assert (refused, let_in) == (Verdict.SSH_AUTH, Verdict.PASS)


def test_a_key_registered_after_the_create_or_deleted_before_it_does_not_open_the_box_h4(
    make, vast, tmp_path, monkeypatch, fake_ssh_env
):
    """M9/H4: keys reach a box at its creation only: one registered later, or one the account
    deleted before, is refused."""
    fake = make(scenario(ssh_keys=[{"key": OTHER_KEY, "deleted_at": "2026-09-21T08:30:00Z"}]))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake.box_table))
    with fake.activate(BASE):
        box_id = rent(vast)
        vast.register_ssh_key(recorded("ssh_keys_list")[0]["key"])
        fake.advance(BOOT_S)
        box = vast.show(box_id)
    client = Settings.from_environ().ssh()
    verdicts = []
    for public_key in (OTHER_KEY, recorded("ssh_keys_list")[0]["key"]):
        identity = tmp_path / "keys" / "id_ed25519"
        write_identity(identity, public_key)
        verdicts.append(probe(
            SshEndpoint(box.ssh_host, box.ssh_port), client=client, identity_file=identity,
            known_hosts=known_hosts_path(tmp_path / "gpuops", box_id),
            vram_floor_mb=8192, disk_floor_mb_per_s=500.0,
        ).cause)  # fmt: skip

    assert verdicts == [Verdict.SSH_AUTH, Verdict.SSH_AUTH]


# --- search as Vast answers it (H4, H6) ---------------------------------------------------------
def _search(fake: FakeVast, query: dict[str, object]) -> list[int]:
    with fake.activate(BASE):
        answer = requests.post(f"{BASE}/api/v0/bundles/", json=query, timeout=5,
                               headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    return sorted(o["id"] for o in answer.json()["offers"])


def test_a_search_that_leaves_out_rented_verified_and_rentable_gets_vasts_own_defaults_h4(
    make, vast
):
    """H4/H6: search_offers.yaml's defaults (verified, rentable true; rented false) apply when
    a query leaves them out: our own rented offer and an unverified one are not listed, unless
    asked for."""
    fake = make(scenario(offer(1), offer(2), offer(3, verification="unverified")))
    with fake.activate(BASE):
        rent(vast, 1)

    assert _search(fake, {}) == [2]
    assert _search(fake, {"rented": {"eq": True}}) == [1]
    assert _search(fake, {"verified": {"eq": False}}) == [3]


def test_a_numeric_driver_version_filter_compares_driver_numbers_as_the_cli_sends_them_h6(make):
    """H6: vastai sends driver_version>=550.0.0 as 550000000; it matches drivers by number,
    and driver_vers follows the offer's driver_version."""
    fake = make(scenario(offer(1, driver_version="535.129.03"), offer(2), offer(3,
                driver_version="560.35.03")))  # fmt: skip

    assert _search(fake, {"driver_version": {"gte": 550000000}}) == [2, 3]
    assert _search(fake, {"driver_version": {"lt": 550000000}}) == [1]
    assert _search(fake, {"driver_version": {"eq": "560.35.03"}}) == [3]
    assert fake.offers[3].row()["driver_vers"] == 560035003


def test_ubuntu_version_filters_as_the_documented_alias_of_os_version_h6(make):
    """H6: search_offers.yaml documents ubuntu_version as an alias of os_version: it filters,
    where it was an unknown key (400)."""
    fake = make(scenario(offer(1), offer(2, os_version="20.04")))

    assert _search(fake, {"ubuntu_version": {"eq": "20.04"}}) == [2]
    assert _search(fake, {"ubuntu_version": {"gte": "22.04"}}) == [1]


# --- creates and keys Vast's contract refuses (H4, H6) --------------------------------------------
@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"disk": 4}, "disk: 4 is below the minimum 8.0"),
        ({"label": "l" * 257}, "label: 257 characters, the limit is 256"),
        ({"image": None}, "image: required, missing"),
        ({"image": "i" * 1025}, "image: 1025 characters, the limit is 1024"),
        ({"onstart": "o" * 4000, "args": ["a" * 97]},
         "args+args_str+onstart: 4097 characters, the limit is 4096"),
        ({"gpu_count": 2}, "gpu_count: a field the contract lacks"),
        ({"runtype": "telnet"}, "runtype: 'telnet' is not one of"),
    ],
    ids=["disk under 8", "label over 256", "no image", "image over 1024", "args and onstart",
         "unknown field", "runtype"],
)  # fmt: skip
def test_a_create_vast_refuses_is_its_documented_400_and_rents_nothing_h4(make, change, said):
    """H4/H6: create_instance.yaml's limits, required image, closed fields and runtype enum:
    400 invalid_args with the asked offer's id, no box, the offer still for rent."""
    fake = make(scenario())
    body = {"image": "pytorch/pytorch", "disk": 20.0, "label": LABEL, "runtype": "ssh", **change}
    body = {k: v for k, v in body.items() if v is not None}
    with fake.activate(BASE):
        answer = requests.put(f"{BASE}/api/v0/asks/1/", json=body, timeout=5,
                              headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
        listed = requests.post(f"{BASE}/api/v0/bundles/", json={}, timeout=5,
                               headers={"Authorization": f"Bearer {KEY}"}).json()  # fmt: skip

    doc = answer.json()
    assert answer.status_code == 400 and doc["success"] is False and doc["ask_id"] == 1
    assert doc["error"] == "invalid_args" and doc["msg"].startswith(f"Invalid args: {said}")
    assert fake.instances == {} and [o["rented"] for o in listed["offers"]] == [False]


@pytest.mark.parametrize(
    "text",
    ["not a key", "ssh-ed25519 not-base64!", "ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9",
     "-----BEGIN OPENSSH PRIVATE KEY-----"],
    ids=["prose", "bad base64", "type mismatch", "private key"],
)  # fmt: skip
def test_registering_a_body_that_is_not_an_ssh_public_key_is_refused_and_registers_nothing_h4(
    make, text
):
    """H4: create_ssh_key.yaml requires a valid SSH public key: the documented 400 no_ssh_key,
    and the account's keys are unchanged."""
    fake = make(scenario())
    before = [k.key for k in fake.keys]
    with fake.activate(BASE):
        answer = requests.post(f"{BASE}/api/v0/ssh/", json={"ssh_key": text}, timeout=5,
                               headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip

    assert answer.status_code == 400
    assert answer.json() == {"success": False, "error": "no_ssh_key",
                             "msg": "Invalid ssh key: ssh_key: not an SSH public key"}  # fmt: skip
    assert [k.key for k in fake.keys] == before


# --- clocks ---------------------------------------------------------------------------------------
def test_the_scaled_clock_runs_time_scale_times_faster_than_real_time():
    """Loopback mode: ten real seconds at x60 are ten fake minutes."""
    base = FakeClock(100.0)
    clock = ScaledClock(60.0, start=1000.0, base=base)

    base.advance(10.0)

    assert clock.wall() == 1000.0 + 600.0
    assert clock.epoch_of(1000.0 + 600.0) == 110.0


def test_a_fake_clock_never_runs_backwards():
    """advance(-1) is a bug in the test, refused."""
    clock = FakeClock(5.0)

    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1.0)
    assert clock.wall() == 5.0


def test_only_a_fake_clock_is_advanced_by_hand():
    """A model on a scaled clock cannot be advanced: its time is real time, scaled."""
    fake = FakeVast(parse_scenario(scenario()), clock=ScaledClock(2.0))

    with pytest.raises(TypeError, match="FakeClock"):
        fake.advance(1.0)


# --- scenarios ------------------------------------------------------------------------------------
def default_account(sleeps: list[float]) -> tuple[FakeVast, VastAdapter]:
    fake = FakeVast(load_scenario(DEFAULT_SCENARIO))
    vast = VastAdapter(api_key=fake.api_key, base_url=BASE, clock=WithSleep(SYSTEM, sleeps.append))
    return fake, vast


def test_the_default_scenario_races_a_taken_an_ssh_auth_and_a_healthy_offer(sleeps):
    """The market's incident (docs/rules.md, M1): the three best picks under the default filter are taken, ssh-auth, healthy."""
    fake, vast = default_account(sleeps)
    with fake.activate(BASE):
        offers = vast.search_offers("RTX 4090")

    chosen = select(offers, k=3, rng=random.Random(0), explore_rate=0.0)

    fates = [str(fake.offers[p.offer.id].fate) for p in chosen.picks]
    assert fates == ["taken", "ssh-auth", "healthy"]


def test_the_default_scenario_has_offers_the_default_filter_removes(sleeps):
    """Low reliability, a slow disk and too little VRAM: three offers the filter leaves out."""
    fake, vast = default_account(sleeps)
    with fake.activate(BASE):
        offers = vast.search_offers()

    removed = {o.id: reasons_to_remove(o, Filter(), frozenset()) for o in offers}
    reasons = [r[0].split()[0] for r in removed.values() if r]
    assert sorted(reasons) == ["disk", "reliability", "vram"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"vast": {"offers": [{"id": 1}]}}, r"vast\.offers\[0\]\.machine_id: is required"),
        ({"vast": {"offers": [offer(1, "heathy")]}}, r"offers\[0\]\.fate: 'heathy' is not a fate"),
        ({"vast": {"offers": [offer(1, gpu_ram="24 GB")]}}, r"offers\[0\]\.gpu_ram: '24 GB'"),
        (
            {"vast": {"offers": [offer(1, reliabilty=0.9)]}},
            r"offers\[0\]\.reliabilty: unknown field",
        ),
        ({"vast": {"offers": [offer(1), offer(1)]}}, r"offers\[1\]\.id: offer id 1 appears twice"),
        ({"vast": {"boot": {"loading": 3}}}, r"vast\.boot\.loading: unknown field"),
        ({"time_scale": 0}, r"time_scale: 0 must be positive"),
        ({"vast": {"faults": {"rate_limits": [{"count": 1, "route": "rent"}]}}}, r"route: 'rent'"),
        ({"vast": {"faults": {"rate_limits": [{"count": 1, "body": "xml"}]}}}, r"body: 'xml'"),
        (
            {"vast": {"faults": {"lost_creates": [{"offer": 9}]}}},
            r"lost_creates\[0\]\.offer: no offer 9",
        ),
        ({"vast": {"faults": {"destroy_failures": [{"count": 1}]}}}, r"exactly one of 'offer' or"),
        ({"vast": {"ssh_keys": ["my key"]}}, r"ssh_keys\[0\]\.key: 'my key' is neither"),
        ({"vast": {"offers": {"id": 1}}}, r"vast\.offers: expected a list"),
        ({"gce": {}}, r"gce: unknown field; known here: lane, start_time, time_scale, vast"),
        ([1, 2], r"\(top level\): expected a mapping"),
        ({"vast": {"instances": [{"offer": 9}]}}, r"vast\.instances\[0\]\.offer: no offer 9"),
        (
            {"vast": {"offers": [offer(1)], "instances": [{"offer": 1}, {"offer": 1}]}},
            r"instances\[1\]\.offer: offer 1 is already rented above",
        ),
        ({"vast": {"offers": [offer(1)], "instances": [{"label": "x"}]}}, r"offer: is required"),
        ({"vast": {"duplicate_purchases": "yes"}}, r"duplicate_purchases: 'yes' is not true"),
        (
            {"vast": {"faults": {"duplicate_listings": 7}}},
            r"faults\.duplicate_listings: 7 is not a list of offer ids",
        ),
        (
            {"vast": {"offers": [offer(1)], "faults": {"duplicate_listings": [1, 9]}}},
            r"duplicate_listings\[1\]: no offer 9",
        ),
        (
            {"vast": {"offers": [offer(1)], "instances": [{"offer": 1, "label": 7}]}},
            r"instances\[0\]\.label: 7 is not a string",
        ),
    ],
)
def test_a_bad_scenario_is_refused_naming_the_field(doc, message):
    """A typo in a scenario is a ScenarioError naming its path, never a silent default."""
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(doc, source="bad.yaml")


def test_an_unreadable_scenario_file_is_a_scenario_error(tmp_path):
    """Broken YAML names the file."""
    path = tmp_path / "broken.yaml"
    path.write_text("vast: {offers: [\n")

    with pytest.raises(ScenarioError, match="broken.yaml"):
        load_scenario(path)


# --- loopback HTTP --------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "localhost", "::1"])
def test_serve_http_binds_loopback_only(make, host):
    """DESIGN §4: anything but a literal 127.x address is refused before binding."""
    with pytest.raises(ValueError, match="loopback"):
        serve_http(make(scenario()), host=host)


def test_the_adapter_rents_shows_and_destroys_over_loopback_http(make, sleeps):
    """The same model over real HTTP: the real vastai client, through the adapter."""
    fake = make(scenario())
    with serve_http(fake) as server:
        vast = VastAdapter(api_key=KEY, base_url=server.url, clock=WithSleep(SYSTEM, sleeps.append))
        offers = vast.search_offers()
        box = rent(vast, offers[0].id)
        fake.advance(BOOT_S)
        running = vast.show(box)
        vast.destroy(box)
        gone = vast.show(box)

    assert server.url.startswith("http://127.0.0.1:")
    assert running is not None and running.actual_status is InstanceStatus.RUNNING
    assert gone is None and [c.route for c in fake.calls][:2] == ["search", "create"]


def test_vastais_own_client_works_against_the_loopback_server(make):
    """vastai.VastAI(server_url=...) searches offers and shows instances on the fake."""
    from vastai import VastAI

    fake = make(scenario(offer(1), offer(2)))
    with serve_http(fake) as server:
        client = VastAI(api_key=KEY, server_url=server.url, retry=1)
        offers = client.search_offers(query="gpu_name=RTX_4090 num_gpus=1")
        fake.create(1, {"label": LABEL})
        rows = client.show_instances()

    assert sorted(o["id"] for o in offers) == [1, 2]
    assert [r["label"] for r in rows] == [LABEL] and rows[0]["extra_env"] == {}


def test_an_unknown_route_over_http_is_a_404_listing_every_known_route(make):
    """Loud over the wire too: the JSON body names the known routes."""
    with serve_http(make(scenario())) as server:
        answer = requests.get(f"{server.url}/api/v0/instances/", timeout=5)

    assert answer.status_code == 404
    assert answer.json()["error"] == "fake_vast_unknown_route"
    assert answer.json()["known_routes"] == known_routes()


def test_a_lost_create_over_http_closes_the_connection_after_the_box_exists(make, sleeps):
    """M12 over real HTTP: no status line at all, the adapter says unavailable, the box is there."""
    fake = make(scenario(faults={"lost_creates": [{"offer": 1, "answer": "close"}]}))
    with serve_http(fake) as server:
        vast = VastAdapter(api_key=KEY, base_url=server.url, clock=WithSleep(SYSTEM, sleeps.append))
        with pytest.raises(ProviderUnavailable, match="Connection"):
            rent(vast)
        found = vast.list_instances(label=LABEL)

    assert len(found) == 1 and [c.route for c in fake.calls].count("create") == 1


def test_a_drifted_request_is_answered_with_the_fakes_own_loud_400(make):
    """A body no Vast client sends is a fake_vast_bad_request naming the problem."""
    with serve_http(make(scenario())) as server:
        answer = requests.put(
            f"{server.url}/api/v0/asks/1/",
            data=b"not json",
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=5,
        )

    assert answer.status_code == 400 and "not JSON" in answer.json()["msg"]


def test_an_unexpected_create_body_is_still_parsed_by_the_adapter_as_drift(make, vast):
    """The fake never answers a 2xx the adapter cannot parse: no drift on the happy path."""
    fake = make(scenario())
    with fake.activate(BASE):
        try:
            rent(vast)
        except UnexpectedResponse as exc:  # pragma: no cover - would be a fake bug
            pytest.fail(f"the fake's create body drifted: {exc}")

    assert len(fake.instances) == 1


# --- the documented v1 list, label and user routes -------------------------------------------------
def _call(fake: FakeVast, method: str, path: str, **kwargs: object) -> requests.Response:
    with fake.activate(BASE):
        return requests.request(
            method, f"{BASE}{path}", headers={"Authorization": f"Bearer {KEY}"}, **kwargs
        )


@pytest.mark.parametrize("field", ["dph_total", "num_gpus"])
def test_the_v1_list_refuses_a_filter_on_a_computed_field_as_vast_documents(make, field):
    """show_instances_v1: computed fields are not filterable and answer 400 invalid_request."""
    fake = make(scenario())
    fake.create(1, {"label": LABEL})

    answer = _call(
        fake, "GET", "/api/v1/instances/", params={"select_filters": json.dumps({field: {"gt": 0}})}
    )

    assert answer.status_code == 400
    assert answer.json()["msg"] == f"Error in query parameters: {field} is not a valid search key"


def test_the_v1_list_returns_only_the_selected_columns_and_null_for_unknown_ones(make):
    """select_cols ["id","label","nope"]: those keys only, the unknown one null."""
    fake = make(scenario())
    box = fake.create(1, {"label": LABEL})

    answer = _call(
        fake, "GET", "/api/v1/instances/", params={"select_cols": '["id", "label", "nope"]'}
    )

    assert answer.json()["instances"] == [{"id": box.id, "label": LABEL, "nope": None}]


def test_a_label_is_set_refused_when_too_long_and_404_for_a_gone_box(make):
    """label_success, label_too_long (over 1024 characters) and label_404, as documented."""
    fake = make(scenario())
    box = fake.create(1, {"label": LABEL})

    set_ = _call(fake, "PUT", f"/api/v0/instances/{box.id}/", json={"label": "mine"})
    long = _call(fake, "PUT", f"/api/v0/instances/{box.id}/", json={"label": "x" * 1025})
    fake.destroy(box.id)
    gone = _call(fake, "PUT", f"/api/v0/instances/{box.id}/", json={"label": "late"})

    assert set_.json() == {"success": True, "msg": f"label for {box.id} set to 'mine'"}
    assert long.status_code == 400 and long.json()["error"] == "label_too_long"
    assert gone.status_code == 404 and gone.json()["msg"] == f"Instance {box.id} not found."
    assert fake.instances[box.id].label == "mine"


def test_a_start_or_stop_on_the_label_route_is_the_fakes_own_loud_400(make):
    """{"state": "stopped"} is not modelled: fake_vast_bad_request, never a silent success."""
    fake = make(scenario())
    box = fake.create(1, {"label": LABEL})

    answer = _call(fake, "PUT", f"/api/v0/instances/{box.id}/", json={"state": "stopped"})

    assert answer.status_code == 400 and answer.json()["error"] == "fake_vast_bad_request"


def test_search_keeps_derived_prices_true_to_the_scenario_price(make):
    """The nested `search` pricing and dlperf_per_dphtotal follow the offer's dph_total."""
    fake = make(scenario(offer(1, dph_total=0.5, dph_base=0.45)))

    row = _call(fake, "POST", "/api/v0/bundles/", json={}).json()["offers"][0]

    assert row["search"]["totalHour"] == 0.5 and row["search"]["gpuCostPerHour"] == 0.45
    assert row["dlperf_per_dphtotal"] == round(row["dlperf"] / 0.5, 4)
    assert row["duration"] == row["end_date"] - fake.now()


# --- the box table's entry files -----------------------------------------------------------------
def test_a_box_entry_file_overrides_the_tables_own_entry_for_that_box(tmp_path):
    """load_box and load_table read <table>.d/<host:port>.json over the table's mapping."""
    table = tmp_path / "boxes.yaml"
    table.write_text('boxes:\n  "a.host:22": healthy\n  "b.host:22": slow-disk\n')
    write_entry(table, "a.host:22", {"fate": "unreachable", "sandbox": "a"})
    write_entry(table, "c.host:22", "no-gpu")

    whole = {key: box.fate for key, box in load_table(table).items()}

    assert whole == {"a.host:22": "unreachable", "b.host:22": "slow-disk", "c.host:22": "no-gpu"}
    assert load_box(table, "a.host:22").sandbox == "a"
    assert load_box(table, "b.host:22").fate == "slow-disk"
    assert load_box(table, "d.host:22") is None


def test_a_box_entry_with_an_unknown_field_is_refused_loudly(tmp_path):
    """An entry file is held to the table's own format: no field the fake ssh would ignore."""
    table = tmp_path / "boxes.yaml"
    table.write_text("boxes: {}\n")
    write_entry(table, "a.host:22", {"fate": "healthy", "speed": "fast"})

    with pytest.raises(FakeSshError, match="unknown fields"):
        load_box(table, "a.host:22")


def test_a_list_page_body_is_the_envelope_json_dumps_gives_whichever_way_counts_come():
    """Counts encoded once per listing splice into the same bytes as encoding them per page."""
    rows = [{"id": 7, "label": "a"}]
    counts = {"a": 1, 'théo "q"': 2}
    envelope = recorded("list_instances_page1")
    envelope.update(instances_found=1, total_instances=3, label_counts=counts,
                    next_token=None, instances=rows)  # fmt: skip

    given = wire.page(rows, total=3, label_counts=counts, next_token=None).body
    encoded = wire.page(rows, total=3, label_counts=json.dumps(counts), next_token=None).body

    assert given == encoded == json.dumps(envelope)


def test_the_default_scenario_spreads_host_ram_cpu_and_contract_ends_h6(sleeps):
    """The default market is no copy of one offer: its hosts' RAM and CPUs are the recording's
    spread, so some pass SkyPilot's catalog cut (cpu_ram >= 65,536 MB) and some do not, and a
    few contracts end within days, so `rent --hours` beyond them skips those offers."""
    from fakes.vast.clock import RECORDED_EPOCH

    fake, vast = default_account(sleeps)
    with fake.activate(BASE):
        offers = vast.search_offers()
    in_recording = {int(o["cpu_ram"]) for o in recorded("search_offers")["offers"]}

    rams = [int(str(o.raw["cpu_ram"])) for o in offers]
    assert set(rams) <= in_recording and len(set(rams)) >= 4
    assert 0 < sum(ram >= 65536 for ram in rams) < len(rams)
    assert len({o.raw["cpu_cores_effective"] for o in offers}) >= 3
    days = sorted(round((o.end_date - RECORDED_EPOCH) / 86400.0, 1) for o in offers if o.end_date)
    assert days[:3] == [1.0, 3.0, 7.0] and days[3] > 30
    healthy_big = [
        o.id for o in offers if int(str(o.raw["cpu_ram"])) >= 65536
        and fake.offers[o.id].fate.kind in ("ssh-auth-transient", "dies-after")
    ]
    assert healthy_big  # a peer that cuts on RAM still has an offer that comes up
