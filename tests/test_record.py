"""`gpuops record vast`: a one-cent rental against the loopback fakes, then replay (H1, H3).

The fakes run in another process (`fakes.serve`, real HTTP on 127.0.0.1, the fake ssh), so
the recorder sees exactly what it would see from the provider. What it writes must load as
recordings and replay through the real adapter to the same parsed result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import responses
import yaml

from gpuops.market.teardown import Ending
from gpuops.errors import UsageError
from gpuops.providers import load_recording
from gpuops.providers.vast import VastAdapter
from gpuops.record import max_price_per_hour, op_of, record_vast
from gpuops.settings import Settings
from gpuops.clock import SYSTEM, WithSleep
from tests.test_fakes_serve import Served

ROOT = Path(__file__).resolve().parent.parent
BASE = "https://console.vast.ai"


@pytest.fixture
def served(tmp_path: Path):
    """FakeVast on loopback at x100 with a cheap healthy offer and a dear one."""
    doc = yaml.safe_load((ROOT / "fakes" / "scenarios" / "default.yaml").read_text())
    cheap, dear = dict(doc["vast"]["offers"][2]), dict(doc["vast"]["offers"][3])
    cheap.update(id=777001, dph_total=0.12, fate="healthy")
    dear.update(id=777002, dph_total=0.95, fate="healthy")
    doc["vast"]["offers"] = [dear, cheap]
    doc["time_scale"] = 100  # at x1000 the probe's real seconds outlast the box's own ceiling
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    server = Served("--scenario", str(path))
    yield server
    server.close()


def test_record_vast_captures_every_exchange_and_a_replay_parses_the_same(
    served, tmp_path, monkeypatch
):
    """H1: the recording a one-cent rental writes replays through the adapter to what the live
    call parsed; H3: no secret in any file; M4: the box is confirmed gone; the cap held."""
    for name, value in served.env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "recordings"

    captured = record_vast(
        settings=Settings.from_environ(cli_options={"state": str(tmp_path / "state")}),
        operator="recorder@test",
        gpu_name="RTX 4090",
        max_usd=0.05,
        yes_spend=True,
        root=out,
    )

    assert captured.verdict == "pass"
    assert captured.destroyed and all(o.ending is Ending.GONE for o in captured.destroyed)
    ops = [
        p.stem.split("_", 1)[1]
        for p in captured.files
        if p.parent.parent.name == "captured" and p.parents[2].name == "vast"
    ]
    assert ops[:2] == ["search", "ssh_keys"] and "create" in ops and ops[-1] == "show"
    texts = [p.read_text() for p in captured.files]
    assert not any(served.env["VAST_API_KEY"] in text for text in texts)
    assert all("kind: captured" in text and "vastai 1.9.1" in text for text in texts)
    creates = [
        load_recording("vast", f"captured/{p.parent.name}/{p.stem}", out)
        for p in captured.files
        if p.stem.endswith("_create")
    ]
    assert [c.path for c in creates] == ["/api/v0/asks/777001/"]  # the dear offer is over the cap
    assert {"gpu.yaml", "cuda.yaml", "disk.yaml"} <= {p.name for p in captured.files}
    adapter = VastAdapter(api_key="k-replay", base_url=BASE, clock=WithSleep(SYSTEM, lambda s: None))
    for name, (op, live) in captured.parsed.items():
        rec = load_recording("vast", name, out)
        instance_id = rec.path.rstrip("/").rsplit("/", 1)[1]
        with responses.RequestsMock() as mock:
            mock.add(rec.to_response(BASE))
            if op == "search":
                replayed = adapter.search_offers("RTX 4090", 1)
            elif op == "show":
                replayed = adapter.show(instance_id)
            else:
                replayed = adapter.list_ssh_keys()
        if op == "ssh_keys":  # H3's scrub is greedy: a value under "key" goes, public or not
            assert [k.id for k in replayed] == [k.id for k in live], name
            assert {k.public_key for k in replayed} == {"[REDACTED]"}
        else:
            assert replayed == live, name
    assert sorted(op for op, _ in captured.parsed.values()) == ["search", "show", "ssh_keys"]


def test_nothing_is_spent_without_yes_spend_or_with_a_bad_cap():
    """No --yes-spend: refused before any call; the cap must be positive; it sets the price."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuops", "record", "vast", "--gpu", "RTX 4090"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "VAST_URL": "http://127.0.0.1:9"},
    )

    assert done.returncode == 2 and "pass --yes-spend" in done.stderr
    with pytest.raises(UsageError, match="--max-usd 0.0 must be a positive"):
        max_price_per_hour(0.0, True)
    assert max_price_per_hour(0.05, True) == pytest.approx(0.2)  # $0.05 over 900 s


def test_each_exchange_is_named_after_its_operation():
    """Recording names say what the call was."""
    assert op_of("POST", "/api/v0/bundles/") == "search"
    assert op_of("PUT", "/api/v0/asks/1/") == "create"
    assert op_of("GET", "/api/v0/instances/5/") == "show"
    assert op_of("DELETE", "/api/v0/instances/5/") == "destroy"
    assert op_of("GET", "/api/v1/instances/") == "list"
    assert op_of("GET", "/api/v0/ssh/") == "ssh_keys"
    assert op_of("PATCH", "/x") == "call"
    assert json.loads("{}") == {}
