"""`gpuops budget [set]` (M15): parsing checks and printing only; budgets.py decides."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from gpuops.errors import ExitCode, GpuopsError, UsageError
from gpuops.output import out
from gpuops.settings import Settings

if TYPE_CHECKING:
    from gpuops.market.budget import Figures, Limit
    from gpuops.market.budgets import Snapshot


def limits_given(args: argparse.Namespace) -> dict[str, Any]:
    """The limits `budget set` was given, checked: a UsageError names what is wrong."""
    from gpuops.market.budget import check_limit

    team_day = check_limit(args.team_usd_per_day, "--team-usd-per-day")
    team_month = check_limit(args.team_usd_per_month, "--team-usd-per-month")
    day = check_limit(args.usd_per_day, "--usd-per-day")
    month = check_limit(args.usd_per_month, "--usd-per-month")
    who = args.limit_operator
    if who is not None and not who.strip():
        raise UsageError("--operator must name an operator, not be empty")
    if who is None and (day is not None or month is not None):
        raise UsageError("--usd-per-day and --usd-per-month need --operator ID (whose limits)")
    if who is not None and day is None and month is None:
        raise UsageError(f"--operator {who} needs --usd-per-day and/or --usd-per-month")
    if who is None and team_day is None and team_month is None:
        raise UsageError(
            "budget set needs --team-usd-per-day, --team-usd-per-month, or --operator ID "
            "with --usd-per-day/--usd-per-month"
        )
    return {
        "team_day": team_day,
        "team_month": team_month,
        "operator": who,
        "day": day,
        "month": month,
    }


def run_budget(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    from gpuops.market.session import open_market

    if args.budget_command == "set":
        given = limits_given(args)  # before anything is opened
        from gpuops.market.budgets import Budgets

        store = settings.open_state()
        if given["operator"] is not None:
            from gpuops.store.base import check_key

            check_key(given["operator"])  # an id the store cannot name is a usage error
        Budgets(store, operator).set_limits(**given)
    from gpuops.market.budgets import Budgets

    market = open_market(settings, operator, need_key=False)
    budgets = market.budget
    assert isinstance(budgets, Budgets)  # open_market's
    try:
        instances = market.vast.list_instances()
    except GpuopsError as exc:  # the store's figures are still worth showing, with a warning
        print(f"gpuops: spend not refreshed from the provider: {exc}", file=sys.stderr)
        instances = None
    budgets.observe(instances)
    now = budgets.snapshot()
    budgets.raise_alarms(now)
    view = budget_view(now)
    out(as_json, view, budget_text(view))
    from gpuops import timing

    if budgets.alarms is not None:
        budgets.alarms.flush(timing.ALARM_FLUSH_S)
    return ExitCode.OK


def budget_view(now: Snapshot) -> dict[str, Any]:
    """Every subject's limits and figures, and the whole account's burn, as plain values."""
    from gpuops import timing
    from gpuops.market import budget as b

    def subject(limit: Limit | None, got: Figures) -> dict[str, Any]:
        return {
            "usd_per_day": None if limit is None else limit.usd_per_day,
            "usd_per_month": None if limit is None else limit.usd_per_month,
            "spent_today_usd": round(got.day_usd, 4),
            "spent_month_usd": round(got.month_usd, 4),
            "committed_usd": round(got.committed_usd, 4),
        }

    names = set(now.operators) | {s.operator for s in now.spends if s.operator}
    names |= {c.operator for c in now.commitments if c.operator}
    return {
        "team": subject(now.team, now.figures()),
        "operators": {n: subject(now.operators.get(n), now.figures(n)) for n in sorted(names)},
        "burn_usd_per_hr": round(b.burn_usd_per_hr(now.spends), 4),
        "projected_24h_usd": round(
            b.projected_usd(now.spends, now.commitments, now.now_s, timing.BUDGET_PROJECTION_S), 4
        ),
    }


def budget_text(view: dict[str, Any]) -> str:
    def usd(value: float | None) -> str:
        return "-" if value is None else f"${value:.2f}"

    lines = [
        f"{'WHO':<24} {'LIMIT/DAY':>10} {'TODAY':>9} {'LIMIT/MONTH':>12} {'MONTH':>9} "
        f"{'COMMITTED':>10}"
    ]
    rows = [("team", view["team"]), *view["operators"].items()]
    for who, row in rows:
        lines.append(
            f"{who:<24} {usd(row['usd_per_day']):>10} {usd(row['spent_today_usd']):>9} "
            f"{usd(row['usd_per_month']):>12} {usd(row['spent_month_usd']):>9} "
            f"{usd(row['committed_usd']):>10}"
        )
    lines.append(
        f"burn {usd(view['burn_usd_per_hr'])}/h; projected next 24 h "
        f"{usd(view['projected_24h_usd'])} (live boxes and the lane to their deadlines)"
    )
    return "\n".join(lines)
