"""Fuzzed answers at the HTTP layer for the three adapters (Vast, GCE, GCS), and one judge.

Each case is one adapter call and a list of wire answers, served in order (the last repeats)
through ``responses`` to every request the call sends: a status, a Content-Type, and a body
drawn from what a provider, a proxy or a broken link can put on the wire: HTML 200s, empty
bodies, truncated recordings, recordings with one field replaced by any JSON value, Google
error bodies with any reason and wrong types, operations with empty or odd names, non-UTF-8
bytes, JSON that Python reads but no provider writes (NaN, Infinity, deep nesting), and
failures with no answer at all (refused, timed out, a transfer cut short, a body that does
not decompress, too many redirects). Every body here is the fuzzer's own, built from
recordings/ or from nothing; none is presented as a provider's.

``run_case`` judges one case: ``valid`` (the call returned), ``typed`` (a gpuops error),
``escaped`` (any other exception: the bug this hunts), or ``late`` (the call waited, on its
injected clock, longer than the call may: ``LIMITS_S``). Used by tests/test_wire_fuzz.py (a
slice in the default suite) and tests/benchmarks/bench_wire_fuzz.py (10,000 per adapter).

The adapters are built through ``build`` so that the benchmark can judge an older checkout
too (before the one transport: the Vast adapter's ``environ=``, GCS's STORAGE_EMULATOR_HOST).
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import responses
import yaml
from hypothesis import strategies as st

from gpuops import timing
from gpuops.errors import GpuopsError
from gpuops.events import EventLog

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://127.0.0.1:9"  # nothing listens there; responses answers first
PROVIDERS = ("vast", "gce", "gcs")


def _bodies(provider: str) -> list[str]:
    found = []
    for path in sorted((ROOT / "recordings" / provider).rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        body = (doc.get("response") or {}).get("body") if isinstance(doc, dict) else None
        if isinstance(body, str):
            found.append(body)
    return found


BODIES = {p: _bodies(p) for p in PROVIDERS}

# --- the strategies ------------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["", "DONE", "RUNNING", "TERMINATED", "operation-1", "a/b", "../x"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
REASONS = st.sampled_from(
    [
        "quotaExceeded",
        "QUOTA_EXCEEDED",
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "resource_availability",
        "conditionNotMet",
        "notFound",
        "backendError",
        "rateLimitExceeded",
        "",
    ]
)


def _replace_one(doc: Any, value: Any, pick: int) -> Any:
    """``doc`` with one field (the ``pick``-th object key, depth first) set to ``value``."""
    keys: list[tuple[dict[str, Any], str]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in node:
                keys.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(doc)
    if keys:
        node, key = keys[pick % len(keys)]
        node[key] = value
    return doc


@st.composite
def _mutated(draw: st.DrawFn, provider: str) -> str:
    body = draw(st.sampled_from(BODIES[provider]))
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    return json.dumps(_replace_one(doc, draw(JSON_VALUES), draw(st.integers(0, 200))))


@st.composite
def _truncated(draw: st.DrawFn, provider: str) -> str:
    body = draw(st.sampled_from(BODIES[provider]))
    return body[: draw(st.integers(0, max(0, len(body) - 1)))]


@st.composite
def _google_error(draw: st.DrawFn) -> str:
    rows = draw(
        st.lists(
            st.fixed_dictionaries(
                {}, optional={"reason": REASONS | JSON_VALUES, "message": JSON_VALUES}
            )
            | JSON_VALUES,
            max_size=3,
        )
    )
    error = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "code": st.integers(0, 600) | JSON_VALUES,
                "message": st.text(max_size=20) | JSON_VALUES,
                "errors": st.just(rows) | JSON_VALUES,
                "details": st.just(rows) | JSON_VALUES,
                "status": st.sampled_from(["RESOURCE_EXHAUSTED", "UNAVAILABLE"]) | JSON_VALUES,
            },
        )
    )
    return json.dumps({"error": draw(st.just(error) | JSON_VALUES)})


@st.composite
def _operation(draw: st.DrawFn) -> str:
    errors = st.lists(
        st.fixed_dictionaries(
            {},
            optional={
                "code": REASONS | JSON_VALUES,
                "message": JSON_VALUES,
                "errorDetails": JSON_VALUES
                | st.just([{"errorInfo": {"reason": "resource_availability"}}]),
            },
        )
        | JSON_VALUES,
        max_size=2,
    )
    op = draw(
        st.fixed_dictionaries(
            {"kind": st.just("compute#operation")},
            optional={
                "name": st.sampled_from(["", "operation-1", "op/../../x", "op?x=1"]) | JSON_VALUES,
                "status": st.sampled_from(["DONE", "RUNNING", "PENDING"]) | JSON_VALUES,
                "error": st.fixed_dictionaries({}, optional={"errors": errors | JSON_VALUES})
                | JSON_VALUES,
                "httpErrorStatusCode": st.integers(0, 600) | JSON_VALUES,
                "httpErrorMessage": JSON_VALUES,
            },
        )
    )
    return json.dumps(op)


def bodies(provider: str) -> st.SearchStrategy[str | bytes]:
    text = st.sampled_from(
        [
            "",
            "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
            "<!DOCTYPE html><html><body>Sign in</body></html>",
            "OK",
            "null",
            "[]",
            "{}",
            '{"a": NaN}',
            "Infinity",
            "[" * 5000 + "]" * 5000,
            '{"instances": null}',
            '{"error": "x"}',
            "upstream connect error or disconnect/reset before headers",
        ]
    )
    return st.one_of(
        text,
        st.sampled_from(BODIES[provider]),
        _mutated(provider),
        _truncated(provider),
        JSON_VALUES.map(json.dumps),
        _google_error(),
        _operation(),
        st.binary(max_size=24),
        st.text(max_size=24),
    )


FAILURES = (
    requests.ConnectionError("refused"),
    requests.Timeout("read timed out"),
    requests.exceptions.ChunkedEncodingError("cut short"),
    requests.exceptions.ContentDecodingError("not gzip"),
    requests.TooManyRedirects("loop"),
)
STATUSES = st.sampled_from(
    [200, 200, 200, 201, 204, 400, 401, 403, 404, 409, 410, 412, 429, 500, 502, 503]
) | st.integers(200, 599)
CONTENT_TYPES = st.sampled_from(
    [None, "application/json", "application/json; charset=UTF-8", "text/html", "text/plain"]
)


@dataclass(frozen=True)
class Answer:
    """One fuzzed wire answer, or (``failure``) no answer at all."""

    status: int
    content_type: str | None
    body: str | bytes
    retry_after: str | None = None
    failure: int | None = None  # an index into FAILURES


def answers(provider: str) -> st.SearchStrategy[list[Answer]]:
    answer = st.builds(
        Answer,
        status=STATUSES,
        content_type=CONTENT_TYPES,
        body=bodies(provider),
        retry_after=st.none() | st.sampled_from(["0", "1", "120", "x", "-1", "nan", "1e9"]),
        failure=st.none() | st.none() | st.none() | st.integers(0, len(FAILURES) - 1),
    )
    return st.lists(answer, min_size=1, max_size=6)


# --- the calls -------------------------------------------------------------------------------
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFuzzFuzzFuzzFuzzFuzzFuzzFuzzFuzzFuzzFuzz fuzz"
CALLS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "vast": {
        "search_offers": lambda a: a.search_offers("RTX 4090", 1),
        "show": lambda a: a.show("123"),
        "list_instances": lambda a: a.list_instances(label="x"),
        "list_ssh_keys": lambda a: a.list_ssh_keys(),
        "create": lambda a: a.create(7, label="fuzz", image="img", disk_gb=10.0),
        "destroy": lambda a: a.destroy("123"),
        "register_ssh_key": lambda a: a.register_ssh_key(PUBLIC_KEY),
    },
    "gce": {
        "get": lambda a: a.get("gpu-lane"),
        "set_metadata": lambda a: a.set_metadata("gpu-lane", {"k": "v"}, "fp"),
        "set_run_ceiling": lambda a: a.set_run_ceiling("gpu-lane", {}, 3600.0),
        "start": lambda a: a.start("gpu-lane"),
        "serial_output": lambda a: a.serial_output("gpu-lane", 0),
    },
    "gcs": {
        "list": lambda a: a.list("jobs/j/"),
        "read": lambda a: a.read("jobs/j/status"),
        "updated": lambda a: a.updated("jobs/j/status"),
        "write": lambda a: a.write("jobs/j/board", b"x"),
    },
}
# How long (on the call's injected clock) one call may wait in all: Vast's retries and their
# backoff (a Retry-After is honoured up to BACKOFF_MAX_S), GCE's operation wait, GCS none.
LIMITS_S = {
    "vast": (4 - 1) * timing.BACKOFF_MAX_S,
    "gce": timing.GCE_OPERATION_TIMEOUT_S + timing.LANE_POLL_S,
    "gcs": 0.0,
}


# Seconds slept through ``time.sleep`` itself (not the adapter's injected sleep): only a
# runner that replaces time.sleep (the benchmark, judging an older checkout whose storage
# client retried on its own) adds to it.
SLEPT_OUTSIDE = [0.0]


class VirtualClock:
    """The call's clock: it moves only when the adapter sleeps."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.slept = 0.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def build(provider: str, clock: VirtualClock, events: Path) -> Any:
    """The real adapter for ``provider`` at BASE, on ``clock``."""
    if provider == "vast":
        from gpuops.providers.vast import VastAdapter

        kwargs: dict[str, Any] = {"api_key": "k-fuzz", "base_url": BASE}
        if "environ" in inspect.signature(VastAdapter).parameters:
            kwargs["environ"] = {}  # an older checkout
        return VastAdapter(sleep=clock.sleep, monotonic=clock.time, **kwargs)
    if provider == "gce":
        from gpuops.providers.gce import GceAdapter

        log = EventLog(events, "fuzz@test")
        return GceAdapter(
            "gpuops-lane", "us-central1-b", events=log, endpoint=BASE, clock=clock.time,
            sleep=clock.sleep,
        )  # fmt: skip
    from gpuops.providers.gcs import GcsAdapter

    if "endpoint" in inspect.signature(GcsAdapter).parameters:
        return GcsAdapter("gpuops-lane-jobs", "gpuops-lane", endpoint=BASE)
    os.environ["STORAGE_EMULATOR_HOST"] = BASE  # an older checkout
    return GcsAdapter("gpuops-lane-jobs", "gpuops-lane")


@dataclass
class Outcome:
    verdict: str  # valid | typed | escaped | late
    requests: int
    slept_s: float
    error: BaseException | None = None


def run_case(provider: str, call: str, served: list[Answer], events: Path) -> Outcome:
    """One call against the served answers; the judged outcome."""
    clock = VirtualClock()
    sent = [0]

    def answer(request: Any) -> tuple[int, dict[str, str], str | bytes]:
        one = served[min(sent[0], len(served) - 1)]
        sent[0] += 1
        if one.failure is not None:
            raise FAILURES[one.failure]
        headers = {}
        if one.content_type is not None:
            headers["Content-Type"] = one.content_type
        if one.retry_after is not None:
            headers["Retry-After"] = one.retry_after
        return one.status, headers, one.body

    error: BaseException | None = None
    outside = SLEPT_OUTSIDE[0]
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH"):
            mock.add_callback(method, re.compile(re.escape(BASE) + ".*"), callback=answer)
        adapter = build(provider, clock, events)
        try:
            CALLS[provider][call](adapter)
            verdict = "valid"
        except GpuopsError as exc:
            verdict, error = "typed", exc
        except Exception as exc:  # the bug this hunts: anything untyped
            verdict, error = "escaped", exc
    slept = clock.slept + SLEPT_OUTSIDE[0] - outside
    if slept > LIMITS_S[provider]:
        verdict = "late"
    return Outcome(verdict, sent[0], slept, error)
