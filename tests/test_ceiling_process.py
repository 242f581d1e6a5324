"""The box's own ceiling end to end (M14): `gpuops rent` against `gpuops fakes serve`, every
guardian killed the moment it starts and no sweep ever run; the box ends itself, judged by the
fake's own instance list and by what the box's own process logged. And `gpuops guard NAME
--hours` that moves a deadline later moves the box's ceiling first.

The fakes, their boxes and gpuops share one scaled clock (x120: a half-hour rental and its
30-minute grace pass in thirty seconds), so the box's clock is the renter's, as a datacenter's
NTP-synced one would be. Not faster: every provider-facing budget of gpuops (a boot's, a
destroy's confirmation) passes as fast, and at x600 a boot's ten minutes are one real second,
which a loaded machine's slow answers can outlast. Half an hour (the ceiling 30 s of wall time
after the rent begins), and an hour and a half where the ceiling is moved, so a loaded
machine's slow race still keeps its box and kills the guardian long before the ceiling or the
guardian would have acted.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_guard_process import WAIT_S, Fakes, _alive

from gpuops import timing
from gpuops.market.ceiling import AT_NAME, ceiling_at

pytestmark = [pytest.mark.slow, pytest.mark.process]

SCALE = 120.0


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Fakes]:
    served = Fakes(tmp_path, time_scale=SCALE)
    yield served
    for started in served.events("guard.start"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(started["pid"]), signal.SIGKILL)
    served.proc.send_signal(signal.SIGTERM)
    served.proc.wait(timeout=WAIT_S)


def _sandbox(world: Fakes, instance_id: str) -> Path:
    return Path(world.env["GPUOPS_FAKE_SSH_BOXES"]).parent / "sandboxes" / f"vast-{instance_id}"


def _rent_and_kill_its_guardian(world: Fakes, name: str, hours: str) -> dict[str, object]:
    world.gpuops("rent", name, "--gpu", "RTX 4090", "--hours", hours, "--race", "1")
    (started,) = world.wait_for("its guardian", lambda: world.events("guard.start"))
    os.kill(int(started["pid"]), signal.SIGKILL)  # and nobody runs sweep
    world.wait_for("the guardian to die", lambda: not _alive(int(started["pid"])))
    (rental,) = world.json("boxes")["rentals"]
    return rental


@pytest.mark.fault(
    "the guardian's host dies with it, and nobody runs sweep",
    handled="the box destroys itself at deadline + grace with its own per-instance key (M14)",
)
def test_with_every_guardian_dead_from_the_first_second_the_box_ends_itself_m14(world):
    rental = _rent_and_kill_its_guardian(world, "lone", "0.5")
    instance = str(rental["instance_id"])
    # No check that the box still runs here: on a loaded machine the rent and the kill can take
    # the 30 s of wall time to the ceiling. The box's own log below is the proof that its own
    # process, and nothing else, ended it, and at its ceiling by its own clock, never earlier.
    world.wait_for("the box to end itself", lambda: world.live_instances() == [])
    log = (_sandbox(world, instance) / "gpuops-ceiling.log").read_text()
    asked = [line for line in log.splitlines() if line.endswith(f"destroying {instance}")]
    assert asked, f"the box's own process never asked for its destroy: {log!r}"
    at = int(asked[0].split()[0])  # the box's clock when it asked, as its own process read it
    ceiling = ceiling_at(float(rental["deadline_at"]))
    assert ceiling <= at <= ceiling + timing.BOX_CEILING_POLL_S + 10 * SCALE


def test_a_deadline_moved_later_moves_the_box_s_own_ceiling_first_m14(world):
    # an hour and a half: the ceiling 60 s of wall time away, so even a machine at load 18
    # moves it in time (at 600x and two hours, the box had ended itself by its ceiling before
    # `guard --hours`)
    rental = _rent_and_kill_its_guardian(world, "longer", "1.5")
    at_file = _sandbox(world, str(rental["instance_id"])) / AT_NAME
    assert int(at_file.read_text()) == ceiling_at(float(rental["deadline_at"]))
    world.gpuops("guard", "longer", "--hours", "3")
    (moved,) = world.json("boxes")["rentals"]
    assert float(moved["deadline_at"]) > float(rental["deadline_at"]) + 3600
    assert int(at_file.read_text()) == ceiling_at(float(moved["deadline_at"]))
    world.gpuops("destroy", "longer")
    assert world.live_instances() == []
