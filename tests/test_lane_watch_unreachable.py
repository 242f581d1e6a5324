"""`gpuops lane watch --timeout 0` with the bucket unreachable ends at once in a typed error.

The CLI runs as a user runs it (a separate process) against FakeGCE on loopback, with
STORAGE_EMULATOR_HOST on a closed port: the watch's first status read is refused, sent once
(no client-side retry loop), and exits 4 (Unavailable) naming GCS. Before the one transport,
google-cloud-storage retried it on its own for about 77 s and ended in an untranslated
RetryError (exit 1); the process's own timeout here is only a backstop.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.server import serve_http
from fakes.vast.clock import FakeClock

ROOT = Path(__file__).resolve().parent.parent
BACKSTOP_S = 60.0

pytestmark = [pytest.mark.slow, pytest.mark.process]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.fault(
    "the lane bucket is unreachable during `lane watch --timeout 0`",
    handled="one refused read, exit 4 (gcs unavailable), no retry loop",
)
def test_lane_watch_with_storage_unreachable_exits_unavailable_within_its_timeout(tmp_path):
    """L9: a watch that cannot read the job's status says so at once, typed (exit 4)."""
    scenario = LaneScenario()
    server = serve_http(FakeGCE(scenario, FakeClock()), ticker=False, boot_root=tmp_path / "b")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUOPS_", "STORAGE_"))}
        env.update(
            GPUOPS_STATE=str(tmp_path / "state"),
            XDG_STATE_HOME=str(tmp_path),
            GPUOPS_LANE_PROJECT=scenario.project,
            GPUOPS_LANE_ZONE=scenario.zone,
            GPUOPS_LANE_INSTANCE=scenario.instance,
            GPUOPS_LANE_BUCKET=scenario.bucket,
            GPUOPS_GCE_ENDPOINT=server.url,
            STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{_closed_port()}",
        )
        watched = subprocess.run(
            [sys.executable, "-m", "gpuops", "--operator", "alice", "lane", "watch"]
            + ["--job", "portraits", "--timeout", "0"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=BACKSTOP_S,
            check=False,
        )
    finally:
        server.close()

    assert watched.returncode == 4, watched.stderr
    assert "gcs unavailable" in watched.stderr and "Traceback" not in watched.stderr
