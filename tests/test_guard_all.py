"""The guardian service's decisions and its shell (`gpuops guard --all`, M5, M7, M17): which
rentals it guards, what it does when a guardian leaves, one rental's fault kept to itself, and
a stop that gives every lease up."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from store_fakes import Events
from test_guard import group_alive, wait_until, world  # noqa: F401  (world: the fixture)

from gpuops.errors import CorruptState
from gpuops.market import guard_all as ga
from gpuops.market import guardian as g
from gpuops.market import rentals
from gpuops.market.leases import Leases
from gpuops.store.memory import MemoryStore


def rental(name: str, state: str = rentals.LIVE, deadline: float | None = 2e9) -> rentals.Rental:
    return rentals.Rental(name, "alice", state, 1, deadline_at=deadline, rental_id=f"id-{name}")


def test_a_rental_is_guarded_while_it_has_a_deadline_and_may_still_bill_m13():
    """M13: racing and live rentals with a deadline are guarded; a released one never; a failed
    one only while a record of it is active or unreadable; none without a deadline."""
    assert ga.wanted(rental("a", rentals.LIVE), active=False)
    assert ga.wanted(rental("a", rentals.RACING), active=False)
    assert not ga.wanted(rental("a", rentals.RELEASED), active=True)
    assert ga.wanted(rental("a", rentals.FAILED), active=True)
    assert not ga.wanted(rental("a", rentals.FAILED), active=False)
    assert not ga.wanted(rental("a", rentals.LIVE, deadline=None), active=True)


def test_a_superseded_guardian_is_started_again_and_a_failed_one_retried_m7():
    """M7/M17: exit 7 guards again (the successor may die); 0, 1 and 5 returned end that
    incarnation; anything raised is retried later."""
    assert ga.after_exit(g.SUPERSEDED, raised=False) is ga.Next.AGAIN
    assert [ga.after_exit(c, raised=False) for c in (0, 1, 5)] == [ga.Next.DONE] * 3
    assert ga.after_exit(1, raised=True) is ga.Next.RETRY
    assert ga.after_exit(g.SUPERSEDED, raised=True) is ga.Next.RETRY


def test_a_closed_gate_refuses_every_take_and_renewal_but_not_a_drop_m7():
    """M7: once the service stops, none of its guardians takes or renews a lease."""
    store, gate = MemoryStore(), ga.LeaseGate()
    leases = ga.GatedLeases(store, gate)
    assert leases.take("a", "me", 1.0, None) and leases.take("b", "me", 1.0, None)
    gate.close(0.0)
    assert not leases.renew("a", "me", 2.0)
    assert not leases.take("c", "me", 2.0, None)
    assert Leases(store).read("c") == (None, None)
    leases.drop("a", "me")
    assert Leases(store).read("a") == (None, None) and Leases(store).read("b")[0] is not None


class Stub:
    """A guardian that leaves as told."""

    def __init__(self, leave: Any) -> None:
        self.leave = leave
        self.name = "stub"

    def run(self) -> int:
        if isinstance(self.leave, BaseException):
            raise self.leave
        return int(self.leave)


def service_over(store: MemoryStore, leave: dict[str, Any], started: list[str]) -> ga.Service:
    def guardian_for(r: rentals.Rental, leases: Leases) -> Any:
        started.append(r.name)
        return Stub(leave[r.name])

    return ga.Service(store, Events(), guardian_for, say=lambda line: None)


def test_one_rentals_faults_block_only_itself_in_the_guardian_service_m17():
    """M17: a corrupt rental record, a guardian that raises and one that cannot even be built
    leave every other rental guarded; the raised one is retried a TTL later, a superseded one
    at once, a gone one never again."""
    store = MemoryStore()
    for r in [rental("gone"), rental("bad"), rental("super"), rental("unbuilt"),
              rental("old", rentals.RELEASED)]:  # fmt: skip
        store.create(f"market/rentals/{r.name}", rentals.CODEC.encode(r))
    store.create("market/rentals/torn", b"{")
    started: list[str] = []
    leave = {"gone": 0, "bad": CorruptState("market/rentals/bad", "torn"), "super": 7}
    service = service_over(store, leave, started)

    service.round()
    for slot in list(service.slots.values()):
        assert slot.thread is not None
        slot.thread.join(5)

    assert sorted(started) == ["bad", "gone", "super", "unbuilt"]  # KeyError: never built
    assert service.unreadable == {"market/rentals/torn"}
    service.round()  # reaps them, and looks again
    assert ("gone", "id-gone") in service.done and ("bad", "id-bad") in service.retry_at
    assert ("unbuilt", "id-unbuilt") in service.retry_at
    assert sorted(started) == ["bad", "gone", "super", "super", "unbuilt"]  # again, at once
    left = {p["name"]: p["rental_id"] for k, p in service.events.events if k == "guard.all.left"}
    assert left == {n: f"id-{n}" for n in ("bad", "gone", "super", "unbuilt")}  # M16


def test_a_stopped_guardian_service_gives_every_lease_up_and_exits_loudly_m7(world):
    """M7/M17: SIGTERM to `guard --all`: the lease its guardian held is dropped (a successor
    takes over at once), no lease is taken after, and it exits 143 saying so."""
    market = world.rent(hours=1.0)
    said: list[str] = []
    holder: list[Any] = []

    def guardian_for(r: rentals.Rental, leases: Leases) -> Any:
        guardian = world.guardian(market, "alice/hostA/1/aa", leases=leases)
        holder.append(guardian)
        return guardian

    service = ga.Service(world.store, world.events, guardian_for, say=said.append)
    (r,) = market.rentals.all()
    slot = ga.Slot((r.name, r.rental_id))
    slot.guardian = guardian_for(r, ga.GatedLeases(world.store, service.gate))
    service.slots[r.name] = slot
    while not slot.guardian.mind.held:
        assert slot.guardian.step() is None
    assert job_lease(world.store)[0].holder == "alice/hostA/1/aa"

    with pytest.raises(SystemExit) as stopped:
        service.stop(signal.SIGTERM)

    assert stopped.value.code == 128 + signal.SIGTERM
    assert job_lease(world.store) == (None, None)
    assert not slot.guardian.leases.take(slot.guardian.lease_key, "alice/hostA/1/aa", 1.0, None)
    assert "stopped by SIGTERM" in said[-1] and "job" in said[-1]


def job_lease(store):  # type: ignore[no-untyped-def]
    """The lease of rental "job"'s current incarnation (M16: one lease per incarnation)."""
    from gpuops.market.rentals import Rentals, lease_key

    rental = Rentals(store, "alice").get("job")
    return Leases(store).read("job" if rental is None else lease_key(rental))


@pytest.mark.fault(
    "the guardian service is stopped while a guardian copies results off",
    handled="every copy in flight is ended by its process group, its partial tarball removed, "
    "and the results recorded missing (why) on the rental and in the event log (M17)",
)
def test_a_stopped_guardian_service_ends_every_copy_in_flight_and_records_results_missing_m17(
    world,
):
    """M17: SIGTERM to `guard --all` while a guardian's thread copies a large results directory:
    the copy's ssh and its whole process group are gone, no partial tarball is left, nothing is
    delivered, and the rental and the event log say the results are missing, and why."""
    market = world.rent(hours=1.0)
    # a sparse 64 GiB file: the copy streams for minutes, so the stop lands in the middle of it
    world.run_job(
        market, "mkdir -p results && echo ok > results/r.txt && truncate -s 64G results/big"
    )
    service = ga.Service(world.store, world.events, lambda r, leases: None, say=lambda line: None)
    (r,) = market.rentals.all()
    slot = ga.Slot((r.name, r.rental_id))
    slot.guardian = world.guardian(
        market, "alice/hostA/1/aa", leases=ga.GatedLeases(world.store, service.gate)
    )
    service.slots[r.name] = slot
    while not slot.guardian.mind.held:
        assert slot.guardian.step() is None
    assert job_lease(world.store)[0].holder == "alice/hostA/1/aa"
    copying = threading.Thread(target=slot.guardian._copy, args=(600.0,), daemon=True)
    copying.start()  # on a thread of its own, as the service runs each guardian
    (started,) = wait_until("the copy's ssh", lambda: world.events.kinds("guard.copy.started"))

    with pytest.raises(SystemExit):
        service.stop(signal.SIGTERM)

    wait_until("the copy's group to die", lambda: not group_alive(started["pid"]))  # SIGKILLed
    assert not Path(started["tarball"]).parent.exists()  # no partial tarball left
    why = "the copy was cut: stopped by SIGTERM (the guardian service)"
    after = market.rentals.get("job")
    assert after is not None and (after.results, after.results_detail) == ("missing", why)
    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is False and copied["results"] == "missing"
    assert copied["detail"] == why and copied["ended"] == [started["pid"]]
    assert not (world.tmp / "results").exists()  # nothing delivered
    assert job_lease(world.store) == (None, None)
    # the guardian's thread is parked by the closed gate (the process exits); it never delivers
