"""The guardian service (`gpuops guard --all`) as real processes on two hosts over one state
(M5, M7, M13, M17), judged by the fake's own instance list.

Each service is the real CLI in its own process, run as if on its own host: its host name and
its wall clock are its own (``AS_HOST``: the hostname and ``time.time`` a host would have, set
before gpuops is imported). Every process runs on the fakes' exported clock (GPUOPS_TIME_SCALE:
lease TTL 2 s), deadlines too; a host's skew is given in that clock's seconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_guard_process import ROOT, SCALE, WAIT_S, Fakes, _alive, _kill

from gpuops import timing
from gpuops.market import guardian as g
from gpuops.market.rent import RentRequest
from gpuops.market.session import open_market
from gpuops.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.process]

# The CLI as on another host: its name and its clock (skewed by argv[2] seconds), nothing else.
AS_HOST = """\
import socket, sys, time
host, skew = sys.argv[1], float(sys.argv[2])
socket.gethostname = lambda: host
real = time.time
time.time = lambda: real() + skew
from gpuops.cli import main
sys.exit(main(sys.argv[3:]))
"""
SKEW_S = 600.0  # host A's clock runs ten minutes ahead of B's (and of the provider's)
OFFERS = [
    {"id": 900 + i, "machine_id": 70 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
     "dph_total": 0.30 + i / 100, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}
    for i in range(3)
]  # fmt: skip


def service(fakes: Fakes, host: str, skew_s: float, log: Path) -> subprocess.Popen[bytes]:
    """``skew_s``: the host's clock ahead of the provider's, in the world's seconds (its real
    clock is ahead by 1/SCALE of them, which its scaled clock multiplies back)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", AS_HOST, host, str(skew_s / SCALE), "guard", "--all"],
            env=fakes.env, cwd=ROOT, stdout=out, stderr=out,
        )  # fmt: skip


def held_by(fakes: Fakes, host: str) -> set[str]:
    """The rentals whose lease a guardian of ``host`` has taken."""
    return {e["name"] for e in fakes.events("guard.lease.taken") if f"/{host}/" in e["guardian"]}


@pytest.fixture
def fakes(tmp_path: Path) -> object:
    served = Fakes(tmp_path, offers=OFFERS)
    yield served
    served.proc.send_signal(signal.SIGTERM)
    served.proc.wait(timeout=WAIT_S)


@pytest.mark.fault(
    "the host running the guardian service dies (SIGKILL) with every rental's lease held",
    handled="another host's guard --all takes over each lease once it stands still for a TTL "
    "on its own clock and ends every box at its deadline, none early (M5, M7, M17)",
)
def test_a_second_hosts_guardian_service_ends_every_box_at_its_deadline_when_the_first_dies_m17(
    fakes, tmp_path
):
    """M5/M17: alice's two rentals and bob's one, guarded by `guard --all` on host A (its clock
    ten minutes ahead) and on host B; A is SIGKILLed holding every lease; B takes each over and
    ends every box by its deadline, none before its copy-then-destroy time, as the fake's own
    list shows; each guardian of B exits 0, and SIGTERM stops B loudly (143)."""
    settings = Settings.from_environ(fakes.env)
    world = settings.clock()  # the provider's clock, and host B's
    rented = {}
    for owner, name in [("alice", "a-1"), ("alice", "a-2"), ("bob", "b-1")]:
        market = open_market(settings, owner)
        rental = market.rent(RentRequest(name=name, gpu_name="RTX 4090", hours=3, race_k=1))
        rented[name] = (market, rental)
    a = service(fakes, "hostA", SKEW_S, tmp_path / "a.log")
    b = None
    try:
        fakes.wait_for("A to hold every lease", lambda: held_by(fakes, "hostA") == set(rented))
        b = service(fakes, "hostB", 0.0, tmp_path / "b.log")
        fakes.wait_for(  # B's guardians are up, each a standby behind A's fresh lease
            "B's standbys",
            lambda: {e["name"] for e in fakes.events("guard.start") if "/hostB/" in e["guardian"]}
            == set(rented),
        )
        os.kill(a.pid, signal.SIGKILL)  # host A dies with every lease held
        a.wait(timeout=WAIT_S)
        # the deadlines, set from host B (its clock is the provider's): 8 to 10 s from now
        deadlines, copy_at, boxes = {}, {}, {}
        for i, (name, (market, rental)) in enumerate(sorted(rented.items())):
            deadline = world.wall() + (8.0 + i) * SCALE
            market.rentals.update(name, deadline_at=deadline, deadline_host="hostB")
            deadlines[name] = deadline
            copy_at[name], _ = g.schedule(rental.started_at, deadline)
            boxes[rental.instance_id] = name

        seen_live: dict[str, float] = {}  # each box's last sighting in the fake's list

        def all_gone() -> bool:
            now = world.wall()
            live = {str(i["id"]) for i in fakes.live_instances()} & set(boxes)
            for instance_id in live:
                seen_live[instance_id] = now
            return not live

        fakes.wait_for("every box gone", all_gone)
        gone_at = world.wall()

        assert held_by(fakes, "hostB") == set(rented)  # B took over each lease
        for instance_id, name in boxes.items():
            # never destroyed before its copy-then-destroy time, as the fake shows it
            # (seen live in a poll at most a poll's time before its destroy: 1 s allows a slow one)
            assert copy_at[name] - 1.0 * SCALE <= seen_live[instance_id] < gone_at
        for name in rented:
            last = max(t for i, t in seen_live.items() if boxes[i] == name)
            assert last <= deadlines[name] + timing.DESTROY_CONFIRM_TIMEOUT_S
        # the fake's list empties a poll before a guardian's confirmation is written: wait on it
        fakes.wait_for(
            "each guardian's confirmation",
            lambda: {e["name"] for e in fakes.events("guard.confirmed_gone")} == set(rented),
        )
        gone = {e["name"]: e for e in fakes.events("guard.confirmed_gone")}
        assert set(gone) == set(rented) and all("/hostB/" in e["guardian"] for e in gone.values())
        for name, e in gone.items():  # each at its deadline: within the margin before it
            assert copy_at[name] - deadlines[name] <= e["delay_s"]
            assert e["delay_s"] <= timing.DESTROY_CONFIRM_TIMEOUT_S
        fakes.wait_for(
            "B's guardians to leave",
            lambda: sorted(
                e["code"] for e in fakes.events("guard.exit") if "/hostB/" in e["guardian"]
            )
            == [0, 0, 0],
        )
        assert b.poll() is None  # the service goes on, for rentals that come later
        b.send_signal(signal.SIGTERM)
        assert b.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
        assert "stopped by SIGTERM" in (tmp_path / "b.log").read_text()
        assert fakes.live_instances() == []
    finally:
        for proc in (a, b):
            if proc is not None and _alive(proc.pid):
                _kill(proc.pid)
                proc.wait(timeout=WAIT_S)
