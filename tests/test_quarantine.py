"""Quarantine with a TTL; auth failures are never host faults (M2)."""

from __future__ import annotations

import pytest

from gpuops import timing
from gpuops.errors import CorruptState, VersionConflict
from gpuops.ledger import CAS_ATTEMPTS
from gpuops.market.quarantine import PREFIX, Quarantine
from gpuops.store.memory import MemoryStore
from tests.store_fakes import Events, Interleaved, WallOf


class Clock(WallOf):
    """Wall time ``now``, moved by hand."""

    def __init__(self) -> None:
        super().__init__(lambda: self.now)
        self.now = 1_000_000.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def quarantine(clock: Clock) -> Quarantine:
    return Quarantine(MemoryStore(), Events(), "alice", clock=clock)


def test_an_auth_failure_quarantines_nothing(quarantine):
    """M2: on 20 September innocent hosts were quarantined for our unregistered key."""
    assert quarantine.add(42, "ssh-auth") is None

    assert quarantine.store.list() == []
    assert quarantine.machines() == frozenset()
    assert quarantine.events.events == []


def test_a_host_fault_quarantines_the_machine_until_the_ttl(quarantine, clock):
    """M2: a slow disk keeps the machine out for QUARANTINE_TTL_S, then the pool heals."""
    entry = quarantine.add(42, "slow-disk")

    assert entry.until == clock.now + timing.QUARANTINE_TTL_S
    assert (entry.machine_id, entry.cause, entry.by) == (42, "slow-disk", "alice")
    assert quarantine.machines() == {42}
    assert quarantine.store.list() == [f"{PREFIX}42"]
    assert quarantine.events.events == [
        ("market.quarantine", {"machine_id": 42, "cause": "slow-disk", "until": entry.until})
    ]
    clock.now += timing.QUARANTINE_TTL_S - 1
    assert quarantine.machines() == {42}
    clock.now += 1
    assert quarantine.machines() == frozenset()


def test_a_second_fault_renews_the_ttl(quarantine, clock):
    """M2: a machine that fails again stays out for a full TTL from the new fault."""
    quarantine.add(42, "slow-disk")
    clock.now += 100

    quarantine.add(42, "no-gpu")

    assert [(e.cause, e.until) for e in quarantine.entries()] == [
        ("no-gpu", clock.now + timing.QUARANTINE_TTL_S)
    ]


def test_sweep_deletes_only_expired_entries(quarantine, clock):
    """Expired entries are removed; live ones stay."""
    quarantine.add(1, "slow-disk")
    clock.now += 10
    quarantine.add(2, "no-gpu")
    clock.now += timing.QUARANTINE_TTL_S - 5

    assert quarantine.sweep() == 1

    assert quarantine.store.list() == [f"{PREFIX}2"]
    assert quarantine.sweep() == 0


def test_a_corrupt_entry_blocks_only_itself_and_is_named_with_its_key(quarantine, clock):
    """A bad entry is left out and kept with where it is; the others still count."""
    quarantine.add(1, "slow-disk")
    quarantine.store.create(f"{PREFIX}9", b"{not json")

    assert quarantine.machines() == frozenset({1})
    assert quarantine.corrupt[f"{PREFIX}9"].where == f"{PREFIX}9"


def test_an_entry_with_a_non_numeric_until_is_corrupt(quarantine):
    """Types are checked, not assumed."""
    quarantine.store.create(
        f"{PREFIX}9", b'{"machine_id": 9, "cause": "slow-disk", "until": "soon", "by": "x"}'
    )

    assert quarantine.entries() == []
    assert quarantine.corrupt[f"{PREFIX}9"].reason == (
        "not a quarantine entry: field 'until' must be a number, not 'soon'"
    )


def test_an_entry_is_stored_as_canonical_json(quarantine, clock):
    """Every operator reads the same bytes: sorted keys, the entry's four fields."""
    quarantine.add(42, "slow-disk")

    assert quarantine.store.get(f"{PREFIX}42").data == (
        b'{"by": "alice", "cause": "slow-disk", "machine_id": 42, "until": 1086400.0}'
    )


def test_a_fault_is_quarantined_even_when_a_sweep_deletes_the_expired_entry_meanwhile(clock):
    """M2: a renewal that loses its race to a sweep re-reads and writes; it never assumes."""
    store = Interleaved()
    mine = Quarantine(store, Events(), "alice", clock=clock)
    mine.add(42, "slow-disk")
    clock.now += timing.QUARANTINE_TTL_S + 1  # expired: the next add renews it
    store.before["put"].append(lambda: Quarantine(store, Events(), "bob", clock=clock).sweep())

    entry = mine.add(42, "no-gpu")

    assert mine.entries() == [entry]
    assert (entry.cause, entry.until) == ("no-gpu", clock.now + timing.QUARANTINE_TTL_S)
    assert mine.events.events[-1][1] == {"machine_id": 42, "cause": "no-gpu", "until": entry.until}


def test_a_fault_is_written_over_an_entry_created_meanwhile(clock):
    """M2: another operator creating the entry first makes ours a renewal, not a loss."""
    store = Interleaved()
    mine = Quarantine(store, Events(), "alice", clock=clock)
    theirs = Quarantine(store, Events(), "bob", clock=clock)
    store.before["create"].append(lambda: theirs.add(42, "slow-disk"))

    entry = mine.add(42, "cuda-broken")

    assert store.calls == ["get", "create", "get", "create", "get", "put"]  # theirs in between
    assert mine.entries() == [entry]
    assert entry.by == "alice"


def test_a_quarantine_that_keeps_losing_its_race_says_so(clock):
    """A compare-and-swap that loses CAS_ATTEMPTS times is an error naming the key, not a spin."""
    store = Interleaved()
    mine = Quarantine(store, Events(), "alice", clock=clock)
    mine.add(42, "slow-disk")

    def renew() -> None:  # a rival renewal lands between each of our reads and our put
        found = MemoryStore.get(store, f"{PREFIX}42")
        MemoryStore.put(store, f"{PREFIX}42", found.data, found.version)

    store.before["put"] = [renew] * CAS_ATTEMPTS
    store.calls.clear()

    with pytest.raises(VersionConflict) as caught:
        mine.add(42, "no-gpu")

    assert caught.value.key == f"{PREFIX}42"
    assert store.calls == ["get", "put"] * CAS_ATTEMPTS
    assert mine.events.events[-1][1]["cause"] == "slow-disk"


def test_an_entry_deleted_between_listing_and_reading_is_skipped(quarantine, clock):
    """A sweep elsewhere may delete an entry after we listed it: the others still count."""
    store = Interleaved()
    mine = Quarantine(store, Events(), "alice", clock=clock)
    mine.add(1, "slow-disk")
    mine.add(2, "no-gpu")
    found = store.get(f"{PREFIX}1")
    store.before["get"].append(lambda: store.delete(f"{PREFIX}1", found.version))

    assert mine.machines() == {2}


def test_sweep_deletes_every_entry_whose_time_is_up_the_boundary_included(quarantine, clock):
    """An entry is out of force at its ``until`` (entries() agrees), so sweep counts it gone."""
    quarantine.add(1, "slow-disk")
    quarantine.add(2, "no-gpu")
    clock.now += 10
    quarantine.add(3, "low-vram")
    clock.now += timing.QUARANTINE_TTL_S - 10  # exactly the until of 1 and 2

    assert quarantine.machines() == {3}
    assert quarantine.sweep() == 2
    assert quarantine.store.list() == [f"{PREFIX}3"]


def test_sweep_reports_a_corrupt_entry_with_its_key(quarantine):
    """Sweep never deletes what it cannot read; it names the key."""
    quarantine.store.create(f"{PREFIX}9", b"[1, 2]")

    assert quarantine.sweep() == 0

    caught = quarantine.corrupt[f"{PREFIX}9"]
    assert caught.where == f"{PREFIX}9"
    assert caught.reason.startswith("not a quarantine entry: ")
    assert quarantine.store.list() == [f"{PREFIX}9"]


def test_an_entry_with_a_non_integer_machine_is_corrupt_and_named(quarantine):
    """The type check names the key and says what is wrong."""
    quarantine.store.create(
        f"{PREFIX}9", b'{"machine_id": "9", "cause": "slow-disk", "until": 5.0, "by": "x"}'
    )

    assert quarantine.entries() == []

    caught = quarantine.corrupt[f"{PREFIX}9"]
    assert caught.where == f"{PREFIX}9"
    assert caught.reason == "not a quarantine entry: field 'machine_id' must be an integer, not '9'"


def test_a_renewal_never_shortens_an_entry_another_writer_renewed_meanwhile(clock):
    """Two writers interleaved: the one whose clock is behind re-reads and keeps the later end
    (a compare-and-swap that decides from what it read, not last-writer-wins)."""
    store = Interleaved()
    behind = Quarantine(store, Events(), "alice", clock=clock)
    ahead = Quarantine(store, Events(), "bob", clock=WallOf(lambda: clock.now + 600.0))
    behind.add(42, "slow-disk")
    store.calls.clear()
    store.before["put"].append(lambda: ahead.add(42, "no-gpu"))

    entry = behind.add(42, "cuda-broken")

    assert store.calls == ["get", "put", "get", "put", "get", "put"]  # bob's renewal between
    assert entry.until == clock.now + 600.0 + timing.QUARANTINE_TTL_S
    assert behind.entries() == [entry]
    assert (entry.cause, entry.by) == ("cuda-broken", "alice")


def test_a_corrupt_entry_is_never_written_over(quarantine):
    """A fault on a machine whose entry is unreadable is an error, never a silent overwrite."""
    quarantine.store.create(f"{PREFIX}9", b"{not json")

    with pytest.raises(CorruptState):
        quarantine.add(9, "slow-disk")

    assert quarantine.store.get(f"{PREFIX}9").data == b"{not json"
