"""H4: FakeGCE and its bucket judged by clients we did not write: google-cloud-compute's own
REST client (gpuops itself speaks the same REST API through google-auth, gpuops/providers/gce.py)
and google-cloud-storage (as gpuops/providers/gcs.py uses it). An answer either cannot parse, or
a precondition, operation state or stockout the real service shows and the fake hides, fails."""

from __future__ import annotations

import io

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.inprocess import activate
from fakes.vast.clock import FakeClock

BASE = "http://127.0.0.1:9"
# compute_v1's ExtendedOperation polls through a ZoneOperationsClient the transport builds
# itself, without the client's api_endpoint: it always asks compute.googleapis.com. In-process
# (responses: nothing leaves the process) the compute clients therefore use the real host.
COMPUTE = "https://compute.googleapis.com"
WHERE = {"project": "gpuops-lane", "zone": "us-central1-b", "instance": "gpu-lane"}


def _clients():  # type: ignore[no-untyped-def]
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    kwargs = {
        "transport": "rest",
        "credentials": AnonymousCredentials(),  # type: ignore[no-untyped-call]
        "client_options": {"api_endpoint": COMPUTE},
    }
    return compute_v1, compute_v1.InstancesClient(**kwargs), compute_v1.ZoneOperationsClient(
        **kwargs
    )


def test_the_real_compute_client_reads_writes_schedules_and_starts_the_fake_h4():
    """H4: get, setMetadata (by fingerprint), setScheduling (maxRunDuration, STOP), start and
    zoneOperations.get all parse in the real client, with the values the fake holds."""
    fake = FakeGCE(LaneScenario(), FakeClock())
    compute_v1, instances, operations = _clients()
    with activate(fake, COMPUTE):
        before = instances.get(**WHERE)
        metadata = compute_v1.Metadata(
            fingerprint=before.metadata.fingerprint,
            items=[compute_v1.Items(key="gpuops-job", value="portraits")],
        )
        instances.set_metadata(**WHERE, metadata_resource=metadata)
        scheduling = compute_v1.Scheduling(
            on_host_maintenance="TERMINATE",
            instance_termination_action="STOP",
            max_run_duration=compute_v1.Duration(seconds=3600),
        )
        op = instances.set_scheduling(**WHERE, scheduling_resource=scheduling)
        started = instances.start(**WHERE)
        after = instances.get(**WHERE)
        fake.advance(60.0)
        polled = operations.get(project=WHERE["project"], zone=WHERE["zone"], operation=started.name)

    assert before.status == "TERMINATED" and op.name
    assert polled.status == compute_v1.Operation.Status.DONE
    assert [(i.key, i.value) for i in after.metadata.items] == [("gpuops-job", "portraits")]
    assert after.scheduling.max_run_duration.seconds == 3600
    assert after.scheduling.instance_termination_action == "STOP"
    assert after.status == "PROVISIONING"


def test_set_scheduling_on_a_running_instance_is_refused_by_the_fake_h4():
    """H4: setScheduling works only on a TERMINATED instance, as the API reference says."""
    import pytest
    from google.api_core import exceptions as gx

    fake = FakeGCE(LaneScenario(), FakeClock())
    compute_v1, instances, _ = _clients()
    fake.status = "RUNNING"
    with activate(fake, COMPUTE), pytest.raises(gx.BadRequest, match="fake_gce_not_terminated"):
        instances.set_scheduling(**WHERE, scheduling_resource=compute_v1.Scheduling())


def _start_fake(**scenario: object) -> tuple[FakeGCE, FakeClock]:
    clock = FakeClock()
    return FakeGCE(LaneScenario(**scenario), clock), clock  # type: ignore[arg-type]


def test_a_start_walks_pending_running_done_in_the_real_extended_operation_h4():
    """H4: start's ExtendedOperation is PENDING, then RUNNING (zoneOperations.wait), then
    DONE over the default durations (0.5 s PENDING, 7 s RUNNING), while the instance moves on
    its own schedule; the times are the fake clock's and every operation has its own id."""
    fake, clock = _start_fake()
    compute_v1, instances, operations = _clients()
    status = compute_v1.Operation.Status
    with activate(fake, COMPUTE):
        op = instances.start(**WHERE)
        seen = [(op.status, op.done(), instances.get(**WHERE).status)]
        fake.advance(0.5)
        waited = operations.wait(project=WHERE["project"], zone=WHERE["zone"], operation=op.name)
        seen.append((waited.status, op.done(), instances.get(**WHERE).status))
        fake.advance(7.0)
        seen.append((status.DONE, op.done(), instances.get(**WHERE).status))
        result = op.result()
        again = instances.set_metadata(
            **WHERE,
            metadata_resource=compute_v1.Metadata(
                fingerprint=instances.get(**WHERE).metadata.fingerprint, items=[]
            ),
        )

    assert seen == [
        (status.PENDING, False, "PROVISIONING"),
        (status.RUNNING, False, "PROVISIONING"),
        (status.DONE, True, "STAGING"),
    ]
    assert result is None and op.error_code == 0
    assert op.name != again.name and op.id != again.id
    assert op.insert_time.endswith("-08:00") and op.end_time > op.start_time > op.insert_time


def test_a_stockout_operation_raises_from_the_real_extended_operation_result_h4():
    """H4, L7: both recorded stockout shapes carry httpErrorStatusCode 503, so the real
    client's ExtendedOperation.result() raises ServiceUnavailable; none reads as success."""
    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake(starts=["stockout-plain", "stockout"])
    _, instances, _ = _clients()
    with activate(fake, COMPUTE):
        for code in ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"):
            op = instances.start(**WHERE)
            fake.advance(60.0)
            with pytest.raises(gx.ServiceUnavailable) as raised:
                op.result()
            assert raised.value.errors[0].code == code
            assert instances.get(**WHERE).status == "TERMINATED"


def test_a_start_refused_synchronously_raises_from_the_real_client_h4():
    """H4: a scenario's quota-403 and unavailable-503 answer start itself, with no operation."""
    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake(starts=["quota-403", "unavailable-503"])
    _, instances, _ = _clients()
    with activate(fake, COMPUTE):
        with pytest.raises(gx.Forbidden, match="GPUS_ALL_REGIONS"):
            instances.start(**WHERE)
        with pytest.raises(gx.ServiceUnavailable):
            instances.start(**WHERE)
    assert fake.operations == {} and fake.status == "TERMINATED"


def test_set_metadata_with_a_stale_fingerprint_is_412_in_the_real_client_h4():
    """H4: the fingerprint is opaque base64, changes on every write, and a stale one is the
    recorded 412 (PreconditionFailed)."""
    import base64

    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake()
    compute_v1, instances, _ = _clients()
    with activate(fake, COMPUTE):
        first = instances.get(**WHERE).metadata.fingerprint
        item = compute_v1.Items(key="gpuops-job", value="portraits")
        instances.set_metadata(
            **WHERE, metadata_resource=compute_v1.Metadata(fingerprint=first, items=[item])
        )
        second = instances.get(**WHERE).metadata.fingerprint
        with pytest.raises(gx.PreconditionFailed, match="Supplied fingerprint does not match"):
            instances.set_metadata(
                **WHERE, metadata_resource=compute_v1.Metadata(fingerprint=first, items=[])
            )

    assert first != second and len(base64.b64decode(second, validate=True)) == 8
    assert not second.startswith("fp-")


def test_serial_port_output_parses_in_the_real_client_h4():
    """H4: getSerialPortOutput's contents, start and next (int64 strings) parse."""
    fake, _ = _start_fake()
    compute_v1, instances, _ = _clients()
    fake.serial = "line one\nline two\n"
    with activate(fake, COMPUTE):
        got = instances.get_serial_port_output(
            request=compute_v1.GetSerialPortOutputInstanceRequest(**WHERE, port=1, start=9)
        )

    assert (got.contents, got.start, got.next_) == ("line two\n", 9, 18)


# --- the fake bucket, judged by google-cloud-storage ------------------------------------------


def _bucket(monkeypatch):  # type: ignore[no-untyped-def]
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", BASE)
    # The library's own switch for its bucket-metadata cache (tracing attributes only): on,
    # the first call starts a daemon thread that fetches the bucket in the background, outlives
    # the test, retries against a fake that is gone for minutes, and draws its backoff jitter
    # from the global `random` module, under whatever Hypothesis test the worker runs next.
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    client = storage.Client(project=WHERE["project"], credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    return client, client.bucket(LaneScenario().bucket)


def test_generation_preconditions_raise_precondition_failed_in_the_real_storage_client_h4(
    monkeypatch,
):
    """H4: ifGenerationMatch=0 on an existing object, a stale ifGenerationMatch and a stale
    ifMetagenerationMatch are refused (412 -> PreconditionFailed) and change nothing; a
    current generation is accepted and makes a new one."""
    import pytest
    from google.api_core import exceptions as gx

    fake, clock = _start_fake()
    client, bucket = _bucket(monkeypatch)
    with activate(fake, BASE):
        bucket.blob("jobs/a/claim").upload_from_string(b"first", if_generation_match=0)
        first = bucket.get_blob("jobs/a/claim")
        with pytest.raises(gx.PreconditionFailed):
            bucket.blob("jobs/a/claim").upload_from_string(b"second", if_generation_match=0)
        clock.advance(1.0)
        bucket.blob("jobs/a/claim").upload_from_string(
            b"third", if_generation_match=first.generation
        )
        with pytest.raises(gx.PreconditionFailed):
            bucket.blob("jobs/a/claim").upload_from_string(
                b"fourth", if_generation_match=first.generation
            )
        with pytest.raises(gx.PreconditionFailed):
            bucket.blob("jobs/a/claim").upload_from_string(b"fifth", if_metageneration_match=7)
        with pytest.raises(gx.PreconditionFailed):
            bucket.blob("jobs/a/none").upload_from_string(b"x", if_generation_not_match=0)
        now = bucket.get_blob("jobs/a/claim")

    assert fake.objects["jobs/a/claim"] == b"third"
    assert now.generation > first.generation and now.metageneration == 1
    assert "jobs/a/none" not in fake.objects


def test_reads_by_generation_in_the_real_storage_client_h4(monkeypatch):
    """H4: a read of the live generation returns its bytes; a read of an overwritten
    generation is 404 (no versioning), never the current bytes; generations differ per
    object and per write."""
    import pytest
    from google.api_core import exceptions as gx

    fake, clock = _start_fake()
    client, bucket = _bucket(monkeypatch)
    with activate(fake, BASE):
        bucket.blob("a").upload_from_string(b"old")
        bucket.blob("b").upload_from_string(b"other")
        old = bucket.get_blob("a").generation
        other = bucket.get_blob("b").generation
        clock.advance(1.0)
        bucket.blob("a").upload_from_string(b"new")
        new = bucket.get_blob("a").generation
        current = bucket.blob("a", generation=new).download_as_bytes()
        with pytest.raises(gx.NotFound):
            bucket.blob("a", generation=old).download_as_bytes()
        assert bucket.get_blob("a", generation=old) is None

    assert current == b"new" and len({old, other, new}) == 3


def test_a_metadata_patch_moves_the_metageneration_in_the_real_storage_client_h4(monkeypatch):
    """H4: blob.patch bumps the metageneration; ifMetagenerationMatch then holds only for it."""
    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake()
    client, bucket = _bucket(monkeypatch)
    with activate(fake, BASE):
        bucket.blob("a").upload_from_string(b"x")
        blob = bucket.get_blob("a")
        blob.metadata = {"owner": "alice"}
        blob.patch(if_metageneration_match=1)
        with pytest.raises(gx.PreconditionFailed):
            blob.patch(if_metageneration_match=1)
        after = bucket.get_blob("a")

    assert after.metageneration == 2 and after.metadata == {"owner": "alice"}


def test_a_list_with_a_delimiter_returns_prefixes_in_the_real_storage_client_h4(monkeypatch):
    """H4: prefix + delimiter: direct objects as items, deeper names rolled up as prefixes."""
    fake, _ = _start_fake()
    client, bucket = _bucket(monkeypatch)
    for name in ("jobs/a/status", "jobs/a/results/1", "jobs/a/results/2", "jobs/a/boot/b1"):
        fake.put(name, b"x")
    with activate(fake, BASE):
        listing = client.list_blobs(bucket.name, prefix="jobs/a/", delimiter="/")
        names = [b.name for b in listing]
        prefixes = sorted(listing.prefixes)

    assert names == ["jobs/a/status"]
    assert prefixes == ["jobs/a/boot/", "jobs/a/results/"]


def test_resumable_uploads_work_in_the_real_storage_client_h4(monkeypatch):
    """H4: a resumable upload (the client's choice for a stream of unknown size) in one chunk
    and in several (308 with Range between chunks) stores the bytes with checksums the client
    verifies; a stale ifGenerationMatch on one is PreconditionFailed and writes nothing."""
    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake()
    client, bucket = _bucket(monkeypatch)
    big = bytes(range(256)) * 2400  # 600 KiB: three 256 KiB chunks
    with activate(fake, BASE):
        bucket.blob("one").upload_from_file(io.BytesIO(b"x" * 10))  # no size: resumable
        bucket.blob("many", chunk_size=256 * 1024).upload_from_file(io.BytesIO(big))
        with pytest.raises(gx.PreconditionFailed):
            bucket.blob("one").upload_from_file(io.BytesIO(b"y"), if_generation_match=0)
        back = bucket.blob("many").download_as_bytes()

    assert fake.objects["one"] == b"x" * 10 and back == big and fake.objects["many"] == big
    assert fake.uploads == {}


def test_set_labels_under_a_stale_label_fingerprint_is_412_in_the_real_client_l13():
    """H4/L13: google-cloud-compute's own set_labels with the current labelFingerprint
    replaces the labels (the instance shows them and a new fingerprint); with the fingerprint
    read before that write it is the recorded 412 (PreconditionFailed), and nothing changes."""
    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake()
    compute_v1, instances, _ = _clients()
    with activate(fake, COMPUTE):
        first = instances.get(**WHERE).label_fingerprint
        request = compute_v1.InstancesSetLabelsRequest(
            label_fingerprint=first, labels={"gpuops-claim": "1-held-abcdef12"}
        )
        instances.set_labels(**WHERE, instances_set_labels_request_resource=request)
        after = instances.get(**WHERE)
        stale = compute_v1.InstancesSetLabelsRequest(
            label_fingerprint=first, labels={"gpuops-claim": "1-held-00000000"}
        )
        with pytest.raises(gx.PreconditionFailed, match="Labels fingerprint"):
            instances.set_labels(**WHERE, instances_set_labels_request_resource=stale)

    assert dict(after.labels) == {"gpuops-claim": "1-held-abcdef12"} == fake.labels
    assert after.label_fingerprint != first


def test_an_object_delete_and_a_forbidden_write_behave_in_the_real_storage_client_h4(monkeypatch):
    """H4: blob.delete() removes the object (a second is NotFound); under the scenario's
    gcs_write_forbidden_prefix a write and a delete raise Forbidden and change nothing."""
    import pytest
    from google.api_core import exceptions as gx

    fake, _ = _start_fake(gcs_write_forbidden_prefix="locked/")
    fake.put("locked/kept", b"kept")
    client, bucket = _bucket(monkeypatch)
    with activate(fake, BASE):
        bucket.blob("gpuops-check/probe").upload_from_string(b"probe")
        bucket.blob("gpuops-check/probe").delete()
        with pytest.raises(gx.NotFound):
            bucket.blob("gpuops-check/probe").delete()
        with pytest.raises(gx.Forbidden):
            bucket.blob("locked/new").upload_from_string(b"x")
        with pytest.raises(gx.Forbidden):
            bucket.blob("locked/kept").delete()

    assert fake.objects == {"locked/kept": b"kept"}
