"""`gpuops check` as a real process against `gpuops fakes serve` (its Vast, its GCE and GCS,
its S3 stand-in) and a real notification receiver: every check passes on a sound setup (the
lane's VM TERMINATED with its run ceiling, its bucket writable, its state prefix protected by
the conditional-writes policy); with the state on an S3 endpoint that ignores preconditions
(tests/s3_proxy.py, blind), under a prefix the policy does not cover, the store's self-test
fails, the state policy line names the prefix and the command exits 3; with
GPUOPS_LANE_INSTANCE naming no VM the lane vm line fails and it exits 2."""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from alarm_receiver import Receiver
from s3_proxy import LossyProxy

pytestmark = [pytest.mark.slow, pytest.mark.process]

ROOT = Path(__file__).resolve().parent.parent
WAIT_S = 90.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[dict[str, str]]:
    """`gpuops fakes serve`'s exports, read to the last (the S3 stand-in's)."""
    scenario = tmp_path / "scenario.yaml"
    doc = {"vast": {"ssh_keys": ["generated"], "offers": []}, "lane": {"run_ceiling_s": 21600}}
    scenario.write_text(yaml.safe_dump(doc))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuops", "fakes", "serve", "--scenario", str(scenario)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()], daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUOPS_", "AWS_"))}
    try:
        while "GPUOPS_FAKE_S3_BUCKET" not in env:
            words = shlex.split(lines.get(timeout=WAIT_S))
            if not words or words[0] != "export":
                pytest.skip("the S3 stand-in is not installed")
            name, _, value = words[1].partition("=")
            env[name] = value
        env.update(GPUOPS_OPERATOR="alice", GPUOPS_RESULTS=str(tmp_path / "results"))
        env["GPUOPS_STATE"] = f"s3://{env['GPUOPS_FAKE_S3_BUCKET']}/state"
        yield env
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT_S)


def check(env: dict[str, str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuops", "check"], env={**env, **extra},
        capture_output=True, text=True, timeout=WAIT_S, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.fault(
    "the shared state on an S3-compatible endpoint that ignores If-Match / If-None-Match",
    handled="`gpuops check`, a real process, fails the store's self-test and exits 3 (M3, M4)",
)
def test_check_passes_on_the_fakes_and_fails_with_3_on_a_store_that_ignores_preconditions_m4(
    served,
):
    """M4/O1/L12: every line ok and exit 0 against the fakes (the lane's three lines among
    them, a test notification received); the same command with its S3 endpoint behind a proxy
    that drops preconditions: exit 3; with the lane naming a VM that does not exist: exit 2."""
    receiver = Receiver()
    blind = LossyProxy(served["GPUOPS_S3_ENDPOINT"], blind=True)
    try:
        sound = check(served, GPUOPS_NOTIFY=receiver.url)
        # under `state/` the stand-in's policy refuses the blind writes (403) before they
        # land; elsewhere nothing stops them
        elsewhere = f"s3://{served['GPUOPS_FAKE_S3_BUCKET']}/elsewhere"
        ignoring = check(
            served,
            GPUOPS_NOTIFY=receiver.url,
            GPUOPS_S3_ENDPOINT=blind.url,
            GPUOPS_STATE=elsewhere,
        )
        no_vm = check(served, GPUOPS_NOTIFY=receiver.url, GPUOPS_LANE_INSTANCE="no-such-vm")
    finally:
        blind.close()
        receiver.close()

    assert sound.returncode == 0, sound.stdout + sound.stderr
    assert any(line.startswith("ok   clock: ") for line in sound.stdout.splitlines())
    assert sound.stdout.splitlines()[1].startswith("ok   state policy: ")
    assert all(line.startswith("ok") for line in sound.stdout.splitlines()), sound.stdout
    for lane in ("lane vm: gpu-lane is TERMINATED", "lane ceiling: ", "lane bucket: "):
        assert any(line.startswith(f"ok   {lane}") for line in sound.stdout.splitlines())
    assert receiver.titles() == ["gpuops check: a test notification"] * 3
    assert no_vm.returncode == 2, no_vm.stdout + no_vm.stderr
    failing = [line for line in no_vm.stdout.splitlines() if line.startswith("FAIL")]
    assert [line.split(":")[0] for line in failing] == ["FAIL lane vm", "FAIL lane ceiling"]
    assert "GPUOPS_LANE_INSTANCE" in failing[0]
    assert ignoring.returncode == 3, ignoring.stdout + ignoring.stderr
    (store,) = [line for line in ignoring.stdout.splitlines() if " store: " in line]
    assert store.startswith("FAIL") and "does not honour conditional writes" in store
    (policy,) = [line for line in ignoring.stdout.splitlines() if " state policy: " in line]
    assert policy.startswith("FAIL") and "/elsewhere/*" in policy
    others = [line for line in ignoring.stdout.splitlines() if line not in (store, policy)]
    assert all(line.startswith("ok") for line in others), ignoring.stdout
