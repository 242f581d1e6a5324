"""FakeGCE's routes: the compute and storage calls the lane's adapters make, rendered from
recordings/gce/ and recordings/gcs/. An unknown route is a loud 404 listing the known ones;
there is no stop, suspend or delete route, because gpuops must never call one (L1)."""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from fakes.gce.model import FakeGCE
from fakes.vast.wire import Reply, Request

JSON = (("Content-Type", "application/json; charset=UTF-8"),)
_C = r"/compute/v1/projects/(?P<p>[^/]+)/zones/(?P<z>[^/]+)"
_S = r"/b/(?P<b>[^/]+)/o"


@functools.cache
def _body(provider: str, name: str) -> Any:
    from gpuops.providers import load_recording

    return json.loads(load_recording(provider, name).body)


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


def _instance(fake: FakeGCE, m: re.Match[str]) -> Reply | None:
    s = fake.scenario
    if (m["p"], m["z"], m["i"]) != (s.project, s.zone, s.instance):
        where = f"projects/{m['p']}/zones/{m['z']}/instances/{m['i']}"
        return _error("instance_404", message=f"The resource '{where}' was not found")
    return None


def get_instance(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    body = _recorded("gce", "instance_get_terminated")
    body["status"] = fake.status
    if fake.max_run_s is not None:
        body["scheduling"] = _recorded("gce", "instance_scheduling_max_run")["scheduling"]
        body["scheduling"]["maxRunDuration"] = {"seconds": str(int(fake.max_run_s))}
        body["scheduling"]["instanceTerminationAction"] = fake.termination_action
    body["metadata"] = {
        "kind": "compute#metadata",
        "fingerprint": fake.fingerprint,
        "items": [{"key": k, "value": v} for k, v in sorted(fake.metadata.items())],
    }
    return _json(200, body)


def _op_body(fake: FakeGCE, name: str, done: bool) -> dict[str, Any]:
    op = fake.operations[name]
    recording = {
        "stockout": "operation_stockout_with_details",
        "stockout-plain": "operation_stockout_plain",
        "insufficient-capacity": "operation_insufficient_capacity",
        "quota": "operation_quota",
    }.get(op.outcome, "operation_done")
    body = _recorded("gce", recording if done else "start_operation_running")
    if op.outcome == "unavailable" and done:
        body.update(
            httpErrorStatusCode=503,
            httpErrorMessage="SERVICE UNAVAILABLE",
            error={"errors": [{"code": "SERVICE_UNAVAILABLE", "message": "try later"}]},
        )
    if op.outcome == "not-ready" and done:
        body.update(
            httpErrorStatusCode=400,
            httpErrorMessage="BAD REQUEST",
            error={
                "errors": [{"code": "RESOURCE_NOT_READY", "message": "The instance is stopping."}]
            },
        )
    body["name"] = name
    body["operationType"] = op.kind
    body["selfLink"] = body["selfLink"].rsplit("/", 1)[0] + "/" + name
    return dict(body)


def start(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    return _json(200, _op_body(fake, fake.start().name, done=False))


def set_metadata(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    sent = json.loads(req.body or b"{}")
    items = {str(i["key"]): str(i.get("value", "")) for i in sent.get("items") or []}
    op = fake.set_metadata(str(sent.get("fingerprint", "")), items)
    if op is None:
        return _error("set_metadata_412")
    return _json(200, _op_body(fake, op.name, done=True))


def set_scheduling(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    """setScheduling: only on a TERMINATED instance (the API reference); a ceiling is kept."""
    if (missing := _instance(fake, m)) is not None:
        return missing
    if fake.status != "TERMINATED":
        body = _recorded("gce", "set_scheduling_not_terminated")
        return _json(int(body["error"]["code"]), body)
    sent = json.loads(req.body or b"{}")
    duration = sent.get("maxRunDuration") or {}
    seconds = float(duration.get("seconds", 0) or 0) if duration else None
    op = fake.set_scheduling(seconds, str(sent.get("instanceTerminationAction", "")))
    return _json(200, _op_body(fake, op.name, done=True))


def get_operation(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if m["op"] not in fake.operations:
        return _error("instance_404", message=f"The resource 'operations/{m['op']}' was not found")
    return _json(200, _op_body(fake, m["op"], done=True))


def serial(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if (missing := _instance(fake, m)) is not None:
        return missing
    start_at = int(req.query.get("start", "0") or 0)
    body = _recorded("gce", "serial_port_output")
    body.update(contents=fake.serial[start_at:], start=str(start_at), next=str(len(fake.serial)))
    return _json(200, body)


def _object(fake: FakeGCE, name: str) -> dict[str, Any]:
    item = dict(_recorded("gcs", "list_objects")["items"][0])
    b = fake.scenario.bucket
    stamp = _rfc3339(fake.updated.get(name, fake.clock.now()))
    item.update(
        name=name,
        bucket=b,
        id=f"{b}/{name}/1",
        size=str(len(fake.objects[name])),
        contentType="application/octet-stream",
        updated=stamp,
        timeCreated=stamp,
    )
    return item


def _rfc3339(epoch: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _bucket_ok(fake: FakeGCE, m: re.Match[str]) -> bool:
    return m["b"] == fake.scenario.bucket


def list_objects(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if not _bucket_ok(fake, m):
        return _error("object_404", "gcs", f"The specified bucket does not exist: {m['b']}")
    prefix = req.query.get("prefix", "")
    names = sorted(n for n in fake.objects if n.startswith(prefix))
    body: dict[str, Any] = {"kind": "storage#objects"}
    if names:
        body["items"] = [_object(fake, n) for n in names]
    return _json(200, body)


def download(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    name = unquote(m["o"])
    if not _bucket_ok(fake, m) or name not in fake.objects:
        return _error("object_404", "gcs", f"No such object: {m['b']}/{name}")
    data = fake.objects[name].decode("latin-1")
    return Reply(200, (("Content-Type", "application/octet-stream"),), data)


def object_meta(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    name = unquote(m["o"])
    if not _bucket_ok(fake, m) or name not in fake.objects:
        return _error("object_404", "gcs", f"No such object: {m['b']}/{name}")
    return _json(200, _object(fake, name))


def upload(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if not _bucket_ok(fake, m):
        return _error("object_404", "gcs", f"The specified bucket does not exist: {m['b']}")
    kind = req.query.get("uploadType", "")
    if kind == "media":
        name, data = req.query.get("name", ""), req.body
    elif kind == "multipart":
        parts = _multipart(req.headers.get("content-type", ""), req.body)
        if len(parts) != 2:
            return _json(400, {"error": {"code": 400, "message": "multipart needs 2 parts"}})
        name, data = str(json.loads(parts[0])["name"]), parts[1]
    else:
        return _json(400, {"error": {"code": 400, "message": f"uploadType {kind!r}"}})
    if not name:
        return _json(400, {"error": {"code": 400, "message": "no object name"}})
    fake.put(name, bytes(data))
    return _json(200, _object(fake, name))


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
        return Reply(403, (("Content-Type", "text/html"),), "Missing Metadata-Flavor:Google header.")
    return None


def metadata_attribute(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    """A boot reading its instance's custom metadata (live, as the real server serves it)."""
    if (refused := _flavored(req)) is not None:
        return refused
    key = unquote(m["k"])
    if key not in fake.metadata:
        return Reply(404, (("Content-Type", "text/html"),), "Not Found")
    return Reply(200, _TEXT, fake.metadata[key])


def metadata_token(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    if (refused := _flavored(req)) is not None:
        return refused
    return _json(200, _recorded("gce", "metadata_token"))


def boot_poweroff(fake: FakeGCE, req: Request, m: re.Match[str]) -> Reply:
    """fake_gce_poweroff: a boot's poweroff/shutdown shim (no real client sends this)."""
    if not fake.poweroff(int(m["n"])):
        return _json(409, {"fake_gce_error": f"boot {m['n']} is not the running boot"})
    return _json(200, {"fake_gce_poweroff": int(m["n"])})


Handler = Callable[[FakeGCE, Request, re.Match[str]], Reply]
ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    ("GET", re.compile(_C + r"/instances/(?P<i>[^/]+)"), get_instance),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/start"), start),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/setMetadata"), set_metadata),
    ("POST", re.compile(_C + r"/instances/(?P<i>[^/]+)/setScheduling"), set_scheduling),
    ("GET", re.compile(_C + r"/instances/(?P<i>[^/]+)/serialPort"), serial),
    ("GET", re.compile(_C + r"/operations/(?P<op>[^/]+)"), get_operation),
    ("GET", re.compile(r"/storage/v1" + _S), list_objects),
    ("GET", re.compile(r"/download/storage/v1" + _S + r"/(?P<o>.+)"), download),
    ("GET", re.compile(r"/storage/v1" + _S + r"/(?P<o>.+)"), object_meta),
    ("POST", re.compile(r"/upload/storage/v1" + _S), upload),
    ("GET", re.compile(r"/computeMetadata/v1/instance/attributes/(?P<k>[^/]+)"), metadata_attribute),
    (
        "GET",
        re.compile(r"/computeMetadata/v1/instance/service-accounts/default/token"),
        metadata_token,
    ),
    ("POST", re.compile(r"/fake_gce/boots/(?P<n>\d+)/poweroff"), boot_poweroff),
)
SLEEP = re.compile(r"/fake_gce/boots/(?P<n>\d+)/sleep")
KNOWN = [f"{method} {pattern.pattern}" for method, pattern, _ in ROUTES]


class UnknownRoute(Exception):
    def __init__(self, method: str, path: str) -> None:
        super().__init__(f"FakeGCE has no route {method} {path}; known: {KNOWN}")
        self.method, self.path = method, path


def dispatch(fake: FakeGCE, req: Request) -> Reply:
    with fake.lock:
        fake.tick()
        for method, pattern, handler in ROUTES:
            match = pattern.fullmatch(req.path)
            if match and method == req.method:
                fake.calls.append(f"{method} {handler.__name__}")
                return handler(fake, req, match)
        fake.calls.append(f"{req.method} {req.path}")
    raise UnknownRoute(req.method, req.path)


def unknown_reply(exc: UnknownRoute) -> Reply:
    return _json(404, {"error": {"code": 404, "message": str(exc), "known_routes": KNOWN}})
