"""`gpuops stats`: the seed's figures from the event log, streamed (M11, H1)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from store_fakes import WallOf

from fakes.simulate import simulate_market
from gpuops.analysis.scan import ScanCounts, scan_events
from gpuops.analysis.stats import KINDS, Stats, hours_between
from gpuops.events import EventLog

ROOT = Path(__file__).resolve().parent.parent
START = datetime(2026, 7, 18, tzinfo=UTC)


def write_log(path: Path, events: list[tuple[float, str, dict[str, object]]]) -> Path:
    """Events at START + minutes, written by the real EventLog."""
    at = iter([START + timedelta(minutes=m) for m, _, _ in events])
    log = EventLog(path, "tester", clock=WallOf(lambda: next(at).timestamp()))
    for _, kind, payload in events:
        log.append(kind, **payload)
    return path


def candidate(offer: int, machine: int, price: float, rel: float = 0.99, disk: float = 900.0):
    return {
        "id": offer,
        "machine_id": machine,
        "dph_total": price,
        "reliability": rel,
        "disk_bw": disk,
        "gpu_ram": 24564,
    }


def race_events() -> list[tuple[float, str, dict[str, object]]]:
    """Two races: one inside the filter (a taken offer, an SSH failure, a pass), one outside
    it (a slow disk); the machine that failed on SSH passes in the second race."""
    sel = {"name": "a", "gpu_name": "RTX 4090", "k": 3, "removed": [], "quarantined": 0}
    return [
        (
            0,
            "market.selection",
            {
                **sel,
                "candidates": [candidate(1, 11, 0.3), candidate(2, 12, 0.4), candidate(3, 13, 0.5)],
                "picks": [
                    {"id": 1, "rank": 0, "propensity": 0.933, "explored": False},
                    {"id": 3, "rank": 2, "propensity": 0.05, "explored": True},
                ],
            },
        ),
        (
            1,
            "market.create",
            {"name": "a", "offer_id": 1, "machine_id": 11, "outcome": "taken", "instance_id": None},
        ),
        (
            2,
            "market.create",
            {
                "name": "a",
                "offer_id": 2,
                "machine_id": 12,
                "outcome": "created",
                "instance_id": "900",
            },
        ),
        (
            3,
            "market.create",
            {
                "name": "a",
                "offer_id": 3,
                "machine_id": 13,
                "outcome": "rate-limited",
                "instance_id": None,
            },
        ),
        (
            4,
            "market.probe",
            {
                "name": "a",
                "offer_id": 2,
                "machine_id": 12,
                "instance_id": "900",
                "verdict": "ssh-auth",
            },
        ),
        (
            64,
            "ledger.transition",
            {
                "name": "a-0-1",
                "instance_id": "900",
                "before": "destroying",
                "after": "gone-confirmed",
            },
        ),
        (70, "market.rent.stopped", {"name": "a", "reason": "out of offers"}),
        (
            80,
            "market.selection",
            {
                **sel,
                "name": "b",
                "candidates": [candidate(4, 14, 0.2, rel=0.9), candidate(5, 12, 0.6)],
                "picks": [
                    {"id": 4, "rank": 0, "propensity": 0.95, "explored": False},
                    {"id": 5, "rank": 1, "propensity": 1.0, "explored": False},
                ],
            },
        ),
        (
            81,
            "market.create",
            {
                "name": "b",
                "offer_id": 4,
                "machine_id": 14,
                "outcome": "created",
                "instance_id": "901",
            },
        ),
        (
            82,
            "market.create",
            {
                "name": "b",
                "offer_id": 5,
                "machine_id": 12,
                "outcome": "reconciled",
                "instance_id": "902",
            },
        ),
        (
            90,
            "market.probe",
            {
                "name": "b",
                "offer_id": 4,
                "machine_id": 14,
                "instance_id": "901",
                "verdict": "slow-disk",
            },
        ),
        (
            91,
            "market.probe",
            {"name": "b", "offer_id": 5, "machine_id": 12, "instance_id": "902", "verdict": "pass"},
        ),
        (92, "market.quarantine", {"machine_id": 14, "cause": "slow-disk", "until": 1.0}),
        (93, "market.rent.done", {"name": "b", "instance_id": "902", "offer_id": 5}),
        (
            120,
            "ledger.transition",
            {
                "name": "b-0-0",
                "instance_id": "901",
                "before": "destroying",
                "after": "gone-confirmed",
            },
        ),
        (
            211,
            "ledger.transition",
            {
                "name": "b-0-1",
                "instance_id": "902",
                "before": "destroying",
                "after": "gone-confirmed",
            },
        ),
    ]


def guard_and_lane_events() -> list[tuple[float, str, dict[str, object]]]:
    """The guardian's and the lane runner's event contracts, exactly as they will emit them."""
    gone = {"name": "b", "instance_id": "902", "deadline": "2026-07-18T03:30:00+00:00"}
    return [
        (300, "guard.confirmed_gone", {**gone, "delay_s": 42.5}),
        (301, "guard.confirmed_gone", {**gone, "delay_s": -10.0}),
        (
            302,
            "lane.start",
            {"lane": "g2", "job": "portraits", "attempt": 1, "outcome": "stockout"},
        ),
        (303, "lane.start", {"lane": "g2", "job": "portraits", "attempt": 2, "outcome": "started"}),
        (
            400,
            "lane.job_end",
            {
                "lane": "g2",
                "job": "portraits",
                "attempts": 2,
                "stockouts": 1,
                "waiting_s": 3600.0,
                "running_s": 1380.0,
                "cost_usd": 0.28,
                "outcome": "succeeded",
            },
        ),
        (
            401,
            "lane.job_end",
            {
                "lane": "g2",
                "job": "val",
                "attempts": 13,
                "stockouts": 12,
                "waiting_s": 36000.0,
                "running_s": 600.0,
                "cost_usd": 0.12,
                "outcome": "failed",
            },
        ),
    ]


def stats_of(path: Path, since: str = "") -> tuple[dict, ScanCounts]:
    counts, stats = ScanCounts(), Stats()
    for ts, kind, event in scan_events(path, kinds=KINDS, since=since, counts=counts):
        stats.add_event(ts, kind, event)
    return stats.report(), counts


def test_the_market_figures_come_out_of_a_known_log(tmp_path):
    """Create causes, probe verdicts, SSH machines that passed later, the filter split, cost."""
    report, counts = stats_of(write_log(tmp_path / "e.jsonl", race_events()))

    m = report["market"]
    assert counts.events == 16 and counts.bad_total == 0
    assert (m["create_calls"], m["rentals"], m["probe_verdicts"]) == (5, 1, 3)
    assert m["create_failure_rate"] == pytest.approx(2 / 5)
    assert m["create_failure_rate_by_cause"] == pytest.approx(
        {"taken": 1 / 5, "rate-limited": 1 / 5, "other": 0.0}
    )
    assert m["verdicts"] == {"pass": 1, "slow-disk": 1, "ssh-auth": 1}
    assert (m["machines_failed_ssh"], m["machines_failed_ssh_passed_other_time"]) == (1, 1)
    assert m["host_failure_rate_by_filter"]["inside"] == {
        "probes": 2,
        "host_faults": 0,
        "rate": 0.0,
    }
    assert m["host_failure_rate_by_filter"]["outside"] == {
        "probes": 1,
        "host_faults": 1,
        "rate": 1.0,
    }
    assert m["explore_share"] == pytest.approx(1 / 4)
    assert m["boxes_confirmed_gone"] == {"failed": 2, "rental": 1}
    # box 900: $0.40/h for 62 min; 901: $0.20/h for 39 min (failures); 902: $0.60/h for 129 min
    assert m["failure_cost_usd"] == pytest.approx(0.4 * 62 / 60 + 0.2 * 39 / 60)
    assert m["cost_usd"]["rental"] == pytest.approx(0.6 * 129 / 60)
    assert m["boxes_not_confirmed_gone"] == {} and m["quarantines"] == 1


def test_guardian_and_lane_figures_follow_issue_4_and_5_contracts(tmp_path):
    """Guardian firings and lateness; lane attempts, stockouts, waiting and cost per job."""
    report, _ = stats_of(write_log(tmp_path / "e.jsonl", guard_and_lane_events()))

    g, lane = report["guardian"], report["lane"]
    assert (g["firings"], g["late"]) == (2, 1)
    assert (g["delay_s_mean"], g["delay_s_min"], g["delay_s_max"]) == (16.25, -10.0, 42.5)
    assert g["delay_histogram"]["counts"] == [0, 0, 1, 1, 0, 0]
    assert lane["starts"] == {"started": 1, "stockout": 1}
    assert (lane["jobs"], lane["attempts_per_job"], lane["stockouts_per_job"]) == (2, 7.5, 6.5)
    assert lane["waiting_s_per_job"] == 19800.0 and lane["cost_usd_per_job"] == 0.2
    assert lane["outcomes"] == {"failed": 1, "succeeded": 1}
    assert [j["job"] for j in lane["last_jobs"]] == ["portraits", "val"]


def test_since_drops_earlier_events_by_their_stamp(tmp_path):
    """--since keeps only events at or after the given time."""
    path = write_log(tmp_path / "e.jsonl", race_events() + guard_and_lane_events())

    report, counts = stats_of(path, since="2026-07-18T05:00:00.000000Z")

    assert counts.before_since == 16
    assert report["market"]["create_calls"] == 0 and report["guardian"]["firings"] == 2


def test_a_torn_line_or_a_bad_payload_is_counted_and_never_fatal(tmp_path):
    """Bad input: unreadable lines and events missing fields are counted, the rest still counts."""
    path = write_log(tmp_path / "e.jsonl", race_events()[:3])
    with path.open("ab") as f:
        f.write(b'{"ts":"2026-07-18T09:00:00.000000Z","operator":"x","kind":"market.cre\n')
        f.write(b"\xff\xfe not utf-8\n")
        f.write(
            b'{"ts":"2026-07-18T09:00:01.000000Z","operator":"x","kind":"market.create",'
            b'"payload":{"name":"a"}}\n'
        )

    report, counts = stats_of(path)

    assert counts.bad_total == 2 and [b.lineno for b in counts.bad_lines] == [4, 5]
    assert counts.events == 4
    assert report["malformed_events"] == {"market.create": 1}
    assert report["market"]["create_calls"] == 2


def test_a_line_in_another_layout_still_counts_through_the_full_parser(tmp_path):
    """A hand-written event whose keys are in another order is parsed, not skipped."""
    path = tmp_path / "e.jsonl"
    path.write_text(
        json.dumps(
            {
                "kind": "market.rent.done",
                "operator": "x",
                "ts": "2026-07-18T00:00:00.000000Z",
                "payload": {"name": "a", "instance_id": "1"},
            }
        )
        + "\n"
    )

    report, counts = stats_of(path)

    assert counts.events == 1 and report["market"]["rentals"] == 1


def test_a_simulated_run_against_the_fakes_matches_what_the_fake_saw(tmp_path):
    """The figures of a simulated run agree with FakeVast's own call log and the fates dealt."""
    path = tmp_path / "events.jsonl"
    truth = simulate_market(path, rentals=12, seed=3)

    report, counts = stats_of(path)

    m = report["market"]
    taken_calls = sum(n for status, n in truth.create_statuses.items() if status in (400, 404, 410))
    assert m["create_calls"] == sum(truth.create_statuses.values())
    assert m["create_outcomes"].get("taken", 0) == taken_calls
    assert m["create_outcomes"]["created"] == truth.create_statuses[200]
    assert m["rentals"] == truth.rentals
    assert m["boxes_not_confirmed_gone"] == {}  # every box the run made was confirmed gone
    assert sum(m["boxes_confirmed_gone"].values()) == truth.create_statuses[200]
    assert counts.bad_total == 0


def test_gpuops_stats_prints_the_table_writes_json_and_an_html_report(tmp_path):
    """The CLI: the seed's sentences, --json, and an HTML page with inline SVG plots."""
    path = write_log(tmp_path / "e.jsonl", race_events() + guard_and_lane_events())
    html = tmp_path / "report.html"
    cmd = [sys.executable, "-m", "gpuops", "stats", "--log", str(path)]

    text = subprocess.run([*cmd, "--html", str(html)], capture_output=True, text=True, cwd=ROOT)
    as_json = subprocess.run([*cmd, "--json"], capture_output=True, text=True, cwd=ROOT)
    bad = subprocess.run([*cmd, "--since", "yesterday"], capture_output=True, text=True, cwd=ROOT)

    assert text.returncode == 0, text.stderr
    assert "create calls failed: 40.0% (offers taken 20.0%, rate limits 20.0%" in text.stdout
    assert "of 1 machine that failed on SSH, 1 passed at another time" in text.stdout
    assert "guardian firings 2, 1 after the deadline" in text.stdout
    assert json.loads(as_json.stdout)["lane"]["jobs"] == 2
    page = html.read_text()
    # the seven failure charts, then the renter's: spend, GPU priors, machines, lane job costs
    assert page.count("<svg") == 11 and "Probe verdicts" in page
    assert bad.returncode == 2 and "--since 'yesterday' is not a date" in bad.stderr


def extra_events() -> list[tuple[float, str, dict[str, object]]]:
    """Seconds of each kind, a guardian exactly on time and half a second late, a lane job with
    seven decimals, and two malformed creates."""
    fault = {"name": "gone", "offer_id": 9, "machine_id": 99, "instance_id": "x",
             "verdict": "no-gpu"}  # fmt: skip
    gone = {"name": "b", "instance_id": "902", "deadline": "2026-07-18T03:30:00+00:00"}
    return [
        (410, "market.rent.stopped", {"name": "zz", "reason": "x"}),
        (411, "market.quarantine", {"machine_id": 14, "cause": "slow-disk", "until": 2.0}),
        (412, "market.probe", fault),
        (413, "market.probe", fault),
        (414, "guard.confirmed_gone", {**gone, "delay_s": 0.0}),
        (415, "guard.confirmed_gone", {**gone, "delay_s": 0.5}),
        (416, "lane.start", {"lane": "g2", "job": "v", "attempt": 1, "outcome": "stockout"}),
        (
            417,
            "lane.job_end",
            {
                "lane": "g2",
                "job": "v2",
                "attempts": 1,
                "stockouts": 0,
                "waiting_s": 0.0,
                "running_s": 1.0000001,
                "cost_usd": 0.1234567,
                "outcome": "succeeded",
            },
        ),  # fmt: skip
        (418, "market.create", {"name": "a"}),
        (419, "market.create", {"name": "a"}),
    ]


def test_the_whole_report_of_a_known_log_is_exactly_the_hand_worked_one(tmp_path):
    """Every figure at once, worked by hand (rates, means, rounding to 6 places, histogram)."""
    events = race_events() + guard_and_lane_events() + extra_events()

    report, _ = stats_of(write_log(tmp_path / "e.jsonl", events))

    jobs = [
        {"lane": "g2", "job": "portraits", "attempts": 2, "stockouts": 1, "waiting": 3600.0,
         "running": 1380.0, "cost_usd": 0.28, "outcome": "succeeded"},
        {"lane": "g2", "job": "val", "attempts": 13, "stockouts": 12, "waiting": 36000.0,
         "running": 600.0, "cost_usd": 0.12, "outcome": "failed"},
        {"lane": "g2", "job": "v2", "attempts": 1, "stockouts": 0, "waiting": 0.0,
         "running": 1.0000001, "cost_usd": 0.1234567, "outcome": "succeeded"},
    ]  # fmt: skip
    assert report == {
        "span": {"first": "2026-07-18T00:00:00.000000Z", "last": "2026-07-18T06:59:00.000000Z"},
        "market": {
            "selections": 2, "picks": 4, "explored_picks": 1, "explore_share": 0.25,
            "create_calls": 5, "rentals": 1, "races_stopped": 2,
            "create_outcomes": {"created": 2, "rate-limited": 1, "reconciled": 1, "taken": 1},
            "create_failure_rate": 0.4,
            "create_failure_rate_by_cause": {"taken": 0.2, "rate-limited": 0.2, "other": 0.0},
            "probe_verdicts": 5,
            "verdicts": {"no-gpu": 2, "pass": 1, "slow-disk": 1, "ssh-auth": 1},
            "ssh_failure_rate": 0.2, "host_fault_rate": 0.6,
            "machines_failed_ssh": 1, "machines_failed_ssh_passed_other_time": 1,
            "host_failure_rate_by_filter": {
                "inside": {"probes": 2, "host_faults": 0, "rate": 0.0},
                "outside": {"probes": 1, "host_faults": 1, "rate": 1.0},
                "unknown": {"probes": 2, "host_faults": 2, "rate": 1.0},
            },
            "quarantines": 2,
            "boxes_confirmed_gone": {"failed": 2, "rental": 1},
            "cost_usd": {"failed": 0.543333, "rental": 1.29},
            "failure_cost_usd": 0.543333,
            "boxes_not_confirmed_gone": {},
        },
        "guardian": {
            "firings": 4, "late": 2, "delay_s_mean": 8.25, "delay_s_min": -10.0,
            "delay_s_max": 42.5,
            "delay_histogram": {"upper_edges_s": [-600.0, -60.0, 0.0, 60.0, 600.0],
                                "counts": [0, 0, 2, 2, 0, 0]},
        },
        "lane": {
            "starts": {"started": 1, "stockout": 2}, "jobs": 3,
            "outcomes": {"failed": 1, "succeeded": 2},
            "attempts_per_job": 5.333333, "stockouts_per_job": 4.333333,
            "waiting_s_per_job": 13200.0, "running_s_per_job": 660.333333,
            "cost_usd_per_job": 0.174486, "cost_usd_total": 0.523457, "last_jobs": jobs,
        },
        "malformed_events": {"market.create": 2},
        "skipped_events": 2,
    }  # fmt: skip


def folded(events: list[tuple[str, dict[str, object]]]) -> dict:
    stats = Stats()
    for minute, (kind, payload) in enumerate(events):
        stats.add(f"2026-07-18T00:{minute:02}:00.000000Z", kind, payload)
    return stats.report()


def test_a_healthy_loser_is_racing_overhead_and_each_box_bills_until_confirmed_gone():
    """Two boxes pass, one is kept: the other is a lost race; a destroying transition does not
    end the bill; an unknown instance, a create without an id or for an unknown race, and the
    end of a race never seen change nothing."""
    sel = {"name": "r", "candidates": [candidate(1, 11, 0.6), candidate(2, 12, 1.2)],
           "picks": [{"id": 1}, {"id": 2}]}  # fmt: skip
    box = {"name": "r", "outcome": "created"}
    gone = {"after": "gone-confirmed"}

    report = folded([
        ("market.selection", sel),
        ("market.create", {**box, "offer_id": 1, "instance_id": "a"}),
        ("market.create", {**box, "offer_id": 2, "instance_id": "b"}),
        ("market.create", {**box, "offer_id": 2, "instance_id": None}),
        ("market.create", {**box, "name": "other", "offer_id": 5, "instance_id": "c"}),
        ("market.probe", {"name": "r", "offer_id": 1, "machine_id": 11, "instance_id": "a",
                          "verdict": "pass"}),
        ("market.probe", {"name": "r", "offer_id": 2, "machine_id": 12, "instance_id": "b",
                          "verdict": "pass"}),
        ("market.rent.done", {"name": "r", "instance_id": "a"}),
        ("market.rent.done", {"name": "never-raced", "instance_id": "zz"}),
        ("ledger.transition", {"after": "destroying", "instance_id": "b"}),
        ("ledger.transition", {**gone, "instance_id": "unknown"}),
        ("ledger.transition", {**gone, "instance_id": None}),
        ("ledger.transition", {**gone, "instance_id": "b"}),
        ("market.probe", {"name": "r", "offer_id": 1, "machine_id": 11, "instance_id": "q",
                          "verdict": "pass"}),
    ])  # fmt: skip

    m = report["market"]
    assert m["boxes_confirmed_gone"] == {"lost-race": 1}
    assert m["cost_usd"] == {"lost-race": 0.2}  # $1.20/h from 00:02 to 00:12
    assert m["boxes_not_confirmed_gone"] == {"failed": 1, "rental": 1}  # c (no price), a
    assert m["host_failure_rate_by_filter"]["unknown"]["probes"] == 1  # race r was over
    assert report["malformed_events"] == {}


def test_the_filter_split_judges_the_seed_s_bounds_inclusively():
    """Reliability 0.98 and 500 MB/s pass the default filter; a field left out is unknown."""
    from gpuops.analysis.stats import hours_between, in_default_filter

    assert in_default_filter(0.98, 500.0) is True
    assert in_default_filter(0.9799, 500.0) is False and in_default_filter(0.99, 499.9) is False
    assert in_default_filter(None, 900.0) is None and in_default_filter(0.99, None) is None
    assert hours_between("2026-07-18T00:00:00.5Z", "2026-07-18T00:00:00Z") == 0.0
    assert hours_between("2026-07-18T00:00:00Z", "2026-07-18T00:00:00.36+00:00") == pytest.approx(
        1e-4
    )


def test_a_bad_candidate_list_is_counted_and_the_lane_keeps_its_last_twenty_jobs():
    """A selection whose candidates are not objects is malformed; lane jobs beyond twenty
    leave the listing but stay in the totals."""
    job = {"lane": "g2", "attempts": 1, "stockouts": 0, "waiting_s": 0.0, "running_s": 0.0,
           "cost_usd": 0.0, "outcome": "succeeded"}  # fmt: skip

    report = folded(
        [("market.selection", {"name": "x", "candidates": [1, 2], "picks": []})]
        + [("lane.job_end", {**job, "job": f"j{i}"}) for i in range(21)]
    )

    assert report["malformed_events"] == {"market.selection": 1}
    stopped = folded([
        ("market.selection", {"name": "s", "candidates": [candidate(1, 11, 0.3)], "picks": []}),
        ("market.rent.stopped", {"name": "s"}),
        ("market.probe", {"name": "s", "offer_id": 1, "machine_id": 11, "verdict": "pass"}),
    ])  # fmt: skip
    assert stopped["market"]["host_failure_rate_by_filter"]["unknown"]["probes"] == 1
    assert [j["job"] for j in report["lane"]["last_jobs"]] == [f"j{i}" for i in range(1, 21)]
    assert report["lane"]["jobs"] == 21


def test_a_stamp_without_a_utc_offset_is_refused_by_name():
    """Bad input: hours_between of a naive stamp is a ValueError naming it (the fold counts
    it), never the TypeError of subtracting a naive time from an aware one."""
    with pytest.raises(ValueError, match=r"the timestamp '2026-07-18T00:00:00.0000000' names no UTC"):
        hours_between("2026-07-18T00:00:00Z", "2026-07-18T00:00:00.0000000")
    with pytest.raises(ValueError, match="names no UTC offset"):
        hours_between("2026-07-18T00:00:00", "2026-07-18T00:00:00Z")


def test_one_bad_stamp_or_a_price_past_float_range_is_counted_and_the_rest_still_counts():
    """Bad input: a gone-confirmed stamp ending in 0 instead of Z, and a box priced 10**400
    (JSON keeps it whole), are each one malformed event; the other boxes are still costed."""
    price = {"id": 2, "machine_id": 12, "dph_total": 10**400}
    cheap = {"id": 1, "machine_id": 11, "dph_total": 1.0}
    sel = {"name": "a", "candidates": [cheap, price], "picks": [{"id": 1}, {"id": 2}]}
    stats = Stats()
    stats.add("2026-07-18T00:00:00.000000Z", "market.selection", sel)
    for offer, box in ((1, "1"), (2, "2"), (1, "3")):
        stats.add(
            "2026-07-18T00:00:00.000000Z",
            "market.create",
            {"name": "a", "offer_id": offer, "outcome": "created", "instance_id": box},
        )
    gone = {"name": "x", "before": "destroying", "after": "gone-confirmed"}
    stats.add("2026-07-18T01:00:00.000000Z", "ledger.transition", {**gone, "instance_id": "1"})
    stats.add("2026-07-18T01:00:00.000000Z", "ledger.transition", {**gone, "instance_id": "2"})
    stats.add("2026-07-18T01:00:00.0000000", "ledger.transition", {**gone, "instance_id": "3"})

    report = stats.report()

    assert report["malformed_events"] == {"ledger.transition": 2}
    assert report["market"]["cost_usd"] == {"failed": 1.0}  # type: ignore[index]
