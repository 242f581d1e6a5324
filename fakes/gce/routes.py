"""FakeGCE's routes: the compute and storage calls the lane's adapters make, rendered from
recordings/gce/ and recordings/gcs/. An unknown route is a loud 404 listing the known ones;
there is no instance stop, suspend or delete route, because gpuops must never call one (L1)
(an object's delete is a storage route: `gpuops check` removes its probe object)."""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from fakes import seam
from fakes.gce.model import (
    LABEL_KEY,
    LABEL_VALUE,
    MAX_LABELS,
    MAX_RUN_S,
    MIN_RUN_S,
    PRECONDITIONS,
    FakeGCE,
    StartRefused,
    StoredObject,
)
from fakes.seam import Reply, Request

JSON = (("Content-Type", "application/json; charset=UTF-8"),)
_C = r"/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)"
_S = r"/b/(?P<b>[^/]+)/o"


@functools.cache
def _body(provider: str, name: str) -> Any:
    from gpuops.providers import load_recording

    return json.loads(load_recording(provider, name).body)


@functools.cache
def _recording(provider: str, name: str) -> Any:
    from gpuops.providers import load_recording

    return load_recording(provider, name)


def _recorded(provider: str, name: str) -> Any:
    return copy.deepcopy(_body(provider, name))


def _json(status: int, value: Any) -> Reply:
    return Reply(status, JSON, json.dumps(value))


def _error(recording: str, provider: str = "gce", message: str | None = None) -> Reply:
    body = _recorded(provider, recording)
    if message is not None:
        body["error"]["message"] = message
        body["error"]["errors"][0]["message"] = message
    return _json(int(body["error"]["code"]), body)


def _instance(fake: FakeGCE, m: Mapping[str, str]) -> Reply | None:
    s = fake.scenario
    if (m["p"], m["z"], m["i"]) != (s.project, s.zone, s.instance):
        where = f"projects/{m['p']}/zones/{m['z']}/instances/{m['i']}"
        return _error("instance_404", message=f"The resource '{where}' was not found")
    return None


def _gce_timestamp(epoch_s: float) -> str:
    """A GCE timestamp as the recordings write them: "2026-11-14T07:02:41.601-08:00"."""
    from datetime import datetime, timedelta, timezone

    zone = timezone(timedelta(hours=-8))  # the recordings' offset (US Pacific, standard time)
    return datetime.fromtimestamp(epoch_s, zone).isoformat(timespec="milliseconds")


def get_instance(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    body = _recorded("gce", "instance_get_terminated")
    body["status"] = fake.status
    if fake.max_run_s is not None:
        body["scheduling"] = _recorded("gce", "instance_scheduling_max_run")["scheduling"]
        body["scheduling"]["maxRunDuration"] = {"seconds": str(int(fake.max_run_s))}
        body["scheduling"]["instanceTerminationAction"] = fake.termination_action
    if fake.termination_at is not None:  # while RUNNING under a run ceiling, until stopped
        stamp = _gce_timestamp(fake.clock.epoch_of(fake.termination_at))
        body["resourceStatus"] = {"scheduling": {"terminationTimestamp": stamp}}
    if fake.labels:  # GCE leaves ``labels`` out of an instance that has none
        body["labels"] = dict(sorted(fake.labels.items()))
    body["labelFingerprint"] = fake.label_fingerprint
    body["metadata"] = {
        "kind": "compute#metadata",
        "fingerprint": fake.fingerprint,
        "items": [{"key": k, "value": v} for k, v in sorted(fake.metadata.items())],
    }
    return _json(200, body)


# The recording each outcome's DONE operation is rendered from. ``unavailable`` and
# ``not-ready`` are the fake's own bodies (their codes say ``fake_gce_``): GCE's exact answers
# to those were never captured.
DONE_BODIES = {
    "ok": "operation_done",
    "stockout": "operation_stockout_with_details",
    "stockout-plain": "operation_stockout_plain",
    "insufficient-capacity": "operation_insufficient_capacity",
    "quota": "operation_quota",
    "unavailable": "operation_unavailable",
    "not-ready": "operation_not_ready",
}
# Only these keys of a DONE body say how it ended; a PENDING or RUNNING one has none of them.
_ENDED = ("endTime", "error", "httpErrorStatusCode", "httpErrorMessage")


def _pacific(epoch: float) -> str:
    """An operation time as GCE writes it (RFC 3339, milliseconds, the zone's offset; the
    recordings use -08:00)."""
    import datetime as dt

    local = dt.datetime.fromtimestamp(epoch, dt.timezone(dt.timedelta(hours=-8)))
    return local.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "-08:00"


def _op_body(fake: FakeGCE, name: str) -> dict[str, Any]:
    """The operation as it stands on the fake clock: PENDING, RUNNING, or DONE with its
    outcome's recorded body; its own id, name and times."""
    op = fake.operations[name]
    status = op.status(fake.clock.wall())
    if status == "DONE":
        body = _recorded("gce", DONE_BODIES[op.outcome])
    else:
        body = _recorded("gce", "start_operation_running")
        for key in _ENDED:
            body.pop(key, None)
    body.update(
        id=op.id,
        name=name,
        operationType=op.kind,
        status=status,
        progress=100 if status == "DONE" else 0,
        insertTime=_pacific(op.insert_at),
    )
    body["selfLink"] = body["selfLink"].rsplit("/", 1)[0] + "/" + name
    if status == "PENDING":
        body.pop("startTime", None)
    else:
        body["startTime"] = _pacific(op.start_at)
    if status == "DONE":
        body["endTime"] = _pacific(op.end_at)
    return dict(body)


def start(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    op = fake.start()
    if isinstance(op, StartRefused):
        body = _recorded("gce", op.recording)
        return _json(int(body["error"]["code"]), body)
    return _json(200, _op_body(fake, op.name))


def set_metadata(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    sent = json.loads(req.body or b"{}")
    items = {str(i["key"]): str(i.get("value", "")) for i in sent.get("items") or []}
    too_large = _metadata_breach(items)
    if too_large is not None:  # nothing changes: GCE refuses the whole write
        return _fake_gce_error(400, "fake_gce_metadata_too_large", too_large)
    op = fake.set_metadata(str(sent.get("fingerprint", "")), items)
    if op is None:
        return _error("set_metadata_412")
    return _json(200, _op_body(fake, op.name))


# The Metadata resource's limits (Compute Engine API reference, compute/v1 Metadata): each value
# at most 262144 bytes (256 KiB), all keys and values together less than 512 KB, each key less
# than 128 bytes. Over them setMetadata is a 400 (the googleapis error envelope; the exact reason
# and message GCE sends were never captured, so they are the fake's own).
METADATA_VALUE_MAX = 262144
METADATA_TOTAL_MAX = 512 * 1024
METADATA_KEY_MAX = 128


def _metadata_breach(items: Mapping[str, str]) -> str | None:
    for key, value in items.items():
        if len(key.encode()) >= METADATA_KEY_MAX:
            return f"key {key[:40]!r}... is {len(key.encode())} bytes, the limit is under 128"
        if len(value.encode()) > METADATA_VALUE_MAX:
            return f"{key}: {len(value.encode())} bytes, the limit is {METADATA_VALUE_MAX}"
    total = sum(len(k.encode()) + len(v.encode()) for k, v in items.items())
    if total >= METADATA_TOTAL_MAX:
        return f"{total} bytes of keys and values, the limit is under {METADATA_TOTAL_MAX}"
    return None


def set_labels(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """setLabels under the label fingerprint (412 conditionNotMet when stale); labels that
    break GCE's rules are a 400 of the fake's own (the exact answer was never captured)."""
    if (missing := _instance(fake, m)) is not None:
        return missing
    sent = json.loads(req.body or b"{}")
    labels = sent.get("labels") or {}
    if not isinstance(labels, dict):
        return _fake_gce_error(400, "fake_gce_bad_labels", "labels is not an object")
    bad = [
        f"{k}={v}"
        for k, v in labels.items()
        if not (isinstance(v, str) and LABEL_KEY.fullmatch(str(k)) and LABEL_VALUE.fullmatch(v))
    ]
    if bad or len(labels) > MAX_LABELS:
        return _fake_gce_error(400, "fake_gce_bad_labels", f"labels break GCE's rules: {bad}")
    op = fake.set_labels(str(sent.get("labelFingerprint", "")), dict(labels))
    if op is None:
        return _error("set_labels_412")
    return _json(200, _op_body(fake, op.name))


def _fake_gce_error(status: int, reason: str, message: str) -> Reply:
    """A refusal of the fake's own (reason ``fake_gce_*``), never mistaken for GCE's wording."""
    text = f"{reason}: {message}"
    error = {"message": text, "domain": "global", "reason": reason}
    return _json(status, {"error": {"code": status, "message": text, "errors": [error]}})


def set_scheduling(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """setScheduling: only on a TERMINATED instance (the API reference); a ceiling is kept. A
    maxRunDuration outside the documented 30 s to 120 days is a 400, as GCE answers it."""
    if (missing := _instance(fake, m)) is not None:
        return missing
    if fake.status != "TERMINATED":
        body = _recorded("gce", "set_scheduling_not_terminated")
        return _json(int(body["error"]["code"]), body)
    sent = json.loads(req.body or b"{}")
    duration = sent.get("maxRunDuration") or {}
    seconds = None
    if duration:
        try:
            seconds = float(duration.get("seconds", 0) or 0) + float(duration.get("nanos", 0)) / 1e9
        except (TypeError, ValueError):
            seconds = -1.0
        if not MIN_RUN_S <= seconds <= MAX_RUN_S:  # a 0 never silently removes the ceiling
            body = _recorded("gce", "set_scheduling_max_run_out_of_range")
            return _json(int(body["error"]["code"]), body)
    op = fake.set_scheduling(seconds, str(sent.get("instanceTerminationAction", "")))
    return _json(200, _op_body(fake, op.name))


def _zone_ok(fake: FakeGCE, m: Mapping[str, str]) -> bool:
    return (m["p"], m["z"]) == (fake.scenario.project, fake.scenario.zone)


def get_operation(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    if m["op"] not in fake.operations or not _zone_ok(fake, m):
        return _error("instance_404", message=f"The resource 'operations/{m['op']}' was not found")
    return _json(200, _op_body(fake, m["op"]))


def wait_operation(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """zoneOperations.wait: the operation as it stands now. GCE's wait may hold the request
    for up to 2 minutes, and its reference allows it to return "after zero seconds" with the
    operation not DONE; the fake always returns at once (a caller must poll again)."""
    return get_operation(fake, req, m)


def serial(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    start_at = int(req.query.get("start", "0") or 0)
    body = _recorded("gce", "serial_port_output")
    body.update(contents=fake.serial[start_at:], start=str(start_at), next=str(len(fake.serial)))
    return _json(200, body)


def _object(fake: FakeGCE, name: str, stored: StoredObject) -> dict[str, Any]:
    """An object resource: the recorded item's fields, this generation's values."""
    item = dict(_recorded("gcs", "list_objects")["items"][0])
    b = fake.scenario.bucket
    stamp = _rfc3339(stored.updated)
    item.update(
        name=name,
        bucket=b,
        id=f"{b}/{name}/{stored.generation}",
        generation=str(stored.generation),
        metageneration=str(stored.metageneration),
        size=str(len(stored.data)),
        contentType=stored.content_type,
        updated=stamp,
        timeCreated=_rfc3339(stored.generation / 1_000_000),
    )
    item.update(_checksums(stored.data))
    if stored.metadata:
        item["metadata"] = dict(stored.metadata)
    return item


def _checksums(data: bytes) -> dict[str, str]:
    """The object resource's documented ``md5Hash`` and ``crc32c`` (base64, crc32c big-endian),
    computed from the bytes: the python client checks one against a resumable upload."""
    out = {"md5Hash": base64.b64encode(hashlib.md5(data).digest()).decode()}
    try:
        import google_crc32c  # google-cloud-storage's own dependency
    except ImportError:  # pragma: no cover - then only md5Hash
        return out
    crc = google_crc32c.value(data)
    out["crc32c"] = base64.b64encode(crc.to_bytes(4, "big")).decode()
    return out


def _rfc3339(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _bucket_ok(fake: FakeGCE, m: Mapping[str, str]) -> bool:
    return m["b"] == fake.scenario.bucket


def _no_bucket(m: Mapping[str, str]) -> Reply:
    return _error("object_404", "gcs", f"The specified bucket does not exist: {m['b']}")


def _refused_by_precondition(fake: FakeGCE, name: str, req: Request) -> Reply | None:
    """The fake's 400 for a precondition that is not a number, else the recorded 412 when a
    generation precondition of the request does not hold; None when they all hold."""
    if (bad := _bad_precondition(req)) is not None:
        return bad
    if fake.precondition(name, req.query):
        return None
    return _error("precondition_failed_412", "gcs")


def _fake_gcs_error(status: int, reason: str, message: str) -> Reply:
    """A refusal of the fake's own (reason ``fake_gcs_*``): a request GCS would serve but this
    fake does not model, or one it cannot read. Never mistaken for GCS's wording."""
    text = f"{reason}: {message}"
    error = {"message": text, "domain": "global", "reason": reason}
    return _json(status, {"error": {"code": status, "message": text, "errors": [error]}})


def _bad_precondition(req: Request) -> Reply | None:
    for key in PRECONDITIONS:
        value = req.query.get(key, "")
        if value and not value.lstrip("-").isdigit():
            return _fake_gcs_error(400, "fake_gcs_bad_precondition", f"{key}={value!r}")
    return None


def list_objects(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """objects.list with ``prefix`` and ``delimiter``: names past the prefix that hold the
    delimiter are rolled up into ``prefixes`` (each up to and including the delimiter)."""
    if not _bucket_ok(fake, m):
        return _no_bucket(m)
    for unmodelled in ("versions", "startOffset", "endOffset", "matchGlob"):
        if req.query.get(unmodelled, "") not in ("", "false", "False"):
            return _fake_gcs_error(400, "fake_gcs_unmodelled", f"objects.list {unmodelled}")
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter", "")
    page_size = req.query.get("maxResults", str(LIST_PAGE_MAX))
    if not page_size.isdigit() or int(page_size) < 1:
        return _fake_gcs_error(400, "fake_gcs_bad_max_results", f"maxResults={page_size!r}")
    after = _page_after(req.query.get("pageToken", ""))
    if after is None:
        return _fake_gcs_error(400, "fake_gcs_bad_page_token", "pageToken is not one of ours")
    entries: dict[str, bool] = {}  # name or rolled-up prefix -> whether it is a prefix
    for name in sorted(n for n in fake.objects if n.startswith(prefix)):
        rest = name[len(prefix) :]
        if delimiter and delimiter in rest:
            entries[prefix + rest[: rest.index(delimiter) + len(delimiter)]] = True
        else:
            entries[name] = False
    listed = sorted(e for e in entries if e > after)
    page = listed[: min(int(page_size), LIST_PAGE_MAX)]
    body: dict[str, Any] = {"kind": "storage#objects"}
    if len(page) < len(listed):  # more after this page: the last entry it holds, opaque
        body["nextPageToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
    prefixes = [e for e in page if entries[e]]
    names = [e for e in page if not entries[e]]
    if prefixes:
        body["prefixes"] = prefixes
    if names:
        body["items"] = [_object(fake, n, fake.live(n)) for n in names]  # type: ignore[arg-type]
    return _json(200, body)


# objects.list answers at most this many entries (items and prefixes together) a page, fewer
# when maxResults asks ("the service uses this parameter or 1,000 items, whichever is smaller",
# Cloud Storage JSON API reference, objects.list), with a nextPageToken while more remain.
LIST_PAGE_MAX = 1000


def _page_after(token: str) -> str | None:
    """The entry a pageToken of ours continues after ("": from the first); None: not ours."""
    if not token:
        return ""
    try:
        return base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None


def _readable(
    fake: FakeGCE, req: Request, m: Mapping[str, str]
) -> tuple[str, StoredObject | Reply]:
    """The live generation a read asks for (``generation``, preconditions), or the answer."""
    name = unquote(m["o"])
    if not _bucket_ok(fake, m):
        return name, _no_bucket(m)
    stored = fake.live(name)
    wanted = req.query.get("generation", "")
    if stored is None or (wanted and wanted != str(stored.generation)):
        # without object versioning an overwritten generation is gone: 404, as for no object
        return name, _error("object_404", "gcs", f"No such object: {m['b']}/{name}")
    if (refused := _refused_by_precondition(fake, name, req)) is not None:
        return name, refused
    return name, stored


def download(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    _, stored = _readable(fake, req, m)
    if isinstance(stored, Reply):
        return stored
    # an object's data is bytes, sent as they are whatever its content type (fakes/seam.py)
    headers = (
        ("X-Goog-Generation", str(stored.generation)),
        ("X-Goog-Metageneration", str(stored.metageneration)),
        ("Content-Type", stored.content_type),
    )
    return Reply(200, headers, stored.data)


def object_meta(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    name, stored = _readable(fake, req, m)
    if isinstance(stored, Reply):
        return stored
    return _json(200, _object(fake, name, stored))


def patch_object(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """objects.patch: contentType and custom metadata; the metageneration moves."""
    name, stored = _readable(fake, req, m)
    if isinstance(stored, Reply):
        return stored
    sent = json.loads(req.body or b"{}")
    metadata = {str(k): str(v) for k, v in (sent.get("metadata") or {}).items()}
    patched = fake.patch(name, sent.get("contentType"), metadata)
    return _json(200, _object(fake, name, patched))


def upload(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """objects.insert, media or multipart, with its generation preconditions (412 when one
    does not hold: ``ifGenerationMatch=0`` on an existing object, a stale generation)."""
    if not _bucket_ok(fake, m):
        return _no_bucket(m)
    kind = req.query.get("uploadType", "")
    content_type = ""
    if kind == "media":
        name, data = req.query.get("name", ""), req.body
    elif kind == "multipart":
        parts = _multipart(req.headers.get("content-type", ""), req.body)
        if len(parts) != 2:
            return _fake_gcs_error(400, "fake_gcs_bad_upload", "multipart needs 2 parts")
        meta = json.loads(parts[0])
        name, data = str(meta.get("name", "")), parts[1]
        content_type = str(meta.get("contentType", ""))
    elif kind == "resumable":
        return _begin_resumable(fake, req, m)
    else:
        return _fake_gcs_error(400, "fake_gcs_bad_upload", f"uploadType {kind!r}")
    if not name:
        return _fake_gcs_error(400, "fake_gcs_bad_upload", "no object name")
    if fake.write_forbidden(name):
        return _error("forbidden_403", "gcs")
    if fake.write_refused(name):
        return _error("service_unavailable_503", "gcs")
    if (refused := _refused_by_precondition(fake, name, req)) is not None:
        return refused
    stored = fake.put(name, bytes(data), content_type)
    return _json(200, _object(fake, name, stored))


def delete_object(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """objects.delete: the live generation goes (the recorded empty answer); a missing object
    is the recorded 404, a name under the scenario's forbidden prefix the recorded 403."""
    name, stored = _readable(fake, req, m)
    if isinstance(stored, Reply):
        return stored
    if fake.write_forbidden(name):
        return _error("forbidden_403", "gcs")
    fake.delete(name)
    done = _recording("gcs", "object_delete")
    return Reply(done.status, done.headers, done.body)


def _begin_resumable(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """A resumable upload's first request: its metadata; the session URL in ``Location``
    (the JSON API's resumable protocol, cloud.google.com/storage/docs/performing-resumable-uploads;
    preconditions are checked here and again at the last chunk)."""
    meta = json.loads(req.body or b"{}")
    name = str(req.query.get("name") or meta.get("name") or "")
    if not name:
        return _fake_gcs_error(400, "fake_gcs_bad_upload", "no object name")
    if (refused := _refused_by_precondition(fake, name, req)) is not None:
        return refused
    content_type = req.headers.get("x-upload-content-type") or str(meta.get("contentType", ""))
    upload_id = fake.begin_upload(name, content_type, dict(req.query))
    host = req.headers.get("host", "")
    if not host:
        return _fake_gcs_error(400, "fake_gcs_no_host", "a resumable upload needs a Host header")
    # the fake is served over http only (loopback, or responses on an http:// base)
    query = f"uploadType=resumable&upload_id={upload_id}"
    location = f"http://{host}/upload/storage/v1/b/{m['b']}/o?{query}"
    return Reply(200, (*JSON, ("Location", location)), "")


_RANGE = re.compile(r"bytes (?:(?P<first>\d+)-(?P<last>\d+)|\*)/(?P<total>\d+|\*)")


def resumable_chunk(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """A chunk of a resumable upload (``Content-Range: bytes F-L/T``, T ``*`` until the last):
    308 with the ``Range`` received so far, or, with the last byte, the object (its
    preconditions checked again: 412 then, and nothing is written)."""
    upload = fake.uploads.get(req.query.get("upload_id", ""))
    if upload is None or not _bucket_ok(fake, m):
        return _fake_gcs_error(404, "fake_gcs_no_such_upload", "no such resumable upload")
    found = _RANGE.fullmatch(req.headers.get("content-range", "").strip())
    if found is None:
        return _fake_gcs_error(400, "fake_gcs_bad_range", req.headers.get("content-range", ""))
    if found["first"] is not None:
        if int(found["first"]) != len(upload.data):
            return _fake_gcs_error(400, "fake_gcs_bad_range", "a chunk out of order")
        upload.data += req.body
    total = found["total"]
    if total == "*" or int(total) != len(upload.data):
        headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/plain"),)
        if upload.data:
            headers += (("Range", f"bytes=0-{len(upload.data) - 1}"),)
        return Reply(308, headers, "")
    del fake.uploads[req.query["upload_id"]]
    if fake.write_forbidden(upload.name):
        return _error("forbidden_403", "gcs")
    if fake.write_refused(upload.name):
        return _error("service_unavailable_503", "gcs")
    if not fake.precondition(upload.name, upload.query):
        return _error("precondition_failed_412", "gcs")
    stored = fake.put(upload.name, bytes(upload.data), upload.content_type)
    return _json(200, _object(fake, upload.name, stored))


def _multipart(content_type: str, body: bytes) -> list[bytes]:
    """The payloads of a multipart/related body (the JSON metadata, then the data)."""
    found = re.search(r'boundary="?([^";]+)"?', content_type)
    if found is None:
        return []
    out = []
    for chunk in body.split(b"--" + found.group(1).encode())[1:]:
        if chunk.startswith(b"--"):
            break
        _, sep, payload = chunk.partition(b"\r\n\r\n")
        if sep:
            out.append(payload[:-2] if payload.endswith(b"\r\n") else payload)
    return out


_TEXT = (("Content-Type", "application/text"), ("Metadata-Flavor", "Google"))


def _flavored(req: Request) -> Reply | None:
    """The metadata server answers only requests that carry ``Metadata-Flavor: Google``."""
    if req.headers.get("metadata-flavor") != "Google":
        return Reply(
            403, (("Content-Type", "text/html"),), "Missing Metadata-Flavor:Google header."
        )
    return None


def metadata_attribute(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """A boot reading its instance's custom metadata (live, as the real server serves it)."""
    if (refused := _flavored(req)) is not None:
        return refused
    key = unquote(m["k"])
    if key not in fake.metadata:
        return Reply(404, (("Content-Type", "text/html"),), "Not Found")
    return Reply(200, _TEXT, fake.metadata[key])


def metadata_token(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    if (refused := _flavored(req)) is not None:
        return refused
    return _json(200, _recorded("gce", "metadata_token"))


def boot_poweroff(fake: FakeGCE, req: Request, m: Mapping[str, str]) -> Reply:
    """fake_gce_poweroff: a boot's poweroff/shutdown shim (no real client sends this)."""
    if not fake.poweroff(int(m["n"])):
        return _json(409, {"fake_gce_error": f"boot {m['n']} is not the running boot"})
    return _json(200, {"fake_gce_poweroff": int(m["n"])})


Handler = Callable[[FakeGCE, Request, Mapping[str, str]], Reply]


@dataclass(frozen=True)
class Route:
    """One of FakeGCE's routes, as the fakes' router (fakes/seam.py) finds and lists them."""

    method: str
    pattern: re.Pattern[str]
    handler: Handler

    def __str__(self) -> str:
        return f"{self.method} {self.pattern.pattern}"


ROUTES: tuple[Route, ...] = tuple(Route(method, pattern, handler) for method, pattern, handler in (
    ("GET", re.compile(_C + r"/instances/(?P<i>[^/]+)"), get_instance),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/start"), start),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/setMetadata"), set_metadata),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/setScheduling"), set_scheduling),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/setLabels"), set_labels),
    ("GET", re.compile(_C + r"/instances/(?P<i>[^/]+)/serialPort"), serial),
    ("GET", re.compile(_C + r"/operations/(?P<op>[^/]+)"), get_operation),
    ("POST", re.compile(_C + r"/operations/(?P<op>[^/]+)/wait"), wait_operation),
    ("GET", re.compile(r"/storage/v1" + _S), list_objects),
    ("GET", re.compile(r"/download/storage/v1" + _S + r"/(?P<o>.+)"), download),
    ("GET", re.compile(r"/storage/v1" + _S + r"/(?P<o>.+)"), object_meta),
    ("PATCH", re.compile(r"/storage/v1" + _S + r"/(?P<o>.+)"), patch_object),
    ("DELETE", re.compile(r"/storage/v1" + _S + r"/(?P<o>.+)"), delete_object),
    ("POST", re.compile(r"/upload/storage/v1" + _S), upload),
    ("PUT", re.compile(r"/upload/storage/v1" + _S), resumable_chunk),
    ("GET", re.compile(r"/computeMetadata/v1/instance/attributes/(?P<k>[^/]+)"), metadata_attribute),
    (
        "GET",
        re.compile(r"/computeMetadata/v1/instance/service-accounts/default/token"),
        metadata_token,
    ),
    ("POST", re.compile(r"/fake_gce/boots/(?P<n>\d+)/poweroff"), boot_poweroff),
))  # fmt: skip
ROUTER = seam.Router("FakeGCE", ROUTES)
SLEEP = re.compile(r"/fake_gce/boots/(?P<n>\d+)/sleep")
KNOWN = ROUTER.known()


class UnknownRoute(seam.UnknownRoute):
    """A request FakeGCE has no route for: a test or client bug, never a provider answer."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__("FakeGCE", method, path, KNOWN)


def dispatch(fake: FakeGCE, req: Request) -> Reply:
    with fake.lock:
        fake.tick()
        found = ROUTER.find(req.method, req.path)
        if found is not None:
            route, groups = found
            fake.calls.append(f"{route.method} {route.handler.__name__}")
            reply = route.handler(fake, req, groups)
            for tap in fake.taps:
                tap(req, reply)
            return reply
        fake.calls.append(f"{req.method} {req.path}")
    raise UnknownRoute(req.method, req.path)


def unknown_reply(exc: UnknownRoute) -> Reply:
    return _json(404, {"error": {"code": 404, "message": str(exc), "known_routes": KNOWN}})
