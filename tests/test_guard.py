"""The guardian shell against FakeVast in-process and the fake ssh (M5, M7).

The provider is FakeVast through the real adapter on an injected clock; jobs and the results
copy run for real in the fake box's sandbox through the fake ssh program and a real tmux.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import market_world
import pytest
from market_world import KEY, fake_vast, ssh_boxes

from fakes.vast import FakeVast
from gpuops import timing
from gpuops.errors import NotOwned, StoreUnavailable
from gpuops.ledger import BoxState
from gpuops.market import guardian as g
from gpuops.market import jobs
from gpuops.market.ending import destroy_rental
from gpuops.market.guard import Guardian
from gpuops.market.leases import Leases
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import RELEASED
from gpuops.market.results import LocalResults
from gpuops.model import Verdict
from gpuops.settings import Settings

OFFER = 18432117


def scenario(**faults: Any) -> dict[str, Any]:
    offer = {
        "id": OFFER,
        "machine_id": 31218,
        "gpu_name": "RTX 4090",
        "gpu_ram": 24564,
        "dph_total": 0.4,
        "reliability": 0.995,
        "disk_bw": 2000.0,
        "fate": "healthy",
    }
    doc: dict[str, Any] = {"vast": {"api_key": "k-test", "ssh_keys": [KEY], "offers": [offer]}}
    if faults:
        doc["vast"]["faults"] = faults
    return doc


@dataclass
class World(market_world.World):
    def market(self, operator: str = "alice", **kwargs: Any) -> Market:
        kwargs.setdefault("probe", lambda instance, box: Verdict.PASS)
        kwargs.setdefault("seed", 3)
        return super().market(operator, **kwargs)

    def rent(self, hours: float = 2.0) -> Market:
        market = self.market()
        market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=hours, race_k=1))
        return market

    def shell(self) -> jobs.BoxShell:
        return jobs.BoxShell(
            self.tmp / "local", self.tmp / "id_ed25519", Settings.from_environ().ssh()
        )

    def guardian(self, market: Market, me: str, **kwargs: Any) -> Guardian:
        return Guardian(
            market,
            "job",
            shell=self.shell(),
            results=LocalResults(self.tmp / "results"),
            me=me,
            clock=self.fake.ticking(),
            say=lambda line: None,
            **kwargs,
        )

    def run_job(self, market: Market, command: str) -> None:
        rental = market.rentals.get("job")
        assert rental is not None and rental.instance_id is not None
        instance = market.vast.show(rental.instance_id)
        assert instance is not None
        job = jobs.start(rental, instance, self.shell(), [command], "results")
        jobs.Jobs(self.store).put(job)
        ends = time.monotonic() + timing.SSH_COMMAND_TIMEOUT_S
        while time.monotonic() < ends:  # the job is a real process: wait for its exit code
            status = jobs.observe("job", instance, self.shell())
            if status.state.value == "dead":
                return
            time.sleep(timing.GUARD_SPAWN_POLL_S)
        raise AssertionError("the job did not finish")


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch) -> Iterator[World]:
    doc = getattr(request, "param", scenario())
    with ssh_boxes(tmp_path, monkeypatch) as fake_dir, fake_vast(doc, fake_dir) as fake:
        yield World(fake, tmp=tmp_path)


def test_the_guardian_copies_results_destroys_at_the_deadline_and_exits_0(world):
    """M5: results copied off first, then destroy, confirmed gone by show, records released."""
    market = world.rent(hours=2.0)
    box_id = world.alive()[0]
    world.run_job(market, "mkdir -p results/ckpt && echo 42 > results/ckpt/answer.txt")
    rental = market.rentals.get("job")
    assert rental is not None and rental.deadline_at is not None

    code = world.guardian(world.market(), "alice/pi/1/aa").run()

    assert code == g.GONE
    assert world.alive() == []
    assert world.fake.instances[box_id].destroyed_at is not None
    (answer,) = (world.tmp / "results" / "job").glob("*/ckpt/answer.txt")  # NAME/<id>/ (M16)
    assert answer.read_text() == "42\n"
    after = market.rentals.get("job")
    assert after is not None and after.state == RELEASED
    assert market.ledger.get(after.box or "").state is BoxState.RELEASED
    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is True and copied["results"] == "delivered"
    # M17: recorded on the rental `boxes` reads: delivered, and where
    assert (after.results, after.results_detail) == ("delivered", str(answer.parents[1]))
    (gone,) = world.events.kinds("guard.confirmed_gone")
    copy_at, _ = g.schedule(rental.started_at or 0.0, rental.deadline_at)
    assert copy_at - rental.deadline_at <= gone["delay_s"] <= 0
    assert world.events.kinds("guard.exit")[-1]["code"] == 0
    assert job_lease(world.store) == (None, None)


def test_without_a_declared_job_the_guardian_destroys_without_copying(world):
    """M5: nothing to copy is said in the log, and the destroy still happens."""
    world.rent(hours=1.0)
    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE
    assert world.alive() == []
    (copied,) = world.events.kinds("guard.copy")
    assert copied == {
        "name": "job",
        "instance_id": copied["instance_id"],
        "guardian": "alice/pi/1/aa",
        "rental_id": world.market().rentals.get("job").rental_id,  # M16: its incarnation
        "ok": False,
        "detail": "no job declared results: nothing to copy",
    }


def test_a_missing_results_directory_is_logged_and_the_box_still_destroyed(world):
    """M5: a failed copy never keeps the box: the ceiling wins."""
    market = world.rent(hours=1.0)
    world.run_job(market, "echo no results here")
    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE
    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is False and "no results directory results" in copied["detail"]
    assert world.alive() == []
    after = market.rentals.get("job")  # none made is said, and is not "missing" (M17)
    assert after is not None and after.results == "none"
    assert "no results directory results" in str(after.results_detail)


@pytest.mark.parametrize(
    "world", [scenario(destroy_failures=[{"offer": OFFER, "count": 9, "status": 503}])],
    indirect=True,
)  # fmt: skip
def test_a_failing_destroy_is_retried_until_the_box_is_confirmed_gone(world):
    """M4/M5: a destroy that fails keeps the guardian at it; it never exits 0 before gone."""
    world.rent(hours=1.0)
    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE
    assert world.alive() == []
    assert len(world.events.kinds("guard.destroy")) >= 2
    assert world.events.kinds("guard.destroy.pending")


def test_a_guardian_given_no_clock_runs_on_its_market_s_one_clock(world):
    """The command's one clock reaches the guardian through its market: given none, the
    guardian reads and waits on the market's (under GPUOPS_TIME_SCALE, the fakes' scaled one),
    never the real clock beside a market on another."""
    market = world.market()
    guardian = Guardian(
        market,
        "job",
        shell=world.shell(),
        results=LocalResults(world.tmp / "results"),
        say=lambda line: None,
    )
    assert guardian.clock is market.clock
    before = world.fake.now()
    guardian.market.clock.sleep(2.0)  # the market's waits are the guardian's, on that clock
    assert world.fake.now() - before == pytest.approx(2.0)


def test_a_wait_the_market_makes_inside_a_guardian_is_the_guardian_s_own_sleep(world):
    """A destroy's confirmation poll inside the guardian waits the whole of
    DESTROY_CONFIRM_POLL_S on the guardian's one clock, renewing its lease meanwhile: no
    scale divides it (under GPUOPS_TIME_SCALE the clock itself runs faster)."""
    guardian = world.guardian(world.rent(), "alice/pi/1/aa")
    assert guardian.step() is None  # it holds the lease
    before = world.fake.now()
    beat = job_lease(world.store)[0]

    guardian.market.clock.sleep(timing.GUARDIAN_HEARTBEAT_S * 2)

    assert world.fake.now() - before == pytest.approx(timing.GUARDIAN_HEARTBEAT_S * 2)
    renewed = job_lease(world.store)[0]
    assert beat is not None and renewed is not None and renewed.beats > beat.beats


def test_a_second_guardian_stands_by_and_takes_over_only_when_the_first_goes_stale(world):
    """M7: one responsible guardian; a standby takes over a stale lease and finishes the job."""
    world.rent(hours=1.0)
    first = world.guardian(world.market(), "alice/laptop/1/aa")
    second = world.guardian(world.market(), "alice/pi/2/bb")
    assert first.step() is None  # takes the lease
    assert second.step() is None
    assert second.mind.role is g.Role.STANDBY
    held = job_lease(world.store)[0]
    assert held is not None and held.holder == "alice/laptop/1/aa"
    world.fake.advance(timing.LEASE_TTL_S / 2)
    second.step()
    lease = job_lease(world.store)[0]
    assert lease is not None and lease.holder == "alice/laptop/1/aa"  # still fresh: no takeover
    world.fake.advance(timing.LEASE_TTL_S / 2)
    assert second.run() == g.GONE  # the first went silent: the second takes over and destroys
    assert world.alive() == []
    taken = world.events.kinds("guard.lease.taken")
    assert [t["guardian"] for t in taken] == ["alice/laptop/1/aa", "alice/pi/2/bb"]
    assert taken[1]["previous"] == "alice/laptop/1/aa"


def test_a_guardian_that_lost_its_lease_leaves_7_only_after_its_successor_renews(world):
    """M7: superseded counts only with a verified-live successor."""
    world.rent(hours=10.0)
    first = world.guardian(world.market(), "alice/laptop/1/aa")
    second = world.guardian(world.market(), "alice/pi/2/bb")
    first.step()
    second.step()  # a standby: it sees the lease and starts its watch on its own clock
    world.fake.advance(timing.LEASE_TTL_S)  # the laptop slept through its heartbeats
    second.step()  # takes over
    assert first.step() is None  # sees the successor: starts verifying, does not leave
    assert first.mind.role is g.Role.VERIFYING
    code = None
    for _ in range(40):
        world.fake.advance(timing.LEASE_POLL_S)
        second.step()
        code = first.step()
        if code is not None:
            break
    assert code == g.SUPERSEDED
    assert world.alive() != []  # the box is the successor's to destroy at its deadline
    (left,) = [e for e in world.events.kinds("guard.exit") if e["guardian"] == first.me]
    assert left["code"] == 7 and "alice/pi/2/bb" in left["reason"]


def test_a_standby_leaves_0_once_another_destroyed_the_box(world):
    """M7: a standby exits 0 only after the provider confirms the box gone."""
    market = world.rent(hours=1.0)
    holder = world.guardian(world.market(), "alice/laptop/1/aa")
    standby = world.guardian(world.market(), "alice/pi/2/bb")
    holder.step()
    standby.step()
    destroy_rental(market, "job")  # the user destroys it by hand
    assert standby.step() == g.GONE


def test_another_operators_guardian_is_refused(world):
    """M3: a guardian acts only on its own operator's rental."""
    world.rent(hours=1.0)
    with pytest.raises(NotOwned):
        world.guardian(world.market("bob"), "bob/pi/1/aa").run()
    assert world.alive() != []


def test_a_store_outage_is_loud_and_the_guardian_carries_on(world):
    """M7: an unreachable store is an error event and a retry, never a silent exit."""
    world.rent(hours=1.0)
    guardian = world.guardian(world.market(), "alice/pi/1/aa")
    real_get = world.store.get
    failures = iter(range(3))

    def flaky(key: str):
        if key.startswith("market/leases/") and next(failures, None) is not None:
            raise StoreUnavailable("the store is unreachable")
        return real_get(key)

    world.store.get = flaky  # type: ignore[method-assign]
    assert guardian.run() == g.GONE
    errors = world.events.kinds("guard.error")
    assert len(errors) == 3 and "unreachable" in errors[0]["error"]
    assert world.alive() == []


def test_the_lease_records_a_finished_copy_so_a_successor_skips_it(world):
    """M5: a guardian taking over after the copy destroys at once instead of copying again."""
    market = world.rent(hours=1.0)
    world.run_job(market, "mkdir -p results && echo 1 > results/a")
    first = world.guardian(world.market(), "alice/laptop/1/aa")
    rental = market.rentals.get("job")
    assert rental is not None and rental.deadline_at is not None
    copy_at, _ = g.schedule(rental.started_at or 0.0, rental.deadline_at)
    first.step()
    world.fake.advance(copy_at - world.fake.now())
    first.step()  # a heartbeat was due
    first.step()  # copies
    lease = job_lease(world.store)[0]
    assert lease is not None and lease.copied
    world.fake.advance(timing.LEASE_TTL_S)  # then dies before destroying
    second = world.guardian(world.market(), "alice/pi/2/bb")
    assert second.run() == g.GONE
    assert len(world.events.kinds("guard.copy")) == 1


def test_no_account_key_reaches_the_ssh_that_starts_a_job_or_copies_its_results(world, monkeypatch):
    """M5/H3: the provider key stays on this host: the ssh child never sees it."""
    monkeypatch.setenv("VAST_API_KEY", "k-secret-never-on-a-box")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-never-on-a-box")
    market = world.rent(hours=1.0)
    world.run_job(market, "mkdir -p results && env > results/env.txt")
    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE

    from fakes.ssh.boxes import TableState

    calls = TableState(world.tmp / "fake" / "boxes.yaml").read_calls()
    assert calls and all(call["secret_env"] == [] for call in calls)
    (env,) = (world.tmp / "results" / "job").glob("*/env.txt")
    copied = env.read_text()
    assert "never-on-a-box" not in copied


def test_an_unexpected_error_ends_the_guardian_loudly_in_the_event_log(world):
    """M7: a crash is never silent: its exit code and reason reach the event log first."""
    world.rent(hours=1.0)
    guardian = world.guardian(world.market(), "alice/pi/1/aa")
    guardian.bind()

    def broken(key: str):
        raise RuntimeError("disk on fire")

    world.store.get = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="disk on fire"):
        guardian.run()
    (ended,) = world.events.kinds("guard.exit")
    assert ended["code"] == 1 and ended["reason"] == "RuntimeError: disk on fire"


class Skewed:
    """Another host's clock: its wall time ``skew_s`` off the fake's, its monotonic time and
    its waits the fake's own."""

    def __init__(self, fake: FakeVast, skew_s: float) -> None:
        self.fake, self.skew_s = fake, skew_s

    def wall(self) -> float:
        return self.fake.now() + self.skew_s

    def monotonic(self) -> float:
        return self.fake.now()

    def sleep(self, seconds: float) -> None:
        self.fake.advance(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return self.fake.clock.wait(event, seconds)  # as the fake's own: real seconds


@pytest.mark.parametrize("skew_s", [300.0, -300.0])
def test_two_hosts_five_minutes_apart_never_both_guard_nor_both_stand_aside_m7(world, skew_s):
    """M7 across hosts: guardians on two hosts sharing state, their wall clocks five minutes
    apart, judge the lease only on their own monotonic clocks: one is responsible and one
    stands by for as long as both live, and the standby takes over a TTL after the holder
    dies, never before."""
    world.rent(hours=10.0)
    here = world.guardian(world.market(), "alice/laptop/1/aa")
    there = Guardian(
        world.market(),
        "job",
        shell=world.shell(),
        results=LocalResults(world.tmp / "results"),
        me="alice/pi/2/bb",
        clock=Skewed(world.fake, skew_s),  # its wall clock is five minutes off
        say=lambda line: None,
    )
    for n in range(120):  # ten minutes of both alive
        here.step()
        there.step()
        roles = {here.mind.role, there.mind.role}
        if n:  # the first round takes the lease; from the second on, one holds it
            assert roles == {g.Role.RESPONSIBLE, g.Role.STANDBY}, roles
        world.fake.advance(timing.LEASE_POLL_S)
    holder, standby = (here, there) if here.mind.role is g.Role.RESPONSIBLE else (there, here)

    died_at = world.fake.now()  # the holder dies: only the standby steps from now on
    while standby.mind.role is not g.Role.RESPONSIBLE:
        standby.step()
        world.fake.advance(timing.LEASE_POLL_S)

    assert world.fake.now() - died_at >= timing.LEASE_TTL_S
    assert world.fake.now() - died_at <= timing.LEASE_TTL_S + 3 * timing.LEASE_POLL_S
    (lease, _) = job_lease(world.store)
    assert lease.holder == standby.me != holder.me


def job_lease(store):  # type: ignore[no-untyped-def]
    """The lease of rental "job"'s current incarnation (M16: one lease per incarnation)."""
    from gpuops.market.rentals import Rentals, lease_key

    rental = Rentals(store, "alice").get("job")
    return Leases(store).read("job" if rental is None else lease_key(rental))


# --- one incarnation, one identity (M16) ------------------------------------------------------
def _holding(world: World, name: str, me: str, operator: str = "alice") -> Guardian:
    guardian = world.guardian(world.market(operator), me)
    while not guardian.mind.held:
        assert guardian.step() is None
    return guardian


def test_a_copy_of_an_earlier_incarnation_never_stands_for_a_later_one_s_m16(world):
    """A guardian killed after copying leaves its lease saying "copied"; the name's next
    incarnation has results of its own, and its guardian copies them."""
    market = world.rent(hours=1.0)
    world.run_job(market, "mkdir -p results && echo first > results/a")
    first = _holding(world, "job", "alice/laptop/1/aa")
    rental = market.rentals.get("job")
    copy_at, _ = g.schedule(rental.started_at or 0.0, rental.deadline_at or 0.0)
    world.fake.advance(copy_at - world.fake.now())
    while not (job_lease(world.store)[0] or g.Lease("", 0.0)).copied:
        assert first.step() is None  # copies, then is killed before its destroy
    destroy_rental(world.market(), "job")  # a person ends it; the stale lease stays
    again = world.rent(hours=1.0)
    world.run_job(again, "mkdir -p results && echo second > results/a")
    assert world.guardian(world.market(), "alice/pi/2/bb").run() == g.GONE
    delivered = sorted(p.read_text() for p in (world.tmp / "results" / "job").glob("*/a"))
    assert delivered == ["first\n", "second\n"]  # each under its own rental id, none skipped


def test_a_guardian_of_an_ended_incarnation_leaves_with_0_when_another_races_the_name_m16(world):
    """Alice's rental is destroyed while her guardian still holds its lease; Bob rents the
    name at once. His guardian is not told "already guarded" by hers: it takes a lease of his
    incarnation's own; hers sees its incarnation ended and leaves 0 (not refused by M3), and
    Bob's box lives until his deadline."""
    market = world.rent(hours=1.0)
    hers = _holding(world, "job", "alice/laptop/1/aa")
    destroy_rental(market, "job")
    bob = world.market("bob")
    bob.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=3.0, race_k=1))
    (bobs,) = world.alive()
    his = _holding(world, "job", "bob/pi/1/bb", operator="bob")  # not a standby to hers
    assert hers.run() == g.GONE
    assert world.alive() == [bobs]
    deadline = bob.rentals.get("job").deadline_at
    assert his.run() == g.GONE
    assert world.alive() == [] and world.fake.instances[bobs].destroyed_at >= deadline - (
        timing.DEADLINE_MARGIN_S
    )


def test_a_guardian_of_an_earlier_incarnation_never_ends_the_next_one_s_box_m16(world):
    """Alice re-rents her own name while the guardian of its first incarnation still runs:
    that guardian ends what is left of its own incarnation and leaves; the new box is the
    new incarnation's, which its own guardian ends at its own deadline, never before."""
    market = world.rent(hours=1.0)
    old = _holding(world, "job", "alice/laptop/1/aa")
    destroy_rental(market, "job")
    world.rent(hours=8.0)
    (second,) = world.alive()
    world.fake.advance(2 * 3600.0)  # past the first incarnation's deadline and its grace
    assert old.run() == g.GONE
    assert world.alive() == [second]
    new = world.guardian(world.market(), "alice/pi/2/bb")
    assert new.run() == g.GONE and world.alive() == []


def test_every_event_a_guardian_writes_names_the_incarnation_it_answers_for_m16(world):
    """M16: the guardians of a name's two incarnations (both alice's) write every guard.*
    event under their own rental id, from their start to their exit."""
    market = world.rent(hours=1.0)
    first_id = market.rentals.get("job").rental_id
    old = _holding(world, "job", "alice/laptop/1/aa")
    destroy_rental(market, "job")
    world.rent(hours=1.0)
    second_id = world.market().rentals.get("job").rental_id
    assert old.run() == g.GONE
    new = world.guardian(world.market(), "alice/pi/2/bb")
    assert new.run() == g.GONE

    by = {"alice/laptop/1/aa": first_id, "alice/pi/2/bb": second_id}
    guard_events = [(k, p) for k, p in world.events.events if k.startswith("guard.")]
    assert {k for k, _ in guard_events} >= {"guard.start", "guard.lease.taken", "guard.exit"}
    assert first_id != second_id and all(
        p.get("rental_id") == by[p["guardian"]] for _, p in guard_events
    ), [(k, p.get("guardian"), p.get("rental_id")) for k, p in guard_events]


def group_alive(pgid: int) -> bool:
    """Some process of group ``pgid`` still runs (a zombie waiting to be reaped does not).
    The kernel says first whether the group has any process at all; a pass over /proc, which
    can miss an entry while processes come and go, is made three times before "none runs"."""
    import os

    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for _ in range(3):
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, _, group = stat.read_text().rpartition(")")[2].split()[:3]
            except (OSError, ValueError):
                continue  # it ended while we looked
            if int(group) == pgid and state != "Z":
                return True
    return False


def wait_until(what: str, check: Any, limit_s: float = timing.SSH_COMMAND_TIMEOUT_S) -> Any:
    """Poll a real process's doing until ``check`` holds (a bound, never a guess at timing)."""
    ends = time.monotonic() + limit_s
    while time.monotonic() < ends:
        found = check()
        if found:
            return found
        time.sleep(timing.GUARD_SPAWN_POLL_S)
    raise AssertionError(f"timed out waiting for {what}")


def test_ended_copies_are_killed_by_process_group_reaped_and_their_tarballs_removed_m17(
    tmp_path,
):
    """M17: a copy child registered with the guardian's Copies is killed with its whole process
    group (what it started too), reaped, and its partial tarball and folder removed when the
    guardian is stopped; a copy that starts afterwards is ended at once, never told started."""
    started: list[tuple[int, Path]] = []
    copies = jobs.Copies(started=lambda pid, target: started.append((pid, target)))
    folder = tmp_path / "gpuops-results-1"
    folder.mkdir()
    tarball = folder / "results.tar.gz"
    with tarball.open("wb") as out:  # a child that starts a grandchild in its group, as ssh may
        proc = subprocess.Popen(
            ["sh", "-c", "sleep 600 & echo partial; wait"], stdout=out, start_new_session=True
        )
    assert copies.add(proc, tarball)
    assert started == [(proc.pid, tarball)] and copies.live() == [proc.pid]
    wait_until("the partial tarball", lambda: tarball.stat().st_size > 0)  # the child writes

    assert copies.end("stopped by SIGTERM") == [proc.pid]

    assert proc.returncode == -signal.SIGKILL  # reaped, by its group's SIGKILL
    wait_until("the grandchild to die", lambda: not group_alive(proc.pid))  # SIGKILLed too
    assert not folder.exists() and copies.live() == []
    assert copies.ended == "stopped by SIGTERM"
    late_folder = tmp_path / "gpuops-results-2"
    late_folder.mkdir()
    (late_folder / "results.tar.gz").write_bytes(b"")
    late = subprocess.Popen(["sleep", "600"], start_new_session=True)
    assert not copies.add(late, late_folder / "results.tar.gz")
    assert late.returncode == -signal.SIGKILL and not late_folder.exists()
    assert started == [(proc.pid, tarball)] and copies.live() == []


def test_a_copy_that_ran_to_its_end_is_recorded_delivered_none_or_missing_m17():
    """M17: delivered and where; none when the job made no results directory; missing and
    why for any other error (a failed ssh, a budget overrun, a refused destination)."""
    from gpuops.market.guard import results_outcome
    from gpuops.market.results import Copied

    assert results_outcome(Copied("", "/r/job/1", 10)) == ("delivered", "/r/job/1")
    assert results_outcome(Copied("exit 3: no results", None, 0, none_made=True)) == (
        "none",
        "exit 3: no results",
    )
    assert results_outcome(Copied("the copy overran its 5 s budget", None, 9)) == (
        "missing",
        "the copy overran its 5 s budget",
    )
