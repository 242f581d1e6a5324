"""Printing for the learning commands (stats, policy eval, incident); no decisions here."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.errors import ExitCode, UsageError
from gpuops.output import print_json
from gpuops.settings import Settings
from gpuops.timestamps import utc_iso

if TYPE_CHECKING:
    from gpuops.register import Incident, Observation


def log_path(args: argparse.Namespace, settings: Settings) -> Path:
    """--log, else the event log every command writes (Settings.events_path: GPUOPS_EVENTS,
    else beside a local store, else per user)."""
    path = Path(args.log) if getattr(args, "log", None) else settings.events_path
    if path.is_dir():
        raise UsageError(f"event log {path} is a directory; give the events.jsonl file in it")
    return path


def since_stamp(text: str | None) -> str:
    """DATE as the log's own fixed-width stamp, so it compares as text."""
    if not text:
        return ""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r} is not a date (use YYYY-MM-DD or ISO-8601)") from None
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return utc_iso(when.timestamp())


def run_learn(
    args: argparse.Namespace, settings: Settings, as_json: bool, operator: str = ""
) -> int:
    if args.command == "incident":
        return _incident(args, settings, operator, as_json)
    if args.command == "record":
        return _record(args, settings, operator, as_json)
    if args.command == "stats":
        return _stats(args, settings, as_json)
    if args.command == "policy":
        return _policy_eval(args, settings, as_json)
    raise UsageError(f"unknown command {args.command!r}")  # pragma: no cover


_METRIC_NAMES = {"passed": "pass rate", "seconds": "seconds to verdict", "cost_usd": "cost USD"}


def _policy_eval(args: argparse.Namespace, settings: Settings, as_json: bool) -> int:
    from gpuops.analysis import ope, shrink
    from gpuops.analysis.scan import scan_events

    decisions, counts = ope.Decisions(), shrink.MachineCounts()
    for ts, kind, event in scan_events(
        log_path(args, settings), kinds=ope.KINDS | shrink.KINDS, since=since_stamp(args.since)
    ):
        if kind in ope.KINDS:
            decisions.add_event(ts, event)
        counts.add_event(event)
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
        # events that did not decode (event_types), skipped by each fold
        "skipped_events": {"decisions": decisions.skipped, "pass_rates": counts.skipped},
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
        print_json(doc)
        return ExitCode.OK
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
    if decisions.skipped or counts.skipped:
        print(
            f"  skipped events that did not decode: {decisions.skipped} for the decisions, "
            f"{counts.skipped} for the pass rates"
        )
    return ExitCode.OK


def _stats(args: argparse.Namespace, settings: Settings, as_json: bool) -> int:
    from gpuops.analysis.scan import ScanCounts, scan_events
    from gpuops.analysis.stats import KINDS, NEEDLES, Stats

    counts = ScanCounts()
    stats = Stats()
    renter = None
    if args.html:  # the report's timelines need every transition, not just the gone ones
        from gpuops.analysis import report as r

        renter = r.Report()
    for ts, kind, event in scan_events(
        log_path(args, settings),
        kinds=KINDS if renter is None else KINDS | r.KINDS,
        since=since_stamp(args.since),
        counts=counts,
        needles=NEEDLES if renter is None else None,
    ):
        if renter is not None:
            renter.add_event(ts, kind, event)
            if kind not in KINDS or not _stats_wants(event):
                continue
        stats.add_event(ts, kind, event)
    report = stats.report()
    first_bad = [f"line {b.lineno}: {b.reason}" for b in counts.bad_lines]
    scanned = {
        "events": counts.events - counts.before_since,
        "before_since": counts.before_since,
        "bad_lines": counts.bad_total,
        "first_bad_lines": first_bad,
    }
    if args.html:
        from gpuops.analysis.page import render

        figures = None if renter is None else renter.figures(settings.clock().wall())
        Path(args.html).write_text(render(report, scanned, figures), encoding="utf-8")
    if as_json:  # the log's first and last stamps as epoch seconds, as every --json has times
        print_json({**report, "span": _epoch_span(report["span"]), "scanned": scanned})
        return ExitCode.OK
    from gpuops.analysis.table import lines

    print("\n".join(lines(report, scanned)))
    for bad in first_bad:
        print(f"unreadable: {bad}", file=sys.stderr)
    return ExitCode.OK


def _epoch_span(span: object) -> dict[str, float | None]:
    """The span's stamps in epoch seconds; None for none, or for a stamp of the log's width
    that names no real time (the scan passes those through to the fold, which counts them)."""
    from gpuops.timestamps import epoch_of

    def epoch(stamp: object) -> float | None:
        try:
            return epoch_of(stamp) if isinstance(stamp, str) else None
        except ValueError:
            return None

    found = span if isinstance(span, dict) else {}  # the report's {"first": ts, "last": ts}
    return {"first": epoch(found.get("first")), "last": epoch(found.get("last"))}


def _stats_wants(event: object) -> bool:
    """What stats' own scan yields: of the transitions, only those to gone-confirmed (its
    NEEDLES), so the figures are the same with or without --html."""
    from gpuops.event_types import Transition

    return not isinstance(event, Transition) or event.after == "gone-confirmed"


def _incident(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    import dataclasses

    from gpuops.register import Register

    register = Register(settings.open_state(), operator)
    command = args.incident_command
    if command == "list":
        rows = [dataclasses.asdict(i) for i in register.incidents()]
        if as_json:
            print_json(rows)
        else:
            for row in rows:
                cost = "cost unknown" if row["cost_usd"] is None else f"${row['cost_usd']:.2f}"
                print(f"{row['id']:<14} {cost:<14} {row['what']}")
                cause, rule = row["cause"] or "not yet known", row["rule"] or "none yet"
                print(f"{'':15}cause: {cause}; rule: {rule}")
            if not rows:
                print("no incidents recorded")
        for key, exc in sorted(register.corrupt.items()):  # each blocks only itself
            print(f"gpuops: skipped the unreadable register entry {key!r}: {exc}", file=sys.stderr)
        return ExitCode.ERROR if register.corrupt else ExitCode.OK
    if command == "add":
        entry: Incident | Observation = register.add(
            on=args.date, what=args.what, cost_usd=args.cost_usd, cause=args.cause, rule=args.rule
        )
    elif command == "update":
        entry = register.update(args.id, cause=args.cause, rule=args.rule, cost_usd=args.cost_usd)
    else:
        entry = register.observe(rule=args.rule, on=args.date, kind=args.kind, what=args.what)
    if as_json:
        print_json(dataclasses.asdict(entry))
    else:
        print(f"{command}: {entry.id}")
    return ExitCode.OK


def _record(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    if args.record_command == "gce":
        return _record_gce(args, settings, operator, as_json)
    from gpuops.providers import RECORDINGS
    from gpuops.record import max_price_per_hour, record_vast, summary

    max_price_per_hour(args.max_usd, args.yes_spend)  # refuse before opening anything

    def progress(line: str) -> None:
        if not as_json:
            print(line, file=sys.stderr, flush=True)

    captured = record_vast(
        settings=settings,
        operator=operator,
        gpu_name=args.gpu,
        max_usd=args.max_usd,
        yes_spend=args.yes_spend,
        root=Path(args.out) if args.out else RECORDINGS,
        progress=progress,
    )
    from gpuops.market.teardown import exit_code

    doc = summary(captured)
    code = exit_code(captured.destroyed)  # M13: from the outcomes' types, not their text
    if as_json:
        print_json({**doc, "all_confirmed_gone": code == 0})
    else:
        print(f"{captured.name}: probe verdict {captured.verdict}; {len(captured.files)} files")
        for line in doc["destroyed"]:
            print(f"  {line}")
        for path in doc["files"]:
            print(f"  wrote {path}")
    return code


def _record_gce(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    from gpuops.events import EventLog
    from gpuops.lane import decide
    from gpuops.providers import RECORDINGS
    from gpuops.record_gce import check_spend, record_gce, summary

    rate = decide.RUNNING_USD_PER_HOUR if args.usd_per_hour is None else args.usd_per_hour
    check_spend(args.max_usd, args.yes_spend, rate)  # refuse before opening anything
    lane = settings.lane()
    captured = record_gce(
        project=lane.project,
        zone=lane.zone,
        instance=lane.instance,
        events=EventLog(settings.events_path, operator),
        max_usd=args.max_usd,
        yes_spend=args.yes_spend,
        root=Path(args.out) if args.out else RECORDINGS,
        usd_per_hour=rate,
        endpoint=settings.gce_endpoint,
        progress=lambda line: None if as_json else print(line, file=sys.stderr, flush=True),
    )
    doc = summary(captured)
    if as_json:
        print_json(doc)
    else:
        print(f"{captured.name}: {len(captured.files)} files, started: {captured.started}")
        for path in doc["files"]:
            print(f"  wrote {path}")
    return ExitCode.OK
