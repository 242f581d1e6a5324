"""The GCE adapter for the lane: get, setMetadata, setScheduling, start, zone operations,
serial output.

The Compute Engine REST API (v1), spoken through ``google-auth``'s ``AuthorizedSession`` (a
``requests`` session that adds the Application Default Credentials' token), with wire JSON in
and out. ``google-cloud-compute``'s REST transport sends exactly these requests, but importing
it costs 1.3-1.6 s on a loaded 2-core host (its one ``types/compute.py`` holds every message of
the API), more than a whole lane command may add; google-auth costs about 0.15 s. FakeGCE is
still judged by the real ``compute_v1`` client in tests/test_fake_gce_contract.py.

Every HTTP error becomes the google.api_core exception the client would raise
(``exceptions.from_http_response``), and every such exception, every ``requests`` error and
every error found in a finished operation is translated here, once (``translate``,
``operation_error``), into gpuops/errors.py. There is deliberately no stop, suspend or
delete here (L1): tests/test_lane_safety.py scans gpuops/ for any such call.

Operations are polled explicitly (``zoneOperations.get``) rather than waited on: the operation
body is what the stockout classification needs.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuops import event_ops as ops
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    CapacityExhausted,
    GpuopsError,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    UnexpectedResponse,
    UsageError,
)
from gpuops.event_base import write
from gpuops.events import EventLog
from gpuops.providers import google_errors
from gpuops.providers.transport import Observer, new_session

PROVIDER = "gce"

# A failed operation's capacity and quota codes are google_errors' (one list for GCE and GCS).
CAPACITY_TEXT = "does not have enough resources available to fulfill the request"
# An operation's name is a resource name: letters, digits, '-' and '_' (one path segment).
_OPERATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


# The Metadata resource's limits (Compute Engine API reference, compute/v1 Metadata: a value's
# "size must be less than or equal to 262144 bytes (256 KiB)", and "the total size of all keys
# and values must be less than 512 KB"): setMetadata refuses more with a 400.
METADATA_VALUE_MAX_BYTES = 262144
METADATA_TOTAL_MAX_BYTES = 512 * 1024


def metadata_too_large(items: Mapping[str, str]) -> str | None:
    """Why GCE would refuse these metadata items for their size (each value, then all keys and
    values together, in UTF-8 bytes, each size and its limit named); None when they fit."""
    for key, value in sorted(items.items()):
        size = len(value.encode())
        if size > METADATA_VALUE_MAX_BYTES:
            return (
                f"metadata {key!r} is {size} bytes; GCE takes at most "
                f"{METADATA_VALUE_MAX_BYTES} bytes (256 KiB) a value"
            )
    total = sum(len(k.encode()) + len(v.encode()) for k, v in items.items())
    if total >= METADATA_TOTAL_MAX_BYTES:
        return (
            f"the metadata's keys and values are {total} bytes together; GCE takes less than "
            f"{METADATA_TOTAL_MAX_BYTES} bytes (512 KB)"
        )
    return None


class GceStatus(enum.Enum):
    """Instance.status (provider-formats.md B.2), with UNKNOWN for anything else."""

    PROVISIONING = "PROVISIONING"
    STAGING = "STAGING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    TERMINATED = "TERMINATED"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    PENDING = "PENDING"
    PENDING_STOP = "PENDING_STOP"
    REPAIRING = "REPAIRING"
    DEPROVISIONING = "DEPROVISIONING"
    STOPPED = "STOPPED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class LaneInstance:
    """What the runner needs of the instance; ``status_raw`` keeps an unknown status's text."""

    name: str
    status: GceStatus
    status_raw: str
    fingerprint: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    scheduling: Mapping[str, Any] = field(default_factory=dict)  # wire JSON, camelCase
    labels: Mapping[str, str] = field(default_factory=dict)
    label_fingerprint: str = ""  # setLabels' compare-and-swap token (labelFingerprint)


def parse_instance(body: Mapping[str, Any]) -> LaneInstance:
    """An ``instances.get`` body (wire JSON, camelCase) as a LaneInstance."""
    try:
        name = str(body["name"])
        raw = str(body["status"])
        meta = body.get("metadata") or {}
        items = {str(i["key"]): str(i.get("value", "")) for i in meta.get("items") or []}
        fingerprint = str(meta.get("fingerprint", ""))
    except (KeyError, TypeError, AttributeError) as exc:
        raise UnexpectedResponse(PROVIDER, f"instance body without {exc}", body=str(body)) from exc
    try:
        status = GceStatus(raw)
    except ValueError:
        status = GceStatus.UNKNOWN
    scheduling = body.get("scheduling") or {}
    if not isinstance(scheduling, dict):
        raise UnexpectedResponse(PROVIDER, "instance scheduling is not an object", body=str(body))
    labels = body.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise UnexpectedResponse(PROVIDER, "instance labels are not strings", body=str(body))
    return LaneInstance(
        name,
        status,
        raw,
        fingerprint,
        items,
        dict(scheduling),
        {str(k): v for k, v in labels.items()},
        str(body.get("labelFingerprint", "")),
    )


def operation_error(op: Mapping[str, Any]) -> GpuopsError | None:
    """The error a DONE operation carries, translated; None when it succeeded. A field of the
    wrong type counts as absent; an error that says nothing usable is still an error."""
    error = op.get("error")
    found = error.get("errors") if isinstance(error, dict) else None
    errors = [e for e in found if isinstance(e, dict)] if isinstance(found, list) else []
    status = op.get("httpErrorStatusCode")
    code = status if isinstance(status, int) and not isinstance(status, bool) else None
    if not errors and not code and not error:
        return None
    codes = [str(e.get("code", "")) for e in errors]
    details = [d for e in errors for d in _rows(e.get("errorDetails"))]
    reasons = [str(_row(d.get("errorInfo")).get("reason", "")) for d in details]
    message = "; ".join(f"{e.get('code')}: {e.get('message', '')}" for e in errors) or str(
        op.get("httpErrorMessage", "")
    )
    body = str(op)
    if (
        any(c in google_errors.CAPACITY_CODES for c in codes)
        or google_errors.CAPACITY_REASON in reasons
        or any(CAPACITY_TEXT in str(e.get("message", "")) for e in errors)
    ):
        return CapacityExhausted(PROVIDER, message, code, body)
    if any(c in google_errors.QUOTA_REASONS for c in codes):
        return QuotaExceeded(PROVIDER, message, code, body)
    if code is not None and code >= 500:
        return ProviderUnavailable(PROVIDER, message, code, body)
    return ProviderError(PROVIDER, f"operation {op.get('name')} failed: {message}", code, body)


def _rows(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _row(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


COMPUTE = "https://compute.googleapis.com"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


def google_session(endpoint: str | None, observers: Sequence[Observer]) -> Any:
    """The adapter's one session: plain for a loopback fake (no credentials), else
    google-auth's ``AuthorizedSession`` (a ``requests.Session``) over Application Default
    Credentials; each observer on its response hook. Shared with gcs.py."""
    if endpoint:
        return new_session(observers)
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    try:
        credentials, _ = google.auth.default(scopes=list(SCOPES))
    except google_errors.foreign() as exc:
        raise google_errors.from_exception(PROVIDER, "credentials", exc) from exc
    return new_session(observers, AuthorizedSession(credentials))  # type: ignore[no-untyped-call]


class GceAdapter:
    """One lane instance's calls. ``endpoint`` (an http:// loopback fake) implies anonymous
    credentials; otherwise Application Default Credentials are used. ``observers`` see every
    response on the adapter's one session (transport.py; ``record gce`` keeps them)."""

    def __init__(
        self,
        project: str,
        zone: str,
        *,
        events: EventLog,
        endpoint: str | None = None,
        observers: Sequence[Observer] = (),
        clock: Clock = SYSTEM,
    ) -> None:
        self.project, self.zone, self.endpoint = project, zone, endpoint
        self.events = events
        self.clock = clock  # an operation's deadline (monotonic) and its polls (sleep)
        self._observers = tuple(observers)
        self._session: Any = None

    def _http(self) -> Any:
        if self._session is None:
            self._session = google_session(self.endpoint, self._observers)
        return self._session

    def _url(self, rest: str) -> str:
        base = (self.endpoint or COMPUTE).rstrip("/")
        return f"{base}/compute/v1/projects/{self.project}/zones/{self.zone}/{rest}"

    def _request(
        self,
        what: str,
        method: str,
        rest: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """One call; the JSON object answered, or the translated error (google_errors.py)."""
        try:
            reply = self._http().request(
                method,
                self._url(rest),
                json=body,
                params=params,
                timeout=(timing.HTTP_TIMEOUT_S, timing.HTTP_TIMEOUT_S),
            )
        except google_errors.foreign() as exc:
            error = google_errors.from_exception(PROVIDER, what, exc)
            write(self.events, ops.GceError(call=what, error=str(error)))
            raise error from exc
        if reply.status_code >= 400:
            error = google_errors.from_status(PROVIDER, what, reply.status_code, reply.text)
            write(self.events, ops.GceError(call=what, error=str(error)))
            raise error
        return google_errors.json_object(PROVIDER, what, reply.text)

    def get(self, instance: str) -> LaneInstance:
        body = self._request(f"get {instance}", "GET", f"instances/{instance}")
        found = parse_instance(body)
        write(self.events, ops.GceGet(instance=instance, status=found.status_raw))
        return found

    def set_metadata(self, instance: str, items: Mapping[str, str], fingerprint: str) -> None:
        """Replace the metadata items, only if they are still at ``fingerprint`` (412 ->
        VersionConflict: someone else wrote first; re-read and decide again). Items GCE would
        refuse for their size are a usage error before the call (exit 2)."""
        too_large = metadata_too_large(items)
        if too_large is not None:
            raise UsageError(f"setMetadata {instance}: {too_large}")
        resource = {
            "fingerprint": fingerprint,
            "items": [{"key": k, "value": v} for k, v in sorted(items.items())],
        }
        op = self._request(
            f"setMetadata {instance}", "POST", f"instances/{instance}/setMetadata", resource
        )
        write(self.events, ops.GceSetMetadata(instance=instance, keys=tuple(sorted(items))))
        self._wait(_operation_name(op, f"setMetadata {instance}"), f"setMetadata {instance}")

    def set_labels(self, instance: str, labels: Mapping[str, str], fingerprint: str) -> None:
        """Replace the instance's labels, only if they are still at ``fingerprint`` (GCE's
        labelFingerprint: 412 -> VersionConflict, someone else wrote first; re-read, decide)."""
        resource = {"labels": dict(sorted(labels.items())), "labelFingerprint": fingerprint}
        op = self._request(
            f"setLabels {instance}", "POST", f"instances/{instance}/setLabels", resource
        )
        write(self.events, ops.GceSetLabels(instance=instance, labels=dict(sorted(labels.items()))))
        self._wait(_operation_name(op, f"setLabels {instance}"), f"setLabels {instance}")

    def set_run_ceiling(self, instance: str, current: Mapping[str, Any], max_run_s: float) -> None:
        """The provider-native ceiling: ``scheduling.maxRunDuration`` with
        ``instanceTerminationAction: STOP`` (instances.setScheduling, TERMINATED only): GCE
        itself powers the VM off if its script never does. The rest of the instance's
        scheduling (``current``, wire JSON) is sent back unchanged: setScheduling replaces the
        whole block. gpuops still never calls stop (L1)."""
        wanted = {
            **current,
            "maxRunDuration": {"seconds": str(int(max_run_s))},
            "instanceTerminationAction": "STOP",
        }
        op = self._request(
            f"setScheduling {instance}", "POST", f"instances/{instance}/setScheduling", wanted
        )
        write(self.events, ops.GceSetScheduling(instance=instance, max_run_s=int(max_run_s)))
        self._wait(_operation_name(op, f"setScheduling {instance}"), f"setScheduling {instance}")

    def start(self, instance: str) -> None:
        """Send start and wait for its operation; a stockout raises CapacityExhausted.

        A start on a RUNNING instance answers DONE with no error (a silent no-op): only the
        boot marker can tell the runner whether this start did anything (L2).
        """
        op = self._request(f"start {instance}", "POST", f"instances/{instance}/start")
        name = _operation_name(op, f"start {instance}")
        write(self.events, ops.GceStart(instance=instance, operation=name))
        self._wait(name, f"start {instance}")

    def _wait(self, name: str, what: str) -> dict[str, Any]:
        deadline = self.clock.monotonic() + timing.GCE_OPERATION_TIMEOUT_S
        while True:
            body = self._request(f"operation {name}", "GET", f"operations/{name}")
            if body.get("status") == "DONE":
                error = operation_error(body)
                write(
                    self.events,
                    ops.GceOperation(
                        operation=name,
                        call=what,
                        error=None if error is None else type(error).__name__,
                    ),
                )
                if error is not None:
                    raise error
                return body
            if self.clock.monotonic() >= deadline:
                raise ProviderUnavailable(PROVIDER, f"{what}: operation {name} not DONE in time")
            self.clock.sleep(timing.LANE_POLL_S)

    def serial_output(self, instance: str, start: int = 0) -> tuple[str, int]:
        """Serial port 1 from byte ``start``: (contents, next start)."""
        got = self._request(
            f"serialPort {instance}",
            "GET",
            f"instances/{instance}/serialPort",
            params={"port": "1", "start": str(start)},
        )
        try:
            return str(got.get("contents", "")), int(got.get("next", 0))
        except (TypeError, ValueError, OverflowError) as exc:
            raise UnexpectedResponse(PROVIDER, f"serialPort {instance}: bad next") from exc


def _operation_name(op: Mapping[str, Any], what: str) -> str:
    """The operation's name, to poll: a non-empty string that stays one path segment."""
    name = op.get("name")
    if not isinstance(name, str) or not _OPERATION_NAME.fullmatch(name):
        raise UnexpectedResponse(PROVIDER, f"{what}: operation name {name!r}", body=str(op))
    return name
