"""The guardian is the last to die (M17): a fault in its own work, or a bad record anywhere in
the shared state, ends in its destroy with confirmation, then a loud exit.

Two operators (alice and bob) share one store through their own clients; the provider is
FakeVast in-process through the real adapter, and every verdict asks the fake which boxes
still bill (``world.alive()``), never what gpuops printed.
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path

import pytest
from market_world import BASE, KEY
from test_guard import OFFER, World, scenario, world  # noqa: F401  (the fixture)

from gpuops.errors import StateError
from gpuops.ledger import PREFIX
from gpuops.market import guardian as g
from gpuops.market.ending import destroy_rental
from gpuops.market.guard import FAULTED, Guardian, stopped
from gpuops.market.leases import Leases
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import LIVE, RELEASED
from gpuops.market.results import LocalResults, S3Results
from gpuops.market.sweep import sweep
from gpuops.market.teardown import Ending, exit_code
from gpuops.store.local import LocalStore


def two_offers() -> dict[str, object]:
    doc = scenario()
    first = doc["vast"]["offers"][0]
    doc["vast"]["offers"].append({**first, "id": OFFER + 1, "machine_id": 31219})
    return doc


def market_of(world: World, operator: str) -> Market:
    """``operator``'s own client of the shared store and the provider."""
    return world.market(operator)


def rent(world: World, operator: str, name: str, hours: float = 1.0) -> str:
    """Rent ``name`` as ``operator``; the kept box's instance id."""
    rental = market_of(world, operator).rent(
        RentRequest(name=name, gpu_name="RTX 4090", hours=hours, race_k=1)
    )
    assert rental.state == LIVE and rental.instance_id is not None
    return rental.instance_id


def spoil(world: World, name: str) -> tuple[str, bytes]:
    """Edit rental ``name``'s kept box record by hand into bytes no codec reads."""
    market = market_of(world, "nobody")
    rental = market.rentals.get(name)
    assert rental is not None and rental.box is not None
    key = PREFIX + rental.box
    found = world.store.get(key)
    assert found is not None
    garbage = found.data[: len(found.data) // 2]
    world.store.put(key, garbage, found.version)
    return key, garbage


def guardian(world: World, market: Market, name: str, me: str, **kwargs: object) -> Guardian:
    options: dict[str, object] = {"results": LocalResults(world.tmp / "results"), **kwargs}
    return Guardian(
        market,
        name,
        shell=world.shell(),
        me=me,
        clock=world.fake.ticking(),
        say=lambda line: None,
        **options,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("world", [two_offers()], indirect=True)
def test_a_hand_edited_record_of_another_operator_disarms_no_guardian_sweep_or_destroy_m17(world):
    """M17: bob's box record edited by hand blocks only itself: alice's guardian ends her box
    at its deadline and exits 0, her sweep and destroy run, and bob's box is never touched
    by her (M3) but named as the unreadable record's."""
    mine = rent(world, "alice", "a")
    theirs = rent(world, "bob", "b", hours=10.0)
    spoil(world, "b")

    alice = market_of(world, "alice")
    assert guardian(world, alice, "a", "alice/h1/1/aa").run() == g.GONE

    assert world.alive() == [int(theirs)]  # hers ended, his untouched
    assert int(mine) not in world.alive()
    report = sweep(market_of(world, "alice"))
    assert [line for line in report.unowned if f"instance {theirs}" in line]
    assert "cannot be read" in report.unowned[0]
    assert destroy_rental(market_of(world, "alice"), "a") == []
    assert world.alive() == [int(theirs)]


def test_a_corrupt_record_of_its_own_rental_still_ends_the_box_and_exits_loudly_m17(world):
    """M17/M4: the guardian's own box record edited by hand: its box is found by its instance
    claim, destroyed and confirmed gone; the record is left as it was for a person, the rental
    is not released past it, and the exit is loud (1) naming the record; moved aside, `gpuops
    destroy` then releases the rental."""
    rent(world, "alice", "job")
    key, garbage = spoil(world, "job")
    alice = market_of(world, "alice")

    code = guardian(world, alice, "job", "alice/h1/1/aa").run()

    assert code == FAULTED == 1
    assert world.alive() == []  # the provider's own record: nothing bills
    found = world.store.get(key)
    assert found is not None and found.data == garbage  # never replaced
    rental = alice.rentals.get("job")
    assert rental is not None and rental.state == LIVE  # not released past its record
    (ended,) = world.events.kinds("guard.exit")
    assert ended["code"] == 1 and key in ended["reason"]
    outcomes = destroy_rental(market_of(world, "alice"), "job")  # the documented repair
    assert [o.ending for o in outcomes] == [Ending.UNREADABLE] and exit_code(outcomes) == 1

    world.store.delete(key, found.version)  # moved aside by a person, then destroy again
    assert destroy_rental(market_of(world, "alice"), "job") == []
    rental = alice.rentals.get("job")
    assert rental is not None and rental.state == RELEASED


def test_a_results_bucket_that_does_not_exist_still_ends_in_the_destroy_m17(world, monkeypatch):
    """M17: GPUOPS_RESULTS naming a bucket that does not exist (moto's S3 on loopback answers
    NoSuchBucket): the failed copy is recorded, the box is destroyed at the deadline and
    confirmed gone, and the guardian exits 1 naming the results it could not deliver."""
    from fakes.s3 import CREDENTIALS, REGION, serve_s3

    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    s3 = serve_s3()
    try:
        market = world.rent(hours=1.0)
        world.run_job(market, "mkdir -p results && echo 42 > results/answer.txt")
        typo = S3Results("a-bucket-that-does-not-exist", "x", s3.url)
        code = guardian(world, market_of(world, "alice"), "job", "alice/h1/1/aa", results=typo)
        code = code.run()
    finally:
        s3.close()

    assert code == FAULTED
    assert world.alive() == []
    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is False and "NoSuchBucket" in copied["detail"]
    assert copied["results"] == "missing"
    after = market_of(world, "alice").rentals.get("job")  # shown by `boxes` (M17)
    assert after is not None and after.results == "missing"
    assert "NoSuchBucket" in str(after.results_detail)
    (ended,) = world.events.kinds("guard.exit")
    assert ended["code"] == 1 and "results not delivered" in ended["reason"]


class FullDisk(LocalStore):
    """A state directory on a disk that fills up: once ``full``, every write fails as the
    kernel fails it (ENOSPC), reads still work."""

    full = False

    def _write(self, path: Path, data: bytes, previous: str | None) -> str:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super()._write(path, data, previous)


class FullLog:
    """An event log on the same full disk."""

    def __init__(self, world: World, disk: FullDisk) -> None:
        self.world, self.disk = world, disk

    def append(self, kind: str, /, **payload: object) -> None:
        if self.disk.full:
            raise StateError("cannot write the event log: No space left on device")
        self.world.events.append(kind, **payload)


def test_a_full_disk_under_the_state_still_ends_in_the_destroy_and_sweep_releases_later_m17(
    world, tmp_path
):
    """M17: the state directory's disk fills up before the deadline (lease heartbeats, ledger
    writes and the event log all fail): the guardian still destroys the box at its deadline,
    confirms it gone by asking the provider, and exits 1; once the disk has room, `sweep`
    releases the records and the rental."""
    (tmp_path / "state").mkdir(mode=0o700)
    disk = FullDisk(tmp_path / "state")
    shared = World(world.fake, disk, world.events, world.tmp)  # type: ignore[arg-type]
    instance = rent(shared, "alice", "job")
    disk.full = True

    alice = market_of(shared, "alice").on(events=FullLog(world, disk))
    code = guardian(shared, alice, "job", "alice/h1/1/aa").run()

    assert code == FAULTED
    assert world.alive() == []
    assert world.fake.instances[int(instance)].destroyed_at is not None
    rental = alice.rentals.get("job")
    assert rental is not None and rental.state == LIVE  # nothing could be written
    disk.full = False
    sweep(market_of(shared, "alice"))
    rental = alice.rentals.get("job")
    assert rental is not None and rental.state == RELEASED


def test_sigterm_drops_the_guardians_lease_so_a_successor_takes_over_at_once_m17(world):
    """M17/M7: a guardian stopped by SIGTERM gives its lease up before it exits 143, so the
    next `gpuops guard NAME` finds no live holder and starts a successor at once."""
    world.rent(hours=1.0)
    first = guardian(world, market_of(world, "alice"), "job", "alice/h1/1/aa")
    first.step()  # takes the lease
    lease, _ = job_lease(world.store)
    assert lease is not None and lease.holder == "alice/h1/1/aa"

    with pytest.raises(SystemExit) as stop:
        stopped(first, signal.SIGTERM)

    assert stop.value.code == 128 + signal.SIGTERM
    assert job_lease(world.store) == (None, None)
    (ended,) = world.events.kinds("guard.exit")
    assert ended["code"] == 143 and "SIGTERM" in ended["reason"]


def test_sigterm_inside_a_store_write_still_drops_the_lease_and_records_the_copy_cut_m17(
    world, tmp_path
):
    """M17: SIGTERM lands while the guardian holds the store's lock (its heartbeat's renewal,
    under load a wide window). The handler runs on that same thread: it must not wait on the
    lock its own interrupted write holds. It records the cut copy as missing on the rental
    and drops the lease, then exits 143 (a second flock waited out its 10 s and lost both)."""
    store = LocalStore(tmp_path / "state")
    local = World(world.fake, store, world.events, world.tmp)  # type: ignore[arg-type]
    rent(local, "alice", "job")
    first = guardian(local, market_of(local, "alice"), "job", "alice/h1/1/aa")
    first.step()  # takes the lease
    first.copying = True  # its results copy is under way

    with pytest.raises(SystemExit) as stop, store._locked():  # mid-write
        stopped(first, signal.SIGTERM)

    assert stop.value.code == 128 + signal.SIGTERM
    assert job_lease(store) == (None, None)
    rental = market_of(local, "alice").rentals.get("job")
    assert rental is not None and rental.results == "missing"
    assert rental.results_detail == "the copy was cut: stopped by SIGTERM"


def test_a_guardian_leaving_an_unclear_create_unresolved_is_heard_o1(world, monkeypatch):
    """O1/M13: when the core decides the guardian must leave with an unclear create still
    unresolved (exit 5), the shell raises the guardian-exit alarm, as for every loud exit."""
    from store_fakes import Events

    from gpuops import alarms as a

    world.rent(hours=1.0)
    sink = Events()
    guard = guardian(world, market_of(world, "alice"), "job", "alice/h1/1/aa",
                     alarms=a.silent(sink))  # fmt: skip
    monkeypatch.setattr(
        g, "decide", lambda mind, *rest: (mind, g.Leave(g.UNKNOWN, "an unresolved create"))
    )

    assert guard.step() == g.UNKNOWN
    (raised,) = sink.kinds("alarm.raised")
    assert raised["kind"] == "guardian.exit" and "exited 5" in raised["subject"]


def test_a_full_disk_before_any_box_was_recorded_live_still_ends_the_box_found_by_label_m17(
    world, tmp_path
):
    """M17/M12: rent killed between a create and its record going live (the box exists, its
    record is an intent), then the disk fills: at the deadline the guardian finds the box by
    its label (a provider read, no store write) and ends it, confirmed gone."""
    from test_owner import Killed

    (tmp_path / "state").mkdir(mode=0o700)
    disk = FullDisk(tmp_path / "state")
    shared = World(world.fake, disk, world.events, world.tmp)  # type: ignore[arg-type]
    alice = market_of(shared, "alice")
    real_mark_live = alice.ledger.mark_live

    def killed(name: str, instance_id: str) -> None:
        raise Killed  # the rent process dies here: its box exists, its record an intent

    alice.ledger.mark_live = killed  # type: ignore[method-assign]
    alice._abandon = lambda rental, why: []  # type: ignore[method-assign]  # SIGKILL: no cleanup
    with pytest.raises(Killed):
        alice.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=1.0, race_k=1))
    alice.ledger.mark_live = real_mark_live  # type: ignore[method-assign]
    assert len(world.alive()) == 1
    disk.full = True

    code = guardian(shared, market_of(shared, "alice").on(events=FullLog(world, disk)), "job",
                    "alice/h1/1/aa").run()  # fmt: skip

    assert code == FAULTED and world.alive() == []


def job_lease(store):  # type: ignore[no-untyped-def]
    """The lease of rental "job"'s current incarnation (M16: one lease per incarnation)."""
    from gpuops.market.rentals import Rentals, lease_key

    rental = Rentals(store, "alice").get("job")
    return Leases(store).read("job" if rental is None else lease_key(rental))
