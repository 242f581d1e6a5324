"""A short market story against FakeVast, written to a real event log on disk, for the HTML
report's tests (tests/test_report.py, tests/test_report_page.py).

Two rentals race through the real Market, adapter and ledger (FakeVast in-process, on its own
clock): ``train`` over a taken offer, a slow-disk host (quarantined) and a healthy one; its
guardian ends it an hour later, as guard.py does (``guard.destroy``, ``destroy_rental``,
``guard.confirmed_gone``: the guardian's events through their typed writers). ``eval`` is left
past its deadline and `gpuops sweep` ends it. Two lane jobs end (their ``lane.job_end`` through
the typed writer). Last, a rental whose name and owner are markup (``<script>``...), written by a
ledger and typed writers as a log from another version could hold them: the page must show them
as text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from market_world import build_market, fake_vast, request, scenario

from fakes.vast import FakeVast
from gpuops import event_types as ev
from gpuops.events import EventLog
from gpuops.market.ending import destroy_rental
from gpuops.market.sweep import sweep
from gpuops.model import Verdict
from gpuops.store.memory import MemoryStore

HOSTILE = "<script>document.body.setAttribute('data-pwned','1')</script>"
HOSTILE_OWNER = "<img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"
LANE_JOBS = (("train-lane", 1.25, 3600.0), ("eval-lane", 0.5, 1800.0))  # job, cost, running


@dataclass
class Story:
    log: Path
    fake: FakeVast
    train: str  # rental ids
    eval: str
    hostile: str


def write_story(log: Path) -> Story:
    with fake_vast(scenario("taken", "slow-disk", "healthy", "healthy")) as fake:
        events = EventLog(log, "alice", clock=fake.clock)
        market = build_market(fake, MemoryStore(), events)
        train = market.rent(request("train"))
        fake.advance(3600.0)
        destroying = ev.GuardDestroy(
            name="train",
            instance_id=train.instance_id,
            guardian="alice/host/1/g",
            deadline="2026-07-18T02:00:00+00:00",
            rental_id=train.rental_id,
        )
        events.append(destroying.KIND, **destroying.to_payload())
        destroy_rental(market, "train")
        gone = ev.ConfirmedGone(
            name="train",
            instance_id=train.instance_id,
            guardian="alice/host/1/g",
            deadline="2026-07-18T02:00:00+00:00",
            delay_s=-3600.0,
            rental_id=train.rental_id,
        )
        events.append(gone.KIND, **gone.to_payload())
        evaluation = market.rent(request("eval", k=1, hours=0.5))
        fake.advance(2 * 3600.0)  # past its deadline and the grace: sweep's to end
        sweep(market)
        for job, cost, running in LANE_JOBS:
            fake.advance(running)
            end = ev.LaneJobEnd(
                lane="g2",
                job=job,
                attempts=2,
                stockouts=1,
                waiting_s=60.0,
                running_s=running,
                cost_usd=cost,
                outcome="succeeded",
            )
            events.append(end.KIND, **end.to_payload())
        hostile = _hostile(events)
    return Story(log, fake, train.rental_id or "", evaluation.rental_id or "", hostile)


def _hostile(events: EventLog) -> str:
    """A rental named and owned by markup, through the typed writers: a name the store and
    `rent` refuse today, as an older log or another tool could still hold."""
    rental_id = "feedfacecafe"
    box = f"{HOSTILE}+1-0"

    def moved(before: str | None, after: str, revision: int) -> ev.Transition:
        return ev.Transition(name=box, owner=HOSTILE_OWNER, intent_id="i", instance_id="777",
                             before=before, after=after, revision=revision, rental_id=rental_id)

    for event in (
        ev.Create(name=HOSTILE, offer_id=1003, machine_id=503, outcome="created",
                  instance_id="777", rental_id=rental_id),
        moved("intent", "live", 2),
        ev.Probe(name=HOSTILE, offer_id=1003, machine_id=503, instance_id="777",
                 verdict=Verdict.PASS, rental_id=rental_id),
        ev.RentStopped(name=HOSTILE, reason=HOSTILE, rental_id=rental_id),
        moved("live", "destroying", 3),
        moved("destroying", "gone-confirmed", 4),
    ):  # fmt: skip
        events.append(event.KIND, **event.to_payload())
    return rental_id
