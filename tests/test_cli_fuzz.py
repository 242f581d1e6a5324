"""A slice of the CLI argv fuzz: never a traceback (tests/cli_fuzz.py; the benchmark runs more)."""

from __future__ import annotations

import os

import pytest
from cli_fuzz import ARGV, clean, run_case
from hypothesis import HealthCheck, given, settings


@pytest.fixture
def bare(tmp_path_factory, monkeypatch):
    """A throwaway state dir and no provider environment."""
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    root = tmp_path_factory.mktemp("fuzz")
    monkeypatch.setenv("GPUOPS_STATE", str(root / "state"))
    monkeypatch.setenv("GPUOPS_OPERATOR", "alice")
    monkeypatch.setenv("XDG_STATE_HOME", str(root / "xdg"))
    monkeypatch.setenv("HOME", str(root / "home"))
    return root


@pytest.mark.fault(
    "arguments that crashed the CLI with a traceback (nan, inf, bad paths, % in help)",
    handled="fuzzed argv: every case is a usage error, a typed refusal or success",
)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=ARGV)
def test_no_fuzzed_argv_ends_in_a_traceback(bare, argv):
    """M13: exit codes come from typed outcomes; no argv reaches the last line of defence."""
    code, stderr = run_case(argv)

    assert clean(code, stderr), (argv, code, stderr[-600:])
