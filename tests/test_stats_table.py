"""`gpuops stats` as text (analysis/table.py): no `None to None`, no `start attempts {}`, and
every count with its noun in the right number."""

from __future__ import annotations

from typing import Any

from gpuops.analysis.stats import Stats
from gpuops.analysis.table import count, lines


def scanned(events: int, bad: int = 0) -> dict[str, Any]:
    return {"events": events, "before_since": 0, "bad_lines": bad, "first_bad_lines": []}


def test_an_empty_log_reads_as_nothing_yet_never_none():
    """A log with no events: no `None to None`, and the lane says no start attempts, not {}."""
    text = "\n".join(lines(Stats().report(), scanned(0)))

    assert text.splitlines()[0] == "event log: 0 events, 0 unreadable lines, no timestamped events"
    assert text.splitlines()[-1] == "lane: no finished jobs; no start attempts"
    assert "None" not in text and "{}" not in text
    assert "(0 probes)" in text and "(0 boxes)" in text and "of 0 machines that" in text


def test_one_of_each_is_singular():
    """`1 event`, `1 unreadable line`, `1 box`, `1 start attempt`, never `1 boxes`."""
    report = Stats().report()
    report["span"] = {"first": "2026-03-15T10:00:00Z", "last": "2026-03-15T11:00:00Z"}
    report["market"]["boxes_confirmed_gone"] = {"failed": 1}
    report["market"]["host_failure_rate_by_filter"]["inside"]["probes"] = 1
    report["market"]["machines_failed_ssh"] = 1
    report["lane"]["starts"] = {"stockout": 1}

    text = "\n".join(lines(report, scanned(1, 1)))

    assert text.splitlines()[0] == (
        "event log: 1 event, 1 unreadable line, 2026-03-15T10:00:00Z to 2026-03-15T11:00:00Z"
    )
    assert "(1 box)" in text and "(1 probe)" in text and "of 1 machine that failed" in text
    assert text.splitlines()[-1] == "lane: no finished jobs; 1 start attempt (stockout 1)"


def test_the_lane_s_attempts_are_named_by_outcome_when_jobs_finished():
    """With finished jobs: `2 jobs, 3 start attempts (started 2, stockout 1)`."""
    report = Stats().report()
    lane = report["lane"]
    lane.update(jobs=2, starts={"started": 2, "stockout": 1, "quota": 0})
    lane.update(attempts_per_job=1.5, stockouts_per_job=0.5, waiting_s_per_job=0.0, cost_usd_per_job=1.0)

    (line,) = [row for row in lines(report, scanned(9)) if row.startswith("lane:")]

    assert line.startswith("lane: 2 jobs, 3 start attempts (started 2, stockout 1); per job: ")


def test_count_names_the_plural_it_is_given():
    """`box` takes `boxes`; the rest add an s."""
    assert [count(0, "box", "boxes"), count(1, "box", "boxes"), count(2, "job")] == [
        "0 boxes", "1 box", "2 jobs",
    ]  # fmt: skip
