"""`gpuops sweep`: retry pending destroys, end every record of ours past its rental's deadline
as this host may judge it (M13, M17), settle the rentals, and report what no ledger owns.

The ledger is listed once; ``due_records`` (pure, in rentals.py) says which records are due;
each is ended by ``ending.end_record``, up to SWEEP_WORKERS at once within a shared ``Pace``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuops import event_ops as ops
from gpuops import event_types as ev
from gpuops.event_base import write
from gpuops.ledger import (
    PREFIX,
    BoxState,
    Record,
)
from gpuops.market.ending import (
    end_late,
    end_record,
    end_unreadable,
    settle_rental,
)
from gpuops.market.pacing import Pace, Paced
from gpuops.market.rentals import (
    LIVE,
    due_records,
    enforce_at,
    rental_of,
)
from gpuops.market.teardown import (
    Ending,
    Outcome,
    intent_of,
)

if TYPE_CHECKING:
    from gpuops.market.context import MarketContext


@dataclass(frozen=True)
class SweepReport:
    retried: list[Outcome]  # pending destroys retried
    expired: list[Outcome]  # records of ours past their rental's deadline, ended
    unowned: list[str]  # instances on the account no ledger owns: reported, never touched

    @property
    def unresolved(self) -> list[Outcome]:
        return [o for o in [*self.retried, *self.expired] if o.ending is Ending.UNRESOLVED]


# Records a CLI sweep ends at once: each mostly sleeps through its confirmation poll (M4), three
# calls a record over one poll. 128 kept the Pace idle while all slept (about 24 records a
# second); 256 fills the Pace's 100 calls a second, so the bound is the call budget again.
SWEEP_WORKERS = 256


def sweep(market: MarketContext, *, workers: int = 1, pace: Pace | None = None) -> SweepReport:
    """Retry pending destroys; end every record of ours whose rental's deadline has passed,
    whatever state the rental or the record is in (M13); settle the rentals; report
    instances no ledger owns (loudly, never touching them).

    The ledger is listed once per sweep. With ``workers`` > 1 (the CLI), that many records are
    ended at once, each destroy confirmed by its own ``show`` loop (M4), every call within
    ``pace``; each record is still ended by ``end_record``, exactly as one at a time."""
    me = market.ledger.operator
    now = market.clock.wall()
    rentals = {r.name: r for r in market.rentals.all() if r.owner == me}
    # the one listing of the sweep; a record it cannot read blocks only itself (M17)
    records = market.ledger.records(skip_corrupt=True)
    unreadable = sorted(k.removeprefix(PREFIX) for k in market.ledger.corrupt)
    due = due_records(records, rentals, me, now, market.host)  # (record, a retry)
    outcomes = _end_all(market, [record for record, _ in due], workers, pace)
    report = SweepReport([], [], [])
    for (record, retried), outcome in zip(due, outcomes, strict=True):
        (report.retried if retried else report.expired).append(outcome)
        ended = ev.SweepEnded(  # the report's per-rental timeline: what this sweep ended
            name=record.name,
            instance_id=record.instance_id,
            ending=outcome.ending.value,
            retried=retried,
            rental_id=record.rental_id,
        )
        market.events.append(ended.KIND, **ended.to_payload())
    for box in unreadable:  # ours when its rental is: ended once that rental is due
        rental = rentals.get(rental_of(box))
        if rental is not None and now >= enforce_at(rental, None, market.host):
            report.expired.append(end_unreadable(market, box))
    touched = {rental_of(record.name) for record, _ in due}
    active: dict[str, list[Record]] = {}  # the listing's active records, by rental: one pass
    for record in records:
        if record.active:
            active.setdefault(rental_of(record.name), []).append(record)
    settle = [  # and every live rental with no active record left, whoever died between the
        name  # two writes of its `destroy` (M13: a gone box is never shown live)
        for name, rental in rentals.items()
        if name in touched
        or (rental.deadline_at is not None and now >= rental.deadline_at)
        or (rental.state == LIVE and name not in active)
    ]
    _each(lambda name: settle_rental(market, name, active.get(name, [])), settle, workers)
    # an instance of a record this sweep released may still be listed (the list lags): the
    # listing's intents, taken before any release, keep it from being reported as unowned
    known = {r.intent_id for r in records if r.active}
    # an unreadable record's box is named with its record, found by its instance claim
    behind = set(unreadable)
    claimed = (
        {c.intent_id: c.name for _, c, _ in market.ledger.claims.entries() if c.name in behind}
        if behind
        else {}
    )
    # an intent of ours recorded as never created (or refused) whose box turns up later: ours
    late = {
        r.intent_id: r.name
        for r in records
        if r.owner == me and r.state is BoxState.RELEASED and r.instance_id is None
    }
    vast = market.vast if pace is None else Paced(market.vast, pace)
    for instance in vast.list_instances():
        intent = intent_of(instance.label)
        if intent is not None and intent in late:
            report.expired.append(end_late(market, late[intent], instance.instance_id))
        elif intent in claimed:
            report.unowned.append(
                f"instance {instance.instance_id} label {instance.label!r}: its record "
                f"{PREFIX}{claimed[intent]} cannot be read (gpuops destroy "
                f"{rental_of(claimed[intent])} ends it)"
            )
        elif intent not in known:
            report.unowned.append(
                f"instance {instance.instance_id} label {instance.label!r}: no ledger owns it"
            )
    write(
        market.events,
        ops.Sweep(
            retried=len(report.retried),
            expired=len(report.expired),
            unresolved=len(report.unresolved),
            unowned=len(report.unowned),
        ),
    )
    return report


def _each(act: Callable[[str], object], names: list[str], workers: int) -> None:
    """``act`` on each name, up to ``workers`` at once (settling rentals: store calls only,
    each rental its own compare-and-swap); one at a time keeps a test's fake clock its own."""
    if workers <= 1 or len(names) <= 1:
        for name in names:
            act(name)
        return
    with ThreadPoolExecutor(
        max_workers=min(workers, len(names)), thread_name_prefix="settle"
    ) as pool:
        list(pool.map(act, names))


def _end_all(
    market: MarketContext, records: list[Record], workers: int, pace: Pace | None
) -> list[Outcome]:
    """``end_record`` for each record, in order; up to ``workers`` at once, in a market whose
    Vast calls are paced. One at a time keeps the caller's clock and sleep as they are (the
    tests' fake clocks are not shared between threads)."""
    if workers <= 1 or len(records) <= 1:
        return [end_record(market, record) for record in records]
    # the same ledger, store and clock; only its Vast calls paced (Paced has the calls that
    # ending a record makes: show, destroy, list_instances)
    paced = None if pace is None else Paced(market.vast, pace)
    shared = market if paced is None else market.on(vast=paced)  # type: ignore[arg-type]
    size = min(workers, len(records))
    with ThreadPoolExecutor(max_workers=size, thread_name_prefix="sweep") as pool:
        return list(pool.map(lambda record: end_record(shared, record), records))
