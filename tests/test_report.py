"""The HTML report's figures (gpuops/analysis/report.py), folded from a real event log written
against FakeVast (tests/report_story.py) and from typed events: spend over time adds up to what
stats charges, the pass rates are the ones `offers` ranks by, quarantine is judged at the time
asked, and each rental's timeline lists its events in log order with their actors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_story import HOSTILE, LANE_JOBS, write_story

from gpuops import cli
from gpuops import event_types as ev
from gpuops.analysis import report as r
from oracles import pass_rates_from_log
from gpuops.analysis.page import render
from gpuops.analysis.scan import scan_events
from gpuops.analysis.stats import KINDS, Stats
from gpuops.events import EventLog
from gpuops.model import Verdict


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory):
    return write_story(tmp_path_factory.mktemp("story") / "events.jsonl")


def folded(log: Path) -> r.Report:
    report = r.Report()
    for ts, kind, event in scan_events(log, kinds=r.KINDS):
        report.add_event(ts, kind, event)
    return report


def stats_of(log: Path) -> dict:
    stats = Stats()
    for ts, kind, event in scan_events(log, kinds=KINDS):
        stats.add_event(ts, kind, event)
    return stats.report()


def test_spend_over_time_adds_up_to_what_stats_charges_market_and_lane(story):
    """Each bin's share of every box and job adds up to stats' own cost figures."""
    figures = folded(story.log).figures(now=story.fake.now())
    spend, stats = figures["spend"], stats_of(story.log)
    market = sum(stats["market"]["cost_usd"].values())
    assert market > 0.9  # the two kept boxes billed for hours, the losers for seconds
    assert spend["market_usd"] == pytest.approx(market, abs=1e-6)
    assert spend["lane_usd"] == pytest.approx(sum(cost for _, cost, _ in LANE_JOBS))
    assert sum(b["market_usd"] for b in spend["bins"]) == pytest.approx(market, abs=1e-6)
    assert sum(b["lane_usd"] for b in spend["bins"]) == pytest.approx(spend["lane_usd"])
    assert spend["unpriced"] == 1  # the hostile rental's box: no selection logged its price
    assert spend["still_billing"] == 0
    # a time axis: bins of one width, in order, covering the story's 4.5 hours
    starts = [b["start"] for b in spend["bins"]]
    assert spend["bin_s"] == 600 and len(starts) <= r.MAX_BINS
    assert all(b - a == 600 for a, b in zip(starts, starts[1:], strict=False))


def test_a_span_is_split_over_the_bins_it_overlaps_by_its_share():
    """A box billing 90 minutes from 00:30 puts a third in the first hour, two thirds after."""
    report = r.Report()
    t0 = "2026-07-18T00:30:00.000000Z"
    sel = ev.Selection(name="a", candidates=(ev.Offered(id=1, machine_id=2, dph_total=2.0),),
                       picks=(ev.Picked(id=1),))  # fmt: skip
    report.add_event(t0, sel.KIND, sel)
    create = ev.Create(name="a", offer_id=1, outcome="created", instance_id="9")
    report.add_event(t0, create.KIND, create)
    gone = ev.Transition(after="gone-confirmed", instance_id="9")
    report.add_event("2026-07-18T02:00:00.000000Z", gone.KIND, gone)
    spend = report.figures(now=0.0)["spend"]
    assert spend["market_usd"] == pytest.approx(3.0)
    assert spend["bin_s"] == 600
    by_hour: dict[int, float] = {}
    for b in spend["bins"]:
        hour = int(b["start"] // 3600)
        by_hour[hour] = by_hour.get(hour, 0.0) + b["market_usd"]
    assert sorted(by_hour.values()) == pytest.approx([1.0, 2.0])


def test_the_pass_rates_are_the_ones_offers_ranks_by(story):
    """Per machine: raw passes over judged probes, and shrink.py's shrunk rate, unchanged."""
    figures = folded(story.log).figures(now=0.0)
    learned = pass_rates_from_log(story.log)
    rows = {m["machine_id"]: m for m in figures["machines"]["shown"]}
    assert set(rows) == {501, 502, 503}
    assert (rows[501]["passes"], rows[501]["trials"], rows[501]["raw"]) == (0, 1, 0.0)
    assert (rows[502]["passes"], rows[502]["trials"]) == (2, 2)
    for machine, row in rows.items():
        assert row["shrunk"] == learned.rate(machine, row["gpu_name"])
        assert row["raw"] != row["shrunk"]  # shrunk toward its model's prior
    [rtx] = [g for g in figures["gpus"] if g["gpu_name"] == "RTX 4090"]
    prior = learned.prior_for("RTX 4090")
    assert (rtx["machines"], rtx["passes"], rtx["trials"]) == (2, 2, 3)
    assert rtx["prior_mean"] == prior.mean
    assert rtx["prior_strength"] == prior.alpha + prior.beta
    assert rtx["own_prior"] is False  # two machines: it borrows the pooled prior


def test_a_machine_is_quarantined_until_its_last_entry_ends(story):
    """The story's slow disk is in force before its `until` and expired at it."""
    report = folded(story.log)
    [q] = report.figures(now=story.fake.now())["quarantine"]
    assert (q["machine_id"], q["cause"], q["in_force"]) == (501, "slow-disk", True)
    [q] = report.figures(now=q["until"])["quarantine"]
    assert q["in_force"] is False
    renewed = ev.Quarantine(machine_id=501, cause="no-gpu", until=q["until"] + 10)
    report.add_event("2026-12-01T00:00:00.000000Z", renewed.KIND, renewed)
    [q2] = report.figures(now=q["until"])["quarantine"]
    assert (q2["cause"], q2["in_force"]) == ("no-gpu", True)


def test_each_lane_job_is_listed_with_its_cost(story):
    figures = folded(story.log).figures(now=0.0)
    assert [(j["job"], j["cost_usd"], j["running_s"]) for j in figures["lane_jobs"]] == list(
        LANE_JOBS
    )
    assert figures["lane_jobs_total"] == 2


def _rental_events(log: Path, rental_id: str) -> list[str]:
    kinds = []
    for line in log.read_text().splitlines():
        e = json.loads(line)
        if e["kind"] in r.KINDS and e["payload"].get("rental_id") == rental_id:
            kinds.append(e["kind"])
    return kinds


def test_each_rental_lists_its_events_in_log_order_with_their_actors(story):
    """train: rent, probe, keep, destroy, guardian; eval: ended by sweep; every event of the
    rental in the log is there, in order, after its race's selection."""
    lines = {t["rental"]: t for t in folded(story.log).figures(now=0.0)["timelines"]}
    assert set(lines) == {story.train, story.eval, story.hostile}
    train = lines[story.train]
    assert (train["name"], train["owner"]) == ("train", "alice")
    kinds = [e["kind"] for e in train["events"]]
    assert kinds == ["market.selection", *_rental_events(story.log, story.train)]
    actors = [e["actor"] for e in train["events"]]
    assert set(actors) == {"rent", "probe", "keep", "destroy", "guardian"}
    assert actors[kinds.index("market.rent.done")] == "keep"
    assert actors[-1] == "guardian" and kinds[-1] == "guard.confirmed_gone"
    stamps = [e["ts"] for e in train["events"]]
    assert stamps == sorted(stamps)
    evaluation = lines[story.eval]
    assert evaluation["events"][-1]["actor"] == "sweep"
    assert evaluation["events"][-1]["what"] == "eval+1-0: past its deadline, gone"
    hostile = lines[story.hostile]
    assert hostile["name"] == HOSTILE


def test_timelines_are_bounded_in_rentals_and_in_events():
    report = r.Report()
    for i in range(r.RENTALS_KEPT + 5):
        for j in range(r.EVENTS_PER_RENTAL + 3 if i == r.RENTALS_KEPT + 4 else 1):
            probe = ev.Probe(name=f"n{i}", offer_id=1, machine_id=1, verdict=Verdict.PASS,
                             rental_id=f"r{i}")  # fmt: skip
            report.add_event(f"2026-07-18T00:00:{j % 60:02d}.000000Z", probe.KIND, probe)
    lines = report.figures(now=0.0)["timelines"]
    assert len(lines) == r.RENTALS_KEPT
    assert lines[0]["rental"] == "r5" and lines[-1]["rental"] == f"r{r.RENTALS_KEPT + 4}"
    assert len(lines[-1]["events"]) == r.EVENTS_PER_RENTAL and lines[-1]["left_out"] == 3


def test_an_event_that_did_not_decode_or_has_no_utc_stamp_is_counted_not_fatal():
    report = r.Report()
    report.add_event("2026-07-18T00:00:00.000000Z", "market.probe", None)
    probe = ev.Probe(name="a", offer_id=1, machine_id=1, verdict=Verdict.PASS)
    report.add_event("2026-07-18T00:00:00", probe.KIND, probe)  # naive: no offset
    report.add_event("not a time", probe.KIND, probe)
    figures = report.figures(now=0.0)
    assert figures["skipped_events"] == 3
    assert figures["timelines"] == [] and figures["machines"]["total"] == 0


def test_stats_html_writes_the_page_and_leaves_the_stats_figures_as_they_were(story, tmp_path,
                                                                              capsys):  # fmt: skip
    """`stats --html` reads every transition for the timelines; its --json stays the same
    (here, for a log whose first line is a transition stats' own scan never reads)."""
    log = tmp_path / "events.jsonl"
    intent = ev.Transition(name="x+1-0", after="intent", rental_id="r")
    EventLog(log, "alice").append(intent.KIND, **intent.to_payload())
    log.write_bytes(log.read_bytes() + story.log.read_bytes())
    assert cli.main(["stats", "--log", str(log), "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    page = tmp_path / "report.html"
    assert cli.main(["stats", "--log", str(log), "--json", "--html", str(page)]) == 0
    assert json.loads(capsys.readouterr().out) == plain
    text = page.read_text()
    for section in ("spend", "gpus", "machines", "quarantine", "lane-jobs", "timelines"):
        assert f"<section id='{section}'>" in text
    assert "<script" not in text and "&lt;script&gt;" in text
    assert "src=" not in text.replace("src=x", "")  # nothing fetched (the hostile owner's text)


def test_the_page_escapes_every_string_from_the_events(story):
    """A name, owner or reason of markup is text on the page, never an element."""
    figures = folded(story.log).figures(now=0.0)
    page = render(stats_of(story.log), {"events": 0, "before_since": 0, "bad_lines": 0,
                                        "first_bad_lines": []}, figures)  # fmt: skip
    assert "<script" not in page and "<img" not in page
    assert page.count("&lt;script&gt;") >= 4  # the heading, and each event that names it


def test_a_number_past_float_range_is_counted_and_changes_nothing():
    """A dph_total, until, cost or delay of 10**400 decodes (a whole number) but is no float:
    the event is skipped, as stats skips it, and the figures are as if it never came."""
    huge = 10**400
    offered = ev.Offered(id=1, machine_id=2, dph_total=0.5)
    events = [
        ev.Selection(name="a", candidates=(offered, ev.Offered(id=2, machine_id=3, dph_total=huge)),
                     picks=(ev.Picked(id=1),)),
        ev.Quarantine(machine_id=2, cause="slow-disk", until=huge),
        ev.LaneJobEnd(lane="g2", job="j", attempts=1, stockouts=0, waiting_s=0, running_s=1,
                      cost_usd=huge, outcome="succeeded"),
        ev.ConfirmedGone(name="a", delay_s=huge, rental_id="r"),
    ]  # fmt: skip
    report = r.Report()
    for event in events:
        report.add_event("2026-07-18T00:00:00.000000Z", event.KIND, event)
    figures = report.figures(now=0.0)
    assert figures["skipped_events"] == len(events)
    assert report.prices == {} and figures["quarantine"] == [] and figures["lane_jobs"] == []
    assert figures["timelines"] == [] and figures["spend"]["lane_usd"] == 0


def test_the_rentals_kept_are_those_heard_from_last_not_those_first_seen():
    """A rental seen first but heard from again after the others stays; the quietest goes."""
    report = r.Report()

    def probe(i: int, second: int) -> None:
        event = ev.Probe(name=f"n{i}", offer_id=1, machine_id=1, verdict=Verdict.PASS,
                         rental_id=f"r{i}")  # fmt: skip
        report.add_event(f"2026-07-18T00:00:{second:02d}.000000Z", event.KIND, event)

    for i in range(r.RENTALS_KEPT):
        probe(i, i)
    probe(0, 50)  # r0 again: now the latest
    probe(r.RENTALS_KEPT, 51)  # one more: the quietest, r1, is the one left out
    kept = [t["rental"] for t in report.figures(now=0.0)["timelines"]]
    assert "r1" not in kept and kept[-2:] == ["r0", f"r{r.RENTALS_KEPT}"]
    assert len(kept) == r.RENTALS_KEPT


def test_a_lane_job_that_ran_no_time_still_charts_its_cost_in_its_bin():
    """A job ending with running_s 0 (its cost all disk) is one zero-length span: whole, in
    the bin of its end."""
    report = r.Report()
    end = ev.LaneJobEnd(lane="g2", job="j", attempts=1, stockouts=0, waiting_s=0, running_s=0,
                        cost_usd=0.5, outcome="failed")  # fmt: skip
    report.add_event("2026-07-18T00:05:00.000000Z", end.KIND, end)
    spend = report.figures(now=0.0)["spend"]
    assert [b["lane_usd"] for b in spend["bins"]] == [0.5]
    assert spend["lane_usd"] == 0.5


@pytest.mark.parametrize("running_s", [1e13, 1e300])
def test_a_span_far_longer_than_the_widest_bins_is_charted_in_at_most_max_bins(running_s):
    """A job whose running_s says 10^13 s (a bad line, a clock years off) beside one of an hour:
    the chart still has at most MAX_BINS bins, each a whole number of the widest bin (10^15 s
    once asked for 400 million bins, and a worker running the event readers' property test
    was killed for memory), and the bins still add up to the spend."""
    report = r.Report()
    for running, usd in ((running_s, 2.0), (3600.0, 0.5)):
        end = ev.LaneJobEnd(lane="g2", job="j", attempts=1, stockouts=0, waiting_s=0,
                            running_s=running, cost_usd=usd, outcome="succeeded")  # fmt: skip
        report.add_event("2026-07-18T00:05:00.000000Z", end.KIND, end)
    spend = report.figures(now=0.0)["spend"]

    assert 1 <= len(spend["bins"]) <= r.MAX_BINS
    assert spend["bin_s"] % r.BIN_WIDTHS[-1] == 0 and spend["bin_s"] > r.BIN_WIDTHS[-1]
    assert sum(b["lane_usd"] for b in spend["bins"]) == pytest.approx(2.5)
    assert spend["lane_usd"] == 2.5


def test_the_bin_width_is_the_narrowest_that_fits_and_none_for_a_span_no_bins_hold():
    widths = [r._bin_width(s) for s in (0.0, 47 * 60.0, 48 * 60.0, 47 * 30 * 86400.0)]
    assert widths == [60, 60, 600, 30 * 86400]
    assert r._bin_width(48 * 30 * 86400.0) == 2 * 30 * 86400  # a whole number of the widest
    assert r._bin_width(float("inf")) is None and r._bin_width(float("nan")) is None
