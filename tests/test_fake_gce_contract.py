"""H4: FakeGCE judged by a client we did not write: google-cloud-compute's own REST client
(gpuops itself speaks the same REST API through google-auth, gpuops/providers/gce.py)."""

from __future__ import annotations

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.inprocess import activate
from fakes.vast.clock import FakeClock

BASE = "http://127.0.0.1:9"
WHERE = {"project": "gpuops-lane", "zone": "us-central1-b", "instance": "gpu-lane"}


def _clients():  # type: ignore[no-untyped-def]
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    kwargs = {
        "transport": "rest",
        "credentials": AnonymousCredentials(),  # type: ignore[no-untyped-call]
        "client_options": {"api_endpoint": BASE},
    }
    return compute_v1, compute_v1.InstancesClient(**kwargs), compute_v1.ZoneOperationsClient(
        **kwargs
    )


def test_the_real_compute_client_reads_writes_schedules_and_starts_the_fake_h4():
    """H4: get, setMetadata (by fingerprint), setScheduling (maxRunDuration, STOP), start and
    zoneOperations.get all parse in the real client, with the values the fake holds."""
    fake = FakeGCE(LaneScenario(), FakeClock())
    compute_v1, instances, operations = _clients()
    with activate(fake, BASE):
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
        polled = operations.get(project=WHERE["project"], zone=WHERE["zone"], operation=started.name)
        after = instances.get(**WHERE)

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
    with activate(fake, BASE), pytest.raises(gx.BadRequest, match="fake_gce_not_terminated"):
        instances.set_scheduling(**WHERE, scheduling_resource=compute_v1.Scheduling())
