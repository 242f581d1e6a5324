"""No billed box without a live owner, with real processes against `gpuops fakes serve` (M13, M8).

`gpuops rent` runs in its own process and is killed (SIGKILL), interrupted (SIGINT) or run
twice at once; every verdict asks the fake which instances still bill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_guard_process import ROOT, WAIT_S, Fakes, _alive, _guardian_pids, _kill

pytestmark = [pytest.mark.slow, pytest.mark.process]

SLOW_BOOT = {"boot": {"provisioning_s": 300}}  # the world's seconds: 10 s of wall time at x30


@pytest.fixture
def fakes(tmp_path: Path, request: pytest.FixtureRequest) -> Fakes:
    served = Fakes(tmp_path, **getattr(request, "param", SLOW_BOOT))
    yield served
    for pid in _guardian_pids(served):
        _kill(pid)
    served.proc.send_signal(signal.SIGTERM)
    served.proc.wait(timeout=WAIT_S)


def rent(fakes: Fakes, name: str, hours: str, race: str = "3") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpuops", "--json", "rent", name, "--gpu", "RTX 4090",
         "--hours", hours, "--race", race],
        env=fakes.env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def created(fakes: Fakes, n: int) -> bool:
    return len([e for e in fakes.events("market.create") if e["outcome"] == "created"]) >= n


def test_a_rent_killed_between_its_creates_and_keeping_a_box_leaves_nothing_billing_m13(fakes):
    """M13: SIGKILL rent after its creates, before any box is kept, its deadline three hours
    away: the guardian it started before the first create sees the dead racer's heartbeat
    stand still for RACER_TTL_S (three seconds of wall time at x30), fails its race, ends
    every candidate, each confirmed gone, and exits 0 only then."""
    # a race of two: killed once both creates landed, so no third create's intent can be left
    # unresolved (at x30 it follows the second within a fifth of a second; its guardian would
    # then rightly leave with 5 at deadline + OWNER_GRACE_S)
    proc = rent(fakes, "kill-box", "3", race="2")
    fakes.wait_for("two creates", lambda: created(fakes, 2))
    billing = len(fakes.live_instances())  # candidates bill (rent still races, its boot slow)
    proc.kill()
    proc.communicate(timeout=WAIT_S)
    assert billing >= 2  # from here nothing of rent's can end them
    (started,) = fakes.events("guard.start")

    (ended,) = fakes.wait_for("the guardian's exit", lambda: fakes.events("guard.exit"))
    fakes.wait_for("the guardian to exit", lambda: not _alive(int(started["pid"])))

    assert fakes.live_instances() == []
    assert ended["code"] == 0
    (failed,) = fakes.events("guard.race_ended")  # the dead racer's race, failed and ended
    assert failed["guardian"] == ended["guardian"]
    boxes = fakes.json("boxes")
    assert [r["state"] for r in boxes["rentals"]] == ["failed"]
    assert boxes["candidates"] == [] and boxes["pending_destroys"] == []


def test_ctrl_c_during_a_race_destroys_its_candidates_before_rent_exits_130_m13(fakes):
    """M13: Ctrl-C while the candidates boot: rent destroys them, confirmed gone, says so, and
    exits 130; the fake shows nothing billing the moment rent has exited."""
    # a race of two, interrupted once both creates landed: with three, where the interrupt
    # lands (before the third create, on the wire, after it) is left to the machine's load;
    # tests/test_owner.py chooses each of those moments in-process, with a real signal
    proc = rent(fakes, "ctrl-box", "1.5", race="2")
    fakes.wait_for("two creates", lambda: created(fakes, 2))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WAIT_S)

    assert proc.returncode == 130
    assert fakes.live_instances() == []
    assert "interrupted:" in err and "confirmed gone" in err
    (started,) = fakes.events("guard.start")
    fakes.wait_for("the guardian to exit", lambda: not _alive(int(started["pid"])))
    exits = fakes.events("guard.exit")
    log = fakes.state / "guardians" / "ctrl-box.log"
    assert [e["code"] for e in exits] == [0], (exits, log.read_text()[-3000:], err[-2000:])


@pytest.mark.parametrize("fakes", [{"boot": {"provisioning_s": 60}}], indirect=True)
def test_two_rents_of_one_name_at_once_end_with_exactly_one_box_m8(fakes):
    """M8: two `rent NAME` started together: one races, the other waits and returns the same
    box, saying who raced; never a second box."""
    procs = [rent(fakes, "twin-box", "1.5") for _ in range(2)]
    done = [proc.communicate(timeout=WAIT_S) for proc in procs]

    assert [proc.returncode for proc in procs] == [0, 0], [err[-2000:] for _, err in done]
    rows = [json.loads(out) for out, _ in done]
    assert rows[0]["instance_id"] == rows[1]["instance_id"]
    assert len(fakes.live_instances()) == 1
    assert sum("is racing for it now" in err for _, err in done) == 1
    assert len({e["guardian"] for e in fakes.events("guard.lease.taken")}) == 1
    fakes.gpuops("destroy", "twin-box")
    assert fakes.live_instances() == []
    assert os.environ.get("GPUOPS_STATE") != str(fakes.state)  # the test's state is its own
