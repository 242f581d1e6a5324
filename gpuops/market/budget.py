"""Team budgets (M15): the pure arithmetic of spend, commitments and limits.

Nothing here reads a store, a clock or a provider: ``budgets.py`` is the shell that does, and
hands these functions plain values.

- **Spend** is one ``Spend`` per box that billed: its price in $/h and the interval it billed.
  The interval comes from the provider's own state where it has it (an instance row's
  ``start_date`` and ``dph_total``, and the ledger's confirmed-gone time for the end), from the
  rental record otherwise (the kept box's price and the times it was kept and confirmed gone),
  and for the lane from its board (the job's start, at the lane's configured rate: GCE's API
  names no price). ``observe`` decides which spend records to write from what was seen.
- **Committed** is what live rentals may still bill in the worst case: each one's price until
  its deadline.
- **A rental is refused** (``refusal``) when its worst case (price x hours) plus what is already
  spent today (this month) plus what is committed would cross the team's or the operator's
  limit per day (per month). The whole worst case counts against today as well as the month:
  a limit is a ceiling, never an average.

Days and months are UTC.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from gpuops.errors import UsageError

SECONDS_PER_HOUR = 3600.0  # a unit, not a duration
PROVIDER, RENTAL, LANE = "provider", "rental", "lane"
# Fractions of a limit whose crossing by spent + committed is an alarm (O1), each once.
THRESHOLDS = (0.8, 1.0)
DAY, MONTH = "day", "month"


@dataclass(frozen=True)
class Limit:
    """One subject's limits in USD (None: no limit), and who set them when."""

    usd_per_day: float | None = None
    usd_per_month: float | None = None
    set_by: str = ""
    set_at: str = ""


@dataclass(frozen=True)
class Spend:
    """One box (or lane job) that billed ``dph_total`` $/h from ``start_s`` until ``end_s``
    (None: still billing). ``operator`` is its owner, None when no ledger owns it (it bills the
    team's account all the same). ``source`` says where the interval came from."""

    instance_id: str
    operator: str | None
    dph_total: float
    start_s: float
    end_s: float | None = None
    source: str = PROVIDER


@dataclass(frozen=True)
class Row:
    """What the provider says about a live instance: its id, price and start."""

    instance_id: str
    dph_total: float | None
    start_date: float | None


@dataclass(frozen=True)
class Ended:
    """A rental's kept box as its record tells it (used only where no provider row was seen)."""

    instance_id: str
    operator: str
    dph_total: float
    started_at: float
    ended_at: float | None


@dataclass(frozen=True)
class Commitment:
    """A live rental's worst case from now: its price until its deadline."""

    name: str
    operator: str
    dph_total: float
    deadline_at: float
    instance_id: str | None = None  # the box it bills for, once kept


@dataclass(frozen=True)
class Figures:
    """What one subject has spent today and this month, and what is committed, in USD."""

    day_usd: float
    month_usd: float
    committed_usd: float


def check_limit(value: float | None, flag: str) -> float | None:
    """A limit as given on the command line: None, or a finite number of dollars >= 0."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} must be a finite number of US dollars, 0 or more, not {value}")
    return value


def day_start(now_s: float) -> float:
    """The start of ``now_s``'s UTC day."""
    at = datetime.fromtimestamp(now_s, UTC)
    return at.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def month_start(now_s: float) -> float:
    """The start of ``now_s``'s UTC month."""
    at = datetime.fromtimestamp(now_s, UTC)
    return at.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()


def accrued(spend: Spend, since_s: float, until_s: float) -> float:
    """USD ``spend`` billed between ``since_s`` and ``until_s`` (a still-billing one until
    ``until_s``)."""
    end = until_s if spend.end_s is None else min(spend.end_s, until_s)
    return spend.dph_total * max(0.0, end - max(spend.start_s, since_s)) / SECONDS_PER_HOUR


def committed(commitments: Iterable[Commitment], now_s: float) -> float:
    """USD the rentals may still bill in the worst case: each one's price until its deadline."""
    return sum(
        c.dph_total * max(0.0, c.deadline_at - now_s) / SECONDS_PER_HOUR for c in commitments
    )


def figures(
    spends: Iterable[Spend],
    commitments: Iterable[Commitment],
    now_s: float,
    operator: str | None = None,
) -> Figures:
    """The team's figures (``operator`` None), or one operator's."""
    day, month = day_start(now_s), month_start(now_s)
    mine = [s for s in spends if operator is None or s.operator == operator]
    owed = [c for c in commitments if operator is None or c.operator == operator]
    return Figures(
        day_usd=sum(accrued(s, day, now_s) for s in mine),
        month_usd=sum(accrued(s, month, now_s) for s in mine),
        committed_usd=committed(owed, now_s),
    )


def burn_usd_per_hr(spends: Iterable[Spend]) -> float:
    """$/h of everything still billing."""
    return sum(s.dph_total for s in spends if s.end_s is None)


def projected_usd(
    spends: Iterable[Spend], commitments: Iterable[Commitment], now_s: float, horizon_s: float
) -> float:
    """USD the next ``horizon_s`` bills if everything live runs to its deadline (a live box
    with no deadline known bills the whole horizon)."""
    owed = list(commitments)
    total = sum(
        c.dph_total * max(0.0, min(c.deadline_at - now_s, horizon_s)) / SECONDS_PER_HOUR
        for c in owed
    )
    covered = {c.instance_id for c in owed}
    return total + sum(
        s.dph_total * horizon_s / SECONDS_PER_HOUR
        for s in spends
        if s.end_s is None and s.instance_id not in covered
    )


def refusal(
    cost_usd: float,
    limits: Sequence[tuple[str, Limit | None, Figures]],
) -> str | None:
    """Why a rental whose worst case is ``cost_usd`` may not go ahead, or None.

    ``limits``: (who, their limit, their figures) for the team and the operator. The first
    limit crossed is named with every figure: the limit, spent, committed, this rental."""
    for who, limit, got in limits:
        if limit is None:
            continue
        for period, cap, spent in (
            (DAY, limit.usd_per_day, got.day_usd),
            (MONTH, limit.usd_per_month, got.month_usd),
        ):
            if cap is None:
                continue
            total = spent + got.committed_usd + cost_usd
            if total > cap:
                return (
                    f"{who}'s budget of ${cap:.2f} per {period} would be crossed: "
                    f"${spent:.2f} spent this {period} + ${got.committed_usd:.2f} committed by "
                    f"live rentals + ${cost_usd:.2f} for this rental (worst case) = "
                    f"${total:.2f}"
                )
    return None


def crossed(limit: Limit | None, got: Figures) -> list[tuple[str, float, float]]:
    """(period, threshold, cap) of every threshold spent + committed has reached."""
    if limit is None:
        return []
    out = []
    for period, cap, spent in (
        (DAY, limit.usd_per_day, got.day_usd),
        (MONTH, limit.usd_per_month, got.month_usd),
    ):
        if cap is None or cap <= 0:
            continue
        for threshold in THRESHOLDS:
            if spent + got.committed_usd >= threshold * cap:
                out.append((period, threshold, cap))
    return out


def observe(
    known: Mapping[str, Spend],
    rows: Sequence[Row] | None,
    owners: Mapping[str, str],
    gone_at: Mapping[str, float],
    ended: Iterable[Ended],
    now_s: float,
) -> list[Spend]:
    """The spend records to write after looking at the account. Pure.

    ``known``: the stored records by instance id; ``rows``: the provider's live instances
    (None: not read this time, so nothing is closed); ``owners``: instance id -> the ledger
    record's owner; ``gone_at``: instance id -> when the ledger confirmed it gone; ``ended``:
    rentals' kept boxes as their records tell them.

    - a provider row with a price and a start is recorded as billing from its ``start_date``;
    - a provider record still open whose box the provider no longer lists is closed when the
      ledger confirmed it gone, else now (it billed at most until it was found missing);
    - a rental's kept box no provider row was ever recorded for is recorded from the rental.
    """
    out: dict[str, Spend] = {}
    seen: set[str] = set()
    for row in rows or ():
        seen.add(row.instance_id)
        if row.dph_total is None or row.start_date is None:
            continue
        fresh = Spend(row.instance_id, owners.get(row.instance_id), row.dph_total, row.start_date)
        if known.get(row.instance_id) != fresh:
            out[row.instance_id] = fresh
    if rows is not None:
        for instance_id, spend in known.items():
            if spend.end_s is None and spend.source == PROVIDER and instance_id not in seen:
                out[instance_id] = replace(spend, end_s=gone_at.get(instance_id, now_s))
    for box in ended:
        if box.instance_id in known or box.instance_id in out or box.instance_id in seen:
            continue
        if box.ended_at is None and rows is not None:
            continue  # live by its record, yet not listed: the provider's row decides
        out[box.instance_id] = Spend(
            box.instance_id, box.operator, box.dph_total, box.started_at, box.ended_at, RENTAL
        )
    return [out[key] for key in sorted(out)]


def lane_observed(known: Iterable[Spend], running: Sequence[Spend], now_s: float) -> list[Spend]:
    """The lane's spend records to write: each job running now (``running``, one per lane
    board with a started job) as it bills, and every lane record still open whose job no longer
    runs closed now (it billed at most until it was found ended). Pure."""
    out = {s.instance_id: s for s in running}
    for spend in known:
        if spend.source != LANE:
            continue
        if spend.instance_id in out:
            if out[spend.instance_id] == spend:
                del out[spend.instance_id]
        elif spend.end_s is None:
            out[spend.instance_id] = replace(spend, end_s=now_s)
    return [out[key] for key in sorted(out)]
