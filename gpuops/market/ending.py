"""Ending a rental's boxes, whatever state each record is in (M3, M4, M12, M13, M17).

``end_record`` ends one ledger record of ours: an intent looked up by its label (and, past
UNCLEAR_CREATE_WINDOW_S, recorded as never found), a box destroyed and confirmed gone.
``end_records`` ends every record of a rental, and every box an unreadable record of it claims
(``end_unreadable``); ``settle_rental`` lets the rental follow its records; ``destroy_rental``
is `gpuops destroy NAME`. The race (``rent.Market``), the guardian and sweep all end boxes
through these, so there is one way to end one.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuops import event_ops as ops
from gpuops import timing
from gpuops.errors import (
    NotOwned,
    Refused,
    StillRunning,
    Unavailable,
    UnexpectedResponse,
)
from gpuops.event_base import write
from gpuops.ledger import (
    NEVER_FOUND,
    PREFIX,
    BoxState,
    Record,
)
from gpuops.market.rentals import (
    PENDING,
    RELEASED,
    Rental,
    box_name,
    settled,
)
from gpuops.market.teardown import (
    Ending,
    Outcome,
    destroy_box,
    intent_of,
    label_for,
    never_found,
    poll_gone,
)

if TYPE_CHECKING:
    from gpuops.market.context import MarketContext

# _ENDING adds the live boxes `destroy` ends to the pending ones (M4).
_ENDING = (BoxState.LIVE, *PENDING)


def end_record(market: MarketContext, record: Record) -> Outcome:
    """End one record of ours, whatever its state: an intent is looked up by its label first
    (M12) and its box, if found, destroyed; a box is destroyed and confirmed gone (M4)."""
    if record.state is BoxState.INTENT:
        found = market.reconcile(label_for(record.intent_id))
        if found is None and never_found(record, market.clock.wall()):
            # bounded (M13): a name is never blocked for good by a create that made nothing
            market.ledger.confirm_gone(record.name, NEVER_FOUND)
            market.ledger.release(record.name)
            write(
                market.events,
                ops.LedgerNeverFound(
                    name=record.name, intent_id=record.intent_id, written_at=record.updated_at
                ),
            )
            return Outcome(
                record.name,
                Ending.GIVEN_UP,
                f"no box with its label was found in {timing.UNCLEAR_CREATE_WINDOW_S:.0f} s of "
                "looking: recorded as never created (a box that turns up with its label later "
                "is still ended by `gpuops sweep`)",
            )
        if found is None:
            return Outcome(
                record.name,
                Ending.UNRESOLVED,
                "an intent whose box no look-up by label has found yet; still looking",
            )
        record = market.ledger.mark_live(record.name, found.instance_id)
    if record.state is BoxState.GONE_CONFIRMED or (
        record.state in _ENDING and record.instance_id
    ):  # gone-confirmed: a crash cut off the release; the evidence is already recorded
        return destroy_box(
            market.vast,
            market.ledger,
            record.name,
            clock=market.clock,
        )
    return Outcome(record.name, Ending.UNRESOLVED, f"left as it is ({record.state.value})")


def _prefix(name: str, race: int | None) -> str:
    """What the record names of rental ``name`` (of one race, when given) begin with."""
    return f"{name}+" if race is None else box_name(name, race, 0).rpartition("-")[0] + "-"


@dataclass(frozen=True)
class Incarnation:
    """One incarnation of a rental name (M16): its id, and the last race it was seen to run.
    A later incarnation's races all come after it, so a guardian of this one, once the name is
    raced again, ends its own records (by id) and unreadable ones up to that race, never the
    newer boxes."""

    rental_id: str | None
    last_race: int

    def holds(self, record: Record) -> bool:
        """A readable record of this incarnation (one written before ids: of any)."""
        return record.rental_id is None or record.rental_id == self.rental_id

    def holds_key(self, box: str) -> bool:
        """An unreadable record's name, judged by the race its name gives."""
        race = box.partition("+")[2].partition("-")[0]
        return race.isdigit() and int(race) <= self.last_race


def owned_records(
    market: MarketContext,
    name: str,
    race: int | None = None,
    *,
    of: Incarnation | None = None,
) -> list[Record]:
    """Every active record of ours under rental ``name`` (of one race, of one incarnation,
    when given): what its owner must end (M13). A record that cannot be read is left out
    here, so another rental's blocks nothing of this one (M17); ``unreadable_records`` names
    this rental's."""
    prefix = _prefix(name, race)
    return [
        record
        for record in market.ledger.records(skip_corrupt=True, under=prefix)  # its own only
        if record.name.startswith(prefix)
        and record.owner == market.ledger.operator
        and record.active
        and (of is None or of.holds(record))
    ]


def unreadable_records(
    market: MarketContext, name: str, race: int | None = None, *, of: Incarnation | None = None
) -> list[str]:
    """The record names under rental ``name`` that the ledger's last listing could not read."""
    prefix = PREFIX + _prefix(name, race)
    return sorted(
        k.removeprefix(PREFIX)
        for k in market.ledger.corrupt
        if k.startswith(prefix) and (of is None or of.holds_key(k.removeprefix(PREFIX)))
    )


def end_records(
    market: MarketContext, name: str, race: int | None = None, *, of: Incarnation | None = None
) -> list[Outcome]:
    """End every active record of ours under rental ``name`` (of one race, of one
    incarnation, when given), and every box an unreadable record of it claims
    (``end_unreadable``)."""
    ended = [end_record(market, record) for record in owned_records(market, name, race, of=of)]
    unreadable = unreadable_records(market, name, race, of=of)
    return ended + [end_unreadable(market, box) for box in unreadable]


def end_unreadable(market: MarketContext, box: str) -> Outcome:
    """A ledger record that cannot be read may stand for a box that bills: end every instance
    its instance claim names (``ledger/instances/<id>``, written when it went live) and whose
    label still carries the claim's intent (M3), destroyed and confirmed gone by ``show``
    (M4), without reading or replacing the record. PENDING while one still shows; else
    UNREADABLE: the record is left for a person to move aside. The caller has checked that
    the rental is ours."""
    claimed = [(iid, c) for iid, c, _ in market.ledger.claims.entries() if c.name == box]
    still: list[str] = []
    ended: list[str] = []
    for instance_id, claim in claimed:
        shown = market.vast.show(instance_id)
        if shown is None:
            continue
        if intent_of(shown.label) != claim.intent_id:  # the id went to another box: not ours
            continue
        problem = end_instance(market, instance_id)
        if problem is None:
            ended.append(instance_id)
        else:
            still.append(f"instance {instance_id}: {problem}")
    where = f"its record {PREFIX}{box} cannot be read ({market.ledger.corrupt.get(PREFIX + box)})"
    if still:
        return Outcome(box, Ending.PENDING, f"{where}; " + "; ".join(still))
    gone = f"instance(s) {', '.join(ended)} confirmed gone" if ended else "no claimed box shows"
    return Outcome(
        box,
        Ending.UNREADABLE,
        f"{where}; {gone}; the record is left as it is: move it aside or restore it",
    )


def end_late(market: MarketContext, box: str, instance_id: str) -> Outcome:
    """A box whose label carries the intent of our record ``box``, released as never created:
    the create happened after all. Destroyed and confirmed gone by ``show`` (M4, M13)."""
    problem = end_instance(market, instance_id)
    if problem is not None:
        return Outcome(box, Ending.PENDING, f"instance {instance_id}, found late: {problem}")
    return Outcome(
        box,
        Ending.GONE,
        f"instance {instance_id} carried the label of an intent recorded as never "
        "created: destroyed and confirmed gone",
    )


def end_instance(market: MarketContext, instance_id: str) -> str | None:
    """Destroy this very instance and confirm it gone by asking for it (M4), with no record to
    move (an unreadable one, a late box, a store that cannot be written): None once gone,
    else what is still wrong."""
    try:
        market.vast.destroy(instance_id)
    except (Unavailable, UnexpectedResponse) as exc:
        return f"destroy failed: {exc}"
    last = poll_gone(market.vast, instance_id, clock=market.clock)
    return None if last is None else f"not confirmed gone yet: {last}"


def settle_rental(
    market: MarketContext, name: str, listed: list[Record] | None = None
) -> Rental | None:
    """A rental follows its records (M13): once none of ours is active, a live or racing
    rental is released, so no spend accrues on a gone box and `rent` races afresh.

    ``listed``: the rental's records as a listing the caller already holds (sweep lists the
    ledger once, not once per rental); each is read again here, so only what the listing
    names is taken from it, never a state."""
    rental = market.rentals.get(name)
    if rental is None or rental.owner != market.ledger.operator:
        return rental
    prefix = f"{name}+"
    if listed is None:
        current = market.ledger.records(skip_corrupt=True, under=prefix)
    else:
        current = [r for r in map(market.ledger.get, (r.name for r in listed)) if r is not None]
    if unreadable_records(market, name):  # it may stand for a box: never released past it
        return rental
    active = sum(1 for r in current if r.active)
    to = settled(rental, active, market.clock.wall())
    if to is None:
        return rental
    try:
        return market.rentals.update(
            name, expect=rental.state, state=to, ended_at=market.clock.wall()
        )
    except StillRunning:
        return market.rentals.get(name)


def destroy_rental(
    market: MarketContext, name: str, *, of: Incarnation | None = None
) -> list[Outcome]:
    """``gpuops destroy NAME``: refuse unless ours (M3); end every record of the rental, boxes
    destroyed with confirmation (M4), intents looked up by label (M12); the rental is
    released only when all are gone. ``of``: a guardian's own incarnation; once the name has
    been raced again (by anyone) only that incarnation's records are ended, and the rental,
    another incarnation's now, is left as it is (M16)."""
    rental = market.rentals.get(name)
    if of is not None and rental is not None and rental.rental_id != of.rental_id:
        return end_records(market, name, of=of)
    if rental is None:
        raise Refused("M3", f"no rental named {name!r}: gpuops cannot prove it owns such a box")
    if rental.owner != market.ledger.operator:
        raise NotOwned(name, rental.owner, market.ledger.operator)
    outcomes = end_records(market, name, of=of)
    if all(o.released for o in outcomes) and rental.state != RELEASED:
        with contextlib.suppress(StillRunning):
            market.rentals.update(name, state=RELEASED, ended_at=market.clock.wall())
    return outcomes
