"""Budget arithmetic (M15), pure: spend, commitments, refusals, thresholds and observation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops.errors import UsageError
from gpuops.market import budget as b

NOON = datetime(2026, 3, 15, 12, 0, tzinfo=UTC).timestamp()
DAY0 = datetime(2026, 3, 15, tzinfo=UTC).timestamp()
MONTH0 = datetime(2026, 3, 1, tzinfo=UTC).timestamp()
H = 3600.0


def spend(i: str = "1", op: str | None = "alice", price: float = 1.0, start: float = NOON - H,
          end: float | None = None, source: str = b.PROVIDER) -> b.Spend:  # fmt: skip
    return b.Spend(i, op, price, start, end, source)


def test_days_and_months_start_at_utc_midnight():
    """M15: today is the UTC day, this month the UTC month, whatever the hour."""
    assert b.day_start(NOON) == DAY0
    assert b.month_start(NOON) == MONTH0
    assert b.day_start(DAY0) == DAY0 and b.month_start(MONTH0) == MONTH0


def test_a_box_accrues_its_price_only_inside_the_window_and_its_life():
    """M15: a box bills price x hours of its life that fall in the window, never before it
    started, after it ended, or outside the window."""
    box = spend(price=2.0, start=NOON - 2 * H, end=NOON - H)
    assert b.accrued(box, DAY0, NOON) == pytest.approx(2.0)
    assert b.accrued(box, NOON - 1.5 * H, NOON) == pytest.approx(1.0)
    assert b.accrued(box, NOON - 0.5 * H, NOON) == 0.0
    assert b.accrued(box, DAY0, NOON - 1.75 * H) == pytest.approx(0.5)
    live = spend(price=2.0, start=NOON - H)
    assert b.accrued(live, DAY0, NOON) == pytest.approx(2.0)
    assert b.accrued(live, DAY0, NOON + H) == pytest.approx(4.0)


def test_yesterdays_spend_counts_for_the_month_not_for_today():
    """M15: a box that billed yesterday is in this month's figure, not today's."""
    box = spend(price=1.0, start=DAY0 - 3 * H, end=DAY0 + H)
    got = b.figures([box], [], NOON)
    assert got.day_usd == pytest.approx(1.0)
    assert got.month_usd == pytest.approx(4.0)


def test_committed_is_each_live_rentals_price_until_its_deadline():
    """M15: what is committed is the worst case still to come; a past deadline commits
    nothing."""
    owed = [b.Commitment("a", "alice", 0.5, NOON + 2 * H), b.Commitment("b", "bob", 9.0, NOON - H)]
    assert b.committed(owed, NOON) == pytest.approx(1.0)


def test_an_operators_figures_are_theirs_and_the_teams_are_everyones():
    """M15: bob's spend and commitments count against the team, not against alice."""
    spends = [spend("1", "alice", 1.0), spend("2", "bob", 2.0), spend("3", None, 4.0)]
    owed = [b.Commitment("b", "bob", 1.0, NOON + H)]
    team = b.figures(spends, owed, NOON)
    alice = b.figures(spends, owed, NOON, "alice")
    assert (team.day_usd, team.committed_usd) == (pytest.approx(7.0), pytest.approx(1.0))
    assert (alice.day_usd, alice.committed_usd) == (pytest.approx(1.0), 0.0)


def test_a_rental_that_would_cross_the_team_limit_is_refused_with_the_figures():
    """M15: spent + committed + the rental's worst case over a limit is refused, naming the
    limit, each figure and the total."""
    team = b.Limit(usd_per_day=10.0)
    got = b.Figures(day_usd=3.0, month_usd=3.0, committed_usd=4.0)
    why = b.refusal(3.5, [("the team", team, got)])
    assert why is not None
    for figure in ("$10.00 per day", "$3.00 spent", "$4.00 committed", "$3.50", "$10.50"):
        assert figure in why
    assert b.refusal(3.0, [("the team", team, got)]) is None  # exactly at the limit: allowed


def test_the_month_limit_and_the_operators_limit_refuse_too():
    """M15: every limit counts: the month's, and the operator's under a roomy team's."""
    got = b.Figures(day_usd=0.0, month_usd=90.0, committed_usd=0.0)
    roomy = b.Limit(usd_per_day=1000.0, usd_per_month=1000.0)
    month = b.refusal(11.0, [("the team", b.Limit(usd_per_month=100.0), got)])
    assert month is not None and "per month" in month and "$90.00 spent" in month
    mine = b.refusal(2.0, [("the team", roomy, got), ("alice", b.Limit(usd_per_day=1.0), got)])
    assert mine is not None and mine.startswith("alice's budget of $1.00 per day")
    assert b.refusal(5.0, [("the team", None, got), ("alice", b.Limit(), got)]) is None


@given(
    spent=st.floats(0, 1e4),
    owed=st.floats(0, 1e4),
    cost=st.floats(0, 1e4),
    cap=st.floats(0, 1e4),
)
def test_a_refusal_is_exactly_a_crossing(spent, owed, cost, cap):
    """M15: refused if and only if spent + committed + worst case exceeds the limit."""
    got = b.Figures(day_usd=spent, month_usd=0.0, committed_usd=owed)
    why = b.refusal(cost, [("the team", b.Limit(usd_per_day=cap), got)])
    assert (why is not None) == (spent + owed + cost > cap)


def test_thresholds_are_crossed_at_80_and_100_percent_of_spent_plus_committed():
    """O1/M15: each threshold of each limit reached is named once; a zero limit raises none."""
    limit = b.Limit(usd_per_day=10.0, usd_per_month=100.0)
    assert b.crossed(limit, b.Figures(7.9, 7.9, 0.0)) == []
    assert b.crossed(limit, b.Figures(5.0, 5.0, 3.0)) == [(b.DAY, 0.8, 10.0)]
    assert b.crossed(limit, b.Figures(6.0, 80.0, 4.0)) == [
        (b.DAY, 0.8, 10.0),
        (b.DAY, 1.0, 10.0),
        (b.MONTH, 0.8, 100.0),
    ]
    assert b.crossed(b.Limit(usd_per_day=0.0), b.Figures(1.0, 1.0, 1.0)) == []
    assert b.crossed(None, b.Figures(1.0, 1.0, 1.0)) == []


@pytest.mark.parametrize("bad", [-0.01, float("nan"), float("inf")])
def test_a_negative_or_non_finite_limit_is_a_usage_error_naming_the_flag(bad):
    """M15: a limit is a finite number of dollars, 0 or more; anything else names its flag."""
    with pytest.raises(UsageError, match="--usd-per-day"):
        b.check_limit(bad, "--usd-per-day")
    assert b.check_limit(0.0, "--usd-per-day") == 0.0
    assert b.check_limit(None, "--usd-per-day") is None


def test_burn_and_the_projection_follow_the_live_boxes_to_their_deadlines():
    """M15: burn is $/h of what still bills; the next 24 h stop at each deadline, and a box
    with no known deadline bills all of them."""
    spends = [spend("1", price=1.0), spend("2", price=2.0), spend("3", price=8.0, end=NOON)]
    owed = [b.Commitment("r", "alice", 1.0, NOON + 2 * H, "1")]
    assert b.burn_usd_per_hr(spends) == pytest.approx(3.0)
    assert b.projected_usd(spends, owed, NOON, 24 * H) == pytest.approx(2.0 + 48.0)
    far = [b.Commitment("r", "alice", 1.0, NOON + 48 * H, "1")]
    assert b.projected_usd([], far, NOON, 24 * H) == pytest.approx(24.0)


def test_observation_records_each_provider_row_from_its_start_date():
    """M15: a live row's own start_date and dph_total make its record; an unchanged one is not
    written again; a row without a price or a start is not guessed at."""
    rows = [b.Row("7", 0.5, NOON - H), b.Row("8", None, NOON), b.Row("9", 0.2, None)]
    got = b.observe({}, rows, {"7": "bob"}, {}, [], NOON)
    assert got == [b.Spend("7", "bob", 0.5, NOON - H)]
    assert b.observe({"7": got[0]}, rows, {"7": "bob"}, {}, [], NOON) == []


def test_a_box_gone_from_the_list_ends_when_the_ledger_confirmed_it_gone():
    """M15: a box the provider no longer lists billed until its confirmed-gone time, or, with
    none known, until now; without a list nothing is closed."""
    known = {"7": spend("7", start=NOON - 2 * H), "8": spend("8", start=NOON - 2 * H)}
    got = b.observe(known, [], {}, {"7": NOON - H}, [], NOON)
    assert got == [spend("7", start=NOON - 2 * H, end=NOON - H),
                   spend("8", start=NOON - 2 * H, end=NOON)]  # fmt: skip
    assert b.observe(known, None, {}, {"7": NOON - H}, [], NOON) == []
    closed = {"7": spend("7", end=NOON - H)}
    assert b.observe(closed, [], {}, {}, [], NOON) == []


def test_a_kept_box_no_list_showed_is_recorded_from_its_rental():
    """M15: a rental's kept box never seen in a list still counts, from its record; one the
    provider lists, or already recorded, is the provider's."""
    ended = [
        b.Ended("5", "alice", 0.3, NOON - 2 * H, NOON - H),
        b.Ended("6", "bob", 0.4, NOON - H, None),
    ]
    got = b.observe({}, None, {}, {}, ended, NOON)
    assert got == [
        b.Spend("5", "alice", 0.3, NOON - 2 * H, NOON - H, b.RENTAL),
        b.Spend("6", "bob", 0.4, NOON - H, None, b.RENTAL),
    ]
    listed = b.observe({}, [b.Row("6", 0.4, NOON - H)], {"6": "bob"}, {}, ended, NOON)
    assert listed == [b.Spend("5", "alice", 0.3, NOON - 2 * H, NOON - H, b.RENTAL),
                      b.Spend("6", "bob", 0.4, NOON - H)]  # fmt: skip
    live_unlisted = b.observe({}, [], {}, {}, ended[1:], NOON)
    assert live_unlisted == []
    assert b.observe({"5": spend("5")}, None, {}, {}, ended[:1], NOON) == []


def test_a_lane_job_bills_while_it_runs_and_is_closed_once_it_does_not():
    """M15: the lane's started job is a record at the lane's rate; a record whose job no
    longer runs is closed now; records of boxes are not the lane's to close."""
    job = spend("lane+l+1", "carol", 0.7, NOON - H, None, b.LANE)
    assert b.lane_observed([], [job], NOON) == [job]
    assert b.lane_observed([job], [job], NOON) == []
    assert b.lane_observed([job], [], NOON) == [
        spend("lane+l+1", "carol", 0.7, NOON - H, NOON, b.LANE)
    ]
    box = spend("9")
    assert b.lane_observed([box], [], NOON) == []
    done = spend("lane+l+0", "carol", 0.7, NOON - 3 * H, NOON - 2 * H, b.LANE)
    assert b.lane_observed([done], [], NOON) == []


def test_days_and_months_start_at_utc_midnight_in_any_local_zone_and_to_the_microsecond(
    monkeypatch,
):
    """M15: the day's and month's start drop every minute, second and microsecond, and are
    UTC's whatever this host's time zone."""
    import time

    odd = NOON + 1234.567891
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert b.day_start(odd) == DAY0 and b.month_start(odd) == MONTH0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_passed_deadline_projects_nothing_and_every_limit_is_read_past_an_empty_one():
    """M15: a commitment past its deadline adds nothing to the next 24 h; a subject with no
    limit, or a period with none, does not stop the next from being checked or alarmed."""
    assert b.projected_usd([], [b.Commitment("r", "a", 5.0, NOON - H, "1")], NOON, 24 * H) == 0.0
    got = b.Figures(day_usd=9.0, month_usd=9.0, committed_usd=0.0)
    why = b.refusal(2.0, [("the team", None, got), ("alice", b.Limit(usd_per_day=10.0), got)])
    assert why is not None and why.startswith("alice's")
    assert b.crossed(b.Limit(usd_per_month=10.0), got) == [(b.MONTH, 0.8, 10.0)]
    assert b.crossed(b.Limit(usd_per_day=0.5), got) == [(b.DAY, 0.8, 0.5), (b.DAY, 1.0, 0.5)]


def test_observation_reads_past_rows_and_records_it_skips():
    """M15: a row with no price, a kept box already recorded and a live one the list lacks are
    each skipped without ending the observation; a listed row's rental is never recorded in
    its place, priced or not."""
    rows = [b.Row("8", None, NOON), b.Row("7", 0.5, NOON - H)]
    assert b.observe({}, rows, {}, {}, [], NOON) == [b.Spend("7", None, 0.5, NOON - H)]
    ended = [
        b.Ended("8", "bob", 0.4, NOON - H, NOON),  # listed without a price: not from its rental
        b.Ended("5", "alice", 0.3, NOON - 2 * H, None),  # live, not listed: the row decides
        b.Ended("4", "alice", 0.3, NOON - 2 * H, NOON - H),
    ]
    got = b.observe({}, rows, {}, {}, ended, NOON)
    assert [s.instance_id for s in got] == ["4", "7"]
    known = {"3": spend("3", end=NOON)}
    got = b.observe(known, None, {}, {}, [b.Ended("3", "a", 1, NOON - H, NOON), *ended], NOON)
    assert [s.instance_id for s in got] == ["4", "5", "8"]  # no list: the rentals say


def test_the_lane_closes_its_jobs_past_any_box_record():
    """M15: a box's record before a lane job's does not keep the ended job open."""
    job = spend("lane+l+1", "carol", 0.7, NOON - H, None, b.LANE)
    assert b.lane_observed([spend("9"), job], [], NOON) == [
        spend("lane+l+1", "carol", 0.7, NOON - H, NOON, b.LANE)
    ]
