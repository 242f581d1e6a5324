"""FakeGCE, its bucket, and gpuops' GCE and GCS adapters held to Google's own published contract
(H6): the discovery documents for compute v1 and storage v1 as google-api-python-client ships
them, judged by fakes/gce/contract.py.

A tap on the fake judges every exchange of a tour that reaches every Compute and Storage route
the fake serves, with gpuops' own adapters where gpuops makes the call and google-cloud-storage
(or a plain requests client) where only a peer does: the request sent, and each 2xx body the fake
rendered. A field the schema lacks, a required parameter missing, a wrong type, an int64 as a
JSON number in a response, a bad enum value or a date-time that is not RFC 3339 is a breach, and
any breach fails. The metadata server and the fake's own boot routes are no part of the APIs
the documents describe and are not judged.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce import contract as google
from fakes.gce.inprocess import activate
from fakes.seam import Reply, Request
from fakes.vast.clock import FakeClock
from gpuops.clock import WithSleep
from gpuops.errors import GpuopsError
from gpuops.events import EventLog
from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter

BASE = "http://127.0.0.1:9"
S = LaneScenario()
ZONE = f"/compute/v1/projects/{S.project}/zones/{S.zone}"
# The least the tour must reach: every discovery method FakeGCE serves, and this many field
# paths (query parameters, request and response fields at every depth).
OPERATIONS = {
    "compute.instances.get", "compute.instances.start", "compute.instances.setMetadata",
    "compute.instances.setScheduling", "compute.instances.setLabels",
    "compute.instances.getSerialPortOutput", "compute.zoneOperations.get",
    "compute.zoneOperations.wait", "storage.objects.list", "storage.objects.get",
    "storage.objects.patch", "storage.objects.delete", "storage.objects.insert",
}  # fmt: skip
MIN_FIELDS = 150


@dataclass
class Judged:
    """A FakeGCE with the discovery documents' judge on its tap."""

    fake: FakeGCE
    clock: FakeClock
    events: Path
    judge: google.Contract = field(default_factory=google.load)
    breaches: list[str] = field(default_factory=list)
    exchanges: int = 0

    def __post_init__(self) -> None:
        self.fake.taps.append(self.tap)

    def tap(self, request: Request, reply: Reply) -> None:
        self.exchanges += 1
        self.breaches += self.judge.judge(request, reply)

    def gce(self) -> GceAdapter:
        events = EventLog(
            self.events, "alice", clock=self.clock
        )
        return GceAdapter(
            S.project, S.zone, events=events, endpoint=BASE,
            clock=WithSleep(self.clock, self.fake.advance),
        )  # fmt: skip

    def gcs(self) -> GcsAdapter:
        return GcsAdapter(S.bucket, S.project, endpoint=BASE)

    def raw(self, method: str, path: str, **kwargs: object) -> requests.Response:
        return requests.request(method, BASE + path, timeout=5, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def judged(tmp_path, monkeypatch) -> Iterator[Judged]:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", BASE)
    monkeypatch.setenv("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    clock = FakeClock()
    fake = FakeGCE(LaneScenario(starts=("stockout",), fingerprint_races=1), clock)
    with activate(fake, BASE):
        yield Judged(fake, clock, tmp_path / "events.jsonl")


def _quietly(call: Callable[[], object]) -> None:
    """Run one adapter call whose failure is the point (a fault the tour scripted)."""
    with contextlib.suppress(GpuopsError):
        call()


def tour(world: Judged) -> None:
    """Every Compute and Storage route FakeGCE serves, and the answers it gives, once at least."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    fake, gce, gcs = world.fake, world.gce(), world.gcs()
    got = gce.get(S.instance)
    _quietly(lambda: gce.set_metadata(S.instance, {"gpuops-job": "j"}, got.fingerprint))  # 412
    got = gce.get(S.instance)
    gce.set_metadata(S.instance, {"gpuops-job": "j", "startup-script": "#!/bin/bash\n"},
                     got.fingerprint)  # fmt: skip
    got = gce.get(S.instance)
    gce.set_labels(S.instance, {"gpuops-job": "j"}, got.label_fingerprint)
    doc = world.raw("GET", f"{ZONE}/instances/{S.instance}").json()
    gce.set_run_ceiling(S.instance, doc.get("scheduling", {}), 3600.0)
    gce.get(S.instance)  # with its scheduling block and maxRunDuration
    _quietly(lambda: gce.start(S.instance))  # the scripted stockout: a DONE operation's error
    gce.start(S.instance)
    fake.advance(S.provisioning_s + S.staging_s)
    gce.get(S.instance)  # RUNNING, with its terminationTimestamp
    _quietly(lambda: gce.set_run_ceiling(S.instance, {}, 3600.0))  # 400: not TERMINATED
    gce.serial_output(S.instance, 0)
    op = next(iter(fake.operations))
    world.raw("POST", f"{ZONE}/operations/{op}/wait")  # a peer's wait (gpuops polls get)
    world.raw("GET", f"{ZONE}/instances/nobody")  # 404
    # --- the bucket: gpuops' own calls, then google-cloud-storage's
    for n in range(3):
        gcs.write(f"jobs/a/out/{n}", b"result %d" % n)
    gcs.list("jobs/a/")
    gcs.objects("jobs/a/")
    gcs.read("jobs/a/out/0")
    gcs.read("jobs/a/missing")  # 404
    gcs.updated("jobs/a/out/1")
    gcs.delete_object("jobs/a/out/2")
    client = storage.Client(project=S.project, credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    bucket = client.bucket(S.bucket)
    bucket.blob("peer/multipart").upload_from_string(b"m", if_generation_match=0)
    bucket.blob("peer/one").upload_from_file(io.BytesIO(b"x" * 10))  # resumable, one chunk
    bucket.blob("peer/many", chunk_size=256 * 1024).upload_from_file(
        io.BytesIO(bytes(600 * 1024))
    )  # resumable, 308 between chunks
    blob = bucket.get_blob("peer/multipart")
    blob.metadata = {"owner": "alice"}
    blob.patch(if_metageneration_match=1)
    list(client.list_blobs(S.bucket, prefix="", delimiter="/", max_results=1))  # pages
    bucket.blob("peer/many").download_as_bytes()
    bucket.blob("peer/one").delete()


def test_every_exchange_of_a_tour_of_fakegce_keeps_googles_discovery_documents_h6(judged):
    """H6: every request gpuops' GCE and GCS adapters (and google-cloud-storage) sent, and every
    2xx body FakeGCE rendered, on a tour of all its Compute and Storage routes, is within the
    discovery documents; the tour reaches every method the fake serves and MIN_FIELDS fields."""
    tour(judged)

    counts = judged.judge.coverage.counts()
    print(f"google H6: {judged.exchanges} exchanges, {counts}")
    assert judged.breaches == []
    assert judged.judge.coverage.operations == OPERATIONS
    assert counts["fields"] >= MIN_FIELDS, counts


def test_a_fake_that_renders_an_int64_as_a_number_fails_the_discovery_contract_h6(
    judged, monkeypatch
):
    """H6: an object resource whose ``size`` is a JSON number (the document: a string, format
    uint64) is a breach on every object body: breaking the fake fails the tour."""
    from fakes.gce import routes

    real = routes._object

    def broken(fake, name, stored):  # type: ignore[no-untyped-def]
        return real(fake, name, stored) | {"size": len(stored.data)}

    monkeypatch.setattr(routes, "_object", broken)
    tour(judged)

    assert any(b.endswith(".size: a int 8, the contract says a string") for b in judged.breaches)


def test_a_fake_that_renders_a_field_google_does_not_document_fails_the_contract_h6(
    judged, monkeypatch
):
    """H6: an instance carrying a field no Instance schema lists is a breach on get."""
    from fakes.gce import routes

    real = routes.get_instance

    def broken(fake, req, m):  # type: ignore[no-untyped-def]
        reply = real(fake, req, m)
        return Reply(reply.status, reply.headers, json.dumps(reply.json() | {"gpuCount": 1}))

    monkeypatch.setattr(routes, "ROUTER", routes.seam.Router("FakeGCE", [
        r if r.handler is not real else routes.Route(r.method, r.pattern, broken)
        for r in routes.ROUTES
    ]))  # fmt: skip
    judged.gce().get(S.instance)

    assert judged.breaches == ["compute.instances.get 200.gpuCount: a field the contract lacks"]


# --- the judge itself, one body at a time ----------------------------------------------------------
def _instance(judged: Judged) -> dict[str, object]:
    doc = judged.raw("GET", f"{ZONE}/instances/{S.instance}").json()
    assert judged.breaches == []
    return doc  # type: ignore[no-any-return]


def _get_method(judge: google.Contract) -> google.Method:
    found = judge.method("GET", f"{ZONE}/instances/{S.instance}")
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("edit", "breach"),
    [
        (lambda d: d.update(gpuCount=1), "gpuCount: a field the contract lacks"),
        (lambda d: d.update(status="ASLEEP"), "status: 'ASLEEP' is not one of its"),
        (lambda d: d.update(id=5), "id: a int 5, the contract says a string"),
        (lambda d: d.update(id="five"), "id: 'five' is not an uint64"),
        (lambda d: d.update(canIpForward="no"), "canIpForward: a str 'no', the contract says a"),
        (lambda d: d["metadata"].update(items={}), "metadata.items: a dict, the contract says an"),
        (lambda d: d.update(name=None), "name: null, the contract says string"),
        (lambda d: d.update(disks=[{"diskSizeGb": 20}]), "disks[0].diskSizeGb: a int 20"),
    ],
    ids=["unknown field", "bad enum", "int64 as a number", "not an int64", "wrong type",
         "object for an array", "null", "nested int64"],
)  # fmt: skip
def test_the_judge_names_each_way_a_rendered_instance_breaks_the_discovery_document_h6(
    judged, edit, breach
):
    """H6: one changed field of a real instances.get answer is named, with its path and rule."""
    doc = _instance(judged)
    edit(doc)

    found = judged.judge.response_breaches(
        _get_method(judged.judge), Reply(200, (), json.dumps(doc))
    )

    assert len(found) == 1 and found[0].startswith(f"compute.instances.get 200.{breach}"), found


@pytest.mark.parametrize(
    ("method", "path", "query", "body", "breach"),
    [
        ("POST", f"{ZONE}/instances/i/setScheduling", {}, {"maxRunDuration": {"secs": 5}},
         "compute.instances.setScheduling request.maxRunDuration.secs: a field the contract"),
        ("POST", f"{ZONE}/instances/i/setScheduling", {},
         {"instanceTerminationAction": "HALT"}, "compute.instances.setScheduling request"
         ".instanceTerminationAction: 'HALT' is not one of"),
        ("POST", f"{ZONE}/instances/i/setMetadata", {}, {"items": [{"key": 1}]},
         "compute.instances.setMetadata request.items[0].key: a int 1"),
        ("GET", f"{ZONE}/instances/i/serialPort", {"start": "soon"}, None,
         "compute.instances.getSerialPortOutput query start: 'soon' is not an int64"),
        ("GET", "/storage/v1/b/bkt/o", {"projection": "everything"}, None,
         "storage.objects.list query projection: 'everything' is not one of"),
        ("GET", f"{ZONE}/instances/i", {"verbose": "1"}, None,
         "compute.instances.get query verbose: a parameter the contract lacks"),
        ("GET", "/storage/v1/b/bkt/o", {"maxResults": "ten"}, None,
         "storage.objects.list query maxResults: 'ten' is not an integer"),
        ("POST", "/upload/storage/v1/b/bkt/o", {"name": "x"}, None,
         "storage.objects.insert query uploadType: required on the upload path, missing"),
        ("GET", "/download/storage/v1/b/bkt/o/x", {}, None,
         "storage.objects.get query alt: media, required on the download path"),
        ("POST", f"{ZONE}/instances/i/nap", {}, None,
         "POST /compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/i/nap: no"),
    ],
    ids=["unknown field", "bad enum", "wrong type", "int64 query", "enum query",
         "unknown parameter", "integer query", "upload without a type", "download without alt",
         "no such method"],
)  # fmt: skip
def test_the_judge_names_each_way_a_request_breaks_the_discovery_document_h6(
    method, path, query, body, breach
):
    """H6: a request's body field, enum, type, query parameter and path, each named."""
    judge = google.load()
    raw = b"" if body is None else json.dumps(body).encode()
    request = Request(method=method, path=path, query=query, headers={}, body=raw)

    found = judge.judge(request, Reply(400, (), ""))

    assert found and any(b.startswith(breach) for b in found), found


def test_an_int64_a_request_sends_as_a_number_is_within_proto3s_json_mapping_h6():
    """H6: proto3's JSON mapping accepts a number or a string for an int64 on input, so a
    maxRunDuration of 3600 and of "3600" are both within the contract (a response must say
    "3600")."""
    judge = google.load()
    for seconds in (3600, "3600"):
        body = json.dumps({"maxRunDuration": {"seconds": seconds}}).encode()
        request = Request("POST", f"{ZONE}/instances/i/setScheduling", {}, {}, body)
        assert judge.judge(request, Reply(400, (), "")) == []


def test_the_contract_is_the_pinned_packages_discovery_documents_and_their_fields_h6():
    """H1/H6: the documents are the revisions google-api-python-client 2.202.0 ships (the dev
    pin in pyproject.toml), and the methods FakeGCE serves hold this many fields."""
    judge = google.load()
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()

    assert f'"{google.PACKAGE}"' in pyproject
    assert {api: doc["revision"] for api, doc in judge.docs.items()} == google.REVISIONS
    assert {m.id for m in judge.methods} >= OPERATIONS
    fields = google.field_count(judge, sorted(OPERATIONS))
    print(f"google H6: {len(OPERATIONS)} methods, {fields} schema fields")
    assert fields >= 500
