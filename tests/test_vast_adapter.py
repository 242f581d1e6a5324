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
from gpuops.clock import SYSTEM, WithSleep
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
from gpuops.events import REDACTED, EventLog, read_events, scrub
from gpuops.model import Instance, InstanceStatus, KeyHolder, Offer, SshKey
from gpuops.providers import Recording, load_recording
from oracles import recording_names
from gpuops.providers.vast import (
    READ_ATTEMPTS,
    VastAdapter,
    backoff_s,
    find_api_key,
    translate_error,
)

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
        clock=WithSleep(SYSTEM, sleeps.append),
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
        assert "2026-11-30" <= recording.date <= "2026-12-02"
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
        end_date=1798761600.0,
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


@pytest.mark.fault(
    "429 rate limits",
    handled="reads back off, honouring Retry-After up to a cap (M12)",
)
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
@pytest.mark.fault(
    "an offer taken between search and rent (400, 404 or 410)",
    handled="OfferTaken, whatever the status: the race moves on to a spare offer (M1)",
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
        api_key=API_KEY, base_url=BASE, clock=WithSleep(SYSTEM, sleeps.append), read_attempts=1
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


@pytest.mark.fault(
    "a provider status never seen before",
    handled="UNKNOWN with the raw string kept, never a guess",
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


# --- whose key (M3) ------------------------------------------------------------------------------
def test_a_team_members_own_key_is_answered_with_the_members_id_and_username(http, vast):
    """M3: /users/current for a member's key names the member: the operator id gpuops
    derives from it."""
    replay(http, rec("user_current_member"))

    assert vast.current_user() == KeyHolder(user_id=101, username="alice")


def test_the_shared_account_keys_answer_names_no_user(http, vast):
    """M3: the recorded answer for the account's key has an id and no username: nothing
    attests which person holds it."""
    replay(http, rec("user_current"))

    assert vast.current_user() == KeyHolder(user_id=318840, username=None)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("[]", "body is a list, expected an object"),
        ('{"username": "alice"}', "body: field 'id' is missing"),
        ('{"id": 101, "username": 7}', "body: field 'username' is a int, expected a string"),
    ],
)
def test_a_drifted_current_user_answer_is_named(http, vast, body, problem):
    """M3: an answer that is not a user (a list, no id, a username that is not text) is
    drift, named with the call, never an identity."""
    replay(http, rec("user_current_member", body=body))

    with pytest.raises(UnexpectedResponse) as caught:
        vast.current_user()

    assert str(caught.value).startswith(f"vast: current_user: {problem}")


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


def test_asking_whose_key_it_is_is_logged_as_current_user_and_never_logs_the_key(
    http, vast, event_path
):
    """M3, H3: the identity question is one vast.call event named current_user; the key Vast
    puts in that answer (its schema lists api_key) is parsed past and written nowhere."""
    leaked = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    replay(http, rebody("user_current_member", lambda doc: doc.update(api_key=leaked)))

    assert vast.current_user() == KeyHolder(user_id=101, username="alice")

    logged = calls_of(event_path)
    assert [(c["op"], c["method"], c["path"], c["status"]) for c in logged] == [
        ("current_user", "GET", "/api/v0/users/current", 200),
    ]
    assert leaked not in event_path.read_text()


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
    vast = VastAdapter(api_key=API_KEY, base_url=BASE, clock=WithSleep(SYSTEM, sleeps.append))
    replay(http, rec("show_gone"))

    assert vast.show(BOX) is None
    assert list(tmp_path.iterdir()) == []


def test_a_create_is_not_lost_when_the_event_log_cannot_be_written(http, tmp_path, sleeps):
    """M12: the box exists once Vast said so; an unwritable audit log only warns."""
    (tmp_path / "events.jsonl").mkdir()  # a directory where the log file should be
    log = EventLog(tmp_path / "events.jsonl", "tester@ci")
    vast = VastAdapter(api_key=API_KEY, base_url=BASE, events=log, clock=WithSleep(SYSTEM, sleeps.append))
    replay(http, rec("create_success"))

    with pytest.warns(RuntimeWarning, match="vast.call not written"):
        instance_id = vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)

    assert instance_id == BOX


# --- configuration -------------------------------------------------------------------------------
def test_the_base_url_comes_from_vast_url_so_a_loopback_fake_can_answer(http, sleeps):
    """VAST_URL (or base_url=) points the real client at another server."""
    loopback = "http://127.0.0.1:8765"
    vast = VastAdapter(api_key=API_KEY, base_url=loopback + "/", clock=WithSleep(SYSTEM, sleeps.append))
    http.add(rec("show_gone").to_response(loopback))

    assert vast.show(BOX) is None
    assert vast.base_url == loopback


def test_the_api_key_comes_from_the_argument_the_environment_or_vastais_key_files(tmp_path):
    """The argument wins, then VAST_API_KEY, then ~/.config/vastai/vast_api_key, else refusal."""
    (tmp_path / ".config" / "vastai").mkdir(parents=True)
    (tmp_path / ".config" / "vastai" / "vast_api_key").write_text("from-file-key\n")
    home = {"HOME": str(tmp_path)}

    assert VastAdapter(api_key=" arg-key\n")._api_key == "arg-key"
    assert find_api_key({"VAST_API_KEY": " env-key\n", **home}) == "env-key"
    assert find_api_key(home) == "from-file-key"
    # the configured key (VAST_API_KEY, else the config file's) wins over both
    assert find_api_key({"VAST_API_KEY": "env-key", **home}, " configured\n") == "configured"
    with pytest.raises(UsageError, match="no Vast.ai API key"):
        find_api_key({"HOME": str(tmp_path / "empty")})


@pytest.mark.parametrize("url", ["console.vast.ai", "ftp://console.vast.ai", "https://"])
def test_a_base_url_that_is_not_http_is_a_usage_error(url):
    """A typo'd URL is refused at construction, not at the first call."""
    with pytest.raises(UsageError, match="base URL"):
        VastAdapter(api_key=API_KEY, base_url=url)


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


# --- exact errors: every failure says who answered, what, and which call --------------------------
def body_start(recording: Recording) -> str:
    """What an UnexpectedResponse quotes of a body: its first 120 characters, scrubbed (H3)."""
    return f"(body starts {str(scrub(recording.body))[:120]!r})"


@pytest.mark.parametrize(
    ("status", "body", "headers", "offer_id", "expected"),
    [
        (None, "", None, None, (ProviderUnavailable, "vast unavailable: no answer", None)),
        (503, None, None, None, (ProviderUnavailable, "vast unavailable: HTTP 503", 503)),
        (
            502,
            '{"msg": "bad gateway"}',
            None,
            None,
            (ProviderUnavailable, "vast unavailable: HTTP 502 bad gateway", 502),
        ),
        (429, "", None, None, (RateLimited, "vast rate limited: HTTP 429", 429)),
        (
            429,
            "too   frequent\n" * 30,
            None,
            None,
            (RateLimited, "vast rate limited: " + ("too frequent " * 16)[:200], 429),
        ),
        (
            429,
            '{"message": "slow down", "detail": "later"}',
            None,
            None,
            (RateLimited, "vast rate limited: slow down", 429),
        ),
        (
            429,
            '{"detail": "too frequent"}',
            None,
            None,
            (RateLimited, "vast rate limited: too frequent", 429),
        ),
        (
            429,
            '{"error": "search_quota_exceeded"}',
            None,
            None,
            (SearchQuotaExceeded, "vast rate limited: search quota exceeded", 429),
        ),
        (
            429,
            '{"error": "search_quota_exceeded"}',
            {"x-ratelimit-reset": "soon"},
            None,
            (
                SearchQuotaExceeded,
                "vast rate limited: search quota exceeded; it resets at 'soon'",
                429,
            ),
        ),
        (
            410,
            '{"error": "no_such_ask"}',
            None,
            7,
            (OfferTaken, "vast offer 7 is no longer available", 410),
        ),
        (
            401,
            '{"error": "auth_error", "msg": "Invalid user key"}',
            None,
            None,
            (AuthFailed, "vast: credentials refused (HTTP 401): Invalid user key", 401),
        ),
        (
            400,
            '{"error": "invalid_args", "msg": "bad"}',
            None,
            None,
            (UnexpectedResponse, "vast: HTTP 400 invalid_args bad", 400),
        ),
        (400, "[1, 2]", None, None, (UnexpectedResponse, "vast: HTTP 400  [1, 2]", 400)),
        (
            400,
            '"just a string"',
            None,
            None,
            (UnexpectedResponse, 'vast: HTTP 400  "just a string"', 400),
        ),
    ],
)
def test_translate_error_says_exactly_what_failed_and_keeps_the_body(
    status, body, headers, offer_id, expected
):
    """One function, exact results: type, message, provider, status and the body as sent."""
    if body is None:
        error = translate_error(status)
    else:
        error = translate_error(status, body, headers, offer_id=offer_id)

    assert (type(error), str(error), error.status) == expected  # type: ignore[attr-defined]
    assert (error.provider, error.body) == ("vast", body or "")  # type: ignore[attr-defined]


def test_a_lost_connection_names_its_exception_class_and_text():
    """No answer at all: the transport's own error, scrubbed, is the message."""
    error = translate_error(None, cause=requests.ConnectionError("reset by peer"))

    assert str(error) == "vast unavailable: ConnectionError: reset by peer"


@pytest.mark.parametrize(("value", "seconds"), [("0", 0.0), ("0.5", 0.5), ("3", 3.0)])
def test_retry_after_of_zero_or_a_fraction_is_honoured(value, seconds):
    """Any finite, non-negative number of seconds is the provider's hint, zero included."""
    error = translate_error(429, "", {"Retry-After": value})

    assert error.retry_after_s == seconds  # type: ignore[attr-defined]


def test_the_quota_reset_is_told_in_utc_whatever_the_local_zone(monkeypatch):
    """X-RateLimit-Reset is an epoch; it is shown in UTC even on a machine set to Kolkata."""
    import time

    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        error = translate_error(
            429, '{"error": "search_quota_exceeded"}', {"X-RateLimit-Reset": "1796083200"}
        )
    finally:
        monkeypatch.undo()
        time.tzset()

    assert (
        str(error) == "vast rate limited: search quota exceeded; it resets at 2026-12-01 00:00 UTC"
    )


# --- exact drift messages: the call, the problem, the start of the body ---------------------------
def test_each_call_names_itself_when_its_body_is_not_an_object(http, vast):
    """M11: a body of the wrong shape is refused naming the call and quoting the body."""
    calls = [
        ("search_offers", rec("search_offers", body="[]"), lambda: vast.search_offers()),
        ("show", rec("show_running", body="[]"), lambda: vast.show(BOX)),
        ("list_instances", rec("list_instances_page1", body="[]"), lambda: vast.list_instances()),
        (
            "create",
            rec("create_success", body="[]"),
            lambda: vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0),
        ),
        ("destroy", rec("destroy_success", body="[]"), lambda: vast.destroy(BOX)),
        (
            "register_ssh_key",
            rec("ssh_key_register", body="[]"),
            lambda: vast.register_ssh_key(KEY_RIG),
        ),
    ]
    for op, recording, action in calls:
        replay(http, recording)
        with pytest.raises(UnexpectedResponse) as caught:
            action()
        assert str(caught.value) == (
            f"vast: {op}: body is a list, expected an object (body starts '[]')"
        )
        assert (caught.value.status, caught.value.body) == (200, "[]")


def test_a_key_list_that_is_not_a_list_is_named(http, vast):
    """GET /ssh/ answers a JSON list; an object is drift, named as such."""
    replay(http, rec("ssh_keys_list", body="{}"))

    with pytest.raises(UnexpectedResponse) as caught:
        vast.list_ssh_keys()

    assert str(caught.value) == (
        "vast: list_ssh_keys: the body is an object, expected a list of keys (body starts '{}')"
    )


def test_a_body_that_is_not_json_names_the_call_and_quotes_the_body(http, vast):
    """A proxy's HTML page on a 200 is refused with its first characters."""
    replay(http, rec("search_offers", body="<html>maintenance</html>"))

    with pytest.raises(UnexpectedResponse) as caught:
        vast.search_offers()

    assert str(caught.value) == (
        "vast: search_offers: the body is not JSON (body starts '<html>maintenance</html>')"
    )


def test_an_error_quotes_only_the_first_120_characters_of_the_body(http, vast):
    """M4: an answer about another box is refused; the message quotes 120 characters, no more."""
    recording = rebody("show_running", lambda doc: doc["instances"].update(id=999))
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.show(BOX)

    assert len(recording.body) > 120
    assert str(caught.value) == f"vast: show: asked for 1234568, got 999 {body_start(recording)}"


@pytest.mark.fault(
    'a drifted provider body',
    handled='UnexpectedResponse naming what is missing; never taken as "gone" (M4)',
)
def test_show_without_an_instances_field_is_named_not_taken_as_gone(http, vast):
    """Only an explicit `instances: null` means gone (M4); a missing field is drift."""
    recording = rec("show_running", body='{"success": true}')
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.show(BOX)

    assert str(caught.value) == (
        "vast: show: field 'instances' is missing (body starts '{\"success\": true}')"
    )


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("actual_status", 3, "field 'actual_status' is a int, expected a string"),
        ("id", "x", "field 'id' is a string 'x', expected an integer"),
        ("label", 5, "field 'label' is a int, expected a string"),
        ("ssh_host", 1, "field 'ssh_host' is a int, expected a string"),
        ("ssh_port", "1", "field 'ssh_port' is a string '1', expected an integer"),
        ("public_ipaddr", [1], "field 'public_ipaddr' is a list, expected a string"),
        ("machine_id", "m", "field 'machine_id' is a string 'm', expected an integer"),
        ("gpu_name", 4090, "field 'gpu_name' is a int, expected a string"),
        ("dph_total", "0.3", "field 'dph_total' is a string '0.3', expected a number"),
        ("start_date", True, "field 'start_date' is a boolean True, expected a number"),
    ],
)
def test_a_mistyped_instance_field_is_named_with_where_it_was(http, vast, field, value, problem):
    """show names `instances`, the row, the field, its kind and value, and what was expected."""
    recording = rebody("show_running", lambda doc: doc["instances"].update({field: value}))
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.show(BOX)

    assert str(caught.value) == f"vast: show: instances: {problem} {body_start(recording)}"


@pytest.mark.parametrize(
    ("binding", "kind"),
    [
        ([], "null"),
        ({"HostPort": "20000"}, "null"),
        (["20000"], "null"),
        ([{"HostIp": "0.0.0.0"}], "null"),
        ([{"HostPort": "ssh"}], "a string"),
        ([{"HostPort": 20000.0}], "a float"),
        ([{"HostPort": True}], "a boolean"),
    ],
)
def test_a_port_22_mapping_without_a_port_number_is_named(http, vast, binding, kind):
    """ports["22/tcp"] must hold [{"HostPort": digits}]; anything else is drift, never a port."""
    ports = {"22/tcp": binding}
    recording = rebody("show_running", lambda doc: doc["instances"].update(ports=ports))
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.show(BOX)

    assert str(caught.value) == (
        f'vast: show: field instances.ports["22/tcp"][0].HostPort is {kind}, expected a port '
        f"number {body_start(recording)}"
    )


def test_an_integer_host_port_is_read_like_a_string_one(http, vast):
    """Vast sends HostPort as a string of digits; an int with the same digits means the same."""
    ports = {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": 20001}]}
    replay(http, rebody("show_running", lambda doc: doc["instances"].update(ports=ports)))

    instance = vast.show(BOX)

    assert instance is not None and instance.direct_ssh_port == 20001


def test_an_instance_row_that_is_not_an_object_is_named(http, vast):
    """show names `instances`, the list names the row's index: never a bare type error."""
    shown = rebody("show_running", lambda doc: doc.update(instances=5))
    listed = rebody("list_instances_page1", lambda doc: doc.update(instances=["x"]))
    replay(http, shown, listed)

    with pytest.raises(UnexpectedResponse) as show:
        vast.show(BOX)
    with pytest.raises(UnexpectedResponse) as page:
        vast.list_instances()

    assert str(show.value) == (
        f"vast: show: instances is a int, expected an object {body_start(shown)}"
    )
    assert str(page.value) == (
        f"vast: list_instances: instances[0] is a string, expected an object {body_start(listed)}"
    )


def test_null_ssh_host_and_address_are_none_and_others_are_stripped(http, vast):
    """Before an instance has endpoints both are null; present ones lose stray whitespace."""

    def edit(doc):
        doc["instances"].update(ssh_host=None, public_ipaddr=None)

    def padded(doc):
        doc["instances"].update(ssh_host=" ssh4.vast.ai\n", public_ipaddr="203.0.113.17 ")

    replay(http, rebody("show_running", edit), rebody("show_running", padded))

    bare, spaced = vast.show(BOX), vast.show(BOX)

    assert bare is not None and (bare.ssh_host, bare.public_ipaddr) == (None, None)
    assert spaced is not None and (spaced.ssh_host, spaced.public_ipaddr) == (
        "ssh4.vast.ai",
        "203.0.113.17",
    )


def test_show_reads_a_row_the_sdk_cannot_post_process(http, vast):
    """vastai's show_instance trips over a row without extra_env; our parser does not need it."""
    replay(http, rebody("show_running", lambda doc: doc["instances"].pop("extra_env")))

    instance = vast.show(BOX)

    assert instance is not None and instance.instance_id == BOX


def test_a_404_on_show_is_unexpected_even_when_it_says_no_such_instance(http, vast):
    """Only destroy reads a 404 as gone; on show, gone is `instances: null` (M4)."""
    gone = rec("destroy_404_no_such_instance", method="GET", query=(("owner", "me"),))
    replay(http, gone)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.show(BOX)

    assert str(caught.value) == "vast: HTTP 404 no_such_instance Instance 1234568 not found."
    assert caught.value.status == 404


def test_a_drifted_list_row_and_a_mistyped_cursor_are_named(http, vast):
    """The list names the row index, and `body` for its next_token."""
    row = rebody("list_instances_page1", lambda doc: doc["instances"][1].update(label=5))
    cursor = rebody("list_instances_page1", lambda doc: doc.update(next_token=5))
    replay(http, row, cursor)

    with pytest.raises(UnexpectedResponse) as first:
        vast.list_instances()
    with pytest.raises(UnexpectedResponse) as second:
        vast.list_instances()

    assert str(first.value) == (
        f"vast: list_instances: instances[1]: field 'label' is a int, expected a string "
        f"{body_start(row)}"
    )
    assert str(second.value) == (
        f"vast: list_instances: body: field 'next_token' is a int, expected a string "
        f"{body_start(cursor)}"
    )


def test_a_repeating_cursor_is_named_with_the_token(http, vast):
    """The repeated next_token is quoted, so the loop it would have caused is visible."""
    page1 = rec("list_instances_page1")
    again = dataclasses.replace(page1, query=rec("list_instances_page2").query)
    replay(http, page1, again)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.list_instances()

    token = json.loads(page1.body)["next_token"]
    assert str(caught.value) == (
        f"vast: list_instances: next_token {token!r} repeats {body_start(page1)}"
    )


def test_the_list_is_asked_in_id_order_from_the_first_page(http, vast):
    """Paging by cursor needs a stable order: id ascending, 25 rows a page, no filter."""
    replay(http, rec("list_instances_page1"), rec("list_instances_page2"))

    vast.list_instances()

    first = http.calls[0].request.params
    assert json.loads(first["order_by"]) == [{"col": "id", "dir": "asc"}]
    assert (json.loads(first["select_filters"]), first["limit"]) == ({}, "25")
    assert "after_token" not in first


@pytest.mark.parametrize(
    ("index", "field", "value", "problem"),
    [
        (1, None, 1, "offers[1] is a int, expected an object"),
        (
            3,
            "reliability",
            "high",
            "offers[3]: field 'reliability' is a string 'high', expected a number",
        ),
        (
            1,
            "inet_down",
            "fast",
            "offers[1]: field 'inet_down' is a string 'fast', expected a number",
        ),
        (1, "verification", 3, "offers[1]: field 'verification' is a int, expected a string"),
        (
            1,
            "cuda_max_good",
            [12],
            "offers[1]: field 'cuda_max_good' is a list [12], expected a number",
        ),
        (1, "id", True, "offers[1]: field 'id' is a boolean True, expected an integer"),
        (1, "dph_total", None, "offers[1]: field 'dph_total' is null"),
        (1, "gpu_ram", {}, "offers[1]: field 'gpu_ram' is an object {}, expected an integer"),
        (
            2,
            "end_date",
            "2027-01-01",
            "offers[2]: field 'end_date' is a string '2027-01-01', expected a number",
        ),
    ],
)
def test_a_drifted_offer_is_named_exactly(http, vast, index, field, value, problem):
    """The message names the offer index, the field, its kind and value, and what was expected."""

    def edit(doc):
        if field is None:
            doc["offers"][index] = value
        else:
            doc["offers"][index][field] = value

    recording = rebody("search_offers", edit)
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.search_offers()

    assert str(caught.value) == f"vast: search_offers: {problem} {body_start(recording)}"


def test_a_whole_float_count_is_read_as_an_integer(http, vast):
    """JSON has one number type: 2.0 GPUs is 2, an int, not a float."""
    replay(http, rebody("search_offers", lambda doc: doc["offers"][0].update(num_gpus=2.0)))

    offer = vast.search_offers()[0]

    assert offer.num_gpus == 2 and type(offer.num_gpus) is int


@pytest.mark.parametrize(
    ("keys", "problem"),
    [
        (["ssh-ed25519 AAAA"], "[0] is a string, expected an object"),
        ([{"key": KEY_RIG, "deleted_at": None}], "[0]: field 'id' is missing"),
        ([{"id": 1, "key": None}], "[0]: field 'key' is null"),
    ],
)
def test_a_drifted_key_row_is_named_by_its_index(http, vast, keys, problem):
    """M9: a key row we cannot read is refused, never skipped."""
    recording = rec("ssh_keys_list", body=json.dumps(keys))
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.list_ssh_keys()

    assert str(caught.value) == f"vast: list_ssh_keys: {problem} {body_start(recording)}"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda doc: doc.pop("key"), "key is null, expected an object"),
        (lambda doc: doc.update(key="k"), "key is a string, expected an object"),
        (lambda doc: doc["key"].pop("id"), "key: field 'id' is missing"),
        (lambda doc: doc["key"].pop("public_key"), "key: field 'public_key' is missing"),
    ],
)
def test_a_drifted_registration_answer_is_named(http, vast, edit, problem):
    """M9: a registration we cannot read is not a registered key."""
    recording = rebody("ssh_key_register", edit)
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.register_ssh_key(KEY_RIG)

    assert str(caught.value) == f"vast: register_ssh_key: {problem} {body_start(recording)}"


def test_a_registration_of_another_key_is_named(http, vast):
    """M9: the answer names a key that is not ours: refused with the body quoted."""
    recording = rec("ssh_key_register")
    replay(http, recording)
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBgSW+HOidJG9/iTqjNqG8vhBeCqekf7IOQtVeMd2PiB"

    with pytest.raises(UnexpectedResponse) as caught:
        vast.register_ssh_key(other)

    assert str(caught.value) == (
        f"vast: register_ssh_key: the registered key is not the one sent {body_start(recording)}"
    )


def test_create_and_destroy_drift_are_named_exactly(http, vast):
    """M12/M4: no new_contract, or success false, each say so with the call's name."""
    no_contract = rec("create_drift_no_new_contract")
    refused = rebody("create_success", lambda doc: doc.update(success=False))
    not_destroyed = rebody("destroy_success", lambda doc: doc.update(success=False))
    replay(http, no_contract, refused, not_destroyed)
    messages = []

    for action in (
        lambda: vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0),
        lambda: vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0),
        lambda: vast.destroy(BOX),
    ):
        with pytest.raises(UnexpectedResponse) as caught:
            action()
        messages.append(str(caught.value))

    assert messages == [
        f"vast: create: body: field 'new_contract' is missing {body_start(no_contract)}",
        f"vast: create: success is false on a 2xx {body_start(refused)}",
        f"vast: destroy: success is false on a 2xx: the destroy was not accepted "
        f"{body_start(not_destroyed)}",
    ]


# --- transport failures the SDK can raise ---------------------------------------------------------
def test_an_http_error_without_a_response_is_a_provider_error(http, vast, sleeps):
    """requests can raise HTTPError with no response attached: said plainly, not retried."""
    replay(http, failure("GET", "/api/v0/ssh/", requests.HTTPError("odd")))

    with pytest.raises(ProviderError) as caught:
        vast.list_ssh_keys()

    assert type(caught.value) is ProviderError
    assert str(caught.value) == "vast: list_ssh_keys: an HTTP error without a response"
    assert caught.value.provider == "vast" and sleeps == []


def test_a_non_transient_request_error_names_its_class_and_text(http, vast):
    """Too many redirects: the message is the call, the exception class and its text."""
    replay(http, failure("GET", "/api/v0/ssh/", requests.TooManyRedirects("loop")))

    with pytest.raises(ProviderError) as caught:
        vast.list_ssh_keys()

    assert str(caught.value) == "vast: list_ssh_keys: TooManyRedirects: loop"
    assert caught.value.provider == "vast"


def test_an_sdk_call_that_sends_nothing_is_a_provider_error(http, vast, monkeypatch):
    """If vastai returned without a request, there is no answer to read: said, not guessed."""
    import vastai.api.keys

    monkeypatch.setattr(vastai.api.keys, "show_ssh_keys", lambda client: None)

    with pytest.raises(ProviderError) as caught:
        vast.list_ssh_keys()

    assert type(caught.value) is ProviderError
    assert str(caught.value) == "vast: list_ssh_keys: the SDK returned without sending a request"
    assert caught.value.provider == "vast"


def test_a_bug_before_any_request_is_raised_as_it_is(http, vast, monkeypatch):
    """A KeyError with no response behind it is a bug, shown as itself, never a ProviderError."""
    import vastai.api.keys

    def broken(client):
        raise KeyError("not about a body")

    monkeypatch.setattr(vastai.api.keys, "show_ssh_keys", broken)

    with pytest.raises(KeyError, match="not about a body"):
        vast.list_ssh_keys()


# --- events ---------------------------------------------------------------------------------------
def test_each_call_logs_its_own_name_as_op(http, vast, event_path):
    """Every exchange's vast.call event carries the public call that made it."""
    replay(
        http,
        rec("search_offers"),
        rec("list_instances_page2", query=(("limit", "25"),)),
        rec("ssh_keys_list"),
        rec("create_success"),
        rec("destroy_success"),
        rec("ssh_key_register"),
    )

    vast.search_offers()
    vast.list_instances()
    vast.list_ssh_keys()
    vast.create(OFFER, label="gpuops:x", image="img", disk_gb=10.0)
    vast.destroy(BOX)
    vast.register_ssh_key(KEY_RIG)

    assert [c["op"] for c in calls_of(event_path)] == [
        "search_offers",
        "list_instances",
        "list_ssh_keys",
        "create",
        "destroy",
        "register_ssh_key",
    ]


def test_a_retry_is_logged_with_its_op_attempt_wait_and_reason(http, vast, event_path):
    """Each backoff is one vast.retry event, exactly: what, which attempt, how long, why."""
    replay(http, rec("unavailable_503"), rec("search_offers"))

    vast.search_offers()

    assert calls_of(event_path, "vast.retry") == [
        {
            "op": "search_offers",
            "attempt": 0,
            "wait_s": timing.BACKOFF_BASE_S,
            "reason": "vast unavailable: HTTP 503",
        }
    ]


def test_a_call_event_rounds_its_duration_to_microseconds_and_has_no_error(
    http, sleeps, event_path
):
    """The duration comes from the injected clock, rounded to 6 places; success has error None."""
    ticks = iter([100.0, 100.1234567])

    class Ticking:  # a Clock whose monotonic time is the two ticks
        def wall(self) -> float:
            return 0.0

        def monotonic(self) -> float:
            return next(ticks)

        def sleep(self, seconds: float) -> None:
            sleeps.append(seconds)

    vast = VastAdapter(
        api_key=API_KEY, base_url=BASE, events=EventLog(event_path, "tester@ci"), clock=Ticking()
    )
    replay(http, rec("ssh_keys_list"))

    vast.list_ssh_keys()

    (call,) = calls_of(event_path)
    assert (call["duration_s"], call["error"], call["attempt"]) == (0.123457, None, 0)


def test_an_unwritable_log_warns_at_the_caller_of_log(http, tmp_path, sleeps, monkeypatch):
    """The warning is attributed one frame up (stacklevel 2): the call that lost its line."""
    import gpuops.providers.vast as vast_module

    (tmp_path / "events.jsonl").mkdir()
    log = EventLog(tmp_path / "events.jsonl", "tester@ci")
    vast = VastAdapter(api_key=API_KEY, base_url=BASE, events=log, clock=WithSleep(SYSTEM, sleeps.append))
    warned: list[tuple[object, ...]] = []
    monkeypatch.setattr(
        vast_module, "warnings", type("W", (), {"warn": staticmethod(lambda *a: warned.append(a))})
    )
    replay(http, rec("ssh_keys_list"))

    vast.list_ssh_keys()

    assert len(warned) == 1
    message, category, stacklevel = warned[0]
    assert str(message).startswith("vast.call not written to the event log: ")
    assert (category, stacklevel) == (RuntimeWarning, 2)


# --- retries and arguments, at their edges --------------------------------------------------------
def test_a_retry_after_of_exactly_backoff_max_is_still_honoured(http, vast, sleeps):
    """The cap is inclusive: a hint of exactly BACKOFF_MAX_S is slept, not handed back."""
    limited = rec("create_429_detail", method="POST", path="/api/v0/bundles/")
    hinted = dataclasses.replace(limited, headers=(("Retry-After", str(timing.BACKOFF_MAX_S)),))
    replay(http, hinted, rec("search_offers"))

    vast.search_offers()

    assert sleeps == [timing.BACKOFF_MAX_S]


def test_a_negative_attempt_is_refused_with_its_value():
    """backoff_s is defined from attempt 0; the refusal names the bad value."""
    with pytest.raises(ValueError) as caught:
        backoff_s(-1)

    assert str(caught.value) == "attempt must be >= 0, not -1"


def test_search_asks_for_32_offers_unless_told_and_accepts_a_limit_of_one(http, vast):
    """The default page is 32 offers; 1 is the smallest limit allowed."""
    replay(http, rec("search_offers"), rec("search_offers"))

    vast.search_offers()
    vast.search_offers(limit=1)

    assert [json.loads(c.request.body)["limit"] for c in http.calls] == [32, 1]


def test_create_accepts_every_argument_at_its_limit(http, vast):
    """Offer 1, a 256-character label, half a GB of disk, a 4048-character onstart: all sent."""
    replay(http, rec("create_success", path="/api/v0/asks/1/"))

    instance_id = vast.create(1, label="x" * 256, image="img", disk_gb=0.5, onstart="y" * 4048)

    assert instance_id == BOX
    sent = json.loads(http.calls[0].request.body)
    assert (len(sent["label"]), sent["disk"], len(sent["onstart"])) == (256, 0.5, 4048)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"offer_id": 0}, "offer_id must be a positive integer, not 0"),
        ({"offer_id": True}, "offer_id must be a positive integer, not True"),
        ({"label": ""}, "a label (ownership, M3) is required: 1-256 characters"),
        ({"label": "x" * 257}, "a label (ownership, M3) is required: 1-256 characters"),
        ({"image": ""}, "an image is required"),
        ({"disk_gb": 0.0}, "disk_gb must be positive, not 0.0"),
        ({"onstart": "x" * 4049}, "onstart is 4049 chars; Vast allows 4048"),
    ],
)
def test_each_refused_create_argument_says_what_is_wrong(http, vast, changes, message):
    """M3: the refusal names the argument and the limit it broke."""
    arguments = {"offer_id": OFFER, "label": "gpuops:x", "image": "img", "disk_gb": 10.0}
    arguments.update(changes)
    offer_id = arguments.pop("offer_id")

    with pytest.raises(UsageError) as caught:
        vast.create(offer_id, **arguments)

    assert str(caught.value) == message


def test_a_bad_instance_id_is_quoted_in_the_refusal(vast):
    """The id is shown as given, so a stray space or letter is visible."""
    with pytest.raises(UsageError) as caught:
        vast.show("12a")

    assert str(caught.value) == "a Vast instance id is a string of digits, not '12a'"


def test_register_refusals_say_exactly_why(vast):
    """H3: a private key and a non-key are refused with their own reasons."""
    with pytest.raises(UsageError) as private:
        vast.register_ssh_key("-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn...\n")
    with pytest.raises(UsageError) as garbage:
        vast.register_ssh_key("hello")

    assert str(private.value) == "that is a private key; only the .pub half is ever sent (H3)"
    assert str(garbage.value) == (
        "not an OpenSSH public key (expected 'ssh-ed25519 AAAA... comment')"
    )


# --- configuration, exactly -----------------------------------------------------------------------
def test_the_adapter_reads_no_process_environment(monkeypatch):
    """The key and the URL are constructor arguments only: VAST_API_KEY and VAST_URL in the
    process environment are not read by the adapter (the CLI's session passes them)."""
    monkeypatch.setenv("VAST_API_KEY", "from-os-environ")
    monkeypatch.setenv("VAST_URL", "http://127.0.0.1:8765")

    with pytest.raises(UsageError, match="no Vast.ai API key"):
        VastAdapter()
    assert VastAdapter(api_key=API_KEY).base_url == "https://console.vast.ai"


def test_read_attempts_below_one_is_refused_with_its_value():
    """At least one attempt is always made; zero is a caller's bug."""
    with pytest.raises(UsageError) as caught:
        VastAdapter(api_key=API_KEY, read_attempts=0)

    assert str(caught.value) == "read_attempts must be at least 1, not 0"


def test_only_trailing_slashes_are_trimmed_from_the_base_url():
    """A base URL keeps its path; only the slash at its end goes."""
    vast = VastAdapter(api_key=API_KEY, base_url="http://127.0.0.1:8765/proxy-X/")

    assert vast.base_url == "http://127.0.0.1:8765/proxy-X"


def test_the_key_file_under_xdg_config_home_wins_over_home(tmp_path):
    """vastai's order: $XDG_CONFIG_HOME/vastai/vast_api_key before anything under HOME."""
    (tmp_path / "xdg" / "vastai").mkdir(parents=True)
    (tmp_path / "xdg" / "vastai" / "vast_api_key").write_text("xdg-key\n")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".vast_api_key").write_text("home-key\n")
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}

    assert find_api_key(environ) == "xdg-key"


def test_the_legacy_home_key_file_is_read_when_the_config_file_is_absent(tmp_path, monkeypatch):
    """~/.vast_api_key is the last place looked; a missing config file is skipped, not fatal."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".vast_api_key").write_text(" legacy-key \n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")

    assert find_api_key({"HOME": str(tmp_path / "home")}) == "legacy-key"


def test_without_home_no_file_is_read_and_the_refusal_says_where_to_put_a_key(
    tmp_path, monkeypatch
):
    """No HOME and no XDG_CONFIG_HOME: nothing relative to the working directory is tried."""
    (tmp_path / "None" / ".config" / "vastai").mkdir(parents=True)
    (tmp_path / "None" / ".config" / "vastai" / "vast_api_key").write_text("cwd-key\n")
    monkeypatch.chdir(tmp_path)

    with pytest.raises(UsageError) as caught:
        find_api_key({})

    assert str(caught.value) == (
        "no Vast.ai API key found; set VAST_API_KEY, or write it to ~/.config/vastai/vast_api_key"
    )
    assert scrub(str(caught.value)) == str(caught.value)  # H3's scrub leaves the hint readable


def test_the_key_file_is_read_as_utf8_whatever_the_locale(tmp_path):
    """The key file is opened with an explicit encoding (PEP 597's warning never fires)."""
    (tmp_path / ".vast_api_key").write_text("file-key\n")
    assert find_api_key({"HOME": str(tmp_path)}) == "file-key"
    code = (
        "import sys; from gpuops.providers.vast import find_api_key\n"
        f"print(find_api_key({{'HOME': {str(tmp_path)!r}}}))\n"
    )
    argv = [sys.executable, "-X", "warn_default_encoding", "-W", "error::EncodingWarning"]

    result = subprocess.run([*argv, "-c", code], cwd=ROOT, capture_output=True, text=True)

    assert (result.returncode, result.stdout) == (0, "file-key\n"), result.stderr



@pytest.mark.parametrize("field", ["dph_total", "reliability2", "disk_bw", "cuda_max_good"])
def test_a_number_past_float_range_is_an_unexpected_response_naming_the_field(http, vast, field):
    """Bad input: an integer above float range (10**400) raised OverflowError out of the
    parser; it is drift at the adapter boundary, the value cut short in the message."""
    recording = rebody("search_offers", lambda doc: doc["offers"][0].update({field: 10**400}))
    replay(http, recording)

    with pytest.raises(UnexpectedResponse) as caught:
        vast.search_offers()

    assert str(caught.value).startswith(
        f"vast: search_offers: offers[0]: field {field!r} is a int 1{'0' * 39}... (401 chars), "
        "expected a number"
    )


def test_the_largest_finite_float_is_still_a_number(http, vast):
    """The bound is float range itself: the largest finite float reads as itself."""
    top = 1.7976931348623157e308
    edit = {"dph_total": top, "disk_bw": -top}
    replay(http, rebody("search_offers", lambda doc: doc["offers"][0].update(edit)))

    offer = vast.search_offers()[0]
    assert (offer.dph_total, offer.disk_bw) == (top, -top)


def test_a_long_mistyped_integer_is_cut_short_in_the_message(http, vast):
    """A drifted value is shown cut to its first 40 characters, with its length."""
    replay(http, rebody("search_offers", lambda doc: doc["offers"][0].update(id="9" * 50)))

    with pytest.raises(UnexpectedResponse) as caught:
        vast.search_offers()

    assert f"field 'id' is a string '{'9' * 39}... (52 chars), expected an integer" in str(
        caught.value
    )


def test_a_mistyped_value_of_forty_characters_is_shown_whole(http, vast):
    """Up to 40 characters (quotes included) a drifted value is shown as it is."""
    replay(http, rebody("search_offers", lambda doc: doc["offers"][0].update(id="9" * 38)))

    with pytest.raises(UnexpectedResponse) as caught:
        vast.search_offers()

    assert f"field 'id' is a string '{'9' * 38}', expected an integer" in str(caught.value)


def test_a_search_for_rented_offers_overrides_the_sdk_default_filter(http, vast):
    """`rented=True` replaces vastai's default `rented: false`: the offers rented now, so a
    GPU whose every offer is rented is told apart from a typo (Vast's own `rented` filter)."""
    replay(http, rec("search_offers"), rec("search_offers"))

    vast.search_offers("RTX 4090", rented=True)
    vast.search_offers("RTX 4090")

    sent = [json.loads(call.request.body) for call in http.calls]
    assert sent[0]["rented"] == {"eq": True} and sent[1]["rented"] == {"eq": False}
