"""`gpuops cost`'s arithmetic (market/cost.py), pure: M15's spend records split by operator and
by UTC day, ISO week and month, market and lane, with budget.accrued for every share."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops.market import budget as b
from gpuops.market import cost as c

H = 3600.0


def at(*when: int) -> float:
    return datetime(*when, tzinfo=UTC).timestamp()  # type: ignore[misc]


NOW = at(2026, 3, 18, 12)  # a Wednesday


def spend(i: str = "1", op: str | None = "alice", price: float = 1.0, start: float = NOW - H,
          end: float | None = None, source: str = b.PROVIDER) -> b.Spend:  # fmt: skip
    return b.Spend(i, op, price, start, end, source)


def test_periods_start_at_utc_midnight_on_the_day_the_monday_and_the_first():
    """M15: a day is the UTC day, a week the ISO week from Monday, a month the UTC month."""
    assert c.period_start(c.DAY, NOW) == at(2026, 3, 18)
    assert c.period_start(c.WEEK, NOW) == at(2026, 3, 16)
    assert c.period_start(c.WEEK, at(2026, 3, 16)) == at(2026, 3, 16)
    assert c.period_start(c.WEEK, at(2026, 3, 15, 23, 59)) == at(2026, 3, 9)  # a Sunday
    assert c.period_start(c.MONTH, NOW) == at(2026, 3, 1)


def test_each_period_ends_where_the_next_one_starts_across_years():
    """M15: the next day, the next Monday, the first of the next month (December to January)."""
    assert c.period_end(c.DAY, at(2026, 2, 28)) == at(2026, 3, 1)
    assert c.period_end(c.WEEK, at(2026, 12, 28)) == at(2027, 1, 4)
    assert c.period_end(c.MONTH, at(2026, 12, 1)) == at(2027, 1, 1)
    assert c.period_end(c.MONTH, at(2026, 1, 1)) == at(2026, 2, 1)


def test_an_unknown_period_is_an_error_not_a_guess():
    """M15: only day, week and month split time; anything else is refused by name."""
    with pytest.raises(ValueError, match="no period 'year'"):
        c.period_start("year", NOW)
    with pytest.raises(ValueError, match="no period 'year'"):
        c.period_end("year", NOW)
    with pytest.raises(ValueError, match="no report by 'year'"):
        c.lines([], "year", NOW)


def test_periods_are_labelled_as_a_person_reads_them():
    """A day is its date, a week its ISO year and week, a month its year and month."""
    assert c.label(c.DAY, at(2026, 3, 18)) == "2026-03-18"
    assert c.label(c.WEEK, at(2026, 3, 16)) == "2026-W12"
    assert c.label(c.WEEK, at(2026, 12, 28)) == "2026-W53"
    assert c.label(c.MONTH, at(2026, 3, 1)) == "2026-03"


def test_by_operator_each_ones_spend_is_theirs_with_market_and_lane_apart():
    """M15: alice's two boxes and her lane job, bob's box and a box no ledger owns: one row
    each, nobody's last, market and lane kept apart, the total adding them."""
    spends = [
        spend("1", "alice", 2.0, NOW - 2 * H, NOW - H),
        spend("2", "alice", 1.0, NOW - H),
        spend("lane+x+1", "alice", 0.7, NOW - 2 * H, None, b.LANE),
        spend("3", "bob", 0.5, NOW - 4 * H),
        spend("4", None, 3.0, NOW - H),
    ]

    rows = c.lines(spends, c.OPERATOR, NOW)

    assert [r.operator for r in rows] == ["alice", "bob", None]
    alice, bob, nobody = rows
    assert (alice.market_usd, alice.lane_usd) == (pytest.approx(3.0), pytest.approx(1.4))
    assert alice.total_usd == pytest.approx(4.4)
    assert (bob.market_usd, bob.lane_usd, nobody.market_usd) == (2.0, 0.0, 3.0)
    assert (alice.start_s, alice.end_s) == (None, None)
    assert c.total(rows).total_usd == pytest.approx(9.4)


def test_a_box_billing_across_midnight_counts_in_both_days_to_the_second():
    """M15: 22:00 to 02:00 at $1/h is $2 on each day; by week and month it is one row."""
    box = spend(start=at(2026, 3, 17, 22), end=at(2026, 3, 18, 2))

    days = c.lines([box], c.DAY, NOW)
    weeks = c.lines([box], c.WEEK, NOW)
    months = c.lines([box], c.MONTH, NOW)

    assert [(r.start_s, r.end_s, r.market_usd) for r in days] == [
        (at(2026, 3, 17), at(2026, 3, 18), pytest.approx(2.0)),
        (at(2026, 3, 18), at(2026, 3, 19), pytest.approx(2.0)),
    ]
    assert [(r.start_s, r.market_usd) for r in weeks] == [(at(2026, 3, 16), pytest.approx(4.0))]
    assert [(r.start_s, r.market_usd) for r in months] == [(at(2026, 3, 1), pytest.approx(4.0))]


def test_a_box_still_billing_counts_until_now_and_not_after():
    """M15: a live box's share ends at the report's time, in today's row."""
    rows = c.lines([spend(start=NOW - 3 * H)], c.DAY, NOW)

    assert [(r.start_s, r.market_usd) for r in rows] == [(at(2026, 3, 18), pytest.approx(3.0))]


def test_rows_come_in_period_order_then_by_operator_with_nobodys_last():
    """A report reads down the calendar; within a period operators by name, the unowned last."""
    spends = [
        spend("1", None, 1.0, at(2026, 3, 17, 1), at(2026, 3, 17, 2)),
        spend("2", "bob", 1.0, at(2026, 3, 17, 1), at(2026, 3, 17, 2)),
        spend("3", "alice", 1.0, at(2026, 3, 18, 1), at(2026, 3, 18, 2)),
        spend("4", "alice", 1.0, at(2026, 3, 17, 1), at(2026, 3, 17, 2)),
    ]

    rows = c.lines(spends, c.DAY, NOW)

    assert [(c.label(c.DAY, r.start_s or 0.0), r.operator) for r in rows] == [
        ("2026-03-17", "alice"),
        ("2026-03-17", "bob"),
        ("2026-03-17", None),
        ("2026-03-18", "alice"),
    ]


def test_a_spend_that_never_billed_before_now_makes_no_row():
    """M15: an interval that is empty, or starts after the report's time (a clock ahead), is
    no spend; a lane job and a box of one operator in one day share a row."""
    spends = [
        spend("1", start=NOW - H, end=NOW - H),
        spend("2", start=NOW + H),
        spend("3", "bob", 1.0, NOW - H),
        spend("lane+x+1", "bob", 0.5, NOW - 2 * H, NOW - H, b.LANE),
    ]

    rows = c.lines(spends, c.DAY, NOW)

    assert [(r.operator, r.market_usd, r.lane_usd) for r in rows] == [
        ("bob", pytest.approx(1.0), pytest.approx(0.5))
    ]


def test_a_spend_is_lane_only_when_its_source_says_lane():
    """M15: provider rows and rental records are the market's; the lane's records its own."""
    assert [c.kind(spend(source=s)) for s in (b.PROVIDER, b.RENTAL, b.LANE)] == [
        c.MARKET, c.MARKET, c.LANE
    ]  # fmt: skip


SPENDS = st.lists(
    st.builds(
        spend,
        i=st.text("abc", min_size=1, max_size=3),
        op=st.sampled_from(["alice", "bob", None]),
        price=st.floats(0.0, 10.0),
        start=st.floats(NOW - 90 * 24 * H, NOW + H),
        end=st.one_of(st.none(), st.floats(NOW - 90 * 24 * H, NOW + 2 * H)),
        source=st.sampled_from([b.PROVIDER, b.RENTAL, b.LANE]),
    ),
    max_size=6,
)


@given(spends=SPENDS, by=st.sampled_from(c.BY))
def test_every_split_adds_up_to_what_each_box_accrued_over_its_life(spends, by):
    """M15: no second calculation: whatever the split, the report's total is the sum of
    budget.accrued over each spend's whole life until now, market and lane alike."""
    rows = c.lines(spends, by, NOW)
    whole = sum(b.accrued(s, s.start_s, NOW) for s in spends)
    lane = sum(b.accrued(s, s.start_s, NOW) for s in spends if s.source == b.LANE)

    assert c.total(rows).total_usd == pytest.approx(whole, abs=1e-6)
    assert c.total(rows).lane_usd == pytest.approx(lane, abs=1e-6)
    for row in rows:
        if by != c.OPERATOR:
            assert row.start_s is not None and row.end_s is not None
            assert c.period_start(by, row.start_s) == row.start_s < row.end_s
            assert row.end_s == c.period_end(by, row.start_s)
