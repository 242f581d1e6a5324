"""Team budgets (M15), the shell: limits and spend records in the shared store.

``budget/team/limits`` holds the team's limits and ``budget/operators/<ID>`` each operator's
(``budget.Limit``); ``budget/spend/<INSTANCE>`` one ``budget.Spend`` per box that billed (and
``lane+<LANE>+<START>`` per lane job). Every write goes through ``Records.update`` (the one
compare-and-swap loop), so operators on several hosts share one truth through ``s3://``.

``observe`` is where spend comes from: the provider's instance list (each row's ``start_date``
and ``dph_total``), the ledger's confirmed-gone times, the rentals' records for boxes no list
ever showed, and the lane's boards. ``check_rent`` is what `rent` asks before its first create
(M15); every threshold that spent + committed crosses is an alarm (O1), once per period.
The arithmetic is ``budget.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import CorruptState, Refused
from gpuops.ledger import BoxState, Ledger, Record
from gpuops.market import budget as b
from gpuops.market.rentals import LIVE, RACING, RELEASED, Rental, Rentals
from gpuops.store.base import Store, is_key
from gpuops.store.records import NO_CHANGE, JsonCodec, NoChange, Records
from gpuops.timestamps import epoch_of, utc_iso

if TYPE_CHECKING:
    from gpuops.model import Instance

TEAM = "limits"
LIMITS = JsonCodec(b.Limit, "budget limit")
SPENDS = JsonCodec(b.Spend, "spend record")
GONE = (BoxState.GONE_CONFIRMED, BoxState.RELEASED)


class _Unlogged:
    def append(self, kind: str, /, **payload: Any) -> None:
        raise AssertionError(f"budgets wrote the event {kind}")


@dataclass(frozen=True)
class Snapshot:
    """What the store says now: every spend record, every commitment, every limit."""

    now_s: float
    spends: tuple[b.Spend, ...]
    commitments: tuple[b.Commitment, ...]
    team: b.Limit | None
    operators: dict[str, b.Limit]

    def figures(self, operator: str | None = None, *, without: str | None = None) -> b.Figures:
        owed = [c for c in self.commitments if c.name != without]
        return b.figures(self.spends, owed, self.now_s, operator)


class Budgets:
    """Limits and spend in ``store``; ``operator`` is who sets limits and who rents."""

    def __init__(
        self, store: Store, operator: str, *, clock: Clock = SYSTEM, alarms: Any = None
    ) -> None:
        self.store, self.operator, self.clock, self.alarms = store, operator, clock, alarms
        self.team = Records(store, "budget/team/", LIMITS)
        self.operators = Records(store, "budget/operators/", LIMITS)
        self.spend = Records(store, "budget/spend/", SPENDS)
        self.ledger = Ledger(store, _Unlogged(), operator)
        self.rentals = Rentals(store, operator)

    # --- limits -----------------------------------------------------------------------------
    def set_limits(
        self,
        *,
        team_day: float | None = None,
        team_month: float | None = None,
        operator: str | None = None,
        day: float | None = None,
        month: float | None = None,
    ) -> None:
        """Change the given limits only (the others stay as they are)."""
        stamp = utc_iso(self.clock.wall())

        def merged(
            day_usd: float | None, month_usd: float | None
        ) -> Any:  # a change for Records.update
            def change(current: b.Limit | None) -> b.Limit | NoChange:
                base = current or b.Limit()
                new = replace(
                    base,
                    usd_per_day=base.usd_per_day if day_usd is None else day_usd,
                    usd_per_month=base.usd_per_month if month_usd is None else month_usd,
                    set_by=self.operator,
                    set_at=stamp,
                )
                return NO_CHANGE if current is not None and _same(current, new) else new

            return change

        if team_day is not None or team_month is not None:
            self.team.update(TEAM, merged(team_day, team_month))
        if operator is not None:
            self.operators.update(operator, merged(day, month))

    # --- spend ------------------------------------------------------------------------------
    def observe(
        self,
        instances: Sequence[Instance] | None,
        *,
        write: bool = True,
        known: Mapping[str, b.Spend] | None = None,
        records: Sequence[Record] | None = None,
        rentals: Sequence[Rental] | None = None,
    ) -> list[b.Spend]:
        """What the account's instances (None: not read), the ledger, the rentals and the
        lane's boards say was billed, written (unless not ``write``: a listing only reads).
        ``known``, ``records``, ``rentals``: what the caller has already read (`boxes`), so
        each kind is listed once."""
        now = self.clock.wall()
        if known is None:
            known = {s.instance_id: s for s in self.spend.all()}
        if records is None:
            records = self.ledger.records(skip_corrupt=True)
        owners = {r.instance_id: r.owner for r in records if r.instance_id}
        gone_at = {
            r.instance_id: epoch_of(r.updated_at)
            for r in records
            if r.instance_id and r.state in GONE
        }
        ended = [
            b.Ended(
                r.instance_id,
                r.owner,
                r.dph_total,
                r.started_at,
                r.ended_at if r.state == RELEASED else None,
            )
            for r in (self.rentals.all() if rentals is None else rentals)
            if r.instance_id and r.dph_total is not None and r.started_at is not None
        ]
        rows = None
        if instances is not None:
            rows = [b.Row(i.instance_id, i.dph_total, i.start_date) for i in instances]
        writes = b.observe(known, rows, owners, gone_at, ended, now)
        writes += b.lane_observed(known.values(), self._lane_jobs(), now)
        if write:
            for spend in writes:
                self.spend.update(spend.instance_id, _to(spend))
        return writes

    def _lane_jobs(self) -> list[b.Spend]:
        """Each lane board's started job, billing at the lane's configured rate."""
        jobs = []
        for key in self.store.list("lane/"):
            if not key.endswith("/board"):
                continue
            from gpuops.lane.board import RUNNING, STARTING, parse  # only where a lane is

            found = self.store.get(key)
            if found is None:
                continue
            try:
                board, _ = parse(found.data.decode("utf-8", "replace"), key)
            except CorruptState:
                continue  # the lane's own commands name it; nothing here can tell its cost
            if board.state in (STARTING, RUNNING) and board.started is not None:
                from gpuops.lane.decide import RUNNING_USD_PER_HOUR

                name = _segment(f"lane+{board.lane}+{int(board.started)}")
                jobs.append(
                    b.Spend(name, board.owner, RUNNING_USD_PER_HOUR, board.started, None, b.LANE)
                )
        return jobs

    def snapshot(
        self,
        unwritten: Sequence[b.Spend] = (),
        *,
        known: Mapping[str, b.Spend] | None = None,
        rentals: Sequence[Rental] | None = None,
        limits: bool = True,
    ) -> Snapshot:
        """Every spend record (``unwritten``: observed, not stored, in their place), limit and
        commitment, as the store has them now (``known``, ``rentals``: as the caller read them;
        without ``limits`` no limit is read, and none is in the snapshot)."""
        now = self.clock.wall()
        stored = dict({s.instance_id: s for s in self.spend.all()} if known is None else known)
        stored.update({s.instance_id: s for s in unwritten})
        spends = tuple(stored[key] for key in sorted(stored))
        price = {s.instance_id: s.dph_total for s in spends}
        owed = [
            b.Commitment(
                r.name,
                r.owner,
                price.get(r.instance_id or "", r.dph_total),  # the provider's price first
                r.deadline_at,
                r.instance_id,
            )
            for r in (self.rentals.all() if rentals is None else rentals)
            if r.state in (LIVE, RACING) and r.deadline_at is not None and r.dph_total is not None
        ]
        owed += [
            b.Commitment(
                s.instance_id,
                s.operator or "",
                s.dph_total,
                s.start_s + timing.DEFAULT_MAX_RUN_S,
                s.instance_id,
            )
            for s in spends
            if s.source == b.LANE and s.end_s is None
        ]
        if not limits:
            return Snapshot(now, spends, tuple(owed), None, {})
        operators = {name: limit for name, limit, _ in self.operators.entries()}
        return Snapshot(now, spends, tuple(owed), self.team.get(TEAM), operators)

    # --- M15 --------------------------------------------------------------------------------
    def check_rent(
        self, name: str, usd_per_hr: float, hours: float, instances: Sequence[Instance] | None
    ) -> None:
        """Refuse (M15) a rental of ``name`` whose worst case, ``usd_per_hr`` for ``hours``,
        would cross the team's or this operator's limit; raise the alarms of any threshold
        crossed. ``instances``: the account's, as the provider lists them now."""
        self.observe(instances)
        now = self.snapshot()
        cost = usd_per_hr * hours
        team = now.figures(without=name)
        mine = now.figures(self.operator, without=name)
        why = b.refusal(
            cost,
            [("the team", now.team, team), (self.operator, now.operators.get(self.operator), mine)],
        )
        self.raise_alarms(now)
        if why is not None:
            raise Refused("M15", f"rent {name} refused before any create: {why}")

    def raise_alarms(self, now: Snapshot) -> None:
        """O1: each threshold spent + committed has reached, once per period."""
        if self.alarms is None:
            return
        from gpuops.alarms import budget_threshold  # only when raising: `boxes` never does

        subjects: list[tuple[str, b.Limit | None, b.Figures]] = [("team", now.team, now.figures())]
        subjects += [(op, limit, now.figures(op)) for op, limit in sorted(now.operators.items())]
        for who, limit, got in subjects:
            for period, threshold, cap in b.crossed(limit, got):
                start = b.day_start(now.now_s) if period == b.DAY else b.month_start(now.now_s)
                spent = got.day_usd if period == b.DAY else got.month_usd
                detail = (
                    f"${spent:.2f} spent this {period} + ${got.committed_usd:.2f} committed by "
                    f"live rentals, of a limit of ${cap:.2f}"
                )
                self.alarms.raise_alarm(
                    budget_threshold(who, period, start, threshold, cap, detail)
                )


def _same(a: b.Limit, c: b.Limit) -> bool:
    return (a.usd_per_day, a.usd_per_month) == (c.usd_per_day, c.usd_per_month)


def _to(spend: b.Spend) -> Any:
    def change(current: b.Spend | None) -> b.Spend | NoChange:
        return NO_CHANGE if current == spend else spend

    return change


def _segment(text: str) -> str:
    import hashlib  # rarely: a lane name too long for one key segment

    return text if is_key(text) else f"lane+{hashlib.sha256(text.encode()).hexdigest()[:24]}"
