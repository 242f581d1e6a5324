"""The stats report as one self-contained HTML page with inline SVG charts (no dependency).

Nothing on the page is fetched: no script, no stylesheet, font or image from anywhere. Every
string that came from the event log (a rental's name, an owner, a cause, a reason) is escaped
where it is written, so a name such as ``<script>`` is shown as text, never run. The renter's
figures (spend over time, pass rates, quarantine, lane jobs, rental timelines) are
analysis/report.py's; each chart carries its figures in ``data-*`` attributes too, which the
headless-browser test (tests/test_report_page.py) reads back from the drawn page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any

from gpuops.analysis.table import count, lines, pct

_BAR_PX = 360
_ROW_PX = 22


def bars(title: str, rows: list[tuple[str, float]], fmt: str = "{:g}") -> str:
    """A horizontal bar chart; each bar's length is its value over the largest."""
    top = max((value for _, value in rows), default=0.0) or 1.0
    height = _ROW_PX * max(len(rows), 1) + 8
    parts = [
        f"<figure><figcaption>{escape(title)}</figcaption>"
        f'<svg role="img" width="{_BAR_PX + 260}" height="{height}">'
    ]
    for i, (label, value) in enumerate(rows):
        y = 4 + i * _ROW_PX
        width = max(0.0, value) / top * _BAR_PX
        parts.append(
            f'<text x="150" y="{y + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="160" y="{y}" width="{width:.1f}" height="{_ROW_PX - 6}" fill="#4a7fb5">'
            f"<title>{escape(label)}: {escape(fmt.format(value))}</title></rect>"
            f'<text x="{166 + width:.1f}" y="{y + 15}">{escape(fmt.format(value))}</text>'
        )
    if not rows:
        parts.append('<text x="10" y="18">no events of this kind in the log</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


def render(
    report: dict[str, Any], scanned: dict[str, Any], renter: dict[str, Any] | None = None
) -> str:
    m, g, lane = report["market"], report["guardian"], report["lane"]
    by_filter = m["host_failure_rate_by_filter"]
    edges = g["delay_histogram"]["upper_edges_s"]
    names = (
        [f"<= {edges[0]:g} s"]
        + [f"{lo:g} to {hi:g} s" for lo, hi in zip(edges, edges[1:], strict=False)]
        + [f"> {edges[-1]:g} s"]
    )
    charts = [
        bars("Create calls by outcome", [(k, v) for k, v in m["create_outcomes"].items()]),
        bars("Probe verdicts", [(k, v) for k, v in m["verdicts"].items()]),
        bars(
            "Host failure rate by default filter (host faults / probes)",
            [(f"{k} (n={v['probes']})", v["rate"] or 0.0) for k, v in by_filter.items()],
            "{:.1%}",
        ),
        bars("Cost of boxes by fate, USD", list(m["cost_usd"].items()), "${:.2f}"),
        bars(
            "Guardian: confirmed gone, seconds after the deadline",
            list(zip(names, g["delay_histogram"]["counts"], strict=True)),
        ),
        bars("Lane start attempts by outcome", list(lane["starts"].items())),
        bars(
            "Lane: last jobs, hours waiting for a start",
            [(str(j["job"]), j["waiting"] / 3600.0) for j in lane["last_jobs"]],
            "{:.2f} h",
        ),
    ]
    summary = "".join(f"<li>{escape(line)}</li>" for line in lines(report, scanned))
    sections = "" if renter is None else renter_sections(renter)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>gpuops stats</title><style>"
        "body{font:14px system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}"
        "figure{margin:1.5em 0}figcaption{font-weight:600;margin-bottom:.3em}"
        "svg text{font-size:12px;fill:#222}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border-bottom:1px solid #ddd;padding:2px 8px;text-align:left;font-size:13px}"
        "h2{margin-top:2em}.actor{font-weight:600}.a-rent{color:#2a5d9f}.a-probe{color:#7a4f00}"
        ".a-keep{color:#1c7c32}.a-destroy{color:#a02828}.a-guardian{color:#6b2fa0}"
        ".a-sweep{color:#555}</style></head><body>"
        f"<h1>gpuops stats</h1><p>Create calls failed {escape(pct(m['create_failure_rate']))}; "
        f"probes failed on SSH {escape(pct(m['ssh_failure_rate']))}; real host faults "
        f"{escape(pct(m['host_fault_rate']))}.</p><ul>{summary}</ul>{sections}"
        f"<h2>Why creates and probes failed</h2>{''.join(charts)}"
        "</body></html>\n"
    )


# --- the renter's figures (analysis/report.py) ---------------------------------------------------
_PLOT_W, _PLOT_H, _LEFT, _BOTTOM = 720, 200, 70, 40


def renter_sections(renter: dict[str, Any]) -> str:
    return "".join(
        [
            spend_chart(renter["spend"]),
            gpu_chart(renter["gpus"]),
            machine_chart(renter["machines"]),
            quarantine_table(renter["quarantine"]),
            lane_jobs_chart(renter["lane_jobs"], renter["lane_jobs_total"]),
            timelines(renter["timelines"]),
        ]
    )


def _utc(epoch_s: float, fmt: str = "%Y-%m-%d %H:%M UTC") -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime(fmt)


def money(value: float) -> str:
    """Dollars to the cent, or to a hundredth of a cent below one (a race of seconds)."""
    return f"${value:.2f}" if value == 0 or abs(value) >= 0.01 else f"${value:.4f}"


def spend_chart(spend: dict[str, Any]) -> str:
    """Spend per time bin (market and lane stacked) on a UTC time axis, with the running total."""
    bins = spend["bins"]
    total = spend["market_usd"] + spend["lane_usd"]
    head = (
        f"<section id='spend'><h2>Spend over time</h2><p>{escape(money(total))} in all: market "
        f"{escape(money(spend['market_usd']))}, lane {escape(money(spend['lane_usd']))}"
    )
    if spend["still_billing"]:
        head += f"; {count(spend['still_billing'], 'box', 'boxes')} not yet confirmed gone (not charted)"
    if spend["unpriced"]:
        head += f"; {count(spend['unpriced'], 'box', 'boxes')} with no logged price (not charted)"
    head += ".</p>"
    if not bins:
        return head + "<p>no billed box or lane job in the log</p></section>"
    width = _PLOT_W / len(bins)
    top = max(b["market_usd"] + b["lane_usd"] for b in bins) or 1.0
    height = _PLOT_H + _BOTTOM + 10
    parts = [
        f'<svg role="img" id="spend-chart" width="{_LEFT + _PLOT_W + 20}" height="{height}" '
        f'data-bins="{len(bins)}" data-bin-s="{spend["bin_s"]}" data-total-usd="{total:.6f}">',
        f'<line x1="{_LEFT}" y1="{_PLOT_H + 5}" x2="{_LEFT + _PLOT_W}" y2="{_PLOT_H + 5}" '
        'stroke="#222"/>',
        f'<text x="{_LEFT - 6}" y="14" text-anchor="end">{escape(money(top))}</text>',
        f'<text x="{_LEFT - 6}" y="{_PLOT_H + 5}" text-anchor="end">$0</text>',
    ]
    running, points = 0.0, []
    step = max(1, -(-len(bins) // 6))  # at most six labels along the axis
    for i, b in enumerate(bins):
        x = _LEFT + i * width
        y = _PLOT_H + 5.0
        for source, colour in (("market_usd", "#4a7fb5"), ("lane_usd", "#e3a33b")):
            h = b[source] / top * _PLOT_H
            parts.append(
                f'<rect class="spend-{source[:-4]}" x="{x + 1:.1f}" y="{y - h:.1f}" '
                f'width="{max(1.0, width - 2):.1f}" height="{h:.1f}" fill="{colour}" '
                f'data-start="{b["start"]:.0f}" data-usd="{b[source]:.6f}">'
                f"<title>{escape(_utc(b['start']))}: {source[:-4]} {escape(money(b[source]))}"
                "</title></rect>"
            )
            y -= h
        running += b["market_usd"] + b["lane_usd"]
        points.append(f"{x + width:.1f},{_PLOT_H + 5 - running / (total or 1.0) * _PLOT_H:.1f}")
        if i % step == 0:
            parts.append(
                f'<text class="tick" x="{x:.1f}" y="{_PLOT_H + 22}">'
                f"{escape(_utc(b['start'], '%m-%d %H:%M'))}</text>"
            )
    parts.append(
        f'<polyline points="{" ".join(points)}" fill="none" stroke="#222" stroke-dasharray="4 3">'
        "<title>running total, as a share of the whole</title></polyline>"
        f'<text x="{_LEFT}" y="{_PLOT_H + 38}">time (UTC), {escape(_bin_name(spend["bin_s"]))} '
        "a bar; blue market, orange lane; dashed: the running total</text></svg>"
    )
    return head + "".join(parts) + "</section>"


def _bin_name(seconds: float) -> str:
    for unit, size in (("week", 604800), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0 and seconds >= size:
            n = int(seconds // size)
            return count(n, unit) if n != 1 else f"one {unit}"
    return f"{seconds:g} s"


def gpu_chart(gpus: list[dict[str, Any]]) -> str:
    rows = [(g["gpu_name"] or "(no model logged)", g["prior_mean"]) for g in gpus]
    notes = "".join(
        f"<li>{escape(g['gpu_name'] or '(no model logged)')}: "
        f"{count(g['machines'], 'machine')}, raw {escape(pct(g['raw']))} "
        f"({g['passes']} of {g['trials']}); prior mean {escape(pct(g['prior_mean']))}, "
        f"strength a+b {g['prior_strength']:.1f} "
        f"({'its own machines' if g['own_prior'] else 'borrowed from all machines: too few of its own'})"
        "</li>"
        for g in gpus
    )
    return (
        "<section id='gpus'><h2>Pass rate per GPU model</h2><p>What a machine of each model "
        "is expected to pass before its own probes count: the prior `offers` shrinks toward "
        "(a machine seen n times moves from it by n against its strength a+b).</p>"
        + bars("Prior pass rate by GPU model", rows, "{:.1%}")
        + f"<ul>{notes}</ul></section>"
    )


def machine_chart(machines: dict[str, Any]) -> str:
    """Each machine's raw pass rate (hollow) and its shrunk rate (filled), joined by a line:
    the line's length is the shrinkage."""
    shown = machines["shown"]
    head = (
        "<section id='machines'><h2>Pass rate per machine, with its shrinkage</h2><p>Hollow: "
        "the machine's own passes over its hardware-judged probes; filled: the shrunk rate "
        "`offers` and `rent` rank by (SSH failures do not count against a machine).</p>"
    )
    if not shown:
        return head + "<p>no machine was judged by a probe in the log</p></section>"
    row, scale = 24, 400.0
    parts = [
        f'<svg role="img" id="machine-chart" width="{260 + scale + 200}" '
        f'height="{row * len(shown) + 30}" data-machines="{len(shown)}">',
        f'<text x="260" y="{row * len(shown) + 24}">0%</text>',
        f'<text x="{260 + scale}" y="{row * len(shown) + 24}" text-anchor="end">100%</text>',
    ]
    for i, m in enumerate(shown):
        y = 14 + i * row
        raw_x, shrunk_x = 260 + m["raw"] * scale, 260 + m["shrunk"] * scale
        label = f"machine {m['machine_id']} {m['gpu_name'] or ''} (n={m['trials']})"
        parts.append(
            f'<g class="machine" data-machine="{m["machine_id"]}" data-raw="{m["raw"]:.6f}" '
            f'data-shrunk="{m["shrunk"]:.6f}" data-trials="{m["trials"]}">'
            f'<text x="250" y="{y + 4}" text-anchor="end">{escape(label)}</text>'
            f'<line x1="260" y1="{y}" x2="{260 + scale}" y2="{y}" stroke="#eee"/>'
            f'<line x1="{raw_x:.1f}" y1="{y}" x2="{shrunk_x:.1f}" y2="{y}" stroke="#4a7fb5" '
            'stroke-width="2"/>'
            f'<circle class="raw" cx="{raw_x:.1f}" cy="{y}" r="5" fill="white" stroke="#4a7fb5"/>'
            f'<circle class="shrunk" cx="{shrunk_x:.1f}" cy="{y}" r="5" fill="#4a7fb5"/>'
            f'<text x="{270 + scale}" y="{y + 4}">{escape(pct(m["raw"]))} raw, '
            f"{escape(pct(m['shrunk']))} shrunk</text></g>"
        )
    parts.append("</svg>")
    more = machines["total"] - len(shown)
    tail = f"<p>and {count(more, 'machine')} more, fewer probes each</p>" if more > 0 else ""
    return head + "".join(parts) + tail + "</section>"


def quarantine_table(rows: list[dict[str, Any]]) -> str:
    head = "<section id='quarantine'><h2>Quarantined machines</h2>"
    if not rows:
        return head + "<p>no machine was quarantined in the log</p></section>"
    body = "".join(
        f'<tr class="{"in-force" if q["in_force"] else "expired"}" data-machine="{q["machine_id"]}">'
        f"<td>{q['machine_id']}</td><td>{escape(q['cause'])}</td>"
        f"<td>{escape(_utc(q['until']))}</td>"
        f"<td>{'in force' if q['in_force'] else 'expired'}</td></tr>"
        for q in rows
    )
    now = sum(1 for q in rows if q["in_force"])
    return (
        f"{head}<p>{count(now, 'machine')} left out of races now; each row is a machine's "
        "last quarantine in the log.</p><table><tr><th>machine</th><th>cause</th>"
        f"<th>until</th><th>now</th></tr>{body}</table></section>"
    )


def lane_jobs_chart(jobs: list[dict[str, Any]], total: int) -> str:
    rows = [(f"{j['job']} ({j['outcome']})", j["cost_usd"]) for j in jobs]
    shown = "" if total <= len(jobs) else f" (the last {len(jobs)} of {total})"
    return (
        "<section id='lane-jobs'><h2>What each lane job cost</h2>"
        + bars(f"Lane jobs{shown}, USD", rows, "${:.2f}")
        + "</section>"
    )


def timelines(lines: list[dict[str, Any]]) -> str:
    head = (
        "<section id='timelines'><h2>Rentals, event by event</h2><p>Each event with the part "
        "of gpuops that wrote it: rent (the race), probe, keep, destroy (the box record's "
        "ending), guardian, sweep.</p>"
    )
    if not lines:
        return head + "<p>no rental in the log</p></section>"
    parts = [head]
    for t in reversed(lines):  # the latest first
        owner = f", owner {escape(t['owner'])}" if t["owner"] else ""
        items = "".join(
            f'<li class="event" data-actor="{escape(e["actor"])}" data-kind="{escape(e["kind"])}">'
            f"<time>{escape(e['ts'])}</time> "
            f'<span class="actor a-{escape(e["actor"])}">{escape(e["actor"])}</span> '
            f"{escape(e['what'])}</li>"
            for e in t["events"]
        )
        more = f"<p>and {count(t['left_out'], 'event')} more</p>" if t["left_out"] else ""
        parts.append(
            f'<div class="timeline" data-rental="{escape(t["rental"])}">'
            f"<h3>{escape(t['name'])} <small>(rental {escape(t['rental'])}{owner})</small></h3>"
            f"<ol>{items}</ol>{more}</div>"
        )
    return "".join(parts) + "</section>"
