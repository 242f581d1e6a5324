"""The one translation of Google API failures (GCE and GCS) into gpuops/errors.py.

Both lane adapters speak Google's JSON APIs through a ``requests`` session (plain for a
loopback fake, google-auth's ``AuthorizedSession`` for the real thing). Everything that can go
wrong there reaches one of two functions here, and nothing else in gpuops translates it:

- ``from_status``: an HTTP answer of 400 or more. Decided by the status code and by the
  structured Google error body (``error.errors[].reason``, ``error.details[].reason`` of an
  ErrorInfo, ``error.status``), never by the message text, which is only carried along:

      412                                     VersionConflict (a precondition no longer holds)
      a quota reason                          QuotaExceeded
      a capacity reason                       CapacityExhausted
      401, 403                                AuthFailed
      429, 5xx                                ProviderUnavailable
      404                                     ProviderError, "not found"
      anything else                           ProviderError

- ``from_exception``: no usable answer at all. ``requests`` connection errors, timeouts and
  broken transfers -> ProviderUnavailable; any other ``requests`` error (a bad URL, too many
  redirects) -> ProviderError; google-auth's credential errors (no Application Default
  Credentials, a token refresh refused) -> AuthFailed, and its transport errors ->
  ProviderUnavailable. Anything else is not a provider failure and is not caught here.

A 2xx body of the wrong shape is the adapter's to name (UnexpectedResponse), since only the
adapter knows what shape it expected. Bodies are scrubbed by the errors themselves (H3).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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

# Capacity codes, and the errorInfo reason GCE attaches to them (provider-formats.md B.3, B.5);
# gce.py reads a failed operation's codes and errorInfo reasons apart, an HTTP body's together.
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
CAPACITY_REASONS = CAPACITY_CODES | {CAPACITY_REASON}
QUOTA_REASONS = frozenset({"QUOTA_EXCEEDED", "quotaExceeded"})


def reasons(body: str) -> frozenset[str]:
    """Every machine-readable reason in a Google JSON error body (empty when it is not one)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return frozenset()
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict):
        return frozenset()
    found: set[str] = set()
    for key in ("errors", "details"):
        rows = error.get(key)
        for row in rows if isinstance(rows, list) else ():
            if isinstance(row, dict):
                found |= _text(row, "reason")
    found |= _text(error, "status")
    return frozenset(found)


def _text(doc: Mapping[str, object], name: str) -> set[str]:
    value = doc.get(name)
    return {value} if isinstance(value, str) and value else set()


def message(body: str) -> str:
    """``error.message`` of a Google JSON error body, for people to read (never decided on)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    text = error.get("message") if isinstance(error, dict) else None
    return text if isinstance(text, str) else ""


def from_status(provider: str, what: str, status: int, body: str) -> GpuopsError:
    """The gpuops error for an HTTP answer ``status`` >= 400 to the call ``what``."""
    kept = body  # the error scrubs it and keeps its start
    found = reasons(body)
    said = message(body)
    text = f"{what}: HTTP {status}" + (f" {said}" if said else "")
    if status == 412:
        return VersionConflict(f"{provider}:{what}", "the precondition read before")
    if found & QUOTA_REASONS:
        return QuotaExceeded(provider, text, status, kept)
    if found & CAPACITY_REASONS:
        return CapacityExhausted(provider, text, status, kept)
    if status in (401, 403):
        return AuthFailed(provider, text, status, kept)
    if status == 429 or status >= 500:
        return ProviderUnavailable(provider, text, status, kept)
    if status == 404:
        return ProviderError(provider, f"{what}: not found (HTTP 404)", status, kept)
    return ProviderError(provider, text, status, kept)


def foreign() -> tuple[type[Exception], ...]:
    """The exception types ``from_exception`` translates (imported on first use)."""
    import requests
    from google.auth import exceptions as gauth

    return (requests.RequestException, gauth.GoogleAuthError)


def from_exception(provider: str, what: str, exc: Exception) -> GpuopsError:
    """The gpuops error for a call that got no usable answer (one of ``foreign()``)."""
    import requests
    from google.auth import exceptions as gauth

    text = f"{what}: {type(exc).__name__}: {exc}"
    if isinstance(exc, gauth.TransportError):
        return ProviderUnavailable(provider, text)
    if isinstance(exc, gauth.GoogleAuthError):
        return AuthFailed(provider, text)
    transient = (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
        requests.exceptions.ContentDecodingError,
    )
    if isinstance(exc, transient):
        return ProviderUnavailable(provider, text)
    return ProviderError(provider, text)


def unexpected(provider: str, what: str, problem: str, body: str) -> UnexpectedResponse:
    """An answer gpuops cannot read: the call, what was wrong, and the body's start."""
    return UnexpectedResponse(
        provider, f"{what}: {problem} (body starts {body[:120]!r})", body=body
    )


def json_object(provider: str, what: str, body: str) -> dict[str, Any]:
    """The answer's JSON object; anything else (not JSON, too deep, not an object) is an
    UnexpectedResponse naming the call."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise unexpected(provider, what, "the answer is not JSON", body) from exc
    if not isinstance(doc, dict):
        raise unexpected(provider, what, "the answer is not an object", body)
    return doc
