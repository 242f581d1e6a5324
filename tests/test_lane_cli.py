"""Two shells, two operators, one lane: `gpuops lane ...` as separate processes against
`gpuops fakes serve` over loopback HTTP (the issue's "done when"). Exit codes per DESIGN §3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuops.lane.board import parse
from gpuops.store import open_store
from tests.test_fakes_serve import ROOT, Served

CLI_TIMEOUT_S = 60.0

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.fixture
def lane_env(tmp_path: Path):
    """A fast lane scenario served in another process; the environment a shell would export."""
    doc = yaml.safe_load((ROOT / "fakes" / "scenarios" / "default.yaml").read_text())
    doc["time_scale"] = 200
    doc["lane"].update(starts=["stockout"], job_runtime_s=60, results=2)
    scenario = tmp_path / "lane.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    served = Served("--scenario", str(scenario))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
    env.update(served.env, GPUOPS_STATE=str(tmp_path / "state"), XDG_STATE_HOME=str(tmp_path))
    yield env
    stop(served)


def stop(served: Served) -> None:
    """End `fakes serve` as Ctrl-C would (SIGTERM), so it kills its boots, then close."""
    served.stop()
    served.close()


def gpuops(env: dict[str, str], operator: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuops", "--operator", operator, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )


def test_two_operators_share_the_lane_through_the_cli_over_loopback_l3(lane_env, tmp_path):
    """L2/L3/L4/L7 end to end: bob is refused while alice holds the lane, alice's typo is
    refused, her start rides out a stockout, and the shared board holds her retry state. (Watch,
    release and the rest run in-process in tests/test_lane_incidents.py.)"""
    assert gpuops(lane_env, "alice", "lane", "claim", "--job", "portraits").returncode == 0
    bob_claim = gpuops(lane_env, "bob", "lane", "claim", "--job", "vids")
    script = gpuops(lane_env, "alice", "lane", "script", "--job", "portraits").stdout
    (tmp_path / "typo.sh").write_text(script.replace('JOB="portraits"', 'JOB="portroaits"'))
    (tmp_path / "job.sh").write_text(script)
    typo = gpuops(
        lane_env, "alice", "lane", "install", "--job", "portraits", str(tmp_path / "typo.sh")
    )
    installed = gpuops(
        lane_env, "alice", "lane", "install", "--job", "portraits", str(tmp_path / "job.sh")
    )
    started = gpuops(lane_env, "alice", "lane", "start", "--job", "portraits")
    bob_start = gpuops(lane_env, "bob", "lane", "start", "--job", "portraits")

    assert bob_claim.returncode == 3 and "refused (L3)" in bob_claim.stderr
    assert typo.returncode == 3 and "refused (L4)" in typo.stderr
    assert installed.returncode == 0, installed.stderr
    assert started.returncode == 0, started.stderr
    assert "stockout; the claim is kept (L7)" in started.stderr
    assert bob_start.returncode == 3 and "refused (L3)" in bob_start.stderr
    stored = open_store(str(tmp_path / "state")).get("lane/gpu-lane/board")
    assert stored is not None
    board, _ = parse(stored.data.decode("utf-8"))
    assert (board.state, board.owner, board.attempt, board.stockouts) == ("running", "alice", 2, 1)
    events = [json.loads(line) for line in (tmp_path / "state" / "events.jsonl").open()]
    outcomes = [e["payload"]["outcome"] for e in events if e["kind"] == "lane.start"]
    assert outcomes == ["stockout", "started"]


@pytest.fixture
def broken_env(tmp_path: Path):
    """The served lane with a broken torch on the fake VM image."""
    doc = yaml.safe_load((ROOT / "fakes" / "scenarios" / "default.yaml").read_text())
    doc["time_scale"] = 200
    doc["lane"].update(starts=[], broken_imports=["torch"], job_runtime_s=60, results=2)
    scenario = tmp_path / "lane.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    served = Served("--scenario", str(scenario))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
    env.update(served.env, GPUOPS_STATE=str(tmp_path / "state"), XDG_STATE_HOME=str(tmp_path))
    yield env
    stop(served)


def test_a_failed_import_powers_the_vm_off_and_a_moved_board_is_repaired_l12(broken_env, tmp_path):
    """L6/L12 end to end over loopback: the preflight fails, watch exits 6, the script's own
    power-off leaves the instance TERMINATED; with the board file moved away the lane is
    refused (exit 3, L12) until `lane repair` restores alice's claim."""
    env = broken_env
    assert gpuops(env, "alice", "lane", "claim", "--job", "portraits").returncode == 0
    text = gpuops(env, "alice", "lane", "script", "--job", "portraits").stdout
    (tmp_path / "job.sh").write_text(text)
    installed = gpuops(
        env, "alice", "lane", "install", "--job", "portraits", str(tmp_path / "job.sh")
    )
    started = gpuops(env, "alice", "lane", "start", "--job", "portraits")
    watched = gpuops(env, "alice", "lane", "watch", "--job", "portraits")
    board = gpuops(env, "alice", "lane", "board", "--live")
    assert installed.returncode == 0, installed.stderr
    assert started.returncode == 0, started.stderr
    assert watched.returncode == 6 and "preflight: import torch failed" in watched.stderr
    assert "instance TERMINATED" in board.stdout, board.stdout

    moved = tmp_path / "moved-board"
    board_file = tmp_path / "state" / "lane" / "gpu-lane" / "board~"  # the local store's name
    board_file.rename(moved)
    refused = gpuops(env, "bob", "lane", "claim", "--job", "vids")
    repaired = gpuops(env, "bob", "lane", "repair")
    again = gpuops(env, "bob", "lane", "claim", "--job", "vids")

    assert refused.returncode == 3 and "refused (L12)" in refused.stderr
    assert repaired.returncode == 0 and "owner=alice job=portraits" in repaired.stdout
    assert again.returncode == 3 and "refused (L3)" in again.stderr


def _boot_processes(url: str) -> list[int]:
    """Live processes whose environment points at the FakeGCE server ``url`` (its boots)."""
    found = []
    needle = f"GPUOPS_FAKE_GCE={url}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in environ.split(b"\0") and state != "Z":
                found.append(int(entry))
    return found


def test_fakes_serve_exiting_leaves_no_boot_process_behind(tmp_path):
    """A boot still running its job when `gpuops fakes serve` exits dies with it."""
    doc = yaml.safe_load((ROOT / "fakes" / "scenarios" / "default.yaml").read_text())
    doc["time_scale"] = 200
    doc["lane"].update(starts=[], broken_imports=[], job_runtime_s=864000)
    scenario = tmp_path / "lane.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    served = Served("--scenario", str(scenario))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
    env.update(served.env, GPUOPS_STATE=str(tmp_path / "state"), XDG_STATE_HOME=str(tmp_path))
    try:
        assert gpuops(env, "alice", "lane", "claim", "--job", "portraits").returncode == 0
        text = gpuops(env, "alice", "lane", "script", "--job", "portraits").stdout
        (tmp_path / "job.sh").write_text(text)
        assert (
            gpuops(
                env, "alice", "lane", "install", "--job", "portraits", str(tmp_path / "job.sh")
            ).returncode
            == 0
        )
        started = gpuops(env, "alice", "lane", "start", "--job", "portraits")
        assert started.returncode == 0, started.stderr
        running = _boot_processes(served.env["GPUOPS_GCE_ENDPOINT"])
    finally:
        stop(served)

    assert running, "the boot should be running its job before the fakes exit"
    assert _boot_processes(served.env["GPUOPS_GCE_ENDPOINT"]) == []


@pytest.mark.parametrize("hours", ["0.0001", "3000"])
def test_lane_install_refuses_max_hours_outside_gces_bounds_with_exit_2_l12(tmp_path, hours):
    """L12: `--max-hours 0.0001` (0 s once rounded) and `--max-hours 3000` (125 days) are
    refused with exit 2 before anything is sent: the endpoints here refuse every connection,
    so any call would end in exit 4, not 2."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n")
    env = _unreachable_lane(tmp_path)

    done = gpuops(env, "alice", "lane", "install", "--job", "p", "--max-hours", hours, str(script))

    assert done.returncode == 2, done.stderr
    assert "--max-hours" in done.stderr and "30 s to 120 days" in done.stderr


def test_lane_install_refuses_a_startup_script_over_gces_metadata_limit_with_exit_2_h6(tmp_path):
    """H6: GCE takes at most 262144 bytes a metadata value; a larger startup script is refused
    with exit 2, naming its size and the limit, before anything is sent (the endpoints here
    refuse every connection, so any call would end in exit 4, not 2)."""
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n" + "# padding\n" * 26300)  # 263012 bytes
    env = _unreachable_lane(tmp_path)

    done = gpuops(env, "alice", "lane", "install", "--job", "p", str(script))

    assert done.returncode == 2, done.stderr
    assert "'startup-script' is 263012 bytes" in done.stderr
    assert "at most 262144 bytes (256 KiB)" in done.stderr


def _unreachable_lane(tmp_path: Path) -> dict[str, str]:
    """An environment whose lane endpoints refuse every connection: any provider call would
    end in exit 4, so an exit 2 proves the refusal came before anything was sent."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
    env.update(
        GPUOPS_STATE=str(tmp_path / "state"),
        XDG_STATE_HOME=str(tmp_path),
        GPUOPS_GCE_ENDPOINT="http://127.0.0.1:9",
        STORAGE_EMULATOR_HOST="http://127.0.0.1:9",
        GPUOPS_LANE_PROJECT="gpuops-lane",
        GPUOPS_LANE_ZONE="us-central1-b",
        GPUOPS_LANE_INSTANCE="gpu-lane",
        GPUOPS_LANE_BUCKET="gpuops-lane-jobs",
    )
    return env
