"""Wire fuzz: every answer the wire can carry ends each adapter call in a valid result or a
typed gpuops error, within the call's own time (tests/wire_fuzz.py; the 10,000-per-adapter run
is tests/benchmarks/bench_wire_fuzz.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuops.errors import GpuopsError
from tests.wire_fuzz import CALLS, Answer, answers, run_case

SLICE = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _judged(provider: str, call: str, served: list[Answer], tmp: Path) -> None:
    outcome = run_case(provider, call, served, tmp / "events.jsonl")
    shown = [(a.status, a.content_type, str(a.body)[:200], a.failure) for a in served]
    assert outcome.verdict in ("valid", "typed"), f"{outcome.verdict}: {outcome.error!r} {shown}"


@pytest.mark.fault("any answer at the Vast wire", handled="a valid result or a typed error")
@SLICE
@given(call=st.sampled_from(sorted(CALLS["vast"])), served=answers("vast"))
def test_every_fuzzed_vast_answer_ends_in_a_result_or_a_typed_error(call, served, tmp_path_factory):
    """HTML 200s, truncated and mutated recordings, odd 5xx, no answer: typed, in time."""
    _judged("vast", call, served, tmp_path_factory.mktemp("vast"))


@pytest.mark.fault("any answer at the GCE wire", handled="a valid result or a typed error")
@SLICE
@given(call=st.sampled_from(sorted(CALLS["gce"])), served=answers("gce"))
def test_every_fuzzed_gce_answer_ends_in_a_result_or_a_typed_error(call, served, tmp_path_factory):
    """Empty operation names, wrong types, Google error bodies of any shape: typed, in time."""
    _judged("gce", call, served, tmp_path_factory.mktemp("gce"))


@pytest.mark.fault("any answer at the GCS wire", handled="a valid result or a typed error")
@SLICE
@given(call=st.sampled_from(sorted(CALLS["gcs"])), served=answers("gcs"))
def test_every_fuzzed_gcs_answer_ends_in_a_result_or_a_typed_error(call, served, tmp_path_factory):
    """A bucket that answers HTML, odd 503 bodies or nothing: typed, at once (no retry)."""
    _judged("gcs", call, served, tmp_path_factory.mktemp("gcs"))


@pytest.mark.parametrize(
    "provider, call, body",
    [
        ("gce", "start", '{"kind": "compute#operation", "name": ""}'),
        ("gce", "get", "<html><body>Sign in</body></html>"),
        ("gcs", "updated", '{"updated": "yesterday"}'),
        ("gcs", "list", '{"items": [{"size": "3"}]}'),
        ("vast", "show", "<html><body>502</body></html>"),
    ],
)
def test_known_bad_answers_are_typed_errors(provider, call, body, tmp_path):
    """A 200 that no provider means (an empty operation name, HTML, a bad time, an item
    without a name) is an UnexpectedResponse-style typed error, never a crash."""
    outcome = run_case(provider, call, [Answer(200, "application/json", body)], tmp_path / "e")

    assert outcome.verdict == "typed" and isinstance(outcome.error, GpuopsError), outcome


def test_the_judge_calls_an_untyped_exception_escaped(tmp_path, monkeypatch):
    """The judge is not blind: a call that raises a bare KeyError is counted as escaped."""
    from tests import wire_fuzz

    monkeypatch.setitem(wire_fuzz.CALLS["gcs"], "list", lambda a: {}["missing"])

    outcome = run_case("gcs", "list", [Answer(200, None, "{}")], tmp_path / "e")

    assert outcome.verdict == "escaped"
