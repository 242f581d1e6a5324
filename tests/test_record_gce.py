"""`gpuops record gce`: the lane's calls captured against FakeGCE on loopback, then replayed
(H1, H3, L1).

FakeGCE serves real HTTP on 127.0.0.1 from a thread of this process (fakes/gce/server.py), on
a hand-advanced clock that the adapter's waits move, so ``responses``' recorder passes each
request through to it exactly as it would to GCE. What the capture writes must load as
recordings and replay through the real adapter to the same parsed result.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import responses

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.server import serve_http
from fakes.vast.clock import FakeClock
from gpuops.errors import Refused, UsageError
from gpuops.events import EventLog
from gpuops.providers import load_recording
from gpuops.providers.gce import GceAdapter, GceStatus
from gpuops.record_gce import capture_cost_usd, check_spend, op_of, record_gce

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://127.0.0.1:9"
# FakeGCE's compute handlers: what the recorder may call (a boot's own script also calls the
# metadata server and storage on the same fake)
COMPUTE_ROUTES = {"get_instance", "start", "set_metadata", "set_scheduling", "get_operation", "serial"}
TOKEN = "ya29.a0AfB_byC-record-gce-secret-token-0123456789"
ENV_SECRET = "gce-record-env-secret-9f8e7d6c5b4a"


@pytest.fixture
def fake_gce():
    """FakeGCE on loopback with a token left in the instance's metadata by someone."""
    clock = FakeClock()
    fake = FakeGCE(LaneScenario(provisioning_s=5.0, staging_s=10.0, job_runtime_s=60.0), clock)
    fake.metadata = {"old-note": f"Authorization: Bearer {TOKEN}"}
    server = serve_http(fake)
    yield server, fake, clock
    server.close()


def _record(server, fake, clock, tmp_path, **kwargs):
    s = fake.scenario
    return record_gce(
        project=s.project,
        zone=s.zone,
        instance=s.instance,
        events=EventLog(tmp_path / "events.jsonl", "recorder@test"),
        max_usd=kwargs.pop("max_usd", 0.05),
        yes_spend=kwargs.pop("yes_spend", True),
        root=tmp_path / "recordings",
        endpoint=server.url,
        clock=clock.wall,
        sleep=clock.advance,
        **kwargs,
    )


def _replay_adapter(tmp_path: Path) -> GceAdapter:
    return GceAdapter(
        "gpuops-lane",
        "us-central1-b",
        events=EventLog(tmp_path / "replay.jsonl", "t"),
        endpoint=BASE,
        clock=lambda: 0.0,
        sleep=lambda s: None,
    )


def test_record_gce_captures_the_lane_calls_and_each_replays_to_the_same_parse(
    fake_gce, tmp_path, monkeypatch
):
    """H1: every recording replays through the real adapter to what the live call parsed;
    H3: no token in any file; L1: started only from TERMINATED, never stopped or deleted."""
    server, fake, clock = fake_gce
    monkeypatch.setenv("GPUOPS_TEST_API_TOKEN", ENV_SECRET)
    fake.metadata["env-echo"] = ENV_SECRET

    captured = _record(server, fake, clock, tmp_path)

    assert captured.status_before == "TERMINATED" and captured.started
    methods = [call.split()[0] for call in fake.calls]
    sent = [c.split()[1] for c in fake.calls if c.startswith("POST")]
    assert [c for c in sent if c in COMPUTE_ROUTES] == ["set_metadata", "start"]
    assert set(methods) <= {"GET", "POST"} and fake.boots == 1
    ops = [p.stem.split("_", 1)[1] for p in captured.files]
    # an operation is polled until DONE (FakeGCE's take time): each run of polls counts once
    runs = [op for i, op in enumerate(ops) if op != "operation" or ops[i - 1] != "operation"]
    assert ops.count("operation") > runs.count("operation")
    assert runs[:4] == ["get", "set_metadata", "operation", "get"]
    assert runs[4:6] == ["start", "operation"] and "serial" in ops and ops[-1] == "get"
    texts = [p.read_text() for p in captured.files]
    assert not any(TOKEN in t or ENV_SECRET in t or "ya29." in t for t in texts)
    assert all("kind: captured" in t and "google-auth " in t for t in texts)
    files = {f"captured/{p.parent.name}/{p.stem}" for p in captured.files}
    assert set(captured.parsed) <= files and len(captured.parsed) >= 6
    gce = _replay_adapter(tmp_path)
    names = sorted(files)
    for name in sorted(captured.parsed):
        op, live = captured.parsed[name]
        group = [name]
        for after in names[names.index(name) + 1 :]:
            if not after.endswith("_operation"):
                break
            group.append(after)
        with responses.RequestsMock() as mock:  # every registered exchange must be used
            for each in group:
                mock.add(load_recording("gce", each, tmp_path / "recordings").to_response(BASE))
            if op == "get":
                replayed = gce.get("gpu-lane")
                assert (replayed.name, replayed.status, replayed.status_raw) == (
                    live.name,
                    live.status,
                    live.status_raw,
                ), name
                assert replayed.fingerprint == live.fingerprint, name
                # H3's scrub is greedy: a value under "key" goes, so item names are redacted
                assert set(replayed.metadata) == {"[REDACTED]"}, name
            elif op == "serial":
                assert gce.serial_output("gpu-lane", live_start(name, tmp_path)) == live, name
            elif op == "set_metadata":
                assert gce.set_metadata("gpu-lane", {"startup-script": "x"}, "fp") is None
            else:
                assert op == "start" and gce.start("gpu-lane") is None, name
    gets = [v for op, v in captured.parsed.values() if op == "get"]
    assert gets[0].status is GceStatus.TERMINATED and gets[1].status is GceStatus.TERMINATED
    assert gets[1].fingerprint != gets[0].fingerprint
    assert "gpuops record gce" in gets[1].metadata["startup-script"]
    assert gets[-1].status is not GceStatus.TERMINATED
    serial = "".join(v[0] for op, v in captured.parsed.values() if op == "serial")
    assert "startup-script" in serial and serial == fake.serial[: len(serial)]


def live_start(name: str, tmp_path: Path) -> int:
    """The offset a recorded serial read asked for (its query), to ask the same on replay."""
    return int(dict(load_recording("gce", name, tmp_path / "recordings").query)["start"])


def test_a_running_instance_is_neither_changed_nor_started_l1(fake_gce, tmp_path):
    """L1/L2: a boot that may be someone's job is left alone; only the get is recorded."""
    server, fake, clock = fake_gce
    fake.foreign_start("their-job")
    clock.advance(20.0)

    with pytest.raises(Refused, match="only a TERMINATED instance"):
        _record(server, fake, clock, tmp_path)

    compute = [c for c in fake.calls if c.split()[1] in COMPUTE_ROUTES]  # not the boot's own
    assert compute == ["GET get_instance"] and fake.boots == 1
    assert [p.stem for p in (tmp_path / "recordings" / "gce" / "captured").glob("*/*")] == [
        "000_get"
    ]


def test_a_cap_below_the_captures_cost_refuses_before_any_request(fake_gce, tmp_path):
    """The cost is the lane's $/h for the run bound; over --max-usd, nothing is called."""
    server, fake, clock = fake_gce

    with pytest.raises(UsageError, match="over --max-usd 0.01: nothing was called"):
        _record(server, fake, clock, tmp_path, max_usd=0.01)
    with pytest.raises(UsageError, match="over --max-usd 0.05"):
        _record(server, fake, clock, tmp_path, usd_per_hour=3.0)

    assert fake.calls == [] and not (tmp_path / "recordings").exists()
    assert capture_cost_usd() == pytest.approx(0.0467)  # $0.70/h for 240 s
    assert check_spend(0.05, True, 0.70) == pytest.approx(0.0467)


def test_nothing_is_called_without_yes_spend(fake_gce, tmp_path):
    """No --yes-spend: exit 2 naming it, before any request, in-process and from the CLI."""
    server, fake, clock = fake_gce

    with pytest.raises(UsageError, match="pass --yes-spend"):
        _record(server, fake, clock, tmp_path, yes_spend=False)
    done = subprocess.run(
        [sys.executable, "-m", "gpuops", "record", "gce"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={
            **os.environ,
            "GPUOPS_GCE_ENDPOINT": server.url,
            "GPUOPS_LANE_PROJECT": fake.scenario.project,
            "GPUOPS_LANE_ZONE": fake.scenario.zone,
            "GPUOPS_LANE_INSTANCE": fake.scenario.instance,
            "GPUOPS_LANE_BUCKET": fake.scenario.bucket,
        },
    )

    assert done.returncode == 2 and "pass --yes-spend" in done.stderr
    assert fake.calls == []


def test_each_gce_exchange_is_named_after_its_operation():
    """Recording names say which of the lane's calls it was."""
    base = "/compute/v1/projects/p/zones/z"
    assert op_of("GET", f"{base}/instances/gpu-lane") == "get"
    assert op_of("POST", f"{base}/instances/gpu-lane/setMetadata") == "set_metadata"
    assert op_of("POST", f"{base}/instances/gpu-lane/start") == "start"
    assert op_of("GET", f"{base}/operations/operation-1") == "operation"
    assert op_of("GET", f"{base}/instances/gpu-lane/serialPort") == "serial"
    assert op_of("DELETE", f"{base}/instances/gpu-lane") == "call"
