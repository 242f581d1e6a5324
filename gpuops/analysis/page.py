"""The stats report as one self-contained HTML page with inline SVG bar charts (no dependency)."""

from __future__ import annotations

from html import escape
from typing import Any

from gpuops.analysis.table import lines, pct

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


def render(report: dict[str, Any], scanned: dict[str, Any]) -> str:
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
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>gpuops stats</title><style>"
        "body{font:14px system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}"
        "figure{margin:1.5em 0}figcaption{font-weight:600;margin-bottom:.3em}"
        "svg text{font-size:12px;fill:#222}</style></head><body>"
        f"<h1>gpuops stats</h1><p>Create calls failed {escape(pct(m['create_failure_rate']))}; "
        f"probes failed on SSH {escape(pct(m['ssh_failure_rate']))}; real host faults "
        f"{escape(pct(m['host_fault_rate']))}.</p><ul>{summary}</ul>{''.join(charts)}"
        "</body></html>\n"
    )
