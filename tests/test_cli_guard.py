"""`gpuops guard`, `run` and `watch` on the command line: usage errors and the systemd unit
(M5, M7)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.cli.guard import _deadline
from gpuops.errors import UsageError
from gpuops.market.drill import target_of
from gpuops.market.systemd import systemd_unit

ROOT = Path(__file__).resolve().parent.parent


def gpuops(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuops", "--state", str(tmp_path / "s"), "--operator", "alice",
         *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "VAST_API_KEY": "k-test", "VAST_URL": "http://127.0.0.1:9"},
    )  # fmt: skip


def test_the_systemd_unit_restarts_failures_but_not_success_or_verified_supersession():
    """M7: exit 0 and exit 7 are final; every other exit is restarted by the supervisor."""
    unit = systemd_unit("s3://bucket/state", "alice@pi")
    exec_start = (
        f"\nExecStart={sys.executable} -m gpuops guard %i --foreground "
        "--state s3://bucket/state --operator alice@pi\n"
    )
    assert exec_start in unit
    assert "\nSuccessExitStatus=7\n" in unit
    assert "\nRestart=on-failure\n" in unit
    assert "\nRestartPreventExitStatus=3\n" in unit
    assert "VAST_API_KEY" in unit and "never reaches a box" in unit


def test_print_systemd_unit_needs_no_rental(tmp_path):
    """M5: the unit is printed without touching state or a provider."""
    done = gpuops(tmp_path, "guard", "--print-systemd-unit")
    assert done.returncode == 0
    assert done.stdout.startswith("# gpuops guardian for one box")


def test_guarding_a_rental_that_does_not_exist_is_a_usage_error(tmp_path):
    """M5: a guardian is never started for nothing; the message names the rental."""
    done = gpuops(tmp_path, "guard", "nosuch", "--hours", "1")
    assert done.returncode == 2
    assert "no rental named 'nosuch'" in done.stderr


def test_hours_and_deadline_together_are_refused_by_the_parser(tmp_path):
    """M5: one deadline, stated one way."""
    done = gpuops(tmp_path, "guard", "box", "--hours", "1", "--deadline", "2026-12-01T00:00:00Z")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


def test_a_deadline_needs_a_time_zone_and_hours_must_be_positive():
    """M5: a wall-clock ceiling is unambiguous: naive times and non-positive hours are refused."""
    ns = argparse.Namespace
    assert _deadline(ns(hours=None, deadline="2026-12-01T00:00:00+00:00"), 0.0) == 1796083200.0
    assert _deadline(ns(hours=None, deadline="2026-12-01T01:00:00+01:00"), 0.0) == 1796083200.0
    assert _deadline(ns(hours=2.0, deadline=None), 100.0) == 7300.0
    assert _deadline(ns(hours=None, deadline=None), 100.0) is None
    with pytest.raises(UsageError, match="needs a time zone"):
        _deadline(ns(hours=None, deadline="2026-12-01T00:00:00"), 0.0)
    with pytest.raises(UsageError, match="not an ISO-8601 time"):
        _deadline(ns(hours=None, deadline="tomorrow"), 0.0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(UsageError, match="--hours must be positive"):
            _deadline(ns(hours=bad, deadline=None), 0.0)


def test_a_drill_against_loopback_is_labelled_fakes_and_anything_else_vast():
    """M5: only a drill on a real provider may ever count as verified."""
    assert target_of("http://127.0.0.1:40123") == "fakes"
    assert target_of("http://localhost:8080/api") == "fakes"
    assert target_of("https://console.vast.ai") == "vast"
    assert target_of("") == "vast"


def test_run_without_a_command_is_a_usage_error(tmp_path):
    """M10: `run NAME --` with nothing after it is refused before anything is touched."""
    done = gpuops(tmp_path, "run", "nosuch")
    assert done.returncode == 2
