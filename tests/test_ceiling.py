"""The box's own ceiling (M14): the onstart script, run for real.

The script is judged by what it does when ``sh`` runs it: against FakeVast served on loopback,
which runs a box's onstart in the box's sandbox on the world's (scaled) clock with the box's
per-instance key in its environment (fakes/vast/onstart.py), and directly under ``sh`` with a
PATH that lacks curl (or curl and wget), as a slim image would. The box's destroy is read from
the fake's own record, never from what the script printed.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from fakes.scenario import parse_scenario
from fakes.vast import FakeVast, serve_http
from fakes.vast.clock import FakeClock
from fakes.vast.onstart import PGID_FILE
from fakes.vast.wire import Reply, Request
from gpuops import timing
from gpuops.clock import ScaledClock
from gpuops.errors import AuthFailed, UsageError
from gpuops.market.ceiling import AT_NAME, ceiling_at, ceiling_script, destroy_url, rearm_script
from gpuops.providers.vast import ONSTART_MAX_CHARS, VastAdapter

T = TypeVar("T")
ACCOUNT_KEY = "k-account-ceiling"
FACTOR = 3600.0  # box seconds per real second: the grace passes in half a second
WAIT_S = 30.0  # the longest a box may take to end itself here before the test fails
OFFERS = [
    {"id": 700 + i, "machine_id": 7700 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
     "dph_total": 0.3, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}
    for i in range(3)
]  # fmt: skip


class World:
    """FakeVast on loopback whose boxes run their onstart; each destroy seen with its key and
    the box clock's time when it arrived."""

    def __init__(self, tmp: Path, **faults: object) -> None:
        doc: dict[str, object] = {
            "vast": {"api_key": ACCOUNT_KEY, "ssh_keys": ["generated"], "offers": OFFERS}
        }
        if faults:
            doc["vast"]["faults"] = faults  # type: ignore[index]
        self.box_clock = ScaledClock(FACTOR)
        self.fake = FakeVast(
            parse_scenario(doc), clock=FakeClock(), state_dir=tmp, box_clock=self.box_clock
        )
        self.server = serve_http(self.fake)
        self.vast = VastAdapter(api_key=ACCOUNT_KEY, base_url=self.server.url)
        self.vast.list_instances()  # the SDK imported now, not inside a test's short margin
        self.destroys: list[tuple[str, int, float]] = []  # (key, status, box time)
        self.gone = threading.Condition()
        self.fake.taps.append(self._tap)

    def _tap(self, route: str, request: Request, reply: Reply) -> None:
        if route == "destroy":
            header = request.headers.get("authorization", "")
            with self.gone:
                self.destroys.append((header, reply.status, self.box_clock.wall()))
                self.gone.notify_all()

    def rent(self, offer: int, deadline_at: float) -> int:
        made = self.vast.create(
            offer,
            label=f"ceiling-{offer}",
            image="vastai/base-image",
            disk_gb=10,
            onstart=ceiling_script(deadline_at, self.server.url),
        )
        return int(made)

    def wait_destroyed(
        self,
        instance_id: int,
        alive: Callable[[], bool] | None = None,
        log: Callable[[], list[str]] | None = None,
    ) -> None:
        """Until the box is destroyed; a failure as soon as it cannot be: its ceiling loop is
        gone with the box still there (a loop that exited can end nothing), or the loop has
        logged three destroy attempts and not one reached the provider (its HTTP call is
        broken); else after WAIT_S. ``alive``: whether the loop still runs (by default: any
        process of the box's onstart session); ``log``: the loop's log lines."""
        if alive is None:
            alive = partial(self._onstart_alive, instance_id)
        if log is None:
            log = partial(_log, self, instance_id)

        def destroyed() -> bool:  # the fake's record, and its answer seen by the tap
            return self.fake.instances[instance_id].destroyed_at is not None and any(
                status == 200 for _, status, _ in self.destroys
            )

        deadline, seen_gone = time.monotonic() + WAIT_S, 0
        with self.gone:
            while not self.gone.wait_for(destroyed, 0.05):
                seen_gone = 0 if alive() else seen_gone + 1
                assert seen_gone < 2 or destroyed(), (  # gone at two looks in a row
                    f"box {instance_id}'s ceiling loop exited without ending the box: {log()}"
                )
                tried = [line for line in log() if line.endswith(f" destroying {instance_id}")]
                assert len(tried) < 3 or self.destroys or destroyed(), (
                    f"box {instance_id}'s ceiling loop tried {len(tried)} destroys and none "
                    f"reached the provider: {log()}"
                )
                assert time.monotonic() < deadline, (
                    f"box {instance_id} did not end itself within {WAIT_S} s"
                )

    def _onstart_alive(self, instance_id: int) -> bool:
        """Whether any process of the box's onstart session (fakes/vast/onstart.py) lives."""
        assert self.fake.box_table is not None
        sandbox = self.fake.box_table.parent / "sandboxes" / f"vast-{instance_id}"
        try:
            session = int((sandbox / PGID_FILE).read_text())
        except (OSError, ValueError):
            return False
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and os.getsid(int(entry)) == session and _running(int(entry)):
                    return True
            except OSError:
                continue
        return False

    def close(self) -> None:
        self.server.close()
        from fakes.ssh.sandbox import stop_all

        assert self.fake.box_table is not None
        stop_all(self.fake.box_table)


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    w = World(tmp_path, **getattr(request, "param", {}))
    yield w
    w.close()


def _log(world: World, box: int) -> list[str]:
    """What the box's own ceiling loop wrote, line by line (its ~/gpuops-ceiling.log)."""
    assert world.fake.box_table is not None
    log = world.fake.box_table.parent / "sandboxes" / f"vast-{box}" / "gpuops-ceiling.log"
    return log.read_text().splitlines() if log.exists() else []


# --- the script, as text ---------------------------------------------------------------------
def test_the_ceiling_is_the_deadline_plus_the_grace_rounded_up_never_down_m14() -> None:
    assert ceiling_at(1000.0) == 1000 + timing.BOX_CEILING_GRACE_S
    assert ceiling_at(1000.2) == math.ceil(1000.2 + timing.BOX_CEILING_GRACE_S)
    assert ceiling_at(1000.2) > 1000.2 + timing.BOX_CEILING_GRACE_S


def test_the_script_names_the_box_s_own_key_and_fits_vast_s_onstart_limit_m14_h3() -> None:
    script = ceiling_script(2e9, "https://console.vast.ai")
    assert "$CONTAINER_API_KEY" in script and "$CONTAINER_ID" in script
    assert len(script) <= ONSTART_MAX_CHARS
    assert destroy_url("https://console.vast.ai/") == (
        "https://console.vast.ai/api/v0/instances/$CONTAINER_ID/"
    )
    assert destroy_url("http://boX/") == "http://boX/api/v0/instances/$CONTAINER_ID/"
    # with its file gone (a person's rm), the loop waits for the second it was armed with
    assert f"2>/dev/null || echo {ceiling_at(2e9)})" in script


@pytest.mark.parametrize(
    "url", ['http://x"$(rm -rf ~)', "http://h/`id`", "http://h/a b", "ftp://h", "http://h/$X"]
)
def test_a_base_url_the_shell_would_read_is_refused_m14(url: str) -> None:
    with pytest.raises(UsageError, match="ceiling script"):
        ceiling_script(2e9, url)


# --- the script, run by a fake box -----------------------------------------------------------
def test_a_box_past_its_ceiling_destroys_itself_with_its_own_key_never_the_account_s_m14(
    world: World,
) -> None:
    """Every guardian dead from the first second: the box alone ends itself, with the key Vast
    gave that instance, and not before deadline + grace on its clock."""
    deadline = world.box_clock.wall() - timing.BOX_CEILING_GRACE_S + 0.5 * FACTOR
    box = world.rent(700, deadline)
    world.wait_destroyed(box)
    key, status, at = world.destroys[0]
    assert (status, key) == (200, f"Bearer {world.fake.instances[box].instance_key}")
    assert ACCOUNT_KEY not in key
    assert at >= ceiling_at(deadline)
    said = _log(world, box)  # what the box itself says it did, on its own clock
    asked = [int(line.split()[0]) for line in said if line.endswith(f" destroying {box}")]
    assert asked and asked[0] >= ceiling_at(deadline), said
    # late by at most one poll and the fake's scheduling (a loaded machine: 20 s real)
    assert at <= ceiling_at(deadline) + timing.BOX_CEILING_POLL_S + 20 * FACTOR
    assert [b.id for b in world.fake.boxes()] == []  # the provider's own record


def test_a_box_before_its_ceiling_keeps_running_and_the_others_end_only_themselves_m14(
    world: World,
) -> None:
    far = world.box_clock.wall() + 100 * 24 * 3600  # a hundred box days away: 40 real minutes
    kept = world.rent(701, far)
    ended = world.rent(702, world.box_clock.wall() - timing.BOX_CEILING_GRACE_S)
    world.wait_destroyed(ended)
    assert [b.id for b in world.fake.boxes()] == [kept]
    assert all(status == 200 for _, status, _ in world.destroys)


@pytest.mark.parametrize(
    "world", [{"destroy_failures": [{"offer": 700, "count": 2, "status": 503}]}], indirect=True
)
def test_a_destroy_the_provider_fails_is_asked_again_each_poll_until_it_lands_m14(
    world: World,
) -> None:
    box = world.rent(700, world.box_clock.wall() - timing.BOX_CEILING_GRACE_S)
    world.wait_destroyed(box)
    assert [status for _, status, _ in world.destroys] == [503, 503, 200]
    times = [at for _, _, at in world.destroys]
    assert times[2] - times[1] >= timing.BOX_CEILING_POLL_S  # one poll apart, never a storm


def test_a_box_s_own_key_destroys_only_that_box_and_reads_nothing_m14(world: World) -> None:
    """The fake holds the per-instance key to what Vast documents it may do."""
    far = world.box_clock.wall() + 100 * 24 * 3600
    one, other = world.rent(700, far), world.rent(701, far)
    with_key = VastAdapter(
        api_key=world.fake.instances[one].instance_key, base_url=world.server.url
    )
    with pytest.raises(AuthFailed):
        with_key.destroy(str(other))
    with pytest.raises(AuthFailed):
        with_key.list_instances()
    with pytest.raises(AuthFailed):
        with_key.show(str(one))
    assert sorted(b.id for b in world.fake.boxes()) == [one, other]
    with_key.destroy(str(one))
    assert [b.id for b in world.fake.boxes()] == [other]


def test_a_destroyed_box_s_ceiling_dies_with_it_m14(world: World) -> None:
    far = world.box_clock.wall() + 100 * 24 * 3600
    box = world.rent(700, far)
    sandbox = world.fake.box_table.parent / "sandboxes" / f"vast-{box}"  # type: ignore[union-attr]
    loop = _wait_for(lambda: _pids_running(str(sandbox / "gpuops-ceiling.sh")))  # asleep
    world.vast.destroy(str(box))
    assert not (sandbox / ".onstart.pgid").exists()
    _wait_for(lambda: not any(_running(pid) for pid in loop))  # SIGKILL is the kernel's to end


def test_a_ceiling_moved_later_holds_the_box_past_the_old_one_m14(world: World) -> None:
    """What `guard NAME --hours` runs over ssh when a deadline moves later: the loop wakes at
    the old ceiling, reads the new one, and sleeps on."""
    from fakes.ssh import sandbox as box_shell

    near = world.box_clock.wall() - timing.BOX_CEILING_GRACE_S + FACTOR  # a second away
    box = world.rent(700, near)
    sandbox = world.fake.box_table.parent / "sandboxes" / f"vast-{box}"  # type: ignore[union-attr]
    (asleep,) = _wait_for(lambda: _log(world, box))  # asleep until the old ceiling...
    assert asleep.endswith(f" sleeping until {ceiling_at(near)}")  # ...then it is moved
    later = ceiling_at(near + 100 * 24 * 3600)
    assert box_shell.run(sandbox, rearm_script(near + 100 * 24 * 3600)) == 0
    assert (sandbox / AT_NAME).read_text() == f"{later}\n"
    # the loop's own word that it woke at the old ceiling, read the new one and slept on (an
    # event it writes, not a guess at how long its wake-up takes on a loaded machine)
    lines = _wait_for(
        lambda: [x for x in _log(world, box) if x.endswith(f" sleeping until {later}")]
    )
    woke = int(lines[0].split()[0])
    assert woke >= ceiling_at(near)  # it was the old ceiling's wake-up, not an early one
    assert [b.id for b in world.fake.boxes()] == [box]
    assert world.destroys == []
    assert not any(" destroying " in x for x in _log(world, box))


def _wait_for(check: Callable[[], T]) -> T:
    ends = time.monotonic() + WAIT_S
    while not (found := check()):
        assert time.monotonic() < ends, "timed out"
        time.sleep(0.01)
    return found


def _pids_running(needle: str) -> list[int]:
    """Processes whose command line holds ``needle`` (one pass over /proc may miss some while
    others come and go: callers retry)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle.encode() in cmdline.read_bytes() and _running(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _running(pid: int) -> bool:
    """``pid`` exists and is not a zombie (its own /proc entry, read directly)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


# --- the script in a slim image --------------------------------------------------------------
@pytest.mark.parametrize("tool", ["curl", "wget", "python3"])
def test_any_one_of_curl_wget_or_python_is_enough_for_the_box_to_end_itself_m14(
    world: World, tmp_path: Path, tool: str
) -> None:
    """Run by ``sh`` as the container would, with only sh and the coreutils it uses on PATH,
    and one HTTP client of the three (a slim image): the box still ends itself. Its ``sleep``
    waits a hundredth of a second whatever it is asked (the real clock is the box's here): a
    loop whose destroy fails tries again at once rather than a minute later."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if tool == "python3":
        (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))  # the interpreter
    for name in ("sh", "date", "cat", "nohup", "mv", *([tool] if tool != "python3" else [])):
        found = shutil.which(name)
        assert found is not None, name
        (bin_dir / name).symlink_to(found)
    real_sleep = shutil.which("sleep")
    assert real_sleep is not None
    (bin_dir / "sleep").write_text(f"#!{bin_dir / 'sh'}\nexec {real_sleep} 0.01\n")
    (bin_dir / "sleep").chmod(0o755)
    made = world.vast.create(700, label="slim", image="vastai/base-image", disk_gb=10)
    box = int(made)
    home = tmp_path / "home"
    home.mkdir()
    script = ceiling_script(time.time() - 2 * timing.BOX_CEILING_GRACE_S, world.server.url)
    env = {
        "PATH": str(bin_dir),
        "HOME": str(home),
        "CONTAINER_ID": str(box),
        "CONTAINER_API_KEY": world.fake.instances[box].instance_key,
    }
    run = ["sh", "-c", script]
    proc = subprocess.run(run, env=env, executable=str(bin_dir / "sh"), cwd=home)
    assert proc.returncode == 0
    try:
        world.wait_destroyed(
            box,
            alive=lambda: bool(_pids_running(str(home))),
            log=lambda: (
                (home / "gpuops-ceiling.log").read_text().splitlines()
                if (home / "gpuops-ceiling.log").exists()
                else []
            ),
        )
    finally:
        subprocess.run(["pkill", "-f", str(home)], check=False)
    assert world.destroys[0][1] == 200
    # the answer goes to the log, never into a file on the box
    assert sorted(os.listdir(home)) == [
        "gpuops-ceiling.at",
        "gpuops-ceiling.log",
        "gpuops-ceiling.sh",
    ]
