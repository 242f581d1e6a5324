"""FakeVast and gpuops' Vast adapter held to Vast's own published contract (H6).

The contract is recordings/contracts/vast-openapi.yaml (facts extracted from vast-cli's openapi
yamls) with vast-client.yaml's sourced patches, judged by fakes/vast/contract.py. A tap on the
fake judges every exchange of a tour that reaches every route the fake serves and every answer
it can give (success, each scripted fault, each refusal): the request the adapter (or, for the
routes gpuops never calls, a plain requests client) sent, and the body the fake rendered. A
field the contract lacks, a required one missing, a wrong type, a value out of range or a status
the operation does not document is a breach, and any breach fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import requests

from fakes.scenario import (
    DEFAULT_SCENARIO,
    DestroyFailure,
    LostCreate,
    RateLimitBurst,
    TeamMember,
    load_scenario,
)
from fakes.seam import Reply, Request
from fakes.vast import FakeVast, contract, wire
from fakes.vast.clock import FakeClock
from gpuops.clock import SYSTEM, WithSleep
from gpuops.errors import GpuopsError
from gpuops.providers.vast import VastAdapter

BASE = "https://console.vast.ai"
HEALTHY = 18432117  # the default scenario's healthy RTX 4090 in Texas, US
TAKEN = 18436001  # taken between search and rent (410)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB laptop"
# The least the tour must reach: every operation FakeVast serves, and this many of the
# contract's field paths (request fields, parameters and response fields, at every depth).
OPERATIONS = {"search", "create", "show", "destroy", "label", "list", "user", "ssh_keys",
              "register_ssh_key"}  # fmt: skip
MIN_FIELDS = 440
# Every answer the tour means to reach (a 429 where another is meant would hide it).
STATUSES = {
    "create 200", "create 400", "create 404", "create 410", "create 429", "create 503",
    "destroy 200", "destroy 404", "destroy 503", "label 200", "label 400", "label 404",
    "list 200", "list 429", "register_ssh_key 200", "register_ssh_key 400", "search 200",
    "search 429", "show 200", "show 401", "show 429", "ssh_keys 200", "user 200",
}  # fmt: skip


@dataclass
class Judged:
    """A fake with the contract's judge on its tap: every breach of every exchange."""

    fake: FakeVast
    judge: contract.Contract = field(default_factory=contract.load)
    breaches: list[str] = field(default_factory=list)
    refused: list[list[str]] = field(default_factory=list)  # each deliberate bad request's
    exchanges: int = 0
    _refusing: bool = False

    def __post_init__(self) -> None:
        self.fake.taps.append(self.tap)

    def tap(self, route: str, request: Request, reply: Reply) -> None:
        """Judge one exchange; a request sent to be refused is judged by its answer only
        (which must not be a 2xx), its own breaches kept apart in ``refused``."""
        self.exchanges += 1
        if not self._refusing:
            self.breaches += self.judge.judge(route, request, reply)
            return
        body = json.loads(request.body) if request.body else None
        asked = self.judge.request_breaches(
            route, method=request.method, path=request.path, query=request.query, body=body
        )
        self.refused.append(asked)
        self.breaches += self.judge.response_breaches(route, reply.status, reply.body)
        if not asked or 200 <= reply.status < 300:
            self.breaches.append(f"{route}: a request sent to be refused got {reply.status}")

    def adapter(self, api_key: str | None = None) -> VastAdapter:
        key = self.fake.api_key if api_key is None else api_key
        # the adapter's retry waits move the fake on: a read it retried after the default
        # scenario's endpoint interval gets through, as it would for real
        return VastAdapter(api_key=key, base_url=BASE, clock=WithSleep(SYSTEM, self.fake.advance))

    def spaced(self) -> None:
        """Let the longest endpoint interval pass (the default scenario's rate limits), so the
        next call is answered as the tour means it, not 429."""
        self.fake.advance(max((s for _, s in self.fake.scenario.endpoint_intervals), default=0))

    def raw(
        self, method: str, path: str, body: object = None, *, refused: bool = False
    ) -> requests.Response:
        """A plain requests client, for routes gpuops never calls (label, user) and requests
        sent to be refused (``refused``: the contract refuses them, and so must the fake)."""
        headers = {"Authorization": f"Bearer {self.fake.api_key}"}
        self.spaced()
        self._refusing = refused
        try:
            return requests.request(method, BASE + path, json=body, headers=headers, timeout=5)
        finally:
            self._refusing = False


@pytest.fixture
def judged() -> Iterator[Judged]:
    scenario = load_scenario(DEFAULT_SCENARIO)
    member = TeamMember("alice", "k-alice", 101, "alice@example.com")  # a key of her own
    scenario = dataclasses.replace(
        scenario, vast=dataclasses.replace(scenario.vast, members=(member,))
    )
    fake = FakeVast(scenario, clock=FakeClock(1.8e9))
    with fake.activate(BASE):
        yield Judged(fake)


def _quietly(call: Callable[[], object]) -> None:
    """Run one adapter call whose failure is the point (a fault the tour scripted)."""
    with contextlib.suppress(GpuopsError):
        call()


def tour(world: Judged) -> None:
    """Every route FakeVast serves, and every kind of answer it gives, once at least."""
    fake, vast, spaced = world.fake, world.adapter(), world.spaced
    vast.search_offers(
        "RTX 4090", 1, min_reliability=0.98, min_disk_bw=500.0, max_dph_total=2.0, limit=8
    )
    box = vast.create(HEALTHY, label="gpuops:tour", image="img", disk_gb=20.0, onstart="echo hi")
    # the default scenario's endpoint interval: a second create at once is 429 with the
    # endpoint's threshold (never retried: a retry could rent a second box, M12)
    _quietly(lambda: vast.create(HEALTHY, label="gpuops:t", image="img", disk_gb=20.0))
    fake.advance(fake.scenario.show_lag_s)  # show answers a moment behind
    vast.show(box)  # provisioning
    fake.advance(fake.scenario.provisioning_s)
    vast.show(box)  # loading
    fake.advance(fake.scenario.loading_s)
    vast.show(box)  # running
    for n in range(30):  # more boxes than a page holds: the list pages through next_token
        fake.add_offer(dataclasses.replace(fake.offers[HEALTHY].spec, id=9000 + n))
        fake.create(9000 + n, {"label": f"gpuops:n{n}"})
    fake.advance(fake.scenario.list_lag_s)  # the list leaves out a box younger than this
    vast.list_instances()
    vast.list_instances(label="gpuops:tour")  # at once: 429, retried after the interval
    world.raw("GET", '/api/v1/instances/?select_cols=["id","nope"]')  # unknown: null
    vast.list_ssh_keys()
    vast.register_ssh_key(KEY)
    world.raw("PUT", f"/api/v0/instances/{box}/", {"label": "relabelled"})
    world.raw("PUT", f"/api/v0/instances/{box}/", {"label": "x" * 1025}, refused=True)
    world.raw("PUT", "/api/v0/instances/4242/", {"label": "nobody's"})  # no_such_instance
    world.raw("GET", "/api/v0/users/current/")
    world.raw("POST", "/api/v0/bundles/", {"type": "bid", "limit": 3})  # interruptible prices
    vast.current_user()  # the account's key: no username
    world.adapter(api_key="k-alice").current_user()  # a member's own key: hers
    world.raw("POST", "/api/v0/ssh/", {"ssh_key": ""}, refused=True)
    world.raw("POST", "/api/v0/ssh/", {"ssh_key": "not a key"}, refused=True)
    world.raw("PUT", f"/api/v0/asks/{HEALTHY}/", {"image": "img", "disk": 4}, refused=True)
    # --- faults, each answered as its recording says
    spaced()
    _quietly(lambda: vast.create(TAKEN, label="gpuops:t", image="img", disk_gb=20.0))  # 410
    for status in (400, 404):
        fake.set_fate(TAKEN, "taken", taken_status=status)
        spaced()
        _quietly(lambda: vast.create(TAKEN, label="gpuops:t", image="img", disk_gb=20.0))
    spaced()
    _quietly(lambda: vast.create(7, label="gpuops:t", image="img", disk_gb=20.0))  # no offer
    for body in ("plain", "json", "json-error"):
        fake.add_rate_limit(RateLimitBurst(count=1, route="create", body=body))
        spaced()
        _quietly(lambda: vast.create(HEALTHY, label="gpuops:t", image="img", disk_gb=20.0))
    spaced()
    fake.add_rate_limit(RateLimitBurst(count=1, route="search", body="search-quota"))
    _quietly(vast.search_offers)
    spaced()
    fake.add_rate_limit(RateLimitBurst(count=1, route="show", body="json", retry_after_s=1.0))
    vast.show(box)
    spaced()
    _quietly(lambda: world.adapter(api_key="wrong-key").show(box))  # auth_401
    spare = 9100
    fake.add_offer(dataclasses.replace(fake.offers[HEALTHY].spec, id=spare))
    fake.add_lost_create(LostCreate(offer=spare, answer=503))
    spaced()
    _quietly(lambda: vast.create(spare, label="gpuops:lost", image="img", disk_gb=20.0))
    fake.add_destroy_failure(DestroyFailure(count=1, instance=int(box), status=503))
    spaced()
    vast.destroy(box)  # a 503, retried after the interval, then destroyed
    spaced()
    fake.advance(fake.scenario.destroy_lag_s + fake.scenario.show_lag_s)  # asynchronous
    vast.destroy(box)  # gone: 404 no_such_instance or not_found
    spaced()
    vast.show(box)  # {"instances": null}


def test_every_exchange_of_a_tour_of_fakevast_keeps_vasts_published_contract_h6(judged):
    """H6: every request sent and every body FakeVast rendered on a tour of all its routes and
    answers is within the contract; the tour reaches every operation and MIN_FIELDS fields."""
    tour(judged)

    assert judged.breaches == []
    assert len(judged.refused) == 4 and all(judged.refused)
    assert judged.judge.coverage.statuses >= STATUSES
    limited = [c.route for c in judged.fake.calls if c.status == 429]
    assert limited.count("create") == 4 and "list" in limited, limited  # 3 + the interval
    counts = judged.judge.coverage.counts()
    print(f"vast H6: {judged.exchanges} exchanges, {counts}")
    assert judged.judge.coverage.operations == OPERATIONS
    assert counts["fields"] >= MIN_FIELDS, counts


def test_a_fake_that_renders_a_field_vast_does_not_document_fails_the_contract_h6(
    judged, monkeypatch
):
    """H6: an instance row carrying one more offer field (gpu_ids, which no instance schema
    lists) is a breach on show and list: breaking the fake fails the tour."""
    monkeypatch.setattr(wire, "FROM_OFFER", (*wire.FROM_OFFER, "gpu_ids"))

    tour(judged)

    assert "show 200.instances.gpu_ids: a field the contract lacks" in judged.breaches
    assert any(b.endswith(".gpu_ids: a field the contract lacks") for b in judged.breaches)


def test_a_fake_that_accepts_a_create_vast_refuses_fails_the_contract_h6(judged, monkeypatch):
    """H6: a fake whose create ignores the contract answers 200 to disk 4, and the judge names
    both the request's breach and the 2xx given to it."""
    monkeypatch.setattr("fakes.vast.routes._refusals", lambda name, request, body: [])

    judged.raw("PUT", f"/api/v0/asks/{HEALTHY}/", {"image": "img", "disk": 4})

    assert judged.breaches == [
        "create request.disk: 4 is below the minimum 8.0",
        "create: answered 200 to a request the contract refuses",
    ]


# --- the judge itself, on one body at a time ------------------------------------------------------
def _show_reply(judged: Judged) -> dict[str, object]:
    box = judged.adapter().create(HEALTHY, label="gpuops:j", image="img", disk_gb=20.0)
    doc = judged.raw("GET", f"/api/v0/instances/{box}/").json()
    assert judged.breaches == []
    return doc


@pytest.mark.parametrize(
    ("edit", "breach"),
    [
        (lambda row: row.update(gpu_ids=[1]), "instances.gpu_ids: a field the contract lacks"),
        (lambda row: row.update(ssh_port="30000"), "instances.ssh_port: a string '30000'"),
        (lambda row: row.update(id=None), "instances.id: null, the contract says ['integer']"),
        (lambda row: row.update(image_args="bash"), "instances.image_args: a string 'bash'"),
        (lambda row: row.pop("start_date"), "instances.start_date: required, missing"),
    ],
    ids=[
        "unknown field",
        "wrong type",
        "null where not nullable",
        "string for a list",
        "required field missing",
    ],
)
def test_the_judge_names_each_way_a_rendered_body_breaks_the_contract_h6(judged, edit, breach):
    """H6: one changed field of a real show answer is named, with its path and the rule."""
    doc = _show_reply(judged)
    edit(doc["instances"])

    found = judged.judge.response_breaches("show", 200, json.dumps(doc))

    assert len(found) == 1 and found[0].startswith(f"show 200.{breach}"), found


@pytest.mark.parametrize(
    ("body", "breach"),
    [
        ({"disk": 20}, "create request.image: required, missing"),
        ({"image": "img", "disk": 7.5}, "create request.disk: 7.5 is below the minimum 8.0"),
        ({"image": "img", "label": "l" * 257}, "create request.label: 257 characters"),
        ({"image": "i" * 1025}, "create request.image: 1025 characters"),
        ({"image": "img", "onstart": "o" * 4097}, "create request.args+args_str+onstart: 4097"),
        ({"image": "img", "args": ["a" * 97], "onstart": "o" * 4000},
         "create request.args+args_str+onstart: 4097"),
        ({"image": "img", "runtype": "telnet"}, "create request.runtype: 'telnet' is not one"),
        ({"image": "img", "gpu_count": 2}, "create request.gpu_count: a field the contract"),
        ({"image": "img", "price": 500.0}, "create request.price: 500.0 is above the maximum"),
        ({"image": 5}, "create request.image: a int 5, the contract says ['string']"),
    ],
    ids=["no image", "disk", "label", "image", "onstart", "args and onstart", "runtype",
         "unknown field", "price", "type"],
)  # fmt: skip
def test_the_judge_names_each_way_a_create_request_breaks_the_contract_h6(body, breach):
    """H6: create_instance.yaml's required image, x-input-validation limits, runtype enum and
    closed field list, each named."""
    judge = contract.load()

    found = judge.request_breaches("create", method="PUT", path="/api/v0/asks/1/", body=body)

    assert found and any(b.startswith(breach) for b in found), found


def test_the_request_the_adapter_sends_to_create_is_within_the_contract_with_its_client_patches_h6():
    """H6: vastai's create body (client_id, env as an object, nulls, 'ssh_direc ssh_proxy') is
    within the contract only with vast-client.yaml's sourced patches, and breaks the bare
    OpenAPI facts in exactly the ways those patches record."""
    import yaml
    from vastai.api.instances import build_create_instance_payload

    body = build_create_instance_payload(
        image="img", disk=20.0, label="gpuops:x", onstart_cmd="echo", ssh=True, direct=True,
        cancel_unavail=True,
    )  # fmt: skip
    bare = contract.merged(
        yaml.safe_load(contract.OPENAPI.read_text(encoding="utf-8")), {"patches": []}
    )

    patched = contract.load().request_breaches("create", method="PUT", path="/api/v0/asks/1/",
                                               body=body)  # fmt: skip
    unpatched = bare.request_breaches("create", method="PUT", path="/api/v0/asks/1/", body=body)

    assert patched == []
    assert {b.split(":")[0] for b in unpatched} >= {
        "create request.client_id", "create request.env", "create request.runtype",
        "create request.price", "create request.extra",
    }  # fmt: skip


def test_every_contract_patch_names_its_source_and_the_openapi_facts_name_their_commit_h6():
    """H1/H6: the contract's provenance: the vast-cli commit, each operation's yaml, and a
    source on every patch of the client file (a patch without one is refused)."""
    import yaml

    openapi = yaml.safe_load(contract.OPENAPI.read_text(encoding="utf-8"))
    client = yaml.safe_load(contract.CLIENT.read_text(encoding="utf-8"))

    assert (
        "vast-ai/vast-cli @ e2aeac9868348f66298ded9be1495c6e11125dca"
        in (openapi["provenance"]["source"])
    )
    assert all(op["source"].startswith("openapi/yaml/") for op in openapi["operations"].values())
    assert all(len(patch["source"]) > 20 for patch in client["patches"])
    with pytest.raises(ValueError, match="without a source"):
        contract.merged(openapi, {"patches": [{"operation": "show", "at": "", "merge": {}}]})


def test_the_contract_holds_the_nine_operations_and_their_fields_h6():
    """H6: what is checked: nine operations, and this many fields in them."""
    judge = contract.load()

    assert set(judge.operations) == OPERATIONS
    assert contract.field_count(judge) >= 500


def test_the_limits_gpuops_refuses_at_the_edge_are_the_contracts_own_h6():
    """H6: `rent`'s edge checks (gpuops/cli/__init__.py) use create_instance.yaml's disk minimum and
    image length (exactly at them passes), and the adapter's label limit is its label limit."""
    import argparse

    from gpuops import cli
    from gpuops.providers import vast

    rules = contract.load().operations["create"]["input_validation"]

    assert cli.VAST_MIN_DISK_GB == rules["disk"]["min"]
    assert cli.VAST_IMAGE_MAX_CHARS == rules["image"]["max_length"]
    assert vast.LABEL_MAX_CHARS == rules["label"]["max_length"]
    cli.check_args(argparse.Namespace(disk_gb=8.0, image="i" * 1024, hours=1.0, race=3))


def test_gpuops_paces_creates_at_least_vasts_documented_create_interval_m12_h6():
    """M12/H6: the race's create spacing is no shorter than create_instance.yaml's x-rate-limit
    threshold (a minimum interval per key), the interval the default scenario enforces."""
    from fakes.scenario import contract_intervals
    from gpuops import timing

    intervals = dict(contract_intervals())

    assert intervals["create"] == 4.5
    assert timing.CREATE_PACING_S >= intervals["create"]
    assert dict(load_scenario(DEFAULT_SCENARIO).vast.endpoint_intervals) == intervals
