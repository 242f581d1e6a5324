"""One contract, two backends: the Vast adapter against replayed recordings and against FakeVast.

Each check names the recorded exchanges it relies on (``backend.given(...)``). The replay backend
registers exactly those recordings in a strict ordered mock; the fake backend arranges its model
so the same exchange happens (a taken offer, a 429 burst, a wrong key). The same assertions
must then hold for both: the fake is only trusted where it answers what Vast was recorded
answering (H1).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
import responses
from responses.registries import OrderedRegistry

from fakes.scenario import RateLimitBurst, parse_offer, parse_scenario
from fakes.vast import FakeVast
from gpuops.errors import AuthFailed, OfferTaken, RateLimited, SearchQuotaExceeded
from gpuops.model import InstanceStatus, SshKey
from gpuops.providers import load_recording
from gpuops.providers.vast import VastAdapter, _parse_offers

BASE = "https://console.vast.ai"
API_KEY = "contract-key-Z3"
OFFER = 1234567  # the recordings' offer id
BOX = "1234568"  # the instance the recordings create, show and destroy
LABEL = "gpuops:intent-7f3c2a91"  # the label show_running carries
KEY_RIG = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM+IjJ97AMeE89dcToyadVmtlBR6Ujcoy6iaia4CUO7g gpuops@rig"
)
KEY_OLD = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB old-laptop"
)


def recorded_offers() -> list[dict[str, object]]:
    return json.loads(load_recording("vast", "search_offers").body)["offers"]


def contract_scenario() -> dict[str, object]:
    """The fake's account: the five recorded offers, the recordings' offer 1234567 and keys."""
    offers = [
        {k: v for k, v in row.items() if k not in ("rented", "ask_contract_id")}
        for row in recorded_offers()
    ]
    offers.append({**offers[0], "id": OFFER})
    return {
        "vast": {
            "api_key": API_KEY,
            "ssh_keys": [KEY_RIG, {"key": KEY_OLD, "deleted_at": "2026-09-21T08:30:00Z"}],
            "offers": offers,
        }
    }


class Replay:
    """The adapter replaying recordings/vast, strictly in order, every one used."""

    name = "replay"

    def __init__(self, mock: responses.RequestsMock) -> None:
        self.mock = mock

    def adapter(self, api_key: str = API_KEY) -> VastAdapter:
        return VastAdapter(api_key=api_key, base_url=BASE, sleep=lambda s: None)

    def given(self, *names: str) -> None:
        for name in names:
            self.mock.add(load_recording("vast", name).to_response(BASE))

    def boot(self) -> None:
        """The recording already shows the box running."""

    def arrange_listing(self) -> list[str]:
        self.given("list_instances_page1", "list_instances_page2")
        return ["1234568", "1234570", "1234571", "1234575", "1234580"]


class Fake:
    """The adapter talking to FakeVast in-process, arranged to make the same exchanges."""

    name = "fake"

    def __init__(self, model: FakeVast) -> None:
        self.model = model

    def adapter(self, api_key: str = API_KEY) -> VastAdapter:
        return VastAdapter(api_key=api_key, base_url=BASE, sleep=lambda s: None)

    def given(self, *names: str) -> None:
        for name in names:
            if name.startswith("create_no_such_ask_"):
                self.model.set_fate(OFFER, "taken", taken_status=int(name.rsplit("_", 1)[1]))
            elif name in ("create_429_plain", "create_429_detail"):
                body = "plain" if name.endswith("plain") else "json"
                self.model.add_rate_limit(RateLimitBurst(count=1, route="create", body=body))
            elif name == "search_quota_exceeded":
                burst = RateLimitBurst(count=1, route="search", body="search-quota")
                self.model.add_rate_limit(burst)
            # every other recorded exchange is what the model answers on its own

    def boot(self) -> None:
        scenario = self.model.scenario
        self.model.advance(scenario.provisioning_s + scenario.loading_s)

    def arrange_listing(self) -> list[str]:
        """More boxes than one page holds, so the list must page through next_token."""
        ids = []
        for n in range(30):
            spec = parse_offer({**contract_scenario()["vast"]["offers"][0], "id": 9000 + n})
            self.model.add_offer(spec)
            ids.append(str(self.model.create(spec.id, {"label": f"gpuops:n{n}"}).id))
        return ids


@pytest.fixture(params=["replay", "fake"])
def backend(request: pytest.FixtureRequest) -> Iterator[Replay | Fake]:
    """Each contract check runs once on the recordings and once on FakeVast."""
    if request.param == "replay":
        registry = OrderedRegistry
        with responses.RequestsMock(registry=registry, assert_all_requests_are_fired=True) as mock:
            yield Replay(mock)
    else:
        model = FakeVast(parse_scenario(contract_scenario()))
        with model.activate(BASE):
            yield Fake(model)


def test_search_parses_every_recorded_offer_with_the_recorded_field_names(backend):
    """H1: the five recorded offers come back as the same Offers, with only recorded fields."""
    backend.given("search_offers")
    recorded_keys = set().union(*(row.keys() for row in recorded_offers()))

    found = {offer.id: offer for offer in backend.adapter().search_offers()}

    for expected in _parse_offers({"offers": recorded_offers()}):
        assert found[expected.id] == expected
    assert all(set(offer.raw) <= recorded_keys for offer in found.values())


def test_create_returns_the_new_instance_id(backend):
    """Vast's new_contract is the instance id, for the recorded offer and the fake's."""
    backend.given("create_success")

    instance_id = backend.adapter().create(OFFER, label=LABEL, image="img", disk_gb=20.0)

    assert instance_id == BOX


def test_a_created_box_shows_running_with_its_label_and_both_ssh_endpoints(backend):
    """After boot, show reports running, our label, the proxy and the direct ssh port."""
    backend.given("create_success", "show_running")
    vast = backend.adapter()

    instance_id = vast.create(OFFER, label=LABEL, image="img", disk_gb=20.0)
    backend.boot()
    shown = vast.show(instance_id)

    assert shown is not None and shown.instance_id == BOX
    assert shown.actual_status is InstanceStatus.RUNNING and shown.label == LABEL
    assert shown.ssh_host and shown.ssh_port and shown.direct_ssh_port
    assert shown.machine_id == 31218 and shown.gpu_name == "RTX 4090"


def test_show_of_a_box_that_does_not_exist_is_none(backend):
    """M4: {"instances": null} is gone, from the recording and from the fake."""
    backend.given("show_gone")

    assert backend.adapter().show(BOX) is None


def test_destroy_then_show_is_none(backend):
    """M4: a destroyed box is confirmed gone by asking for it."""
    backend.given("create_success", "destroy_success", "show_gone")
    vast = backend.adapter()

    instance_id = vast.create(OFFER, label=LABEL, image="img", disk_gb=20.0)
    vast.destroy(instance_id)

    assert vast.show(instance_id) is None


def test_destroying_a_box_already_gone_is_success(backend):
    """M4: a 404 no_such_instance on DELETE means gone, so destroy is idempotent."""
    backend.given("destroy_404_no_such_instance")

    assert backend.adapter().destroy(BOX) is None


@pytest.mark.parametrize("status", [400, 404, 410])
def test_no_such_ask_is_offer_taken_with_the_recorded_body(backend, status):
    """The offer went between search and rent: OfferTaken, whatever the status variant."""
    name = f"create_no_such_ask_{status}"
    backend.given(name)

    with pytest.raises(OfferTaken) as caught:
        backend.adapter().create(OFFER, label=LABEL, image="img", disk_gb=20.0)

    assert (caught.value.offer_id, caught.value.status) == (OFFER, status)
    assert json.loads(caught.value.body) == json.loads(load_recording("vast", name).body)


@pytest.mark.parametrize("name", ["create_429_plain", "create_429_detail"])
def test_a_429_on_create_is_rate_limited_and_sent_once(backend, name):
    """M12: a rate-limited create raises RateLimited after exactly one request."""
    backend.given(name)

    with pytest.raises(RateLimited, match="API requests too frequent"):
        backend.adapter().create(OFFER, label=LABEL, image="img", disk_gb=20.0)


def test_the_search_quota_429_is_search_quota_exceeded(backend):
    """Vast's daily search quota is its own error, never retried."""
    backend.given("search_quota_exceeded")

    with pytest.raises(SearchQuotaExceeded, match="resets at"):
        backend.adapter().search_offers()


def test_a_refused_key_is_auth_failed(backend):
    """The recorded 401 auth_error, for a key the account does not know."""
    backend.given("auth_401")

    with pytest.raises(AuthFailed, match="Invalid user key") as caught:
        backend.adapter(api_key="not-the-account-key").show(BOX)

    assert caught.value.status == 401


def test_the_list_returns_every_instance_across_pages(backend):
    """The v1 list pages through next_token/after_token until it is null."""
    expected = backend.arrange_listing()

    listed = backend.adapter().list_instances()

    assert [box.instance_id for box in listed] == expected


def test_ssh_keys_leave_out_the_deleted_key(backend):
    """M9: only keys without deleted_at count as registered."""
    backend.given("ssh_keys_list")

    assert backend.adapter().list_ssh_keys() == [SshKey(id=40211, public_key=KEY_RIG)]


def test_registering_a_key_returns_the_key_registered(backend):
    """M9: the register answer carries the key we sent."""
    backend.given("ssh_key_register")

    key = backend.adapter().register_ssh_key(KEY_RIG)

    assert key.matches(KEY_RIG) and isinstance(key.id, int)


def test_the_contract_scenario_mirrors_the_recorded_offers():
    """The fake's account is built from the recording itself, not retyped by hand."""
    scenario = parse_scenario(contract_scenario())

    ids = [offer.id for offer in scenario.vast.offers]

    assert ids == [row["id"] for row in recorded_offers()] + [OFFER]
    assert dataclasses.asdict(scenario.vast.offers[0])["fields"]["score"] == 201.4
