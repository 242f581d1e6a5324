"""What `boxes` shows, built from the store alone: the rentals with their spend, expiry, last
sync and guard, the boxes on the retry list and the racing candidates that may bill (M13), and
the team's spend (M15). The CLI only prints it (gpuops/cli/market.py).

Light to import: `boxes` loads it at start-up, so every heavier module is imported where it is
used, and its classes are plain ones (a dataclass built at import costs every command)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from gpuops.clock import Clock
    from gpuops.ledger import Ledger, Record
    from gpuops.market.rent import Market
    from gpuops.market.rentals import Rental, Rentals
    from gpuops.settings import Settings

    # what `boxes` reads: the whole market, or the store-only view of it
    Listing: TypeAlias = Market | "StateView"


class StateView:
    """What `boxes` reads: the rentals, the ledger and the clock (a gpuops.clock.Clock), over
    the store only (a plain class: a dataclass built at import would cost every command's
    start-up)."""

    __slots__ = ("clock", "ledger", "rentals")

    def __init__(self, rentals: Rentals, ledger: Ledger, clock: Clock) -> None:
        self.rentals, self.ledger, self.clock = rentals, ledger, clock


def state_view(settings: Settings, operator: str) -> StateView:
    from gpuops.ledger import Ledger
    from gpuops.market.rentals import Rentals

    class _Unlogged:  # `boxes` only reads: nothing it does is an event
        def append(self, kind: str, /, **payload: object) -> None:
            raise AssertionError(f"boxes wrote the event {kind}")

    store = settings.open_state()
    clock = settings.clock()  # spend and deadlines as the provider renders them (fakes: scaled)
    return StateView(
        Rentals(store, operator), Ledger(store, _Unlogged(), operator, clock=clock), clock
    )


class BoxesView:
    """`boxes`' rows (``rentals``, ``pending_destroys``, ``candidates`` as `--json` names them),
    the spend figures, and whether history is due for `compact`."""

    __slots__ = ("candidates", "compactable", "pending", "rows", "spend")

    def __init__(
        self,
        rows: list[dict[str, Any]],
        pending: list[dict[str, Any]],
        candidates: list[dict[str, Any]],
        spend: dict[str, float],
        compactable: bool,
    ) -> None:
        self.rows, self.pending, self.candidates = rows, pending, candidates
        self.spend, self.compactable = spend, compactable


def boxes_view(market: Listing, *, everyone: bool) -> BoxesView:
    """What `boxes` shows (``everyone``: `--all`, every operator's and the archive's): each
    rental with its spend, its contract's expiry, its last sync and its guard; the box records
    on the retry list; the racing candidates that may bill (M13); the team's spend (M15)."""
    now = market.clock.wall()
    rows = []
    from gpuops.archive import archived_rentals  # --all reads the archive too (audit view)
    from gpuops.ledger import BoxState
    from gpuops.market.rentals import LIVE

    live_rentals = market.rentals.all()
    # listed before the rentals' leases are read: a lease guard_of cannot read is named with
    # the listing's unreadable records, which each listing reports afresh
    records = market.ledger.records(skip_corrupt=True)  # a bad one is named after the list
    for rental in [*live_rentals, *archived_rentals(market.ledger.store, everyone)]:
        if not everyone and rental.owner != market.ledger.operator:
            continue
        spent = None
        if rental.dph_total is not None and rental.started_at is not None:
            until = rental.ended_at if rental.ended_at is not None else now
            spent = round(rental.dph_total * max(0.0, until - rental.started_at) / 3600.0, 4)
        # vars, not dataclasses.asdict: a rental is scalars, so its fields are its __dict__
        end = rental.contract_end_at  # Vast stops a box at its contract's end (expired)
        expired = rental.state == LIVE and end is not None and end <= now
        rows.append(
            {
                **vars(rental),
                "spend_usd": spent,
                "expired": expired,
                **sync_of(rental, now),
                **guard_of(market, rental),
            }
        )
    pending = [record_row(r) for r in records if r.state is BoxState.DESTROYING]
    kept = {row["box"] for row in rows}
    # M13: every box that may bill, racing candidates included, not just the kept ones
    candidates = [
        record_row(r)
        for r in records
        if r.active
        and r.name not in kept
        and r.state is not BoxState.DESTROYING
        and (everyone or r.owner == market.ledger.operator)
    ]
    spend = spend_summary(market, records, live_rentals)
    from gpuops.archive import due

    # history `compact` would move, unless a record was unreadable: while one is, a person
    # decides and nothing moves on its own
    unreadable = bool(market.ledger.corrupt or market.rentals.corrupt)
    compactable = not unreadable and due(records, live_rentals, now)
    return BoxesView(rows, pending, candidates, spend, compactable)


def spend_summary(
    market: Listing, records: list[Record], rentals: list[Rental]
) -> dict[str, float]:
    """The team's burn rate, spend today and this month, and the next 24 h (M15), from the
    store alone: the spend records `rent` and `budget` wrote from the provider's rows, and what
    the rentals and the lane's boards say since (read, never written, here)."""
    from gpuops import timing
    from gpuops.market import budget as b
    from gpuops.market.budgets import Budgets

    budgets = Budgets(market.ledger.store, market.ledger.operator, clock=market.clock)
    known = {s.instance_id: s for s in budgets.spend.all()}  # each kind read once
    seen = budgets.observe(None, write=False, known=known, records=records, rentals=rentals)
    now = budgets.snapshot(seen, known=known, rentals=rentals, limits=False)
    team = now.figures()
    return {
        "burn_usd_per_hr": round(b.burn_usd_per_hr(now.spends), 4),
        "spent_today_usd": round(team.day_usd, 4),
        "spent_month_usd": round(team.month_usd, 4),
        "projected_24h_usd": round(
            b.projected_usd(now.spends, now.commitments, now.now_s, timing.BUDGET_PROJECTION_S), 4
        ),
    }


def sync_of(rental: Rental, now: float) -> dict[str, Any]:
    """The last results sync as `boxes` shows it: ``sync`` in words ("off", "never", "4 min
    ago") and ``last_sync_age_s`` (None when off or never)."""
    from gpuops.market.sync_plan import sync_age

    every, at = rental.sync_every_s, rental.synced_at
    age = None if not every or at is None else round(max(0.0, now - at), 3)
    return {"sync": sync_age(every, at, now), "last_sync_age_s": age}


def record_row(record: Record) -> dict[str, Any]:
    """A box record as `boxes --json` shows it: its times in epoch seconds, as every rental's
    (the record keeps ISO 8601 strings; one listing speaks one format)."""
    import dataclasses

    row: dict[str, Any] = dataclasses.asdict(record)
    row["state"] = record.state.value
    for name in ("updated_at", "deadline_at"):
        row[name] = _epoch(row[name])
    return row


def _epoch(stamp: str | None) -> float | None:
    from gpuops.timestamps import epoch_of

    return None if stamp is None else epoch_of(stamp)


_RELEASED_GUARD: dict[str, Any] = {"guardian": None, "guard": "none needed (released)"}


def guard_of(market: Listing, rental: Rental) -> dict[str, Any]:
    """Who guards a rental (M5): the lease holder, and whether its heartbeat is fresh. A
    released rental needs no guard (every box of it was confirmed gone): its lease, if one
    was left, is not read, so history costs no lease read per rental."""
    if rental.state == "released":
        return _RELEASED_GUARD
    from gpuops.errors import CorruptState
    from gpuops.market import guardian as g
    from gpuops.market.leases import Leases
    from gpuops.market.rentals import lease_key

    try:
        lease, _ = Leases(market.ledger.store).read(lease_key(rental))  # its incarnation's
    except CorruptState as exc:  # blocks only this rental's guard column; named after the list
        market.ledger.corrupt[exc.where] = exc
        return {"guardian": None, "guard": "UNREADABLE lease (named below)"}
    if lease is None and rental.state == "failed":  # no box was kept: nothing to guard
        return {"guardian": None, "guard": "none (its race kept no box)"}
    if lease is None:
        return {"guardian": None, "guard": "NONE (no ceiling: gpuops guard NAME)"}
    from gpuops.market.rentals import this_host
    from gpuops.market.spawn import alive

    # judged as the guardian would, on facts this host has: never another host's clock (M17)
    verdict = g.judge_lease(lease, market.clock.wall(), this_host(), alive)
    state = {
        g.Guarded.LIVE: "fresh",
        g.Guarded.DEAD: "STALE (its guardian is not running)",
        g.Guarded.ELSEWHERE: "held from another host (not judged by this host's clock)",
    }[verdict]
    return {"guardian": lease.holder, "guard": f"{state}: {lease.holder}"}
