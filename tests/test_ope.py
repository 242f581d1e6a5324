"""`gpuops policy eval`: IPS and self-normalised IPS from logged candidate sets (M11)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from store_fakes import WallOf

from fakes.simulate import simulate_market
from gpuops.analysis.ope import (
    Candidate,
    Decision,
    Decisions,
    evaluate,
    greedy,
    logged,
    most_reliable,
    named,
    uniform,
)
from gpuops.events import EventLog, read_events
from gpuops.market.select import pick, rank_key

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Offer:
    id: int
    machine_id: int
    dph_total: float
    reliability: float
    disk_bw: float = 1500.0
    gpu_ram: float = 24564.0


def true_pass(offer: Offer) -> float:
    """The simulation's truth: listed reliability predicts passing; price does not."""
    return 0.3 + 0.65 * (offer.reliability - 0.95) / 0.05


def simulated_races(races: int, seed: int):
    """Races logged by the real selector (select.pick, 10% exploration) with outcomes drawn
    from the truth: (events, each race's ranked candidates so the truth can be computed)."""
    rng = random.Random(seed)
    events, contexts = [], []
    for r in range(races):
        offers = [
            Offer(
                r * 10 + j,
                rng.randrange(400),
                round(rng.uniform(0.3, 0.5), 3),
                rng.uniform(0.95, 1.0),
            )
            for j in range(5)
        ]
        ranked = sorted(offers, key=rank_key)
        contexts.append(ranked)
        [lead] = pick(ranked, k=1, rng=rng, explore_rate=0.1)
        passed = rng.random() < true_pass(lead.offer)
        common = {"name": f"r{r}", "offer_id": lead.offer.id, "machine_id": lead.offer.machine_id}
        events += [
            (
                "market.selection",
                {
                    "name": f"r{r}",
                    "gpu_name": "RTX 4090",
                    "k": 1,
                    "candidates": [o.__dict__ for o in ranked],
                    "picks": [
                        {
                            "id": lead.offer.id,
                            "rank": lead.rank,
                            "propensity": lead.propensity,
                            "explored": lead.explored,
                        }
                    ],
                },
            ),
            ("market.create", {**common, "outcome": "created", "instance_id": str(r)}),
            (
                "market.probe",
                {**common, "instance_id": str(r), "verdict": "pass" if passed else "slow-disk"},
            ),
        ]
    return events, contexts


def simulated_log(path: Path, races: int, seed: int) -> list[list[Offer]]:
    """The same races written by the real EventLog, one second apart."""
    events, contexts = simulated_races(races, seed)
    clock = iter(datetime(2026, 7, 18, tzinfo=UTC) + timedelta(seconds=s) for s in range(10**7))
    log = EventLog(path, "sim", clock=WallOf(lambda: next(clock).timestamp()))
    for kind, payload in events:
        log.append(kind, **payload)
    return contexts


def decisions_of(path: Path) -> Decisions:
    folded = Decisions()
    for event in read_events(path):
        folded.add(str(event["ts"]), str(event["kind"]), event["payload"])  # type: ignore[arg-type]
    return folded


@pytest.mark.parametrize("seed", [4, 5])
def test_policy_eval_ranks_two_policies_in_the_simulations_true_order(seed):
    """Most-reliable truly beats cheapest-first here; both estimators say so from the log, and
    each estimate is within 1.5 of its 95% half-widths of the truth (about 3 standard errors:
    the intervals themselves covered 92-98% over 40 seeds, which a test cannot pin without
    flaking)."""
    events, contexts = simulated_races(6000, seed)
    folded = Decisions()
    for i, (kind, payload) in enumerate(events):
        folded.add(
            f"2026-07-18T{i // 3600 % 24:02}:{i // 60 % 60:02}:{i % 60:02}.000000Z", kind, payload
        )
    rows = folded.rows
    truth = {
        "greedy": sum(true_pass(c[0]) for c in contexts) / len(contexts),
        "reliable": sum(true_pass(max(c, key=lambda o: o.reliability)) for c in contexts)
        / len(contexts),
    }

    est = {name: evaluate(rows, named(name)).estimate("passed") for name in truth}

    assert truth["reliable"] > truth["greedy"] + 0.1
    assert est["reliable"].snips > est["greedy"].snips
    assert est["reliable"].ips > est["greedy"].ips
    for name, value in truth.items():
        assert abs(est[name].snips - value) <= 1.5 * est[name].snips_half_width, name
        assert abs(est[name].ips - value) <= 1.5 * est[name].ips_half_width, name


def test_the_logging_policy_scores_exactly_what_was_observed(tmp_path):
    """Sanity: evaluating the log's own policy gives weights of one and the plain mean."""
    path = tmp_path / "events.jsonl"
    simulated_log(path, races=200, seed=1)
    rows = decisions_of(path).rows

    ev = evaluate(rows, logged)

    observed = sum(d.passed for d in rows) / len(rows)
    assert ev.estimate("passed").ips == pytest.approx(observed)
    assert ev.estimate("passed").snips == pytest.approx(observed)
    assert ev.effective_n == pytest.approx(200) and ev.matched == 200


def decision(chosen: int, propensity: float, passed: bool, seconds: float = 60.0) -> Decision:
    from gpuops.analysis.ope import Candidate

    cands = (Candidate(1, 11, 0.3, 0.99, 900.0), Candidate(2, 12, 0.4, 0.999, 900.0))
    return Decision("RTX 4090", cands, chosen, propensity, passed, seconds, 0.01)


def test_ips_and_snips_follow_their_formulas_on_a_tiny_log():
    """Worked by hand: weights 1/0.95 and 1/0.05 for the pick each policy makes."""
    rows = [decision(0, 0.95, True), decision(1, 0.05, False, 120.0), decision(0, 0.95, False)]

    g, r = evaluate(rows, greedy), evaluate(rows, most_reliable)

    assert g.estimate("passed").ips == pytest.approx((1 / 0.95) / 3)
    assert g.estimate("passed").snips == pytest.approx(0.5)
    w = 1 / 0.95  # SNIPS half-width: Z * sqrt(sum (w (r - 0.5))^2) / sum w
    assert g.estimate("passed").snips_half_width == pytest.approx(
        1.959964 * (2 * (w * 0.5) ** 2) ** 0.5 / (2 * w)
    )
    assert g.matched == 2 and r.matched == 1
    assert r.estimate("passed").snips == 0.0 and r.estimate("seconds").snips == 120.0
    assert g.seconds_to_healthy == pytest.approx(120.0)
    assert r.seconds_to_healthy is None
    assert evaluate(rows, uniform).estimate("passed").snips == pytest.approx(
        (0.5 / 0.95) / (0.5 / 0.95 * 2 + 0.5 / 0.05)
    )
    with pytest.raises(ValueError, match="^no logged decisions to evaluate$"):
        evaluate([], greedy)
    with pytest.raises(ValueError, match="no policy 'cheapest'; known: logged, greedy"):
        named("cheapest")


def test_a_taken_lead_counts_as_no_healthy_box_and_costs_nothing(tmp_path):
    """The lead's failed create closes its decision; other slots' events are ignored."""
    folded = Decisions()
    sel = {
        "name": "a",
        "gpu_name": "RTX 4090",
        "candidates": [
            {"id": 1, "machine_id": 11, "dph_total": 0.3, "reliability": 0.99, "disk_bw": 900.0},
            {"id": 2, "machine_id": 12, "dph_total": 0.4, "reliability": None, "disk_bw": None},
        ],
        "picks": [{"id": 1, "propensity": 0.95}, {"id": 2, "propensity": 1.0}],
    }

    folded.add("2026-07-18T00:00:00.000000Z", "market.selection", sel)
    folded.add(
        "2026-07-18T00:00:05.000000Z",
        "market.create",
        {"name": "a", "offer_id": 2, "outcome": "created"},
    )
    folded.add("2026-07-18T00:00:06.000000Z", "market.probe", {"name": "a"})  # no offer_id
    folded.add(
        "2026-07-18T00:00:10.000000Z",
        "market.create",
        {"name": "a", "offer_id": 1, "outcome": "taken"},
    )

    [row] = folded.rows
    assert (row.passed, row.seconds, row.cost_usd, row.chosen) == (False, 10.0, 0.0, 0)
    assert row.candidates[1].reliability is None and folded.skipped == 1


def test_gpuops_policy_eval_on_a_simulated_fakes_run(tmp_path):
    """The CLI on a log made against FakeVast: every named policy, text and --json."""
    path = tmp_path / "events.jsonl"
    simulate_market(path, rentals=6, seed=6)
    base = [sys.executable, "-m", "gpuops", "policy", "eval", "--log", str(path)]

    shown = subprocess.run([*base, "--policy", "shrunk"], capture_output=True, text=True, cwd=ROOT)
    as_json = subprocess.run(
        [*base, "--policy", "logged", "--json"], capture_output=True, text=True, cwd=ROOT
    )
    bad = subprocess.run([*base, "--policy", "nope"], capture_output=True, text=True, cwd=ROOT)

    assert shown.returncode == 0, shown.stderr
    assert "policy shrunk over" in shown.stdout and "pass rate" in shown.stdout
    doc = json.loads(as_json.stdout)
    assert doc["estimates"]["passed"]["ips"] == pytest.approx(
        doc["estimates"]["passed"]["logged_mean"]
    )
    assert bad.returncode == 2 and "no policy 'nope'" in bad.stderr


def test_the_intervals_follow_their_formulas_on_a_tiny_log():
    """IPS: sample sd of w*r over n - 1; SNIPS: the delta method; the logged mean is plain."""
    rows = [decision(0, 0.5, True), decision(1, 0.5, False), decision(0, 0.25, True)]

    ev = evaluate(rows, greedy)  # weights 2, 0, 4

    e = ev.estimate("passed")
    wr, mean = [2.0, 0.0, 4.0], 2.0
    assert e.logged_mean == pytest.approx(2 / 3)
    assert e.ips == pytest.approx(mean)
    sd = (sum((x - mean) ** 2 for x in wr) / 2) ** 0.5
    assert e.ips_half_width == pytest.approx(1.959964 * sd / 3**0.5)
    assert e.snips == pytest.approx(1.0)
    spread = (2 * (1 - 1)) ** 2 + (0 * (0 - 1)) ** 2 + (4 * (1 - 1)) ** 2
    assert e.snips_half_width == pytest.approx(1.959964 * spread**0.5 / 6)
    s = ev.estimate("seconds")
    assert s.snips_half_width == pytest.approx(0.0) and s.snips == pytest.approx(60.0)
    assert (ev.decisions, ev.matched, ev.effective_n) == (3, 2, pytest.approx(36 / 20))


def test_two_decisions_divide_by_one_degree_of_freedom():
    """The sample variance of w*r over two rows divides by n - 1 = 1."""
    ev = evaluate([decision(0, 0.5, True), decision(0, 0.5, False)], greedy)  # w*r: 2, 0

    assert ev.estimate("passed").ips_half_width == pytest.approx(1.959964 * 2**0.5 / 2**0.5)


def test_a_policy_that_never_matches_gives_no_self_normalised_estimate():
    """No weight anywhere: SNIPS is undefined (nan), IPS is 0, the effective n is 0; a total
    weight under one still normalises."""
    rows = [decision(1, 0.5, True)]

    never = evaluate(rows, greedy)
    half = evaluate([decision(0, 1.0, True, seconds=30.0)], uniform)  # weight 0.5

    assert never.estimate("passed").ips == 0.0 and never.effective_n == 0.0
    assert never.estimate("passed").snips != never.estimate("passed").snips  # nan
    assert half.estimate("passed").snips == 1.0 and half.estimate("seconds").snips == 30.0
    assert half.estimate("passed").snips_half_width == 0.0


def test_the_fold_keeps_races_apart_and_costs_a_box_from_its_create():
    """Two interleaved races; the lead's box costs dph_total for the hours from its create to
    its verdict; malformed events are each counted."""
    folded = Decisions()
    cands = [
        {"id": 1, "machine_id": 11, "dph_total": 0.36, "reliability": 0.99, "disk_bw": 900.0},
        {"id": 2, "machine_id": 12, "dph_total": 0.5, "reliability": None, "disk_bw": None},
    ]
    pick = [{"id": 1, "propensity": 0.95}]
    at = "2026-07-18T0{}:00:00.000000Z".format

    folded.add(
        at(0),
        "market.selection",
        {"name": "a", "gpu_name": "A", "candidates": cands, "picks": pick},
    )
    folded.add(
        at(0),
        "market.selection",
        {
            "name": "b",
            "gpu_name": "B",
            "candidates": cands,
            "picks": [{"id": 2, "propensity": 0.05}],
        },
    )
    folded.add(at(1), "market.create", {"name": "a", "offer_id": 1, "outcome": "created"})
    folded.add(at(1), "market.probe", {"name": "b"})
    folded.add(at(1), "market.probe", {"name": "b"})
    folded.add(
        at(3), "market.probe", {"name": "a", "offer_id": 1, "machine_id": 1, "verdict": "pass"}
    )
    folded.add(
        at(4), "market.probe", {"name": "b", "offer_id": 2, "machine_id": 2, "verdict": "no-gpu"}
    )

    a, b = folded.rows
    assert (a.gpu_name, a.passed, a.seconds, a.cost_usd) == ("A", True, 3 * 3600.0, 0.72)
    assert (b.gpu_name, b.passed, b.cost_usd, b.chosen, b.propensity) == ("B", False, 0.0, 1, 0.05)
    assert a.candidates[0] == Candidate(1, 11, 0.36, 0.99, 900.0)
    assert folded.skipped == 2 and folded.open == {}


def test_the_named_policies_pick_what_their_names_say():
    """uniform spreads evenly; reliable never takes an unknown reliability for a high one;
    shrunk takes the lowest price per healthy box, an unseen machine at its model's prior."""
    from gpuops.analysis.shrink import MachineCounts, PassRates

    counts = MachineCounts()
    history = {
        1: (4, 4, "A"),
        2: (0, 4, "A"),
        3: (2, 4, "A"),
        4: (4, 4, "B"),
        5: (4, 4, "B"),
        6: (4, 4, "B"),
    }
    for m, (k, n, gpu) in history.items():
        counts.passes[m], counts.trials[m], counts.gpu[m] = k, n, gpu
    rates = PassRates.from_counts(counts)
    cands = (
        Candidate(1, 2, 0.10, None, None),
        Candidate(2, 1, 0.30, 0.9, 900.0),
        Candidate(3, 99, 0.20, 0.8, 900.0),
    )
    row = Decision("A", cands, 0, 0.9, True, 1.0, 0.0)

    assert uniform(row) == [pytest.approx(1 / 3)] * 3
    assert most_reliable(row) == [0.0, 1.0, 0.0]
    shrunk = named("shrunk", rates)
    price_per_healthy = [c.dph_total / rates.rate(c.machine_id, "A") for c in cands]
    best = price_per_healthy.index(min(price_per_healthy))
    assert shrunk(row) == [1.0 if i == best else 0.0 for i in range(3)]
    assert rates.rate(99, "A") != rates.rate(99, "B")  # the unseen machine's model matters
    # machine 99 is unseen: at model A's prior (0.5) it loses; at the pooled 0.75 it would win
    assert best == 1 and 0.20 / rates.pooled.mean < 0.30 / rates.rate(1, "A")
    assert named("logged") is logged and named("uniform") is uniform
    with pytest.raises(ValueError, match="^the shrunk policy needs pass rates$"):
        named("shrunk")


def test_a_price_past_float_range_is_a_skipped_event_and_the_next_race_still_counts():
    """Bad input: a dph_total of 10**400 (JSON keeps it whole) killed `policy eval` with an
    OverflowError; that selection is skipped, and a later race is folded as usual."""
    folded = Decisions()
    at = "2026-07-18T0{}:00:00.000000Z".format
    huge = {"id": 1, "machine_id": 11, "dph_total": 10**400}
    fine = {"id": 1, "machine_id": 11, "dph_total": 0.5}
    pick = [{"id": 1, "propensity": 0.9}]

    folded.add(at(0), "market.selection", {"name": "a", "candidates": [huge], "picks": pick})
    folded.add(at(1), "market.selection", {"name": "b", "candidates": [fine], "picks": pick})
    folded.add(
        at(2), "market.probe", {"name": "a", "offer_id": 1, "machine_id": 11, "verdict": "pass"}
    )
    folded.add(
        at(2), "market.probe", {"name": "b", "offer_id": 1, "machine_id": 11, "verdict": "pass"}
    )

    assert folded.skipped == 1
    assert [(d.gpu_name, d.passed, d.seconds) for d in folded.rows] == [("", True, 3600.0)]


def test_a_stamp_without_a_utc_offset_is_a_skipped_event_not_a_crash():
    """Bad input: a stamp ending in 0 instead of Z is naive; it cannot be subtracted from an
    aware one (a TypeError stopped the fold), so the event is skipped and counted."""
    folded = Decisions()
    cands = [{"id": 1, "machine_id": 11, "dph_total": 0.5}]
    pick = [{"id": 1, "propensity": 0.9}]
    folded.add(
        "2026-07-18T00:00:00.000000Z",
        "market.selection",
        {"name": "a", "candidates": cands, "picks": pick},
    )

    folded.add(
        "2026-07-18T01:00:00.0000000",
        "market.probe",
        {"name": "a", "offer_id": 1, "machine_id": 11, "verdict": "pass"},
    )

    assert folded.skipped == 1 and folded.rows == []
