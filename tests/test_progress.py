"""Progress while `watch` and `destroy` wait, and colour only where NO_COLOR allows it.

Every wait runs on the fake's clock: a line's time is the fake time at which it was said, so
"at least every ten seconds" is checked per simulated interval, never against the wall.
"""

from __future__ import annotations

import argparse
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from test_guard import World, world  # noqa: F401  (world is a fixture)

from fakes.scenario import parse_scenario
from fakes.vast import FakeClock, FakeVast
from gpuops import timing
from gpuops.cli.guard import _watch
from gpuops.cli.market import destroy_command
from gpuops.clock import SYSTEM, WithSleep
from gpuops.events import EventLog
from gpuops.ledger import Ledger
from gpuops.market import jobs
from gpuops.market.rent import Market, RentRequest
from gpuops.model import Verdict
from gpuops.progress import colour_on, paced, paint
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings
from gpuops.store import open_store

BASE = "https://console.vast.ai"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopsTestKeyForRentTests000000000000000 test"


class Timed:
    """A `say` that records the fake time of every line."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.lines: list[tuple[float, str]] = []

    def __call__(self, line: str) -> None:
        self.lines.append((self.clock.wall(), line))

    def gaps(self, start: float, end: float) -> list[float]:
        """Fake seconds between the start, each line, and the end of the wait."""
        times = [start, *(t for t, _ in self.lines), end]
        return [b - a for a, b in zip(times, times[1:])]


def test_a_paced_wait_says_a_line_before_every_piece_and_never_goes_quiet_for_ten_seconds():
    """A 37 s wait is said in pieces of at most half the interval: no gap reaches it."""
    clock = FakeClock()
    say = Timed(clock)
    start = clock.wall()
    wait = paced(clock.advance, say, clock.wall, lambda waited, next_s: f"{waited:.0f}+{next_s:g}")

    wait(37.0)
    wait(3.0)

    assert clock.wall() - start == 40.0
    assert max(say.gaps(start, clock.wall())) <= timing.PROGRESS_EVERY_S / 2
    assert [line for _, line in say.lines] == ["0+5", "5+5", "10+5", "15+5", "20+5", "25+5",
                                               "30+5", "35+2", "37+3"]  # fmt: skip


def test_a_zero_wait_says_nothing():
    """Nothing is said for a wait of no length."""
    clock = FakeClock()
    said: list[str] = []
    paced(clock.advance, said.append, clock.wall, lambda w, n: "x")(0.0)
    assert said == []


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_when_no_color_is_set():
    """NO_COLOR (any value, even empty) and TERM=dumb turn colour off; a pipe never has it."""
    def allowed(environ: dict[str, str]) -> bool:
        return Settings.from_environ(environ).colour

    assert colour_on(Tty(), allowed({})) is True
    assert colour_on(Tty(), allowed({"TERM": "xterm"})) is True
    assert colour_on(Tty(), allowed({"NO_COLOR": ""})) is False
    assert colour_on(Tty(), allowed({"NO_COLOR": "1"})) is False
    assert colour_on(Tty(), allowed({"TERM": "dumb"})) is False
    assert colour_on(io.StringIO(), allowed({})) is False
    assert paint("PASSED", "green", False) == "PASSED"
    assert paint("PASSED", "green", True) == "\033[32mPASSED\033[0m"


def test_watch_says_what_it_waits_for_on_stderr_at_least_every_ten_seconds(world: World, capsys):
    """`gpuops watch --json` on a running job: one progress line on stderr at least every
    PROGRESS_EVERY_S of fake time until its timeout, and stdout holds only the JSON."""
    market = world.rent(hours=1.0)
    rental = market.rentals.get("job")
    assert rental is not None and rental.instance_id is not None
    instance = market.vast.show(rental.instance_id)
    job = jobs.start(rental, instance, world.shell(), ["sleep 600"], "results")
    jobs.Jobs(world.store).put(job)
    say = Timed(world.fake.clock)
    args = argparse.Namespace(once=False, timeout=45.0)
    start = world.fake.now()

    code = _watch(market, rental, world.shell(), args, True, say=say,
                  clock=world.fake.now, sleep=world.fake.advance)  # fmt: skip

    out = capsys.readouterr().out
    assert json.loads(out)["state"] == "running" and code == 5
    assert world.fake.now() - start >= 45.0
    assert len(say.lines) >= 45.0 / timing.PROGRESS_EVERY_S
    assert max(say.gaps(start, world.fake.now())) <= timing.PROGRESS_EVERY_S
    assert all("still running" in line for _, line in say.lines)


def test_watch_once_never_waits_and_says_no_progress(world: World, capsys):
    """`watch --once` looks once: no wait, so no progress line."""
    market = world.rent(hours=1.0)
    rental = market.rentals.get("job")
    said: list[str] = []
    args = argparse.Namespace(once=True, timeout=None)
    _watch(market, rental, world.shell(), args, False, say=said.append,
           clock=world.fake.now, sleep=world.fake.advance)  # fmt: skip
    assert said == [] and "job: no job" in capsys.readouterr().out


@pytest.fixture
def slow_destroy(tmp_path: Path, monkeypatch) -> Any:
    """A rented box whose destroy answers 503 twice, then takes 40 fake s to disappear."""
    offer = {"id": 4242, "machine_id": 31218, "gpu_name": "RTX 4090", "gpu_ram": 24564,
             "dph_total": 0.4, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}  # fmt: skip
    doc = {
        "vast": {
            "api_key": "k-test",
            "ssh_keys": [KEY],
            "offers": [offer],
            "destroy_lag_s": 40,
            "faults": {"destroy_failures": [{"offer": 4242, "count": 2, "status": 503}]},
        }
    }
    fake = FakeVast(parse_scenario(doc), clock=FakeClock())
    state = str(tmp_path / "state")
    events = tmp_path / "events.jsonl"
    monkeypatch.setenv("VAST_URL", BASE)
    monkeypatch.setenv("VAST_API_KEY", "k-test")
    monkeypatch.setenv("GPUOPS_EVENTS", str(events))
    with fake.activate(BASE):
        log = EventLog(events, "alice")
        market = Market(
            VastAdapter(api_key="k-test", base_url=BASE, clock=fake.ticking()),
            Ledger(open_store(state), log, "alice"),
            log,
            probe=lambda instance, box: Verdict.PASS,
            public_key=KEY,
            clock=WithSleep(SYSTEM, fake.advance),
        )
        market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=1.0, race_k=1))
        yield fake, state


def test_destroy_says_it_retries_a_503_and_waits_for_the_confirmation(slow_destroy, capsys):
    """`gpuops destroy --json` through two 503s and a 40 s destroy lag: a line on stderr at
    least every PROGRESS_EVERY_S of fake time, naming each wait; stdout is only the JSON."""
    fake, state = slow_destroy
    say = Timed(fake.clock)
    start = fake.now()

    settings = Settings.from_environ(cli_options={"state": state})
    code = destroy_command("job", settings, "alice", True, say=say, clock=fake.now,
                           sleep=fake.advance)  # fmt: skip

    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and [o["ending"] for o in payload["outcomes"]] == ["gone"]
    assert list(fake.boxes()) == []
    waited = fake.now() - start
    assert waited >= 40.0
    assert len(say.lines) >= waited / timing.PROGRESS_EVERY_S
    assert max(say.gaps(start, fake.now())) <= timing.PROGRESS_EVERY_S
    texts = [line for _, line in say.lines]
    assert any("did not answer; asking again" in t for t in texts)
    assert any("confirm the box gone" in t for t in texts)
    so_far = [int(m[1]) for t in texts if (m := re.search(r"\((\d+) s so far\)", t))]
    assert so_far == sorted(so_far) and len(so_far) == len(texts)


def test_a_watch_that_times_out_ends_with_a_closing_line_and_exit_5(world: World, capsys):
    """L9: a timed-out watch is no failure, and says so last: it stopped watching, the job is
    still running, how to look again (it used to end with no closing line)."""
    market = world.rent(hours=1.0)
    rental = market.rentals.get("job")
    assert rental is not None and rental.instance_id is not None
    instance = market.vast.show(rental.instance_id)
    jobs.Jobs(world.store).put(jobs.start(rental, instance, world.shell(), ["sleep 600"], "r"))
    args = argparse.Namespace(once=False, timeout=30.0)

    code = _watch(market, rental, world.shell(), args, False, say=lambda _: None,
                  clock=world.fake.now, sleep=world.fake.advance)  # fmt: skip

    out = capsys.readouterr().out.strip().splitlines()
    assert code == 5 and out[0].startswith("job: running: ")
    assert out[-1] == (
        "gpuops watch job: stopped watching after 30 s; the job is still running (not a "
        "failure: exit 5); `gpuops watch job` looks again"
    )


def test_a_job_that_ended_is_called_succeeded_or_failed_never_dead():
    """`watch` printed "dead: succeeded with exit code 0"; an exit code says which it was,
    and "dead" is left for an end with no exit code (JSON keeps the watchdog's state)."""
    from gpuops.cli.guard import shown
    from gpuops.market import watchdog as w

    assert shown(w.Status(w.JobState.DEAD, "succeeded with exit code 0", 0)) == "succeeded"
    assert shown(w.Status(w.JobState.DEAD, "failed with exit code 3", 3)) == "failed"
    assert shown(w.Status(w.JobState.DEAD, "the box is gone")) == "dead"
    assert shown(w.Status(w.JobState.RUNNING, "log grew")) == "running"
