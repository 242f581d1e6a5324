"""gpuops/providers/google_errors.py: the one translation of Google API failures (GCE, GCS),
decided by status code and the structured error body, never by message text."""

from __future__ import annotations

import json

import pytest
import requests
from google.auth import exceptions as gauth

from gpuops.errors import (
    AuthFailed,
    CapacityExhausted,
    ProviderError,
    ProviderUnavailable,
    QuotaExceeded,
    UnexpectedResponse,
    VersionConflict,
)
from gpuops.providers import google_errors as g
from gpuops.providers import load_recording


def _error(**error: object) -> str:
    return json.dumps({"error": error})


def test_reasons_are_read_from_errors_details_and_status():
    """Each machine-readable reason: errors[].reason, details[].reason (ErrorInfo), status."""
    body = _error(
        errors=[{"reason": "quotaExceeded"}, "junk", {"reason": 3}, {"reason": ""}],
        details=[{"reason": "resource_availability"}, {"@type": "x"}],
        status="RESOURCE_EXHAUSTED",
    )

    assert g.reasons(body) == {"quotaExceeded", "resource_availability", "RESOURCE_EXHAUSTED"}


@pytest.mark.parametrize(
    "body",
    ["", "<html>", "[]", "null", '{"error": "x"}', '{"error": {"errors": "x", "details": 3}}',
     "[" * 3000 + "]" * 3000],
)  # fmt: skip
def test_a_body_that_is_not_a_google_error_has_no_reasons_and_no_message(body):
    """HTML, lists, strings, wrong types, too deep to parse: nothing to decide on, no crash."""
    assert g.reasons(body) == frozenset() and g.message(body) == ""


def test_the_message_is_read_only_from_error_message():
    """The message is carried for people; a non-string message is left out."""
    assert g.message(_error(message="Quota 'GPUS' exceeded.")) == "Quota 'GPUS' exceeded."
    assert g.message(_error(message=5)) == ""
    assert g.message(json.dumps({"message": "top level"})) == ""


@pytest.mark.parametrize(
    "status, body, kind",
    [
        (412, _error(errors=[{"reason": "quotaExceeded"}]), VersionConflict),
        (403, _error(errors=[{"reason": "quotaExceeded"}]), QuotaExceeded),
        (429, _error(errors=[{"reason": "QUOTA_EXCEEDED"}]), QuotaExceeded),
        (503, _error(details=[{"reason": "resource_availability"}]), CapacityExhausted),
        (400, _error(errors=[{"reason": "ZONE_RESOURCE_POOL_EXHAUSTED"}]), CapacityExhausted),
        (401, "", AuthFailed),
        (403, "<html>denied</html>", AuthFailed),
        (429, "", ProviderUnavailable),
        (500, "", ProviderUnavailable),
        (599, "", ProviderUnavailable),
        (499, "", ProviderError),
        (
            400,
            _error(message="Quota 'GPUS' exceeded. does not have enough resources"),
            ProviderError,
        ),
        (409, "", ProviderError),
    ],
)
def test_each_status_and_reason_becomes_one_typed_error(status, body, kind):
    """Status and reason decide; a quota or capacity sign only in the message decides nothing."""
    found = g.from_status("gce", "start gpu-lane", status, body)

    assert type(found) is kind


def test_quota_is_decided_before_capacity_and_auth():
    """A 403 that is a quota is QuotaExceeded, not AuthFailed; quota wins over capacity."""
    both = _error(errors=[{"reason": "quotaExceeded"}, {"reason": "resource_availability"}])

    assert type(g.from_status("gce", "x", 403, both)) is QuotaExceeded
    capacity = _error(errors=[{"reason": "resource_availability"}])
    assert type(g.from_status("gce", "x", 403, capacity)) is CapacityExhausted


def test_an_error_names_the_call_status_and_message_and_keeps_the_body():
    """The text says which call, the status and Google's message; status and body are kept."""
    body = load_recording("gce", "start_503").body

    found = g.from_status("gce", "start gpu-lane", 503, body)

    assert str(found) == (
        "gce unavailable: start gpu-lane: HTTP 503 The service is currently unavailable."
    )
    assert found.status == 503 and found.provider == "gce" and found.body == body[:500]


def test_a_body_without_a_message_names_only_the_status():
    """No message: the status alone, with nothing trailing."""
    found = g.from_status("gcs", "read gs://b/o", 502, "<html>bad gateway</html>")

    assert str(found) == "gcs unavailable: read gs://b/o: HTTP 502"


def test_each_kind_of_error_keeps_the_status_and_the_start_of_the_body():
    """Every error made from an answer carries its status and the body's start."""
    body = "no good " * 200
    for status in (403, 404, 409, 429, 500):
        found = g.from_status("gcs", "x", status, body)
        assert (found.status, found.body) == (status, body[:500])
    quota = _error(errors=[{"reason": "quotaExceeded"}])
    capacity = _error(errors=[{"reason": "resource_availability"}])
    assert g.from_status("gce", "x", 403, quota).status == 403
    assert g.from_status("gce", "x", 503, capacity).body == capacity


def test_not_found_and_a_precondition_are_named():
    """404 says not found; 412 is a lost compare-and-swap on the call's key."""
    missing = g.from_status("gce", "get gpu-lane", 404, load_recording("gce", "instance_404").body)
    stale = g.from_status("gce", "setMetadata gpu-lane", 412, "")

    assert str(missing) == "gce: get gpu-lane: not found (HTTP 404)" and missing.status == 404
    assert type(stale) is VersionConflict and stale.key == "gce:setMetadata gpu-lane"


@pytest.mark.parametrize(
    "exc, kind",
    [
        (requests.ConnectionError("refused"), ProviderUnavailable),
        (requests.Timeout("slow"), ProviderUnavailable),
        (requests.exceptions.ReadTimeout("slow"), ProviderUnavailable),
        (requests.exceptions.ChunkedEncodingError("cut"), ProviderUnavailable),
        (requests.exceptions.ContentDecodingError("gzip"), ProviderUnavailable),
        (requests.TooManyRedirects("loop"), ProviderError),
        (requests.exceptions.InvalidURL("bad"), ProviderError),
        (gauth.DefaultCredentialsError("no ADC"), AuthFailed),
        (gauth.RefreshError("refused"), AuthFailed),
        (gauth.TransportError("down"), ProviderUnavailable),
    ],
)
def test_a_call_without_an_answer_becomes_one_typed_error(exc, kind):
    """Transport failures are unavailable; credentials refused are AuthFailed; a bad URL or a
    redirect loop is a provider error (not transient)."""
    found = g.from_exception("gcs", "read gs://b/o", exc)

    assert type(found) is kind
    assert str(found).endswith(f"read gs://b/o: {type(exc).__name__}: {exc}")


def test_foreign_lists_exactly_what_from_exception_translates():
    """requests' and google-auth's error bases; nothing broader (a bug is not a provider error)."""
    assert g.foreign() == (requests.RequestException, gauth.GoogleAuthError)


@pytest.mark.parametrize(
    "status, reason, words",
    [
        (403, "quotaExceeded", "gce quota exceeded: "),
        (503, "resource_availability", "gce has no capacity: "),
        (401, "", "gce: "),
        (409, "", "gce: "),
    ],
)
def test_each_translated_answer_says_provider_call_status_and_message(status, reason, words):
    """The whole text, the provider, the status and the body, for every kind made from an
    answer (quota, capacity, auth, other)."""
    body = _error(message="said so", errors=[{"reason": reason}])

    found = g.from_status("gce", "start gpu-lane", status, body)

    assert str(found) == f"{words}start gpu-lane: HTTP {status} said so"
    assert (found.provider, found.status, found.body) == ("gce", status, body)


def test_a_precondition_conflict_names_what_was_read():
    """412: the compare-and-swap lost against the precondition read before."""
    found = g.from_status("gcs", "write gs://b/o", 412, "")

    assert type(found) is VersionConflict and found.expected == "the precondition read before"


@pytest.mark.parametrize(
    "exc, words",
    [
        (requests.ConnectionError("refused"), "gcs unavailable: "),
        (gauth.TransportError("down"), "gcs unavailable: "),
        (gauth.RefreshError("refused"), "gcs: "),
        (requests.TooManyRedirects("loop"), "gcs: "),
    ],
)
def test_each_translated_failure_names_its_provider(exc, words):
    """The provider is on every error made from an exception, and leads its text."""
    found = g.from_exception("gcs", "list gs://b/", exc)

    assert found.provider == "gcs"
    assert str(found) == f"{words}list gs://b/: {type(exc).__name__}: {exc}"


# --- an answer that cannot be read ---------------------------------------------------------------
def test_an_unreadable_answer_names_the_call_the_problem_and_the_body_s_start():
    """unexpected(): typed, the provider's, the whole body kept; the message shows 120 chars."""
    body = "x" * 200
    err = g.unexpected("gcs", "list gs://b/", "items is not a list", body)

    assert isinstance(err, UnexpectedResponse) and err.provider == "gcs" and err.body == body
    assert str(err).endswith(f"list gs://b/: items is not a list (body starts {'x' * 120!r})")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("<html>502</html>", "the answer is not JSON"),
        ("[" * 100_000, "the answer is not JSON"),  # too deep to parse: RecursionError
        ("[1, 2]", "the answer is not an object"),
        ('"done"', "the answer is not an object"),
    ],
)
def test_json_object_refuses_what_is_not_one_json_object(body, problem):
    """GCE and GCS read every answer through json_object: anything else is UnexpectedResponse."""
    with pytest.raises(UnexpectedResponse) as caught:
        g.json_object("gce", "get lane", body)

    expected = g.unexpected("gce", "get lane", problem, body)
    assert caught.value.provider == "gce" and caught.value.body == expected.body
    assert str(caught.value) == str(expected) and f"get lane: {problem} (body" in str(expected)


def test_json_object_gives_the_object():
    assert g.json_object("gce", "get lane", '{"status": "DONE", "n": [1]}') == {
        "status": "DONE",
        "n": [1],
    }
