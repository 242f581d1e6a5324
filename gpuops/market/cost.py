"""What was spent, by operator and by UTC day, ISO week or month (`gpuops cost`). Pure.

No second spend calculation: the spend is M15's (market/budget.py, market/budgets.py), one
``budget.Spend`` per box or lane job that billed, its interval from the provider's own state
(a Vast row's ``start_date`` and ``dph_total``, closed when the ledger confirmed the box
gone), the lane's at its configured rate; each period's share is ``budget.accrued`` over that
period. A box that bills across midnight counts in both days, to the second.

Market is every spend of the marketplace (a provider row, or a kept box's rental record);
lane is the lane's jobs. A spend no ledger owns (``operator`` None) is the team's all the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from gpuops.market import budget as b

OPERATOR, DAY, WEEK, MONTH = "operator", "day", "week", "month"
BY = (OPERATOR, DAY, WEEK, MONTH)
MARKET, LANE = "market", "lane"


@dataclass(frozen=True)
class Line:
    """One row of the report: an operator's spend (in a period, unless by operator)."""

    operator: str | None
    market_usd: float
    lane_usd: float
    start_s: float | None = None  # the period's first second (None: by operator, all time)
    end_s: float | None = None  # the next period's first second

    @property
    def total_usd(self) -> float:
        return self.market_usd + self.lane_usd


def kind(spend: b.Spend) -> str:
    """Lane or market: where the spend was billed."""
    return LANE if spend.source == b.LANE else MARKET


def _midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()


def period_start(by: str, at_s: float) -> float:
    """The first second of the UTC day, ISO week (from Monday) or month holding ``at_s``."""
    if by == DAY:
        return b.day_start(at_s)
    if by == MONTH:
        return b.month_start(at_s)
    if by != WEEK:
        raise ValueError(f"no period {by!r}")
    day = datetime.fromtimestamp(at_s, UTC).date()
    return _midnight(date.fromordinal(day.toordinal() - day.weekday()))


def period_end(by: str, start_s: float) -> float:
    """The first second of the period after the one starting at ``start_s``."""
    day = datetime.fromtimestamp(start_s, UTC).date()
    if by == DAY:
        return _midnight(date.fromordinal(day.toordinal() + 1))
    if by == WEEK:
        return _midnight(date.fromordinal(day.toordinal() + 7))
    if by != MONTH:
        raise ValueError(f"no period {by!r}")
    return _midnight(date(day.year + day.month // 12, day.month % 12 + 1, 1))


def label(by: str, start_s: float) -> str:
    """A period as a person reads it: 2026-03-15, 2026-W11, 2026-03."""
    day = datetime.fromtimestamp(start_s, UTC).date()
    if by == WEEK:
        year, week, _ = day.isocalendar()
        return f"{year}-W{week:02d}"
    return day.strftime("%Y-%m") if by == MONTH else day.isoformat()


def lines(spends: Iterable[b.Spend], by: str, now_s: float) -> list[Line]:
    """The report's rows, up to ``now_s``: per operator (``by`` OPERATOR), else per period and
    operator, periods in order, operators by name with nobody's last. Only what billed for a
    moment at least makes a row."""
    if by not in BY:
        raise ValueError(f"no report by {by!r}")
    sums: dict[tuple[float | None, str | None], dict[str, float]] = {}
    for spend in spends:
        end = now_s if spend.end_s is None else min(spend.end_s, now_s)
        if end <= spend.start_s:
            continue
        if by == OPERATOR:
            _add(sums, (None, spend.operator), kind(spend), b.accrued(spend, spend.start_s, end))
            continue
        start = period_start(by, spend.start_s)
        while start < end:
            after = period_end(by, start)
            usd = b.accrued(spend, start, min(after, end))
            _add(sums, (start, spend.operator), kind(spend), usd)
            start = after
    rows = [
        Line(
            who,
            got[MARKET],
            got[LANE],
            start,
            None if start is None else period_end(by, start),
        )
        for (start, who), got in sums.items()
    ]
    return sorted(rows, key=lambda r: (r.start_s or 0.0, r.operator is None, r.operator or ""))


def _add(
    sums: dict[tuple[float | None, str | None], dict[str, float]],
    key: tuple[float | None, str | None],
    where: str,
    usd: float,
) -> None:
    got = sums.setdefault(key, {MARKET: 0.0, LANE: 0.0})
    got[where] += usd


def total(rows: Iterable[Line]) -> Line:
    """Every row added up: the team's whole spend in the report."""
    rows = list(rows)
    return Line(None, sum(r.market_usd for r in rows), sum(r.lane_usd for r in rows))
