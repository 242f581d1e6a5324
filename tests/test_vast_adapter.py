"""The Vast adapter, replayed on recordings/vast through the real vastai client (H1).

Every exchange here is a file in recordings/vast, registered in a strict ordered `responses`
mock: a request out of order, unknown, or left unused fails the test. Variants of a recording
(another status, path or body) are made with dataclasses.replace, never by hand-written bodies.
Backoff goes to an injected recorder, so nothing here sleeps.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import responses
from hypothesis import given
from hypothesis import strategies as st
from responses.registries import OrderedRegistry

from gpuops import providers, timing
from gpuops.errors import (
    AuthFailed,
    OfferTaken,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    SearchQuotaExceeded,
    UnexpectedResponse,
    UsageError,
)
from gpuops.events import REDACTED, EventLog, read_events
from gpuops.model import Instance, InstanceStatus, Offer, SshKey
from gpuops.providers import Recording, load_recording, recording_names
from gpuops.providers.vast import READ_ATTEMPTS, VastAdapter, backoff_s, translate_error

ROOT = Path(__file__).resolve().parent.parent
BASE = "https://console.vast.ai"
# Not 64-hex on purpose: if it leaked, the event log's scrubber would not be what hid it.
API_KEY = "test-key-never-logged-Q7w2"
OFFER = 1234567  # the offer id of the create recordings
BOX = "1234568"  # the instance id they create, shown, listed and destroyed
KEY_RIG = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM+IjJ97AMeE89dcToyadVmtlBR6Ujcoy6iaia4CUO7g gpuops@rig"
)


def rec(name: str, **changes: object) -> Recording:
    """The recording ``name``, with fields replaced when a test needs a variant."""
    recording = load_recording("vast", name)
    return dataclasses.replace(recording, **changes) if changes else recording  # type: ignore[arg-type]


def rebody(name: str, edit, **changes: object) -> Recording:
    """The recording with its JSON body edited by ``edit(doc)`` (which changes it in place)."""
    recording = rec(name, **changes)
    doc = json.loads(recording.body)
    edit(doc)
    return dataclasses.replace(recording, body=json.dumps(doc))


def failure(method: str, path: str, exc: Exception) -> responses.Response:
    """A registration whose request fails at the transport, as a dropped connection does."""
    return responses.Response(method=method, url=BASE + path, body=exc)


@pytest.fixture
def http() -> Iterator[responses.RequestsMock]:
    """Strict, ordered replay: unknown, out-of-order or unused registrations fail the test."""
    with responses.RequestsMock(
        registry=OrderedRegistry, assert_all_requests_are_fired=True
    ) as mock:
        yield mock


def replay(mock: responses.RequestsMock, *items: Recording | responses.Response) -> None:
    for item in items:
        mock.add(item.to_response(BASE) if isinstance(item, Recording) else item)


@pytest.fixture
def sleeps() -> list[float]:
    """Every backoff the adapter asked for, in order."""
    return []


@pytest.fixture
def event_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "events.jsonl"


@pytest.fixture
def vast(sleeps: list[float], event_path: Path) -> VastAdapter:
    """The adapter against the default base URL, logging events, sleeping into ``sleeps``."""
    return VastAdapter(
        api_key=API_KEY,
        base_url=BASE,
        events=EventLog(event_path, "tester@ci"),
        sleep=sleeps.append,
        environ={},
    )


def calls_of(event_path: Path, kind: str = "vast.call") -> list[dict[str, object]]:
    return [e["payload"] for e in read_events(event_path) if e["kind"] == kind]  # type: ignore[misc]


# --- the recordings themselves -----------------------------------------------------------------
def test_every_vast_recording_loads_with_honest_provenance():
    """H1: each file says what it is (public/reconstructed/captured), from where, and when."""
    names = recording_names("vast")

    assert len(names) >= 20
    for name in names:
        recording = load_recording("vast", name)
        assert recording.kind in providers.KINDS
        assert len(recording.source) > 10 and recording.notes
        assert recording.date == "2026-11-30"
        assert recording.path.startswith("/api/v")


def test_no_recording_holds_a_secret():
    """H3: no private key, bearer token, 64-hex API key or token field in any recording."""
    for name in recording_names("vast"):
        recording = load_recording("vast", name)
        text = recording.body + repr(recording.headers) + repr(recording.query)
        for marker in ("PRIVATE KEY", "Bearer ", "jupyter_token", "api_key", "Authorization"):
            assert marker not in text, (name, marker)
        words = text.replace('"', " ").split()
        assert not any(len(w) >= 64 and set(w) <= set("0123456789abcdef") for w in words), name


def test_recorded_offers_use_only_documented_fields():
    """H1: no invented field: every offer key is in the documented example or vastai's Offer."""
    from vastai.data.offer import Offer as SdkOffer

    documented = set(json.loads(rec("search_offers_drift_object").body)["offers"])
    documented |= {f.name for f in dataclasses.fields(SdkOffer)}

    for offer in json.loads(rec("search_offers").body)["offers"]:
        assert set(offer) <= documented


def test_a_malformed_recording_is_refused_by_name(tmp_path, monkeypatch):
    """A recording without a known provenance kind cannot be replayed by mistake."""
    (tmp_path / "vast").mkdir()
    (tmp_path / "vast" / "bad.yaml").write_text(
        "provenance: {kind: guessed, source: nowhere, date: 2026-11-30}\n"
        "request: {method: GET, path: /api/v0/ssh/}\nresponse: {status: 200, body: '[]'}\n"
    )
    monkeypatch.setattr(providers, "RECORDINGS", tmp_path)

    with pytest.raises(UsageError, match="provenance.kind 'guessed'"):
        load_recording("vast", "bad")


# --- search --------------------------------------------------------------------------------------
def test_search_parses_every_recorded_offer(http, vast):
    """Five offers become five Offers, field for field, the raw body kept for the log (M11)."""
    replay(http, rec("search_offers"))

    offers = vast.search_offers("RTX 4090", 1, limit=5)

    assert [o.id for o in offers] == [18432117, 18433502, 18436644, 17990215, 18440078]
    assert offers[0] == Offer(
        id=18432117,
        machine_id=31218,
        host_id=104522,
        gpu_name="RTX 4090",
        num_gpus=1,
        gpu_ram=24564,
        dph_total=0.3712,
        reliability=0.9964,
        disk_bw=2875.4,
        inet_down=848.9,
        cuda_max_good=12.4,
        geolocation="Texas, US",
        verification="verified",
    )
    assert offers[0].raw["score"] == 201.4
    assert (offers[1].reliability, offers[2].disk_bw) == (0.9121, 182.6)
    assert (offers[4].gpu_name, offers[4].num_gpus, offers[4].gpu_ram) == ("A100 SXM4", 2, 81920)


def test_reliability_is_reliability2_when_present_else_reliability(http, vast):
    """The RTX 3090 offer has only `reliability`; another with both takes `reliability2`."""

    def diverge(doc):
        doc["offers"][0]["reliability"] = 0.5

    replay(http, rec("search_offers"), rebody("search_offers", diverge))

    first = vast.search_offers()
    edited = vast.search_offers()

    assert first[3].reliability == 0.9887 and "reliability2" not in first[3].raw
    assert edited[0].reliability == 0.9964


def test_search_filters_travel_in_the_body_the_sdk_builds(http, vast):
    """Our filters are merged into vastai's default query (verified, rentable, not rented)."""
    replay(http, rec("search_offers"))

    vast.search_offers(
        "RTX 4090", 1, limit=8, min_reliability=0.98, min_disk_bw=500.0, max_dph_total=0.5
    )

    sent = json.loads(http.calls[0].request.body)
    assert sent["gpu_name"] == {"eq": "RTX 4090"} and sent["num_gpus"] == {"eq": 1}
    assert sent["reliability"] == {"gte": 0.98} and sent["disk_bw"] == {"gte": 500.0}
    assert sent["dph_total"] == {"lte": 0.5} and sent["limit"] == 8
    assert sent["verified"] == {"eq": True} and sent["rented"] == {"eq": False}


def test_the_real_vastai_client_sends_every_request(http, vast):
    """The requests come from vastai's VastClient: its User-Agent, bearer auth, our timeout."""
    replay(http, rec("search_offers"))

    vast.search_offers()

    request = http.calls[0].request
    assert request.headers["User-Agent"].startswith("vastai-")
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.req_kwargs["timeout"] == timing.HTTP_TIMEOUT_S


def test_offers_as_an_object_is_an_unexpected_response_naming_offers(http, vast):
    """The documented example's object-shaped `offers` is drift, refused by name."""
    replay(http, rec("search_offers_drift_object"))

    with pytest.raises(UnexpectedResponse, match="field 'offers' is an object") as caught:
        vast.search_offers()

    assert caught.value.status == 200
    assert caught.value.body.startswith("{")


@pytest.mark.parametrize(
    "field", ["id", "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram", "dph_total"]
)
def test_a_missing_required_offer_field_is_named(http, vast, field):
    """A drifted offer names its index and the field, with the start of the body."""

    def drop(doc):
        del doc["offers"][2][field]

    replay(http, rebody("search_offers", drop))

    with pytest.raises(UnexpectedResponse, match=rf"offers\[2\]: field '{field}' is missing"):
        vast.search_offers()


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("dph_total", "0.37", "a string"),
        ("dph_total", None, "null"),
        ("num_gpus", 1.5, "an integer"),
        ("id", True, "a boolean"),
        ("gpu_name", 4090, "expected a string"),
        ("disk_bw", "fast", "expected a number"),
        ("reliability2", [0.99], "a list"),
        ("cuda_max_good", "twelve", "expected a number"),
        ("geolocation", {"city": "Austin"}, "an object"),
    ],
)
def test_a_mistyped_offer_field_is_named(http, vast, field, value, expected):
    """Wrong types are drift too; the message names the field and what it was."""

    def mistype(doc):
        doc["offers"][1][field] = value

    replay(http, rebody("search_offers", mistype))

    with pytest.raises(UnexpectedResponse, match=rf"offers\[1\]: field '{field}'.*{expected}"):
        vast.search_offers()


def test_optional_offer_fields_may_be_null_and_cuda_may_be_a_numeric_string(http, vast):
    """vastai marks these optional; None means "not said", and "12.4" is read as 12.4."""

    def thin(doc):
        first = doc["offers"][0]
        for name in ("reliability", "reliability2", "disk_bw", "inet_down", "geolocation"):
            first[name] = None
        del first["verification"]
        first["cuda_max_good"] = "12.4"

    replay(http, rebody("search_offers", thin))

    offer = vast.search_offers()[0]

    assert (offer.reliability, offer.disk_bw, offer.inet_down) == (None, None, None)
    assert (offer.geolocation, offer.verification, offer.cuda_max_good) == (None, None, 12.4)


def test_a_body_that_is_not_json_is_an_unexpected_response(http, vast):
    """A 200 that is not JSON (a proxy's HTML page) is drift, not an empty result."""
    replay(http, rec("search_offers", body="<html>maintenance</html>"))

    with pytest.raises(UnexpectedResponse, match="not JSON.*maintenance"):
        vast.search_offers()


def test_search_quota_exceeded_is_never_retried(http, vast, sleeps):
    """The daily quota resets at UTC midnight: one call, no sleep, the reset time said."""
    replay(http, rec("search_quota_exceeded"))

    with pytest.raises(SearchQuotaExceeded, match="resets at 2026-12-01 00:00 UTC"):
        vast.search_offers()

    assert len(http.calls) == 1 and sleeps == []


def test_a_read_retries_5xx_with_backoff_then_succeeds(http, vast, sleeps, event_path):
    """503, 503, 200: two backoffs from timing, each logged, and the offers arrive."""
    replay(http, rec("unavailable_503"), rec("unavailable_503"), rec("search_offers"))

    offers = vast.search_offers()

    assert len(offers) == 5
    assert (
        sleeps == [backoff_s(0), backoff_s(1)] == [timing.BACKOFF_BASE_S, 2 * timing.BACKOFF_BASE_S]
    )
    assert [c["status"] for c in calls_of(event_path)] == [503, 503, 200]
    assert [r["attempt"] for r in calls_of(event_path, "vast.retry")] == [0, 1]


def test_a_read_gives_up_after_a_bounded_number_of_attempts(http, vast, sleeps):
    """Persistent 503s: exactly READ_ATTEMPTS calls, then ProviderUnavailable (exit 4)."""
    replay(http, *[rec("unavailable_503")] * READ_ATTEMPTS)

    with pytest.raises(ProviderUnavailable) as caught:
        vast.search_offers()

    assert caught.value.status == 503
    assert len(http.calls) == READ_ATTEMPTS == 4
    assert sleeps == [backoff_s(i) for i in range(READ_ATTEMPTS - 1)]


def test_a_read_rate_limited_every_time_ends_rate_limited(http, vast, sleeps):
    """Persistent plain-text 429s on a read: bounded retries, then RateLimited."""
    limited = rec("create_429_plain", method="POST", path="/api/v0/bundles/")
    replay(http, *[limited] * READ_ATTEMPTS)

    with pytest.raises(RateLimited, match="API requests too frequent") as caught:
        vast.search_offers()

    assert caught.value.retry_after_s is None
    assert len(http.calls) == READ_ATTEMPTS and len(sleeps) == READ_ATTEMPTS - 1


def test_a_read_retries_a_dropped_connection_then_says_unavailable(http, vast, sleeps):
    """Connection errors are transient for reads: retried, then ProviderUnavailable."""
    drops = [failure("GET", "/api/v0/ssh/", requests.ConnectionError("reset"))] * READ_ATTEMPTS
    replay(http, *drops)

    with pytest.raises(ProviderUnavailable, match="ConnectionError") as caught:
        vast.list_ssh_keys()

    assert caught.value.status is None
    assert len(sleeps) == READ_ATTEMPTS - 1


def test_retry_after_is_honoured_up_to_backoff_max(http, vast, sleeps):
    """A provider's Retry-After within BACKOFF_MAX_S replaces our own backoff."""
    limited = rec("create_429_detail", method="POST", path="/api/v0/bundles/")
    hinted = dataclasses.replace(limited, headers=limited.headers + (("Retry-After", "7"),))
    replay(http, hinted, rec("search_offers"))

    vast.search_offers()

    assert sleeps == [7.0]


def test_a_retry_after_beyond_backoff_max_goes_to_the_caller(http, vast, sleeps):
    """A longer wait than we ever back off is not slept through: RateLimited carries it."""
    limited = rec("create_429_detail", method="POST", path="/api/v0/bundles/")
    long_wait = str(int(timing.BACKOFF_MAX_S * 10))
    replay(http, dataclasses.replace(limited, headers=(("Retry-After", long_wait),)))

    with pytest.raises(RateLimited) as caught:
        vast.search_offers()

    assert caught.value.retry_after_s == timing.BACKOFF_MAX_S * 10
    assert sleeps == [] and len(http.calls) == 1


def test_a_search_limit_below_one_is_refused_before_any_call(http, vast):
    """Bad arguments are a UsageError, and nothing is sent."""
    with pytest.raises(UsageError, match="limit"):
        vast.search_offers(limit=0)


# --- create (M12) --------------------------------------------------------------------------------
def test_create_returns_new_contract_as_the_instance_id(http, vast):
    """`new_contract` is the instance id; the label, image, disk and onstart are sent."""
    replay(http, rec("create_success"))

    instance_id = vast.create(
        OFFER, label="gpuops:intent-7f3c2a91", image="pytorch/pytorch", disk_gb=20.0, onstart="echo"
    )

    assert instance_id == BOX
    sent = json.loads(http.calls[0].request.body)
    assert sent["label"] == "gpuops:intent-7f3c2a91" and sent["image"] == "pytorch/pytorch"
    assert (sent["disk"], sent["onstart"]) == (20.0, "echo")
    assert sent["cancel_unavail"] is True and sent["runtype"] == "ssh_direc ssh_proxy"


@pytest.mark.parametrize(
    "name", ["create_no_such_ask_404", "create_no_such_ask_410", "create_no_such_ask_400"]
)
def test_no_such_ask_is_offer_taken_whatever_the_status(http, vast, name):
    """The offer went between search and rent: 404, 410 and 400 variants, error or msg."""
    replay(http, rec(name))

    with pytest.raises(OfferTaken) as caught:
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)

    assert caught.value.offer_id == OFFER
    assert caught.value.status == rec(name).status


@pytest.mark.parametrize(
    "failing",
    [
        pytest.param(lambda: rec("create_429_plain"), id="429-plain-text"),
        pytest.param(lambda: rec("create_429_detail"), id="429-json-detail"),
        pytest.param(
            lambda: rec("unavailable_503", method="PUT", path="/api/v0/asks/1234567/", status=502),
            id="502",
        ),
        pytest.param(
            lambda: rec("unavailable_503", method="PUT", path="/api/v0/asks/1234567/"), id="503"
        ),
        pytest.param(
            lambda: failure("PUT", "/api/v0/asks/1234567/", requests.ConnectionError("reset")),
            id="connection-error",
        ),
        pytest.param(
            lambda: failure("PUT", "/api/v0/asks/1234567/", requests.ReadTimeout("lost")),
            id="read-timeout",
        ),
    ],
)
def test_m12_a_create_is_exactly_one_http_call_whatever_fails(http, vast, sleeps, failing):
    """M12: a create is never retried, by us or by vastai's own loop: one call, no backoff."""
    replay(http, failing())

    with pytest.raises((RateLimited, ProviderUnavailable)):
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)

    assert len(http.calls) == 1
    assert sleeps == []


def test_m12_the_vastai_client_is_built_never_to_retry_on_its_own(http, sleeps, event_path):
    """M12: with our retries off, one 503 on a read is one call: vastai's loop never runs."""
    vast = VastAdapter(
        api_key=API_KEY, base_url=BASE, sleep=sleeps.append, read_attempts=1, environ={}
    )
    replay(http, rec("unavailable_503"))

    with pytest.raises(ProviderUnavailable):
        vast.search_offers()

    assert len(http.calls) == 1 and sleeps == []


def test_m12_a_create_that_succeeds_without_new_contract_is_unclear_not_guessed(http, vast):
    """M12: a 2xx with no instance id raises; the caller must reconcile by label."""
    replay(http, rec("create_drift_no_new_contract"))

    with pytest.raises(UnexpectedResponse, match="'new_contract' is missing"):
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)


def test_a_create_answering_success_false_on_200_is_unexpected(http, vast):
    """A 200 that says it failed is not a rental and not a clear refusal."""
    replay(http, rebody("create_success", lambda doc: doc.update(success=False)))

    with pytest.raises(UnexpectedResponse, match="success is false"):
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)


def test_a_create_on_someone_elses_terms_is_auth_failed(http, vast):
    """403 (renting one's own machine as a host) is refused credentials, not a retry."""
    replay(http, rec("create_403_not_your_own"))

    with pytest.raises(AuthFailed, match="HTTP 403"):
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)


@pytest.mark.parametrize(
    "arguments",
    [
        dict(offer_id=0, label="gpuops:x", image="img", disk_gb=10.0),
        dict(offer_id=True, label="gpuops:x", image="img", disk_gb=10.0),
        dict(offer_id=OFFER, label="", image="img", disk_gb=10.0),
        dict(offer_id=OFFER, label="x" * 257, image="img", disk_gb=10.0),
        dict(offer_id=OFFER, label="gpuops:x", image="", disk_gb=10.0),
        dict(offer_id=OFFER, label="gpuops:x", image="img", disk_gb=0.0),
        dict(offer_id=OFFER, label="gpuops:x", image="img", disk_gb=10.0, onstart="x" * 4049),
    ],
)
def test_create_arguments_are_checked_before_anything_is_sent(http, vast, arguments):
    """M3: a create without a usable ownership label never reaches the provider."""
    arguments = dict(arguments)  # the parameter is shared: mutmut runs a test more than once
    offer_id = arguments.pop("offer_id")

    with pytest.raises(UsageError):
        vast.create(offer_id, **arguments)


# --- show ----------------------------------------------------------------------------------------
def test_show_running_reads_the_proxy_and_the_direct_ssh_endpoints(http, vast):
    """Running: ssh_host/ssh_port and ports["22/tcp"][0]["HostPort"] as an int."""
    replay(http, rec("show_running"))

    assert vast.show(BOX) == Instance(
        instance_id=BOX,
        label="gpuops:intent-7f3c2a91",
        actual_status=InstanceStatus.RUNNING,
        actual_status_raw="running",
        ssh_host="ssh4.vast.ai",
        ssh_port=30568,
        public_ipaddr="203.0.113.17",
        direct_ssh_port=20000,
        machine_id=31218,
        gpu_name="RTX 4090",
        dph_total=0.3712,
        start_date=1796029925.0,
    )


def test_show_loading_has_no_direct_port_yet(http, vast):
    """`ports` appears only on running instances; before that the direct port is None."""
    replay(http, rec("show_loading"))

    instance = vast.show(BOX)

    assert instance is not None
    assert instance.actual_status is InstanceStatus.LOADING and instance.direct_ssh_port is None


def test_show_a_null_status_is_provisioning(http, vast):
    """JSON null is Vast's "Provisioning"; the raw stays None."""
    replay(http, rec("show_provisioning"))

    instance = vast.show(BOX)

    assert instance is not None
    assert (instance.actual_status, instance.actual_status_raw) == (
        InstanceStatus.PROVISIONING,
        None,
    )


def test_show_a_never_seen_status_is_unknown_with_the_raw_string_kept(http, vast):
    """A status nobody documented is UNKNOWN, raw "migrating" kept, and it is not dead."""
    replay(http, rec("show_unrecognised_status"))

    instance = vast.show(BOX)

    assert instance is not None
    assert instance.actual_status is InstanceStatus.UNKNOWN
    assert instance.actual_status_raw == "migrating"
    assert not instance.actual_status.is_terminal_failure


def test_show_instances_null_means_the_box_is_gone(http, vast):
    """M4: `{"instances": null}` is Vast saying this box no longer exists: None."""
    replay(http, rec("show_gone"))

    assert vast.show(BOX) is None


def test_show_a_row_about_another_instance_is_unexpected(http, vast):
    """M4: an answer about a different box never confirms anything about ours."""
    replay(http, rebody("show_running", lambda doc: doc["instances"].update(id=999)))

    with pytest.raises(UnexpectedResponse, match="asked for 1234568, got 999"):
        vast.show(BOX)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda row: row.pop("actual_status"), "field 'actual_status' is missing"),
        (lambda row: row.update(actual_status=3), "field 'actual_status' is a int"),
        (lambda row: row.pop("id"), "field 'id' is missing"),
        (lambda row: row.update(ssh_port="30568"), "field 'ssh_port' is a string"),
        (
            lambda row: row.update(ports={"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "ssh"}]}),
            r'ports\["22/tcp"\]\[0\].HostPort',
        ),
    ],
)
def test_a_drifted_instance_row_is_named(http, vast, edit, message):
    """Missing or mistyped instance fields raise UnexpectedResponse naming them."""
    replay(http, rebody("show_running", lambda doc: edit(doc["instances"])))

    with pytest.raises(UnexpectedResponse, match=message):
        vast.show(BOX)


def test_show_accepts_the_documented_list_shape_of_ports_as_no_direct_port(http, vast):
    """show_instance.yaml documents `ports` as a list of ints: no port 22 mapping, not drift."""
    replay(http, rebody("show_running", lambda doc: doc["instances"].update(ports=[8080, 8081])))

    instance = vast.show(BOX)

    assert instance is not None and instance.direct_ssh_port is None


@pytest.mark.parametrize("bad", ["", "12a", "../1", "-5", " 1234568"])
def test_show_and_destroy_refuse_an_id_that_is_not_digits(http, vast, bad):
    """An instance id only ever becomes a URL path segment when it is all digits."""
    with pytest.raises(UsageError):
        vast.show(bad)
    with pytest.raises(UsageError):
        vast.destroy(bad)


def test_auth_error_is_auth_failed_and_not_retried(http, vast, sleeps):
    """401 auth_error: our key was refused; retrying cannot help."""
    replay(http, rec("auth_401"))

    with pytest.raises(AuthFailed, match="Invalid user key") as caught:
        vast.show(BOX)

    assert caught.value.status == 401 and sleeps == [] and len(http.calls) == 1


# --- list ----------------------------------------------------------------------------------------
def test_list_instances_pages_through_next_token(http, vast):
    """Two pages, the second asked for with the first's token (the recording checks it)."""
    replay(http, rec("list_instances_page1"), rec("list_instances_page2"))

    boxes = vast.list_instances()

    assert [b.instance_id for b in boxes] == ["1234568", "1234570", "1234571", "1234575", "1234580"]
    assert [b.actual_status for b in boxes] == [
        InstanceStatus.RUNNING,
        InstanceStatus.EXITED,
        InstanceStatus.NO_HEARTBEAT,
        InstanceStatus.OFFLINE,
        InstanceStatus.PROVISIONING,
    ]
    assert [b.actual_status.is_terminal_failure for b in boxes] == [False, True, True, True, False]
    assert [b.label for b in boxes][2:4] == ["ML Training Job 2025", None]


def test_list_retries_a_failing_page_without_starting_over(http, vast, sleeps):
    """A 503 on page 2 retries page 2 only; page 1 is not fetched twice."""
    page_503 = rec("unavailable_503", method="GET", path="/api/v1/instances/")
    replay(http, rec("list_instances_page1"), page_503, rec("list_instances_page2"))

    assert len(vast.list_instances()) == 5
    assert len(http.calls) == 3 and sleeps == [backoff_s(0)]


def test_list_by_label_sends_vasts_label_filter(http, vast):
    """M12 reconcile: the label filter travels as select_filters={"label": {"eq": ...}}."""
    replay(http, rec("list_instances_page2", query=(("limit", "25"),)))

    vast.list_instances(label="gpuops:intent-5d21c8e0")

    params = http.calls[0].request.params
    assert json.loads(params["select_filters"]) == {"label": {"eq": "gpuops:intent-5d21c8e0"}}


def test_a_repeating_next_token_is_unexpected_not_an_endless_loop(http, vast):
    """A provider that hands back the same cursor would page forever; it is drift."""
    page1 = rec("list_instances_page1")
    again = dataclasses.replace(page1, query=rec("list_instances_page2").query)
    replay(http, page1, again)

    with pytest.raises(UnexpectedResponse, match="repeats"):
        vast.list_instances()


def test_a_page_whose_instances_is_not_a_list_is_named(http, vast):
    """`instances` as an object is drift; null is an empty page, as vastai reads it."""
    replay(
        http,
        rebody("list_instances_page1", lambda doc: doc.update(instances={"id": 1})),
    )

    with pytest.raises(UnexpectedResponse, match="field 'instances' is an object"):
        vast.list_instances()


# --- destroy -------------------------------------------------------------------------------------
def test_destroy_accepted_returns_none(http, vast):
    """200 success: accepted. Confirmation is a later show (M4), not this return."""
    replay(http, rec("destroy_success"))

    assert vast.destroy(BOX) is None
    assert http.calls[0].request.method == "DELETE"


@pytest.mark.parametrize("name", ["destroy_404_no_such_instance", "destroy_404_not_found"])
def test_destroy_of_a_box_already_gone_is_success(http, vast, name):
    """404 with no_such_instance or not_found: destroy is idempotent."""
    replay(http, rec(name))

    assert vast.destroy(BOX) is None


def test_destroy_404_with_any_other_error_is_not_taken_as_gone(http, vast):
    """M4: only the two documented codes mean gone; a stray 404 keeps the box on the list."""
    replay(http, rebody("destroy_404_not_found", lambda doc: doc.update(error="no_route")))

    with pytest.raises(UnexpectedResponse, match="HTTP 404 no_route"):
        vast.destroy(BOX)


def test_destroy_is_retried_and_a_404_after_a_lost_first_attempt_means_gone(http, vast, sleeps):
    """429 then no_such_instance: retrying a destroy is safe, and gone is gone."""
    replay(http, rec("destroy_429"), rec("destroy_404_no_such_instance"))

    assert vast.destroy(BOX) is None
    assert sleeps == [backoff_s(0)]


def test_destroy_answering_success_false_is_unexpected(http, vast):
    """M4: a destroy that says it failed must stay on the retry list, so it raises."""
    replay(http, rebody("destroy_success", lambda doc: doc.update(success=False)))

    with pytest.raises(UnexpectedResponse, match="not accepted"):
        vast.destroy(BOX)


# --- ssh keys (M9) -------------------------------------------------------------------------------
def test_ssh_key_list_leaves_out_deleted_keys(http, vast):
    """M9: a key with deleted_at opens no box, so it never counts as registered."""
    replay(http, rec("ssh_keys_list"))

    assert vast.list_ssh_keys() == [SshKey(id=40211, public_key=KEY_RIG)]


def test_register_sends_the_public_key_and_returns_the_registered_one(http, vast):
    """M9: the account keeps our key; the answer is checked to be the key we sent."""
    replay(http, rec("ssh_key_register"))

    key = vast.register_ssh_key(KEY_RIG + "\n")

    assert key == SshKey(id=40211, public_key=KEY_RIG)
    assert json.loads(http.calls[0].request.body) == {"ssh_key": KEY_RIG}


def test_register_refuses_a_private_key_before_sending_it(http, vast):
    """H3: private key material never leaves the machine."""
    with pytest.raises(UsageError, match="private key"):
        vast.register_ssh_key("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...\n")
    with pytest.raises(UsageError, match="not an OpenSSH public key"):
        vast.register_ssh_key("hello")


def test_register_is_sent_once(http, vast, sleeps):
    """Registering is not idempotent: a 503 is reported, not retried."""
    replay(http, rec("unavailable_503", path="/api/v0/ssh/"))

    with pytest.raises(ProviderUnavailable):
        vast.register_ssh_key(KEY_RIG)

    assert len(http.calls) == 1 and sleeps == []


def test_register_answered_with_another_key_is_unexpected(http, vast):
    """M9: if Vast registered something else, our key is not registered."""
    replay(http, rec("ssh_key_register"))
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB"

    with pytest.raises(UnexpectedResponse, match="not the one sent"):
        vast.register_ssh_key(other)


# --- translation, one function -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "body", "headers", "offer_id", "expected"),
    [
        (429, "API requests too frequent", {}, None, RateLimited),
        (429, '{"detail": "too frequent"}', {"retry-after": "3"}, None, RateLimited),
        (429, '{"error": "search_quota_exceeded"}', {}, None, SearchQuotaExceeded),
        (410, '{"error": "no_such_ask"}', {}, 7, OfferTaken),
        (404, '{"msg": "no_such_ask gone"}', {}, 7, OfferTaken),
        (404, '{"msg": "no_such_ask gone"}', {}, None, UnexpectedResponse),
        (409, '{"msg": "no_such_ask"}', {}, 7, UnexpectedResponse),
        (401, "", {}, None, AuthFailed),
        (403, "{}", {}, None, AuthFailed),
        (400, '{"error": "auth_error"}', {}, None, AuthFailed),
        (500, "oops", {}, None, ProviderUnavailable),
        (504, "", {}, None, ProviderUnavailable),
        (None, "", {}, None, ProviderUnavailable),
        (400, '{"error": "invalid_args", "msg": "bad"}', {}, None, UnexpectedResponse),
        (418, "teapot", {}, 7, UnexpectedResponse),
    ],
)
def test_translate_error_maps_each_shape_to_one_error(status, body, headers, offer_id, expected):
    """Every Vast failure shape maps to exactly one gpuops error, in one function."""
    error = translate_error(status, body, headers, offer_id=offer_id)

    assert type(error) is expected


def test_retry_after_is_read_case_insensitively_and_only_as_seconds():
    """`retry-after: 3` is 3 s; an HTTP date or garbage leaves the choice to our backoff."""
    assert translate_error(429, "", {"retry-after": "3"}).retry_after_s == 3.0  # type: ignore[attr-defined]
    for value in ("Wed, 21 Oct 2026 07:28:00 GMT", "soon", "-1", "nan"):
        error = translate_error(429, "", {"Retry-After": value})
        assert error.retry_after_s is None  # type: ignore[attr-defined]


def test_error_bodies_are_scrubbed_before_they_are_kept(http, vast):
    """H3: a body carrying a key (instance_api_key on a create) is redacted in the error."""
    leaked = "ab12" * 16
    replay(
        http, rebody("create_drift_no_new_contract", lambda d: d.update(instance_api_key=leaked))
    )

    with pytest.raises(UnexpectedResponse) as caught:
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)

    assert leaked not in caught.value.body and leaked not in str(caught.value)
    assert REDACTED in caught.value.body


# --- events and secrets (H3) ---------------------------------------------------------------------
def test_every_http_exchange_is_one_vast_call_event(http, vast, event_path):
    """Each exchange is logged: op, method, path without query, status, duration, attempt."""
    replay(http, rec("show_running"), failure("GET", "/api/v0/ssh/", requests.ConnectTimeout()))
    replay(http, rec("ssh_keys_list"))

    vast.show(BOX)
    vast.list_ssh_keys()

    logged = calls_of(event_path)
    assert [(c["op"], c["method"], c["path"], c["status"]) for c in logged] == [
        ("show", "GET", "/api/v0/instances/1234568/", 200),
        ("list_ssh_keys", "GET", "/api/v0/ssh/", None),
        ("list_ssh_keys", "GET", "/api/v0/ssh/", 200),
    ]
    assert logged[1]["error"] == "ConnectTimeout" and logged[2]["attempt"] == 1
    assert all(isinstance(c["duration_s"], float) and c["duration_s"] >= 0 for c in logged)


def test_the_api_key_never_reaches_the_event_log_errors_or_repr(http, vast, event_path):
    """H3: after calls that succeed, fail and retry, the key appears nowhere we write."""
    replay(http, rec("create_success"), rec("auth_401"), rec("destroy_429"))
    replay(http, rec("destroy_success"), rec("create_no_such_ask_410"))

    vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)
    errors = []
    for action in (lambda: vast.show(BOX), lambda: vast.destroy(BOX)):
        try:
            action()
        except AuthFailed as exc:
            errors.append(exc)
    with pytest.raises(OfferTaken) as caught:
        vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)

    assert API_KEY.encode() not in event_path.read_bytes()
    assert len(calls_of(event_path)) == 5
    assert all(API_KEY not in f"{e} {e.body}" for e in [*errors, caught.value])
    assert API_KEY not in repr(vast) and API_KEY not in str(vars(vast).get("base_url"))


def test_without_an_event_log_nothing_is_written(http, tmp_path, sleeps):
    """The event log is optional; the adapter works the same without one."""
    vast = VastAdapter(api_key=API_KEY, base_url=BASE, sleep=sleeps.append, environ={})
    replay(http, rec("show_gone"))

    assert vast.show(BOX) is None
    assert list(tmp_path.iterdir()) == []


def test_a_create_is_not_lost_when_the_event_log_cannot_be_written(http, tmp_path, sleeps):
    """M12: the box exists once Vast said so; an unwritable audit log only warns."""
    (tmp_path / "events.jsonl").mkdir()  # a directory where the log file should be
    log = EventLog(tmp_path / "events.jsonl", "tester@ci")
    vast = VastAdapter(api_key=API_KEY, base_url=BASE, events=log, sleep=sleeps.append, environ={})
    replay(http, rec("create_success"))

    with pytest.warns(RuntimeWarning, match="vast.call not written"):
        instance_id = vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)

    assert instance_id == BOX


# --- configuration -------------------------------------------------------------------------------
def test_the_base_url_comes_from_vast_url_so_a_loopback_fake_can_answer(http, sleeps):
    """VAST_URL (or base_url=) points the real client at another server."""
    loopback = "http://127.0.0.1:8765"
    vast = VastAdapter(api_key=API_KEY, environ={"VAST_URL": loopback + "/"}, sleep=sleeps.append)
    http.add(rec("show_gone").to_response(loopback))

    assert vast.show(BOX) is None
    assert vast.base_url == loopback


def test_the_api_key_comes_from_the_argument_the_environment_or_vastais_key_files(tmp_path):
    """The argument wins, then VAST_API_KEY, then ~/.config/vastai/vast_api_key, else refusal."""
    (tmp_path / ".config" / "vastai").mkdir(parents=True)
    (tmp_path / ".config" / "vastai" / "vast_api_key").write_text("from-file-key\n")
    home = {"HOME": str(tmp_path)}

    assert VastAdapter(api_key="arg-key", environ={"VAST_API_KEY": "env"})._api_key == "arg-key"
    assert VastAdapter(environ={"VAST_API_KEY": " env-key\n", **home})._api_key == "env-key"
    assert VastAdapter(environ=home)._api_key == "from-file-key"
    with pytest.raises(UsageError, match="no Vast.ai API key"):
        VastAdapter(environ={"HOME": str(tmp_path / "empty")})


@pytest.mark.parametrize("url", ["console.vast.ai", "ftp://console.vast.ai", "https://"])
def test_a_base_url_that_is_not_http_is_a_usage_error(url):
    """A typo'd URL is refused at construction, not at the first call."""
    with pytest.raises(UsageError, match="base URL"):
        VastAdapter(api_key=API_KEY, base_url=url, environ={})


def test_a_non_transient_request_error_is_a_provider_error_and_not_retried(http, vast, sleeps):
    """Too many redirects will not get better by waiting: one attempt, ProviderError."""
    replay(http, failure("GET", "/api/v0/ssh/", requests.TooManyRedirects("loop")))

    with pytest.raises(ProviderError, match="TooManyRedirects"):
        vast.list_ssh_keys()

    assert sleeps == []


def test_importing_the_adapter_does_not_import_vastai():
    """`import vastai` costs over a second; gpuops --help must never pay it."""
    code = (
        "import sys, gpuops.providers.vast, gpuops.model, gpuops.providers\n"
        "assert 'vastai' not in sys.modules, 'vastai imported'\n"
        "assert 'requests' not in sys.modules, 'requests imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 0, result.stderr


# --- backoff -------------------------------------------------------------------------------------
def test_backoff_starts_at_the_base_doubles_and_stops_at_the_cap():
    """M12: 1, 2, 4, ... seconds from timing, never above BACKOFF_MAX_S."""
    assert backoff_s(0) == timing.BACKOFF_BASE_S
    assert backoff_s(1) == 2 * timing.BACKOFF_BASE_S
    assert backoff_s(1000) == timing.BACKOFF_MAX_S
    with pytest.raises(ValueError):
        backoff_s(-1)


@given(st.integers(min_value=0, max_value=10_000))
def test_backoff_is_monotone_and_bounded(attempt):
    """Waiting never shrinks as attempts grow, and always lies within [base, max]."""
    assert timing.BACKOFF_BASE_S <= backoff_s(attempt) <= timing.BACKOFF_MAX_S
    assert backoff_s(attempt) <= backoff_s(attempt + 1)
