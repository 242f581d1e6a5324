"""The stats report as sentences: plain text for a terminal."""

from __future__ import annotations

from typing import Any


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100.0 * value:.1f}%"


def usd(value: float | None) -> str:
    return "n/a" if value is None else f"${value:.2f}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 box``, ``2 boxes``, ``0 boxes``: a number with its noun in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def _span(span: dict[str, Any]) -> str:
    """The log's first and last stamps, or that it has none (never ``None to None``)."""
    if span["first"] is None:
        return "no timestamped events"
    return f"{span['first']} to {span['last']}"


def _starts(starts: dict[str, int]) -> str:
    """The lane's start attempts by outcome: ``3 start attempts (started 1, stockout 2)``."""
    total = sum(starts.values())
    if not total:
        return "no start attempts"
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(starts.items()) if n)
    return f"{count(total, 'start attempt')} ({kinds})"


def lines(report: dict[str, Any], scanned: dict[str, Any]) -> list[str]:
    m, g, lane = report["market"], report["guardian"], report["lane"]
    span = report["span"]
    by_cause = m["create_failure_rate_by_cause"]
    inside = m["host_failure_rate_by_filter"]["inside"]
    outside = m["host_failure_rate_by_filter"]["outside"]
    cost = m["cost_usd"]
    out = [
        f"event log: {count(scanned['events'], 'event')}, "
        f"{count(scanned['bad_lines'], 'unreadable line')}, {_span(span)}",
        f"create calls {m['create_calls']}, rentals {m['rentals']}, "
        f"probe verdicts {m['probe_verdicts']}",
        f"create calls failed: {pct(m['create_failure_rate'])} (offers taken "
        f"{pct(by_cause['taken'])}, rate limits {pct(by_cause['rate-limited'])}, other "
        f"{pct(by_cause['other'])})",
        f"probes failed on SSH: {pct(m['ssh_failure_rate'])}; of "
        f"{count(m['machines_failed_ssh'], 'machine')} that failed on SSH, "
        f"{m['machines_failed_ssh_passed_other_time']} passed at another time",
        f"real host faults: {pct(m['host_fault_rate'])} of probes",
        f"host failure rate inside the default filter: {pct(inside['rate'])} "
        f"({count(inside['probes'], 'probe')}); outside it: {pct(outside['rate'])} "
        f"({count(outside['probes'], 'probe')})",
        f"cost of failures: {usd(m['failure_cost_usd'])} "
        f"({count(m['boxes_confirmed_gone'].get('failed', 0), 'box', 'boxes')}); healthy losers "
        f"{usd(cost.get('lost-race', 0.0))}; kept rentals {usd(cost.get('rental', 0.0))}",
        f"selections {m['selections']}, explored picks {pct(m['explore_share'])}, "
        f"quarantines {m['quarantines']}",
    ]
    if sum(m["boxes_not_confirmed_gone"].values()):
        out.append(f"boxes not yet confirmed gone: {m['boxes_not_confirmed_gone']}")
    late = (
        ""
        if g["delay_s_mean"] is None
        else (
            f", delay after the deadline mean {g['delay_s_mean']:.1f} s, "
            f"max {g['delay_s_max']:.1f} s"
        )
    )
    out.append(f"guardian firings {g['firings']}, {g['late']} after the deadline{late}")
    if lane["jobs"]:
        out.append(
            f"lane: {count(lane['jobs'], 'job')}, {_starts(lane['starts'])}; per job: "
            f"{lane['attempts_per_job']:.1f} attempts, {lane['stockouts_per_job']:.1f} "
            f"stockouts, {lane['waiting_s_per_job'] / 3600.0:.2f} h waiting, "
            f"{usd(lane['cost_usd_per_job'])}"
        )
    else:
        out.append(f"lane: no finished jobs; {_starts(lane['starts'])}")
    if report["malformed_events"]:
        out.append(
            f"{count(report['skipped_events'], 'event')} skipped (did not decode): "
            f"{report['malformed_events']}"
        )
    return out
