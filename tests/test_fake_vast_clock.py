"""FakeVast on the one exported clock: gpuops and the fake read the same fake time.

`gpuops fakes serve` runs FakeVast on an ExportedClock (fakes/vast/clock.py) and prints its
scale and origin as GPUOPS_TIME_SCALE and GPUOPS_TIME_ORIGIN; a gpuops process on those exports
builds the same clock (settings.py), so every time the fake renders (start_date, end_date, a
contract's end) is on gpuops' own clock. A client that is not on it (the vastai CLI, SkyPilot)
is told on stderr to use `$VAST_URL/real-clock`, where the same routes answer with real-clock
times.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
from test_fakes_serve import ROOT, SERVE, STARTUP_TIMEOUT_S, Served

from fakes.scenario import parse_scenario
from fakes.vast import ExportedClock, FakeClock, FakeVast
from fakes.vast.routes import REAL_CLOCK
from gpuops.clock import SYSTEM, ScaledClock, WithSleep
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings, TimeScale

BASE = "https://console.vast.ai"
KEY = "fake-key-clock"
DAY_S = 86400.0
SHORT = 18439515  # the default scenario's offer whose contract ends a day out (contract_days: 1)


def test_the_exported_clock_is_the_clock_gpuops_builds_from_the_export_lines(tmp_path):
    """Its export lines, read by gpuops' settings, give a clock that reads what it reads, at
    any moment; its epoch_of is the fake time itself, real_epoch_of the base clock's."""
    base = FakeClock(1003.0)
    exported = ExportedClock(10.0, origin=1000.0, base=base)
    settings = Settings.from_environ(exported.exports(), home=tmp_path)
    gpuops_clock = ScaledClock(10.0, origin=1000.0, base=base)  # TimeScale.clock(), on base
    base.advance(5.0)

    assert settings.time_scale == TimeScale(10.0, 1000.0)
    assert exported.wall() == gpuops_clock.wall() == 1000.0 + 8.0 * 10.0
    assert exported.epoch_of(1080.0) == 1080.0 and exported.real_epoch_of(1080.0) == 1008.0


def test_fakevast_renders_times_on_its_exported_clock_and_the_real_clock_under_real_clock():
    """One box, one offer: start_date and end_date as gpuops reads them (fake time) on the
    plain routes, and the real clock's epochs for them under /real-clock."""
    base = FakeClock(1000.0)
    offer = {"id": 1, "machine_id": 7, "gpu_name": "RTX 4090", "gpu_ram": 24564,
             "dph_total": 0.3, "reliability": 0.995, "disk_bw": 2500.0, "contract_days": 2}  # fmt: skip
    doc = {"vast": {"api_key": KEY, "boot": {"provisioning_s": 10, "loading_s": 20},
                    "offers": [offer]}}  # fmt: skip
    fake = FakeVast(parse_scenario(doc), clock=ExportedClock(10.0, origin=1000.0, base=base))
    vast = VastAdapter(api_key=KEY, base_url=BASE, clock=WithSleep(SYSTEM, base.advance))
    auth = {"Authorization": f"Bearer {KEY}"}
    base.advance(6.0)  # fake time 1060
    with fake.activate(BASE):
        (offered,) = vast.search_offers()
        (listed,) = VastAdapter(api_key=KEY, base_url=BASE + REAL_CLOCK).search_offers()
        box = vast.create(1, label="gpuops:clock", image="img", disk_gb=20.0)
        scaled = vast.show(box)
        real = requests.get(f"{BASE}{REAL_CLOCK}/api/v0/instances/{box}/", headers=auth,
                            timeout=5).json()["instances"]  # fmt: skip

    assert offered.end_date == 1000.0 + 2 * DAY_S
    assert offered.raw["duration"] == 2 * DAY_S - 60.0  # fake seconds left on gpuops' clock
    assert listed.raw["duration"] == (2 * DAY_S - 60.0) / 10.0  # real seconds left
    assert scaled is not None and scaled.start_date == 1060.0
    assert real["start_date"] == 1006.0
    assert real["end_date"] == 1000.0 + 2 * DAY_S / 10.0 == listed.end_date


def _stderr_line(served: Served, containing: str) -> str:
    """The first line of the serve process's stderr that contains ``containing``."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert served.proc.stderr is not None
        for line in served.proc.stderr:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"no stderr line with {containing!r}: {seen}") from None
        if containing in line:
            return line
        seen.append(line)


@pytest.fixture
def served(tmp_path):
    running = Served()  # the default scenario, at time x10
    yield running
    running.close()


def test_gpuops_on_the_exports_reads_a_served_contract_end_where_the_fake_put_it(served, tmp_path):
    """gpuops on the export lines' clock reads the default scenario's one-day contract as
    ending about a day after its own now (not a tenth of a day, as a real-clock end_date read
    on a x10 clock would), and the rest of at least as long."""
    clock = Settings.from_environ(served.env, home=tmp_path).clock()
    vast = VastAdapter(api_key=served.env["VAST_API_KEY"], base_url=served.env["VAST_URL"])

    offers = {o.id: o for o in vast.search_offers()}
    now = clock.wall()
    left_days = {i: (float(o.end_date or 0.0) - now) / DAY_S for i, o in offers.items()}

    assert 0.9 < left_days[SHORT] <= 1.0, left_days[SHORT]
    assert min(left_days.values()) == left_days[SHORT]


def test_serve_tells_an_unscaled_client_where_the_real_clock_view_is_and_it_answers(served):
    """stderr names VAST_URL/real-clock; there the one-day contract ends a tenth of a day (x10)
    after the real now, as the vastai CLI or SkyPilot compares it with time.time()."""
    line = _stderr_line(served, "real clock")
    url = served.env["VAST_URL"] + REAL_CLOCK
    vast = VastAdapter(api_key=served.env["VAST_API_KEY"], base_url=url)

    offers = {o.id: o for o in vast.search_offers()}
    left_s = float(offers[SHORT].end_date or 0.0) - time.time()

    assert f"VAST_URL={url}" in line
    assert 0.9 * DAY_S / 10 < left_s <= DAY_S / 10, left_s


def test_serve_refuses_a_scenario_start_time_its_exported_clock_could_not_keep(tmp_path):
    """A scenario's start_time is for in-process fakes: served, the fake's clock starts where
    gpuops' does (the exported origin), so serve says so and exits 2, serving nothing."""
    scenario = tmp_path / "start.yaml"
    scenario.write_text("start_time: 1796029925\nvast: {offers: []}\n")

    done = subprocess.run(
        [sys.executable, "-c", SERVE, "--scenario", str(scenario)],
        cwd=Path(ROOT), capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S,
    )  # fmt: skip

    assert done.returncode == 2 and done.stdout == ""
    assert "start_time" in done.stderr and "exported clock" in done.stderr
