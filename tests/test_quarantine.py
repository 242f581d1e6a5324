"""Quarantine with a TTL; auth failures are never host faults (M2)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuops import timing
from gpuops.errors import CorruptState
from gpuops.market.quarantine import HOST_FAULTS, PREFIX, Quarantine, is_host_fault
from gpuops.store.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def append(self, kind: str, /, **payload: Any) -> None:
        self.events.append((kind, payload))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def quarantine(clock: Clock) -> Quarantine:
    return Quarantine(MemoryStore(), Events(), "alice", clock=clock)


def test_only_real_host_faults_are_quarantinable():
    """M2: ssh-auth (our key) and pass are never host faults."""
    assert HOST_FAULTS == {"no-gpu", "low-vram", "slow-disk", "cuda-broken"}
    assert not is_host_fault("ssh-auth")
    assert not is_host_fault("ssh-unreachable")
    assert not is_host_fault("ssh-host-key-changed")
    assert not is_host_fault("pass")
    assert not is_host_fault("unknown")


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


def test_a_corrupt_entry_is_reported_with_its_key(quarantine):
    """A bad entry is a clear error naming where it is."""
    quarantine.store.create(f"{PREFIX}9", b"{not json")

    with pytest.raises(CorruptState) as caught:
        quarantine.machines()

    assert caught.value.where == f"{PREFIX}9"


def test_an_entry_with_a_non_numeric_until_is_corrupt(quarantine):
    """Types are checked, not assumed."""
    quarantine.store.create(
        f"{PREFIX}9", b'{"machine_id": 9, "cause": "slow-disk", "until": "soon", "by": "x"}'
    )

    with pytest.raises(CorruptState, match="until a number"):
        quarantine.entries()
