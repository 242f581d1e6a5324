"""`gpuops budget` and a rent over budget as real processes against `gpuops fakes serve` (M15).

Judged by the fake's own instance list and create count, never by what gpuops printed alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = [pytest.mark.process]

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 60.0  # the longest any step here may take before the test fails


def gpuops(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuops", *args],
        env=env, capture_output=True, text=True, timeout=WAIT_S, cwd=ROOT,
    )  # fmt: skip


def test_a_rent_over_the_team_budget_exits_3_naming_m15_and_creates_nothing(tmp_path):
    """M15: `rent` whose worst case crosses the team's daily limit exits 3 naming M15 and the
    figures, and the fake's own instance list shows no box and no create was sent; a bad
    limit is exit 2 naming the flag."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "gpuops", "fakes", "serve", "--state-dir", str(tmp_path / "fk")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        lines: queue.Queue[str] = queue.Queue()
        assert serve.stdout is not None
        out = serve.stdout
        threading.Thread(target=lambda: [lines.put(x) for x in out], daemon=True).start()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
        while "GPUOPS_SSH_KEY" not in env:  # an event: each export line as it is printed
            name, _, value = shlex.split(lines.get(timeout=WAIT_S))[1].partition("=")
            env[name] = value
        env.update(
            GPUOPS_STATE=str(tmp_path / "state"),
            GPUOPS_EVENTS=str(tmp_path / "events.jsonl"),
            GPUOPS_OPERATOR="alice",
        )
        bad = gpuops(env, "budget", "set", "--team-usd-per-day", "-3")
        assert bad.returncode == 2 and "--team-usd-per-day" in bad.stderr
        done = gpuops(env, "budget", "set", "--team-usd-per-day", "0.25")
        assert done.returncode == 0, done.stderr
        rent = gpuops(env, "rent", "a1", "--gpu", "RTX 4090", "--hours", "1")
        assert rent.returncode == 3, rent.stderr
        assert "(M15)" in rent.stderr and "the team's budget of $0.25 per day" in rent.stderr
        from gpuops.providers.vast import VastAdapter

        vast = VastAdapter(api_key=env["VAST_API_KEY"], base_url=env["VAST_URL"])
        assert vast.list_instances() == []  # the fake's own record: no box was ever made
        rows = (tmp_path / "events.jsonl").read_text().splitlines()
        ops = [e["payload"].get("op") for e in map(json.loads, rows) if e["kind"] == "vast.call"]
        assert "create" not in ops and "list_instances" in ops  # asked, then refused
        shown = gpuops(env, "--json", "budget")
        assert shown.returncode == 0, shown.stderr
        assert '"usd_per_day": 0.25' in shown.stdout
    finally:
        log = tmp_path / "events.jsonl"
        for row in log.read_text().splitlines() if log.exists() else []:
            event = json.loads(row)  # a guardian a rent started (only if it was not refused)
            if event["kind"] == "guard.start":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(event["payload"]["pid"]), signal.SIGKILL)
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=WAIT_S)
