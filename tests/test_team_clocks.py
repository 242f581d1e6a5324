"""No decision compares two hosts' clocks (M17): a deadline written on one host's clock is
never enforced early by another host whose clock runs ahead, and a box still ends within the
deadline + grace + skew bound when the host whose clock runs behind is the only one left.

Two hosts share one store, each with its own market client (its own ``host`` name and wall
clock, ``Skewed`` minutes off the provider's); FakeVast's own record is the verdict.
"""

from __future__ import annotations

import json
import os

import pytest
from test_guard import Skewed, World, scenario, world  # noqa: F401  (the fixture)

from gpuops import timing
from gpuops.clock import WithSleep
from gpuops.market import guardian as g
from gpuops.market.guard import Guardian
from gpuops.market.rent import Market, RentRequest
from gpuops.market.results import LocalResults
from gpuops.market.sweep import sweep

SKEW_S = 600.0  # host B's clock runs ten minutes ahead of host A's


def market_on(world: World, host: str, skew_s: float) -> Market:
    """alice's client on ``host``, whose wall clock is ``skew_s`` off the provider's."""
    clock = Skewed(world.fake, skew_s)
    return world.market(
        ledger_clock=clock, clock=WithSleep(clock, world.fake.advance), seed=9, host=host
    )


def rent_on(world: World, host: str, skew_s: float) -> tuple[float, int]:
    """Rent K for six minutes on ``host``: its deadline on the provider's clock, its box."""
    rental = market_on(world, host, skew_s).rent(
        RentRequest(name="K", gpu_name="RTX 4090", hours=0.1, race_k=1)
    )
    assert rental.deadline_at is not None and rental.instance_id is not None
    return rental.deadline_at - skew_s, int(rental.instance_id)


@pytest.mark.parametrize(("renter", "sweeper"), [(0.0, SKEW_S), (-SKEW_S, 0.0)])
def test_a_host_whose_clock_runs_ahead_never_sweeps_another_hosts_box_early_m17(
    world, renter, sweeper
):
    """M17: host A rents K with a deadline six minutes away; host B, its clock ten minutes
    ahead, sweeps three minutes before that deadline and destroys nothing; its sweep ends the
    box only once the skew allowance has passed, within deadline + grace + skew."""
    deadline, box = rent_on(world, "hostA", renter)
    world.fake.advance(deadline - 180.0 - world.fake.now())  # three minutes before, truly

    report = sweep(market_on(world, "hostB", sweeper))

    assert report.expired == [] and world.alive() == [box]  # B's clock says 7 min past
    world.fake.advance(timing.CLOCK_SKEW_S - SKEW_S + 181.0)  # B's clock: allowance passed
    report = sweep(market_on(world, "hostB", sweeper))
    assert world.alive() == []
    assert world.fake.now() <= deadline + timing.OWNER_GRACE_S + timing.CLOCK_SKEW_S


def test_a_host_whose_clock_runs_behind_still_ends_the_box_within_grace_and_skew_m17(world):
    """M17: host B rents with its clock ten minutes ahead, and host A (behind) is the only one
    left to sweep: the box ends no later than deadline + grace + the real skew, truly."""
    deadline, box = rent_on(world, "hostB", SKEW_S)
    limit = deadline + timing.OWNER_GRACE_S + SKEW_S
    while world.alive() and world.fake.now() <= limit:
        sweep(market_on(world, "hostA", 0.0))
        world.fake.advance(timing.LEASE_POLL_S)
    assert world.alive() == []
    assert deadline < world.fake.instances[box].destroyed_at <= limit


def test_a_guardian_on_another_host_ends_the_box_no_earlier_than_the_renters_own_would_m17(world):
    """M17: the only guardian of K runs on host B, its clock ten minutes ahead of the renter's
    host A: it copies and destroys no earlier than A's own guardian would have (its schedule
    moved by the skew allowance), and ends the box within grace + skew of the deadline."""
    deadline, box = rent_on(world, "hostA", 0.0)
    rental = market_on(world, "hostA", 0.0).rentals.get("K")
    assert rental is not None and rental.started_at is not None
    copy_at, _ = g.schedule(rental.started_at, deadline)  # when A's own guardian would copy
    there = Guardian(
        market_on(world, "hostB", SKEW_S),
        "K",
        shell=world.shell(),
        results=LocalResults(world.tmp / "results"),
        me="alice/hostB/2/bb",
        clock=Skewed(world.fake, SKEW_S),
        say=lambda line: None,
    )
    while world.alive():
        assert there.step() is None
        if world.alive():
            assert world.fake.now() < deadline + timing.OWNER_GRACE_S + timing.CLOCK_SKEW_S
    (destroyed,) = [b for b in world.fake.instances.values() if b.id == box]
    assert copy_at + timing.CLOCK_SKEW_S - SKEW_S <= destroyed.destroyed_at
    assert destroyed.destroyed_at <= deadline + timing.CLOCK_SKEW_S
    assert there.run() == g.GONE


# --- is it guarded? decided on this host's facts, as the guardian decides (M17) --------------
def settings_at(tmp_path):
    from gpuops.settings import Settings

    (tmp_path / "state").mkdir(mode=0o700, exist_ok=True)
    return Settings.from_environ({"GPUOPS_STATE": str(tmp_path / "state")})


def test_a_guardian_this_host_started_is_found_by_its_own_process_m17(tmp_path):
    """M5/M17: `rent` and `guard` find a guardian of NAME this host started by asking the
    process named in its pid file, whose command line must be that guardian's; a dead one or
    another program is not a guardian."""
    import subprocess
    import sys

    from gpuops.market.spawn import _write_pid, running_here

    settings = settings_at(tmp_path)
    folder = settings.local_dir / "guardians"
    folder.mkdir(mode=0o700)
    assert running_here("job", settings) is None  # no pid file
    sleeper = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    with subprocess.Popen([*sleeper, "guard", "job"], stdin=subprocess.PIPE) as guard, \
            subprocess.Popen([*sleeper, "guard", "jobs"], stdin=subprocess.PIPE) as other:  # fmt: skip
        _write_pid(folder / "job.pid", guard.pid)
        assert running_here("job", settings) == guard.pid
        _write_pid(folder / "job.pid", other.pid)  # a guardian of another rental
        assert running_here("job", settings) is None
        guard.stdin.close()  # type: ignore[union-attr]
        other.stdin.close()  # type: ignore[union-attr]
    _write_pid(folder / "job.pid", guard.pid)  # it has exited
    assert running_here("job", settings) is None
    (folder / "job.pid").write_text("not a pid\n")
    assert running_here("job", settings) is None


def test_a_dead_guardians_fresh_lease_on_this_host_starts_a_successor_at_once_m17(tmp_path):
    """M7/M17: a guardian on this host killed a second ago left a fresh lease: its process is
    gone, so `guard NAME` starts a successor now, not a TTL later; a live holder here, or
    another host's holder with a guardian of ours already standing by here, is enough."""
    import os

    from gpuops.market.guardian import Lease
    from gpuops.market.spawn import _write_pid, already_guarded

    settings = settings_at(tmp_path)
    now = 1_800_000_000.0
    dead = Lease("alice/hostA/999999999/ab", now - 1.0, 4)  # no such pid
    assert already_guarded("job", dead, now, "hostA", settings) is None
    live = Lease(f"alice/hostA/{os.getpid()}/ab", now - 1.0, 4)
    assert already_guarded("job", live, now, "hostA", settings) == f"already guarded by {live.holder}"
    there = Lease("alice/hostB/41/ab", now + 600.0, 4)  # its clock ten minutes ahead
    assert already_guarded("job", there, now, "hostA", settings) is None  # a standby starts
    folder = settings.local_dir / "guardians"
    folder.mkdir(mode=0o700)
    _write_pid(folder / "job.pid", os.getpid())  # not a guardian's command line
    assert already_guarded("job", there, now, "hostA", settings) is None


def test_boxes_never_calls_another_hosts_running_guardian_stale_m17(tmp_path, capsys, monkeypatch):
    """M17: `boxes` on host B, its clock ten minutes off host A's, shows A's guardian as held
    from another host, never STALE; a lease of this host whose process is gone is STALE."""
    import socket
    import time

    from gpuops import cli
    from gpuops.market import leases, rentals
    from gpuops.store.local import LocalStore

    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    store = LocalStore(str(tmp_path / "state"))
    here = socket.gethostname()
    for name, holder, beat in [
        ("ahead", "alice/otherhost/41/ab", time.time() + 600),
        ("behind", "alice/otherhost/42/ab", time.time() - 600),
        ("dead", f"alice/{here}/999999999/ab", time.time()),
    ]:
        rental = rentals.Rental(name, "alice", rentals.LIVE, 1, instance_id="1", started_at=1.0)
        store.create(f"market/rentals/{name}", rentals.CODEC.encode(rental))
        store.create(f"market/leases/{name}", leases.CODEC.encode(g.Lease(holder, beat, 3)))

    code = cli.main(["--state", str(tmp_path / "state"), "--operator", "alice", "--json", "boxes"])

    rows = {row["name"]: row["guard"] for row in json.loads(capsys.readouterr().out)["rentals"]}
    assert code == 0
    assert rows["ahead"].startswith("held from another host") and "STALE" not in rows["ahead"]
    assert rows["behind"].startswith("held from another host")
    assert rows["dead"].startswith("STALE")


# --- one incarnation, one identity (M16) -------------------------------------------------------
def failing_then_spare() -> dict[str, object]:
    doc = scenario(destroy_failures=[{"offer": 18432117, "count": 30, "status": 503}])
    first = doc["vast"]["offers"][0]
    doc["vast"]["offers"].append({**first, "id": 18432118, "machine_id": 31219})
    return doc


@pytest.mark.parametrize("world", [failing_then_spare()], indirect=True)
def test_a_name_whose_previous_rental_still_has_a_box_is_refused_to_another_operator_m16(world):
    """M16: alice's rental X failed and its box's destroy is still being retried; bob's `rent
    X` is refused (exit 3, M16, naming alice and the record), creates nothing, and once her
    box is confirmed gone he rents X, his own incarnation with its own id."""
    from gpuops.errors import Refused
    from gpuops.market.ending import destroy_rental
    from gpuops.market.rentals import FAILED, LIVE
    from gpuops.market.teardown import exit_code
    from gpuops.model import Verdict as V

    alice = market_on(world, "hostA", 0.0)
    alice.probe = lambda instance, box: V.NO_GPU  # her only box fails: the race fails
    with pytest.raises(Exception):
        alice.rent(RentRequest(name="X", gpu_name="RTX 4090", hours=1.0, race_k=1, max_creates=1))
    mine = alice.rentals.get("X")
    assert mine is not None and mine.state == FAILED and world.alive()  # her box still bills
    creates = len([c for c in world.fake.calls if c.route == "create"])

    bob = world.market("bob")
    with pytest.raises(Refused, match="M16.*alice's, still has 1 box record") as refused:
        bob.rent(RentRequest(name="X", gpu_name="RTX 4090", hours=1.0, race_k=1))
    assert refused.value.exit_code == 3
    assert len([c for c in world.fake.calls if c.route == "create"]) == creates

    for _ in range(30):  # her guardian's retries, in short
        if exit_code(destroy_rental(market_on(world, "hostA", 0.0), "X")) == 0:
            break
        world.fake.advance(timing.DESTROY_CONFIRM_POLL_S)
    assert world.alive() == []
    again = bob.rent(RentRequest(name="X", gpu_name="RTX 4090", hours=1.0, race_k=1))
    assert again.state == LIVE and again.owner == "bob"
    assert again.rental_id is not None and again.rental_id != mine.rental_id


def test_two_incarnations_of_one_name_deliver_their_results_apart_m16(world, tmp_path):
    """M16: results land under NAME/<rental id>/: a later rental of the same name (here
    alice's own) never overwrites or mixes with the earlier one's."""
    from gpuops.market.rentals import results_key
    from gpuops.market.results import LocalResults

    first = world.rent(hours=1.0)
    world.run_job(first, "mkdir -p results && echo one > results/a.txt && echo keep > results/b.txt")
    assert guardian_of(world, "job").run() == g.GONE
    earlier = first.rentals.get("job")
    second = world.rent(hours=1.0)
    world.run_job(second, "mkdir -p results && echo two > results/a.txt")
    assert guardian_of(world, "job").run() == g.GONE
    later = second.rentals.get("job")

    root = world.tmp / "results"
    assert earlier.rental_id != later.rental_id
    assert (root / results_key(earlier) / "a.txt").read_text() == "one\n"
    assert (root / results_key(earlier) / "b.txt").read_text() == "keep\n"
    assert (root / results_key(later) / "a.txt").read_text() == "two\n"
    assert not (root / results_key(later) / "b.txt").exists()
    assert LocalResults(root).root == root


def guardian_of(world: World, name: str) -> Guardian:
    return Guardian(
        world.market(),
        name,
        shell=world.shell(),
        results=LocalResults(world.tmp / "results"),
        me="alice/hostA/1/aa",
        clock=world.fake.ticking(),
        say=lambda line: None,
    )
