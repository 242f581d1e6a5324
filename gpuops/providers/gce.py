"""The GCE adapter for the lane: get, setMetadata, start, zone operations, serial output.

Built on ``google-cloud-compute`` (REST transport, the only one it has), imported lazily:
importing it costs about 3 s. Every google.api_core / requests exception and every error
found in a finished operation is translated here, once (``translate``,
``operation_error``), into gpuops/errors.py. There is deliberately no stop, suspend or
delete here (L1): tests/test_lane_safety.py scans gpuops/ for any such call.

Operations are polled explicitly with ``ZoneOperationsClient.get`` rather than
``ExtendedOperation.result()``: the latter builds its own client on the default endpoint and
would miss a loopback fake (provider-formats.md §7), and it hides the operation body the
stockout classification needs.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuops import timing
from gpuops.errors import (
    AuthFailed,
    CapacityExhausted,
    GpuopsError,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    UnexpectedResponse,
    VersionConflict,
)
from gpuops.events import EventLog

PROVIDER = "gce"

# Capacity codes, and the errorInfo reason GCE attaches to them (provider-formats.md B.3, B.5).
CAPACITY_CODES = frozenset(
    {
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
        "REGION_RESOURCE_POOL_EXHAUSTED",
        "RESOURCE_POOL_EXHAUSTED",
        "insufficientCapacity",
    }
)
CAPACITY_REASON = "resource_availability"
CAPACITY_TEXT = "does not have enough resources available to fulfill the request"
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})


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
    return LaneInstance(name, status, raw, fingerprint, items, dict(scheduling))


def operation_error(op: Mapping[str, Any]) -> GpuopsError | None:
    """The error a DONE operation carries, translated; None when it succeeded."""
    errors = (op.get("error") or {}).get("errors") or []
    status = op.get("httpErrorStatusCode")
    if not errors and not status:
        return None
    codes = [str(e.get("code", "")) for e in errors]
    reasons = [
        str((d.get("errorInfo") or {}).get("reason", ""))
        for e in errors
        for d in e.get("errorDetails") or []
    ]
    message = "; ".join(f"{e.get('code')}: {e.get('message', '')}" for e in errors) or str(
        op.get("httpErrorMessage", "")
    )
    code = int(status) if status else None
    body = str(op)
    if (
        any(c in CAPACITY_CODES for c in codes)
        or CAPACITY_REASON in reasons
        or any(CAPACITY_TEXT in str(e.get("message", "")) for e in errors)
    ):
        return CapacityExhausted(PROVIDER, message, code, body)
    if any(c in QUOTA_CODES for c in codes):
        return QuotaExceeded(PROVIDER, message, code, body)
    if code is not None and code >= 500:
        return ProviderUnavailable(PROVIDER, message, code, body)
    return ProviderError(PROVIDER, f"operation {op.get('name')} failed: {message}", code, body)


def translate(exc: Exception, what: str) -> GpuopsError:
    """A google.api_core or requests exception as a gpuops error (the one translation)."""
    from google.api_core import exceptions as gx

    if isinstance(exc, gx.GoogleAPICallError):
        code = exc.code if isinstance(exc.code, int) else None
        reasons = {str(getattr(e, "get", lambda k: None)("reason")) for e in exc.errors or []}
        text = f"{what}: {exc.message}"
        if isinstance(exc, gx.PreconditionFailed):
            return VersionConflict(f"gce:{what}", "the metadata fingerprint read before")
        if reasons & QUOTA_CODES or "Quota '" in str(exc.message):
            return QuotaExceeded(PROVIDER, text, code, str(exc.message))
        if CAPACITY_TEXT in str(exc.message) or reasons & CAPACITY_CODES:
            return CapacityExhausted(PROVIDER, text, code, str(exc.message))
        if isinstance(exc, gx.Unauthorized | gx.Forbidden):
            return AuthFailed(PROVIDER, text, code, str(exc.message))
        if isinstance(exc, gx.NotFound):
            return ProviderError(PROVIDER, f"{what}: not found", code, str(exc.message))
        if isinstance(exc, gx.ServerError | gx.TooManyRequests):
            return ProviderUnavailable(PROVIDER, text, code, str(exc.message))
        return ProviderError(PROVIDER, text, code, str(exc.message))
    return ProviderUnavailable(PROVIDER, f"{what}: {type(exc).__name__}: {exc}")


def _foreign() -> tuple[type[Exception], ...]:
    import requests
    from google.api_core import exceptions as gx

    return (gx.GoogleAPICallError, requests.RequestException)


class GceAdapter:
    """One lane instance's calls. ``endpoint`` (an http:// loopback fake) implies anonymous
    credentials; otherwise Application Default Credentials are used."""

    def __init__(
        self,
        project: str,
        zone: str,
        *,
        events: EventLog,
        endpoint: str | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.project, self.zone, self.endpoint = project, zone, endpoint
        self.events = events
        self.clock, self.sleep = clock, sleep
        self._clients: tuple[Any, Any] | None = None

    def _client(self) -> tuple[Any, Any]:
        if self._clients is None:
            from google.cloud import compute_v1

            kwargs: dict[str, Any] = {"transport": "rest"}
            if self.endpoint:
                from google.auth.credentials import AnonymousCredentials

                kwargs["credentials"] = AnonymousCredentials()  # type: ignore[no-untyped-call]
                kwargs["client_options"] = {"api_endpoint": self.endpoint}
            self._clients = (
                compute_v1.InstancesClient(**kwargs),
                compute_v1.ZoneOperationsClient(**kwargs),
            )
        return self._clients

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except _foreign() as exc:
            error = translate(exc, what)
            self.events.append("gce.error", call=what, error=str(error))
            raise error from exc

    def get(self, instance: str) -> LaneInstance:
        from google.cloud import compute_v1

        instances, _ = self._client()
        got = self._call(
            f"get {instance}",
            lambda: instances.get(project=self.project, zone=self.zone, instance=instance),
        )
        body = compute_v1.Instance.to_dict(
            got, use_integers_for_enums=False, preserving_proto_field_name=False
        )
        found = parse_instance(body)
        self.events.append("gce.get", instance=instance, status=found.status_raw)
        return found

    def set_metadata(self, instance: str, items: Mapping[str, str], fingerprint: str) -> None:
        """Replace the metadata items, only if they are still at ``fingerprint`` (412 ->
        VersionConflict: someone else wrote first; re-read and decide again)."""
        from google.cloud import compute_v1

        instances, _ = self._client()
        resource = compute_v1.Metadata(
            fingerprint=fingerprint,
            items=[compute_v1.Items(key=k, value=v) for k, v in sorted(items.items())],
        )
        op = self._call(
            f"setMetadata {instance}",
            lambda: instances.set_metadata(
                project=self.project, zone=self.zone, instance=instance, metadata_resource=resource
            ),
        )
        self.events.append("gce.set_metadata", instance=instance, keys=sorted(items))
        self._wait(op.name, f"setMetadata {instance}")

    def set_run_ceiling(self, instance: str, current: Mapping[str, Any], max_run_s: float) -> None:
        """The provider-native ceiling: ``scheduling.maxRunDuration`` with
        ``instanceTerminationAction: STOP`` (instances.setScheduling, TERMINATED only): GCE
        itself powers the VM off if its script never does. The rest of the instance's
        scheduling (``current``, wire JSON) is sent back unchanged: setScheduling replaces the
        whole block. gpuops still never calls stop (L1)."""
        import json

        from google.cloud import compute_v1

        instances, _ = self._client()
        wanted = {
            **current,
            "maxRunDuration": {"seconds": str(int(max_run_s))},
            "instanceTerminationAction": "STOP",
        }
        resource = compute_v1.Scheduling.from_json(json.dumps(wanted), ignore_unknown_fields=True)
        op = self._call(
            f"setScheduling {instance}",
            lambda: instances.set_scheduling(
                project=self.project,
                zone=self.zone,
                instance=instance,
                scheduling_resource=resource,
            ),
        )
        self.events.append("gce.set_scheduling", instance=instance, max_run_s=int(max_run_s))
        self._wait(op.name, f"setScheduling {instance}")

    def start(self, instance: str) -> None:
        """Send start and wait for its operation; a stockout raises CapacityExhausted.

        A start on a RUNNING instance answers DONE with no error (a silent no-op): only the
        boot marker can tell the runner whether this start did anything (L2).
        """
        instances, _ = self._client()
        op = self._call(
            f"start {instance}",
            lambda: instances.start(project=self.project, zone=self.zone, instance=instance),
        )
        self.events.append("gce.start", instance=instance, operation=op.name)
        self._wait(op.name, f"start {instance}")

    def _wait(self, name: str, what: str) -> dict[str, Any]:
        from google.cloud import compute_v1

        _, operations = self._client()
        deadline = self.clock() + timing.GCE_OPERATION_TIMEOUT_S
        while True:
            got = self._call(
                f"operation {name}",
                lambda: operations.get(project=self.project, zone=self.zone, operation=name),
            )
            body: dict[str, Any] = compute_v1.Operation.to_dict(
                got, use_integers_for_enums=False, preserving_proto_field_name=False
            )
            if body.get("status") == "DONE":
                error = operation_error(body)
                self.events.append(
                    "gce.operation",
                    operation=name,
                    call=what,
                    error=None if error is None else type(error).__name__,
                )
                if error is not None:
                    raise error
                return body
            if self.clock() >= deadline:
                raise ProviderUnavailable(PROVIDER, f"{what}: operation {name} not DONE in time")
            self.sleep(timing.LANE_POLL_S)

    def serial_output(self, instance: str, start: int = 0) -> tuple[str, int]:
        """Serial port 1 from byte ``start``: (contents, next start)."""
        from google.cloud import compute_v1

        instances, _ = self._client()
        request = compute_v1.GetSerialPortOutputInstanceRequest(
            project=self.project, zone=self.zone, instance=instance, port=1, start=start
        )
        got = self._call(
            f"serialPort {instance}", lambda: instances.get_serial_port_output(request=request)
        )
        return str(got.contents), int(got.next_)
