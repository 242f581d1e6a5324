"""The GCE and GCS adapters on recordings (H1), through the real google SDK clients and
``responses``: parsing, and every error translated once into gpuops/errors.py."""

from __future__ import annotations

import json

import pytest
import responses

from gpuops.errors import (
    AuthFailed,
    CapacityExhausted,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    VersionConflict,
)
from gpuops.events import EventLog, read_events
from gpuops.providers import load_recording
from oracles import recording_names
from gpuops.providers.gce import GceAdapter, GceStatus, operation_error, parse_instance
from gpuops.providers.gcs import GcsAdapter
from fakes.vast.clock import FakeClock

BASE = "http://127.0.0.1:9"
OP = "operation-1796031002113-6308a1f2c4d1e-3f0a9c1b-77d1e2a0"


def _body(name: str, provider: str = "gce") -> dict:
    return json.loads(load_recording(provider, name).body)


@pytest.fixture
def gce(tmp_path):
    return GceAdapter(
        "gpuops-lane",
        "us-central1-b",
        events=EventLog(tmp_path / "e.jsonl", "t"),
        endpoint=BASE,
        clock=FakeClock(0.0),  # moves only when the adapter waits
    )


@pytest.mark.parametrize("provider", ["gce", "gcs"])
def test_every_lane_recording_loads_with_honest_provenance_h1(provider):
    """H1: each recording names its kind, source and date, and its body is JSON."""
    names = recording_names(provider)

    assert names
    for name in names:
        rec = load_recording(provider, name)
        assert rec.kind in {"public", "reconstructed", "captured"} and rec.source and rec.notes
        if rec.status == 204:  # No Content: a documented empty body (objects.delete)
            assert rec.body == ""
        else:
            json.loads(rec.body)


@pytest.mark.parametrize(
    "name, status, fingerprint",
    [
        ("instance_get_terminated", GceStatus.TERMINATED, "wSsOXn1oPgE="),
        ("instance_get_running", GceStatus.RUNNING, "bQ9nTUiJ0Hw="),
        ("instance_get_unknown_status", GceStatus.UNKNOWN, "wSsOXn1oPgE="),
    ],
)
def test_an_instance_is_read_through_the_real_client(gce, name, status, fingerprint):
    """H1: status, raw status, fingerprint and metadata items from a recorded instances.get."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", name).to_response(BASE))
        got = gce.get("gpu-lane")

    assert (got.name, got.status, got.fingerprint) == ("gpu-lane", status, fingerprint)
    assert got.status_raw == _body(name)["status"]
    assert "startup-script" in got.metadata or name == "instance_get_unknown_status"


@pytest.mark.parametrize(
    "body",
    [{}, {"name": "x"}, {"name": "x", "status": "RUNNING", "metadata": {"items": [{"v": 1}]}}],
)
def test_a_drifted_instance_body_is_an_unexpected_response(body):
    """Bad input: a missing field is named, never guessed."""
    with pytest.raises(ProviderError, match="instance body without"):
        parse_instance(body)


@pytest.mark.parametrize(
    "name, error",
    [
        ("operation_done", None),
        ("operation_stockout_with_details", CapacityExhausted),
        ("operation_stockout_plain", CapacityExhausted),
        ("operation_insufficient_capacity", CapacityExhausted),
        ("operation_reason_only", CapacityExhausted),
        ("operation_quota", QuotaExceeded),
    ],
)
def test_a_finished_operation_is_classified_from_its_recorded_body(name, error):
    """L7: capacity by code, by errorInfo reason or by message; quota apart; success is None."""
    found = operation_error(_body(name))

    assert (None if found is None else type(found)) is error


def test_a_stockout_operation_without_its_http_fields_is_still_capacity():
    """L7: a DONE stockout body without httpErrorStatusCode/httpErrorMessage (a dump that
    lost them) is still capacity, read from its code: gpuops never trusts the HTTP fields alone."""
    body = _body("operation_stockout_plain")
    del body["httpErrorStatusCode"], body["httpErrorMessage"]

    assert type(operation_error(body)) is CapacityExhausted


def test_an_operation_error_that_is_neither_capacity_nor_quota_keeps_its_status():
    """A 5xx without a capacity sign is unavailable; a 4xx is a provider error, both named."""
    five = operation_error(
        {
            "name": "o",
            "httpErrorStatusCode": 503,
            "error": {"errors": [{"code": "SERVICE_UNAVAILABLE", "message": "later"}]},
        }
    )
    four = operation_error(
        {
            "name": "o",
            "httpErrorStatusCode": 400,
            "error": {"errors": [{"code": "RESOURCE_NOT_READY", "message": "stopping"}]},
        }
    )
    bare = operation_error({"name": "o", "httpErrorStatusCode": 500, "httpErrorMessage": "X"})

    assert type(five) is ProviderUnavailable and five.status == 503
    assert type(four) is ProviderError and "RESOURCE_NOT_READY: stopping" in str(four)
    assert type(bare) is ProviderUnavailable and "X" in str(bare)


@pytest.mark.parametrize(
    "operation, error",
    [
        ("operation_stockout_with_details", CapacityExhausted),
        ("operation_quota", QuotaExceeded),
    ],
)
def test_start_finds_the_error_in_the_polled_operation(gce, tmp_path, operation, error):
    """L7: start answers 200 with a RUNNING operation; the error is in the DONE one."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", "start_operation_running").to_response(BASE))
        mock.add(load_recording("gce", operation).to_response(BASE))
        with pytest.raises(error) as raised:
            gce.start("gpu-lane")

    assert raised.value.provider == "gce"
    kinds = [e["kind"] for e in read_events(tmp_path / "e.jsonl")]
    assert kinds == ["gce.start", "gce.operation"]


def test_a_start_whose_operation_is_done_without_error_returns(gce):
    """L2: DONE with no error is success as far as GCE says (even the silent no-op)."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", "start_operation_running").to_response(BASE))
        mock.add(load_recording("gce", "operation_done").to_response(BASE))
        assert gce.start("gpu-lane") is None


@pytest.mark.parametrize(
    "name, error",
    [
        ("start_403_quota", QuotaExceeded),
        ("start_503", ProviderUnavailable),
    ],
)
def test_a_synchronous_start_error_is_translated_once(gce, name, error):
    """Quota as a 403 and a 503 front end, each its own gpuops error."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", name).to_response(BASE))
        with pytest.raises(error):
            gce.start("gpu-lane")


def test_a_stale_fingerprint_is_a_version_conflict(gce):
    """L3-style compare-and-swap: setMetadata 412 means someone else wrote first."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", "set_metadata_412").to_response(BASE))
        with pytest.raises(VersionConflict, match="setMetadata gpu-lane"):
            gce.set_metadata("gpu-lane", {"startup-script": "x"}, "old")


def test_set_metadata_sends_the_fingerprint_and_every_item(gce):
    """L4: the items and the fingerprint read before go out in one request."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", "set_metadata_operation").to_response(BASE))
        mock.add(load_recording("gce", "operation_done").to_response(BASE))
        gce.set_metadata("gpu-lane", {"startup-script": "s", "gpuops-job": "j"}, "fp1")
        sent = json.loads(mock.calls[0].request.body)

    assert sent == {
        "fingerprint": "fp1",
        "items": [{"key": "gpuops-job", "value": "j"}, {"key": "startup-script", "value": "s"}],
    }


def test_a_missing_instance_is_a_provider_error_naming_it(gce):
    """Not found is named, with its status."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", "instance_404").to_response(BASE))
        with pytest.raises(ProviderError, match="get gpu-lane: not found") as raised:
            gce.get("gpu-lane")

    assert raised.value.status == 404


def test_refused_credentials_are_auth_failed(gce):
    """A 403 that is not quota is our credentials."""
    body = {
        "error": {
            "code": 403,
            "message": "Required 'compute.instances.get' permission",
            "errors": [{"reason": "forbidden", "message": "no"}],
        }
    }
    with responses.RequestsMock() as mock:
        mock.get(
            f"{BASE}/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane",
            json=body,
            status=403,
        )
        with pytest.raises(AuthFailed):
            gce.get("gpu-lane")


def test_no_connection_is_provider_unavailable(gce):
    """A refused connection is unavailable (exit 4), not a crash."""
    with responses.RequestsMock(), pytest.raises(ProviderUnavailable, match="get gpu-lane"):
        gce.get("gpu-lane")


def test_serial_output_is_read_from_the_given_offset(gce):
    """The recorded serialPort body: contents and the next offset (int64 as a string)."""
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gce", "serial_port_output").to_response(BASE))
        contents, nxt = gce.serial_output("gpu-lane")

    assert "boot marker a1b2c3d4" in contents and nxt == 96


def test_gcs_lists_and_reads_and_a_missing_object_is_none(monkeypatch):
    """The GCS adapter on recordings: list by prefix; 404 on download is None."""
    gcs = GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gcs", "list_objects").to_response(BASE))
        mock.add(load_recording("gcs", "object_404").to_response(BASE))
        names = gcs.list("jobs/portraits/inputs/")
        missing = gcs.read("jobs/portraits/status")

    assert names == ["jobs/portraits/inputs/ref-1.png"] and missing is None


def test_gcs_deletes_an_object_and_a_write_without_permission_is_auth_failed():
    """The GCS adapter on recordings: objects.delete's empty answer is success; a write the
    bucket refuses (403 forbidden) is AuthFailed, with GCS's message carried along."""
    gcs = GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gcs", "object_delete").to_response(BASE))
        mock.add(load_recording("gcs", "forbidden_403").to_response(BASE))
        gcs.delete_object("gpuops-check/0123456789abcdef")
        with pytest.raises(AuthFailed, match="does not have storage.objects.create access"):
            gcs.write("gpuops-check/0123456789abcdef", b"x")
        (delete, _) = [call.request for call in mock.calls]

    assert delete.method == "DELETE"
    assert delete.url == f"{BASE}/storage/v1/b/gpuops-lane-jobs/o/gpuops-check%2F0123456789abcdef"


def test_gcs_reads_an_objects_update_time_and_none_when_missing(monkeypatch):
    """The job's end is its status file's `updated` (recorded object fields); 404 is None."""
    gcs = GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    item = _body("list_objects", "gcs")["items"][0]
    meta = f"{BASE}/storage/v1/b/gpuops-lane-jobs/o/jobs%2Fportraits%2Finputs%2Fref-1.png"
    with responses.RequestsMock() as mock:
        mock.get(meta, json=item)
        mock.get(
            f"{BASE}/storage/v1/b/gpuops-lane-jobs/o/nope",
            status=404,
            json=_body("object_404", "gcs"),
        )
        when = gcs.updated("jobs/portraits/inputs/ref-1.png")
        missing = gcs.updated("nope")

    assert when == 1796031002.113 and missing is None


def test_gcs_reads_an_update_time_without_an_offset_as_utc_and_a_bad_one_as_drift(monkeypatch):
    """`updated` is RFC 3339 (always an offset); one without is read as UTC, never the host's
    zone (here New York), and one that is not a time is an UnexpectedResponse."""
    import time

    from gpuops.errors import UnexpectedResponse

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()

    gcs = GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    meta = f"{BASE}/storage/v1/b/gpuops-lane-jobs/o/a"
    with responses.RequestsMock() as mock:
        mock.get(meta, json={"updated": "2026-11-30T09:30:02.113"})
        mock.get(meta, json={"updated": "late"})
        try:
            when = gcs.updated("a")
        finally:
            monkeypatch.undo()
            time.tzset()
        with pytest.raises(UnexpectedResponse, match="updated is 'late'"):
            gcs.updated("a")

    assert when == 1796031002.113


def test_gcs_objects_give_each_results_size_and_md5_and_refuse_one_that_does_not_read_l9():
    """L9: the results check reads each object's documented `size` and `md5Hash` (base64,
    shown as hex); without an md5Hash the md5 is None; a size that is not a number is an
    unexpected answer, never a guess."""
    from gpuops.errors import UnexpectedResponse

    gcs = GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    item = _body("list_objects", "gcs")["items"][0]
    url = f"{BASE}/storage/v1/b/gpuops-lane-jobs/o"
    with responses.RequestsMock() as mock:
        mock.add(load_recording("gcs", "list_objects").to_response(BASE))
        mock.get(url, json={"items": [{**item, "md5Hash": "DMF1ucDxtqgxw5niaXcmYQ=="}]})
        mock.get(url, json={"items": [{**item, "size": "big"}]})
        recorded = gcs.objects("jobs/portraits/inputs/")
        with_md5 = gcs.objects("jobs/portraits/inputs/")
        with pytest.raises(UnexpectedResponse, match="size 'big'"):
            gcs.objects("jobs/portraits/inputs/")

    assert recorded == {"jobs/portraits/inputs/ref-1.png": (48211, None)}
    assert with_md5 == {
        "jobs/portraits/inputs/ref-1.png": (48211, "0cc175b9c0f1b6a831c399e269772661")
    }


def test_the_adapter_reads_labels_and_a_stale_label_fingerprint_is_a_version_conflict_l13(gce):
    """L13: `labels` and `labelFingerprint` of an instance body; setLabels answered with the
    recorded 412 is a VersionConflict (re-read, decide again), never a blind overwrite."""
    from gpuops.errors import UnexpectedResponse, VersionConflict

    body = _body("instance_get_terminated")
    body.update(labels={"gpuops-claim": "3-free"}, labelFingerprint="42WmSpB8rSM=")
    with responses.RequestsMock() as mock:
        mock.get(
            f"{BASE}/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane",
            json=body,
        )
        mock.add(load_recording("gce", "set_labels_412").to_response(BASE))
        found = gce.get("gpu-lane")
        with pytest.raises(VersionConflict):
            gce.set_labels("gpu-lane", {"gpuops-claim": "4-held-abcdef12"}, "stale=")

    assert found.labels == {"gpuops-claim": "3-free"} and found.label_fingerprint == "42WmSpB8rSM="
    assert parse_instance({**body, "labels": None}).labels == {}
    with pytest.raises(UnexpectedResponse):
        parse_instance({**body, "labels": {"gpuops-claim": 3}})


@pytest.mark.parametrize(
    ("items", "said"),
    [
        ({"startup-script": "x" * 262144, "job": "p"}, None),
        (
            {"startup-script": "x" * 262145},
            "'startup-script' is 262145 bytes; GCE takes at most 262144",
        ),
        ({"s": "é" * 131073}, "'s' is 262146 bytes"),  # UTF-8 bytes, not characters
        ({"a": "x" * 262144, "b": "y" * 262142}, None),  # 524288 bytes: the total's turn
        ({"a": "x" * 262144, "b": "y" * 262141}, None),  # 524287 bytes: fits
    ],
)
def test_metadata_too_large_names_the_size_and_the_limit_gce_documents_h6(items, said):
    """compute/v1 Metadata: each value at most 262144 bytes, keys and values under 512 KB."""
    from gpuops.providers.gce import metadata_too_large

    found = metadata_too_large(items)
    total = sum(len(k.encode()) + len(v.encode()) for k, v in items.items())
    if said is not None:
        assert found is not None and said in found
    elif total >= 512 * 1024:
        assert found == (
            f"the metadata's keys and values are {total} bytes together; GCE takes less than "
            "524288 bytes (512 KB)"
        )
    else:
        assert found is None


def test_gcs_listing_follows_every_page_of_a_bucket_longer_than_one_h6():
    """H6: objects.list answers at most 1,000 entries a page with a nextPageToken (Cloud
    Storage JSON API); FakeGCS pages so, and the adapter's paging loop reads all 2,345 names
    in three pages, each token sent back, nothing repeated or lost."""
    from fakes.gce import FakeGCE, LaneScenario
    from fakes.gce.inprocess import activate
    from fakes.vast.clock import FakeClock

    fake = FakeGCE(LaneScenario(), FakeClock())
    made = [f"jobs/p/results/r-{i:05d}.txt" for i in range(2345)]
    for name in made:
        fake.put(name, b"x")
    fake.put("jobs/other/status", b"x")
    gcs = GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    with activate(fake, BASE) as mock:
        names = gcs.list("jobs/p/")
        sizes = gcs.objects("jobs/p/")
        pages = [c.request.url for c in mock.calls if "/o?" in (c.request.url or "")]

    assert names == made and sorted(sizes) == made
    assert len(pages) == 6 and sum("pageToken=" in url for url in pages) == 4


def test_set_metadata_over_gces_limits_is_a_usage_error_before_any_call_h6(gce):
    """Whatever writes the metadata (the script and every key kept beside it), items GCE would
    refuse for their size are exit 2 naming the size and the limit, and nothing is sent."""
    from gpuops.errors import UsageError

    with responses.RequestsMock() as mock, pytest.raises(UsageError) as refused:
        gce.set_metadata("gpu-lane", {"a": "x" * 262144, "b": "y" * 262142}, "fp")

    assert refused.value.exit_code == 2 and len(mock.calls) == 0
    assert str(refused.value) == (
        "setMetadata gpu-lane: the metadata's keys and values are 524288 bytes together; "
        "GCE takes less than 524288 bytes (512 KB)"
    )
