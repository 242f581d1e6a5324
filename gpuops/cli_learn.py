"""Printing for the learning commands (stats, policy eval, incident); no decisions here."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuops.errors import UsageError


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    stats = commands.add_parser(
        "stats", parents=[common], help="the seed's table of figures from the event log"
    )
    stats.add_argument("--since", metavar="DATE", help="only events at or after DATE (UTC)")
    stats.add_argument("--log", metavar="FILE", help="event log (default: the state's)")
    stats.add_argument("--html", metavar="FILE", help="also write an HTML report with plots")
    policy = commands.add_parser(
        "policy", parents=[common], help="score a selection policy from the log, renting nothing"
    )
    policy_commands = policy.add_subparsers(dest="policy_command", metavar="COMMAND", required=True)
    evaluate = policy_commands.add_parser(
        "eval", parents=[common], help="IPS and self-normalised IPS with 95% intervals"
    )
    evaluate.add_argument(
        "--policy",
        required=True,
        metavar="NAME",
        help="logged, greedy, uniform, reliable or shrunk",
    )
    evaluate.add_argument("--since", metavar="DATE", help="only races at or after DATE (UTC)")
    evaluate.add_argument("--log", metavar="FILE", help="event log (default: the state's)")
    record = commands.add_parser(
        "record", parents=[common], help="a one-cent rental that captures raw provider output"
    )
    record_commands = record.add_subparsers(
        dest="record_command", metavar="PROVIDER", required=True
    )
    vast = record_commands.add_parser(
        "vast", parents=[common], help="rent the cheapest box under the cap, probe, destroy"
    )
    vast.add_argument("--gpu", metavar="MODEL", required=True)
    vast.add_argument("--max-usd", type=float, default=0.05, help="hard spend cap (default 0.05)")
    vast.add_argument("--yes-spend", action="store_true", help="without it, nothing is spent")
    vast.add_argument("--out", metavar="DIR", help="recordings root (default: the checkout's)")
    incident = commands.add_parser(
        "incident", parents=[common], help="the incident register: add, update, list, observe"
    )
    incident_commands = incident.add_subparsers(
        dest="incident_command", metavar="COMMAND", required=True
    )
    add = incident_commands.add_parser("add", parents=[common], help="record an incident today")
    add.add_argument("--date", required=True, metavar="YYYY-MM-DD")
    add.add_argument("--what", required=True, help="what happened")
    add.add_argument("--cost-usd", type=float, metavar="USD")
    add.add_argument("--cause", help="the cause, once known")
    add.add_argument("--rule", metavar="ID", help="the prevention rule it led to")
    update = incident_commands.add_parser(
        "update", parents=[common], help="add the cause, rule or cost once known"
    )
    update.add_argument("id", metavar="ID")
    update.add_argument("--cost-usd", type=float, metavar="USD")
    update.add_argument("--cause")
    update.add_argument("--rule", metavar="ID")
    incident_commands.add_parser("list", parents=[common], help="every incident, oldest first")
    observe = incident_commands.add_parser(
        "observe", parents=[common], help="record a rule seen working on a real job or a drill"
    )
    observe.add_argument("--rule", required=True, metavar="ID")
    observe.add_argument("--date", required=True, metavar="YYYY-MM-DD")
    observe.add_argument("--kind", required=True, choices=("real", "drill"))
    observe.add_argument("--what", required=True, help="what was seen")


def log_path(args: argparse.Namespace, state_url: str) -> Path:
    """--log, else GPUOPS_EVENTS, else the state directory's events.jsonl (as rent writes)."""
    if getattr(args, "log", None):
        return Path(args.log)
    if os.environ.get("GPUOPS_EVENTS"):
        return Path(os.environ["GPUOPS_EVENTS"])
    from gpuops.market.session import local_dir

    return local_dir(state_url) / "events.jsonl"


def since_stamp(text: str | None) -> str:
    """DATE as the log's own fixed-width stamp, so it compares as text."""
    if not text:
        return ""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r} is not a date (use YYYY-MM-DD or ISO-8601)") from None
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def run_learn(args: argparse.Namespace, state_url: str, as_json: bool, operator: str = "") -> int:
    if args.command == "incident":
        return _incident(args, state_url, operator, as_json)
    if args.command == "record":
        return _record(args, state_url, operator, as_json)
    if args.command == "stats":
        return _stats(args, state_url, as_json)
    if args.command == "policy":
        return _policy_eval(args, state_url, as_json)
    raise UsageError(f"unknown command {args.command!r}")  # pragma: no cover


_METRIC_NAMES = {"passed": "pass rate", "seconds": "seconds to verdict", "cost_usd": "cost USD"}


def _policy_eval(args: argparse.Namespace, state_url: str, as_json: bool) -> int:
    from gpuops.analysis import ope, shrink
    from gpuops.analysis.scan import scan

    decisions, counts = ope.Decisions(), shrink.MachineCounts()
    for ts, kind, payload in scan(
        log_path(args, state_url), kinds=ope.KINDS | shrink.KINDS, since=since_stamp(args.since)
    ):
        if kind in ope.KINDS:
            decisions.add(ts, kind, payload)
        counts.add(kind, payload)
    try:
        policy = ope.named(args.policy, shrink.PassRates.from_counts(counts))
        result = ope.evaluate(decisions.rows, policy)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    doc = {
        "policy": args.policy,
        "decisions": result.decisions,
        "matched": result.matched,
        "effective_n": round(result.effective_n, 2),
        "seconds_to_healthy": result.seconds_to_healthy,
        "estimates": {
            e.metric: {
                "logged_mean": e.logged_mean,
                "ips": e.ips,
                "ips_ci95": e.ips_half_width,
                "snips": e.snips,
                "snips_ci95": e.snips_half_width,
            }
            for e in result.estimates
        },
    }
    if as_json:
        _print_json(doc)
        return 0
    print(
        f"policy {args.policy} over {result.decisions} logged races ({result.matched} "
        f"matched, effective n {result.effective_n:.1f}):"
    )
    for e in result.estimates:
        print(
            f"  {_METRIC_NAMES[e.metric]:<19} logged {e.logged_mean:.4g}  IPS {e.ips:.4g} "
            f"+/- {e.ips_half_width:.2g}  SNIPS {e.snips:.4g} +/- {e.snips_half_width:.2g}"
        )
    healthy = result.seconds_to_healthy
    print(f"  time to a healthy box (SNIPS): {'n/a' if healthy is None else f'{healthy:.0f} s'}")
    return 0


def _stats(args: argparse.Namespace, state_url: str, as_json: bool) -> int:
    from gpuops.analysis.scan import ScanCounts, scan
    from gpuops.analysis.stats import KINDS, NEEDLES, Stats

    counts = ScanCounts()
    stats = Stats()
    for ts, kind, payload in scan(
        log_path(args, state_url),
        kinds=KINDS,
        since=since_stamp(args.since),
        counts=counts,
        needles=NEEDLES,
    ):
        stats.add(ts, kind, payload)
    report = stats.report()
    scanned = {
        "events": counts.events - counts.before_since,
        "before_since": counts.before_since,
        "bad_lines": counts.bad_total,
        "first_bad_lines": [f"line {b.lineno}: {b.reason}" for b in counts.bad_lines],
    }
    if args.html:
        from gpuops.analysis.page import render

        Path(args.html).write_text(render(report, scanned), encoding="utf-8")
    if as_json:
        _print_json({**report, "scanned": scanned})
        return 0
    from gpuops.analysis.table import lines

    print("\n".join(lines(report, scanned)))
    for bad in scanned["first_bad_lines"]:
        print(f"unreadable: {bad}", file=sys.stderr)
    return 0


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _incident(args: argparse.Namespace, state_url: str, operator: str, as_json: bool) -> int:
    import dataclasses

    from gpuops.register import Register
    from gpuops.store import open_store

    register = Register(open_store(state_url), operator)
    command = args.incident_command
    if command == "list":
        rows = [dataclasses.asdict(i) for i in register.incidents()]
        if as_json:
            _print_json(rows)
            return 0
        for row in rows:
            cost = "cost unknown" if row["cost_usd"] is None else f"${row['cost_usd']:.2f}"
            print(f"{row['id']:<14} {cost:<14} {row['what']}")
            cause, rule = row["cause"] or "not yet known", row["rule"] or "none yet"
            print(f"{'':15}cause: {cause}; rule: {rule}")
        if not rows:
            print("no incidents recorded")
        return 0
    if command == "add":
        entry: Any = register.add(
            on=args.date, what=args.what, cost_usd=args.cost_usd, cause=args.cause, rule=args.rule
        )
    elif command == "update":
        entry = register.update(args.id, cause=args.cause, rule=args.rule, cost_usd=args.cost_usd)
    else:
        entry = register.observe(rule=args.rule, on=args.date, kind=args.kind, what=args.what)
    if as_json:
        _print_json(dataclasses.asdict(entry))
    else:
        print(f"{command}: {entry.id}")
    return 0


def print_rules(as_json: bool, state_url: str | None) -> int:
    """`gpuops rules`: verified only from a dated observation (rules.py or the register)."""
    from gpuops.register import shown_status
    from gpuops.rules import RULES

    observed = _observations(state_url)
    if as_json:
        rows = []
        for rule in RULES:
            status, seen = shown_status(rule, observed)
            rows.append({**rule.__dict__, "status": status.split(" ")[0], "observed": seen})
        _print_json(rows)
        return 0
    for rule in RULES:
        status, seen = shown_status(rule, observed)
        print(f"{rule.id:<4} {status:<22} {rule.summary}")
        if rule.test:
            print(f"{'':28}enforced by {rule.test}")
        if rule.scope:
            print(f"{'':28}scope: {rule.scope}")
        if seen:
            print(f"{'':28}observed: {seen}")
    return 0


def _observations(state_url: str | None) -> list[Any]:
    """The register's observations; none when no state exists yet (rules never creates it)."""
    if state_url is None:
        return []
    if (
        not state_url.startswith("s3://")
        and not Path(state_url.removeprefix("file://")).expanduser().is_dir()
    ):
        return []
    from gpuops.register import Register
    from gpuops.store import open_store

    return Register(open_store(state_url), "reader").observations()


def _record(args: argparse.Namespace, state_url: str, operator: str, as_json: bool) -> int:
    from gpuops.providers import RECORDINGS
    from gpuops.record import max_price_per_hour, record_vast, summary

    max_price_per_hour(args.max_usd, args.yes_spend)  # refuse before opening anything

    def progress(line: str) -> None:
        if not as_json:
            print(line, file=sys.stderr, flush=True)

    captured = record_vast(
        state_url=state_url,
        operator=operator,
        gpu_name=args.gpu,
        max_usd=args.max_usd,
        yes_spend=args.yes_spend,
        root=Path(args.out) if args.out else RECORDINGS,
        progress=progress,
    )
    doc = summary(captured)
    gone = all("confirmed gone" in line for line in captured.destroyed)
    if as_json:
        _print_json({**doc, "all_confirmed_gone": gone})
    else:
        print(f"{captured.name}: probe verdict {captured.verdict}; {len(captured.files)} files")
        for line in captured.destroyed:
            print(f"  {line}")
        for path in doc["files"]:
            print(f"  wrote {path}")
    return 0 if gone else 4
