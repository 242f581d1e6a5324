"""Per-machine pass rates shrunk toward a per-GPU-model prior (the seed's next model)."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from pathlib import Path

import pytest
from oracles import pass_rates_from_log

from fakes.simulate import simulate_market
from gpuops.analysis.learned import ranker
from gpuops.analysis.shrink import (
    MAX_STRENGTH,
    MIN_STRENGTH,
    NO_DATA,
    MachineCounts,
    PassRates,
    Prior,
    fit,
)
from gpuops.market.select import select

UNIFORM = Prior(*NO_DATA)


def population(rng: random.Random, a: float, b: float, machines: int, start: int = 0):
    """True rates from Beta(a, b) and a few probes each (1 to 5), as the seed's log has."""
    truth, counts = {}, {}
    for m in range(start, start + machines):
        p = rng.betavariate(a, b)
        n = rng.choice([1, 1, 2, 3, 5])
        truth[m], counts[m] = p, (sum(rng.random() < p for _ in range(n)), n)
    return truth, counts


def test_the_method_of_moments_recovers_a_known_beta_prior():
    """Many machines, many probes each: the fitted mean and strength are near the truth."""
    rng = random.Random(11)
    counts = []
    for _ in range(2000):
        p = rng.betavariate(6.0, 1.5)
        counts.append((sum(rng.random() < p for _ in range(20)), 20))

    prior = fit(counts, UNIFORM)

    assert prior.mean == pytest.approx(0.8, abs=0.01)
    assert prior.alpha + prior.beta == pytest.approx(7.5, rel=0.15)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shrunk_rates_beat_the_raw_rate_and_the_filter_alone_at_picking_good_hosts(seed):
    """Among 8 filtered offers, the host with the best shrunk rate is truly better, on
    average, than the best raw rate (1/1 looks perfect) and than the cheapest (the filter
    alone); and the shrunk estimates are closer to the truth."""
    rng = random.Random(seed)
    truth, counts = population(rng, 6.0, 1.5, 300)
    prior = fit(counts.values(), UNIFORM)
    picked: dict[str, list[float]] = {"filter": [], "raw": [], "shrunk": []}

    for _ in range(2000):
        cands = rng.sample(sorted(truth), 8)
        price = {m: rng.uniform(0.3, 0.5) for m in cands}
        picked["filter"].append(truth[min(cands, key=price.__getitem__)])
        raw = {m: counts[m][0] / counts[m][1] for m in cands}
        picked["raw"].append(truth[max(cands, key=lambda m: (raw[m], -price[m]))])
        shrunk = {m: prior.shrunk(*counts[m]) for m in cands}
        picked["shrunk"].append(truth[max(cands, key=lambda m: (shrunk[m], -price[m]))])

    mean = {name: statistics.fmean(values) for name, values in picked.items()}
    assert mean["shrunk"] > mean["raw"] + 0.008
    assert mean["shrunk"] > mean["filter"] + 0.04
    mse_raw = statistics.fmean((k / n - truth[m]) ** 2 for m, (k, n) in counts.items())
    mse_shrunk = statistics.fmean(
        (prior.shrunk(k, n) - truth[m]) ** 2 for m, (k, n) in counts.items()
    )
    assert mse_shrunk < mse_raw / 3


def test_a_per_gpu_prior_beats_one_prior_for_every_machine():
    """Two GPU models with different pools: shrinking toward the machine's own model is closer
    to the truth than shrinking toward all machines."""
    rng = random.Random(5)
    good, good_counts = population(rng, 12.0, 1.0, 200)
    bad, bad_counts = population(rng, 2.0, 2.0, 200, start=1000)
    counts = MachineCounts()
    for model, pool in (("A", good_counts), ("B", bad_counts)):
        for m, (k, n) in pool.items():
            counts.trials[m], counts.passes[m], counts.gpu[m] = n, k, model
    rates = PassRates.from_counts(counts)
    truth = good | bad

    per_model = statistics.fmean((rates.rate(m, "") - p) ** 2 for m, p in truth.items())
    pooled = statistics.fmean(
        (rates.pooled.shrunk(*rates.counts[m]) - p) ** 2 for m, p in truth.items()
    )

    assert per_model < pooled * 0.8
    assert rates.prior_for("A").mean > 0.85 > rates.prior_for("B").mean


def test_no_history_gives_every_machine_the_same_rate_so_price_alone_ranks():
    """With an empty log, shrunk ranking is the filter's and price's: nothing changes."""
    rates = PassRates.from_counts(MachineCounts())

    assert rates.rate(1, "RTX 4090") == rates.rate(2, "RTX 3090") == 0.5
    assert rates.raw(1) is None


def test_the_fit_falls_back_where_the_data_cannot_say_how_much_machines_differ():
    """Too few machines, all seen once, all passing, or no spread beyond chance."""
    fallback = Prior(3.0, 1.0)

    assert fit([(1, 1), (0, 2)], fallback) == fallback  # fewer than MIN_MACHINES
    once = fit([(1, 1), (0, 1), (1, 1), (1, 1)], fallback)  # every machine seen once
    assert once.alpha + once.beta == pytest.approx(4.0) and once.mean == pytest.approx(0.75)
    perfect = fit([(5, 5), (3, 3), (4, 4)], fallback)
    assert perfect.alpha + perfect.beta == pytest.approx(4.0)
    assert perfect.mean == pytest.approx((12 + 3) / (12 + 4))
    alike = fit([(5, 10), (5, 10), (5, 10), (5, 10)], fallback)  # less spread than chance
    assert alike.alpha + alike.beta == MAX_STRENGTH and alike.mean == 0.5
    wild = fit([(10, 10), (0, 10), (10, 10), (0, 10)], fallback)
    assert wild.alpha + wild.beta == MIN_STRENGTH


def race(name: str, gpu_name: str) -> dict[str, object]:
    """A race's selection as shrink reads it: its name and GPU model (no offer was picked)."""
    return {"name": name, "gpu_name": gpu_name, "candidates": [], "picks": []}


def test_ssh_failures_do_not_count_against_a_host():
    """M2: an SSH failure is not a host fault, so it is no trial; a host fault is."""
    counts = MachineCounts()
    counts.add("market.selection", race("a", "RTX 4090"))
    for verdict in ("ssh-auth", "ssh-unreachable", "pass", "slow-disk", "unknown"):
        counts.add(
            "market.probe", {"offer_id": 1, "name": "a", "machine_id": 7, "verdict": verdict}
        )
    counts.add("market.rent.done", {"name": "a"})
    counts.add("market.probe", {"offer_id": 1, "name": "a", "machine_id": 8, "verdict": "pass"})

    assert (counts.passes[7], counts.trials[7], counts.gpu[7]) == (1, 2, "RTX 4090")
    assert 8 not in counts.gpu and counts.race_gpu == {}


@dataclass(frozen=True)
class Offer:
    id: int
    machine_id: int
    dph_total: float
    gpu_name: str = "RTX 4090"
    reliability: float | None = 0.99
    disk_bw: float | None = 1500.0
    gpu_ram: float = 24564.0


def test_rent_ranking_learns_from_a_simulated_log_against_the_fakes(tmp_path: Path):
    """A long simulated run: machines' shrunk rates track their true rates, and the ranker
    puts a known-good machine ahead of a cheaper known-bad one."""
    log = tmp_path / "events.jsonl"
    truth = simulate_market(log, rentals=40, seed=2)

    learned = pass_rates_from_log(log)
    judged = [
        m for m in truth.machines.values() if learned.counts.get(m.machine_id, (0, 0))[1] >= 2
    ]
    best = max(judged, key=lambda m: learned.rate(m.machine_id, m.gpu_name))
    worst = min(judged, key=lambda m: learned.rate(m.machine_id, m.gpu_name))
    rates = ranker(log)([Offer(1, best.machine_id, 0.50), Offer(2, worst.machine_id, 0.45)])
    chosen = select(
        [Offer(1, best.machine_id, 0.50), Offer(2, worst.machine_id, 0.45)],
        k=1,
        rng=random.Random(0),
        explore_rate=0.0,
        pass_rate=rates,
    )

    assert best.pass_rate > worst.pass_rate
    assert rates[best.machine_id] > rates[worst.machine_id]
    assert chosen.picks[0].offer.id == 1  # dearer, but cheaper per healthy box
    assert [
        o.id
        for o in select(
            [Offer(1, best.machine_id, 0.50), Offer(2, worst.machine_id, 0.45)],
            k=1,
            rng=random.Random(0),
            explore_rate=0.0,
        ).candidates
    ] == [2, 1]


def test_rent_ranks_its_candidates_by_the_market_s_learned_pass_rates(tmp_path: Path):
    """The rent shell passes Market.pass_rates to select: a cheap machine known to fail goes
    behind a dearer one known to pass, in the logged candidate set too (M11)."""
    from market_world import KEY, build_market, fake_vast, offer, request

    from gpuops.events import EventLog, read_events
    from gpuops.store.memory import MemoryStore

    offers = [offer(0, price=0.30), offer(1, price=0.40)]
    doc = {"vast": {"api_key": "k", "ssh_keys": [KEY], "offers": offers}}
    events = EventLog(tmp_path / "events.jsonl", "alice")
    with fake_vast(doc) as fake:
        market = build_market(
            fake, MemoryStore(), events, api_key="k", seed=1,
            pass_rates=lambda found: {500: 0.3, 501: 0.95},
        )  # fmt: skip
        rental = market.rent(request(k=1, hours=1.0))

    [selection] = [e for e in read_events(events.path) if e["kind"] == "market.selection"]
    assert [c["id"] for c in selection["payload"]["candidates"]] == [1001, 1000]
    assert rental.offer_id == 1001


def test_the_method_of_moments_matches_a_hand_worked_example():
    """Six machines probed four times: m = 20/24, spread 6.0, room 15, rho 1/15, a + b = 14."""
    data = [(4, 4), (3, 4), (2, 4), (4, 4), (3, 4), (4, 4), (0, 0)]  # (0, 0): never judged

    prior = fit(data, UNIFORM)

    assert prior.alpha == pytest.approx(14 * 20 / 24)
    assert prior.beta == pytest.approx(14 * 4 / 24)


def test_the_fit_counts_machines_seen_once_and_handles_the_edges_of_rho():
    """Room just under one still fits; spread exactly at chance pools fully; all failing
    keeps the fallback's strength at the data's mean."""
    # N = 5, sum n^2 / N = 1.4, room = 5 - 1.4 - 3 = 0.6; m = 3/5, spread = 1.2 / 0.24 = 5,
    # rho = (5 - 3) / 0.6 > 1: machines differ wildly, so each one's own record decides
    few = fit([(1, 1), (0, 1), (0, 1), (2, 2)], Prior(3.0, 1.0))
    assert (few.alpha, few.beta) == (pytest.approx(0.6 * MIN_STRENGTH), pytest.approx(0.2))
    chance = fit([(2, 4), (1, 4), (3, 4)], UNIFORM)  # spread == I - 1: rho is exactly 0
    assert (chance.alpha, chance.beta) == (MAX_STRENGTH / 2, MAX_STRENGTH / 2)
    failing = fit([(0, 2), (0, 3), (0, 1)], Prior(3.0, 1.0))
    assert failing.alpha + failing.beta == pytest.approx(4.0)
    assert failing.mean == pytest.approx(3 / (6 + 4))


def test_each_race_s_gpu_goes_to_its_own_machines_and_ends_with_the_race():
    """Interleaved races keep their GPU models apart; a finished or stopped race is forgotten,
    and ending a race never seen is harmless."""
    counts = MachineCounts()

    counts.add("market.selection", race("a", "RTX 4090"))
    counts.add("market.selection", race("b", "RTX 3090"))
    counts.add("market.probe", {"offer_id": 1, "name": "a", "machine_id": 1, "verdict": "pass"})
    counts.add("market.rent.stopped", {"name": "b"})
    counts.add("market.probe", {"offer_id": 1, "name": "b", "machine_id": 2, "verdict": "pass"})
    counts.add("market.rent.done", {"name": "never-seen"})
    counts.add("market.probe", {"offer_id": 1, "name": "a", "machine_id": "3", "verdict": "pass"})

    assert counts.gpu == {1: "RTX 4090"} and counts.race_gpu == {"a": "RTX 4090"}
    assert counts.trials == {1: 1, 2: 1}


def test_rates_use_the_machine_s_model_then_the_asked_model_then_the_pool():
    """A machine without a known model is pooled under ''; a model with too few machines takes
    the pooled prior; an unseen machine takes the prior of the model it is offered as."""
    counts = MachineCounts()
    for m, (k, n, gpu) in {
        1: (4, 4, "A"),
        2: (3, 4, "A"),
        3: (1, 4, "A"),
        4: (0, 4, "B"),
        5: (2, 2, None),
    }.items():
        counts.passes[m], counts.trials[m] = k, n
        if gpu:
            counts.gpu[m] = gpu

    rates = PassRates.from_counts(counts)

    assert set(rates.priors) == {"A", "B", ""}
    assert rates.priors["B"] == rates.pooled == rates.priors[""]
    assert rates.rate(99, "A") == pytest.approx(rates.priors["A"].mean)
    assert rates.rate(99, "Z") == pytest.approx(rates.pooled.mean)
    assert rates.rate(4, "A") == pytest.approx(rates.pooled.shrunk(0, 4))
    assert (rates.raw(2), rates.raw(99)) == (0.75, None)


def test_the_ranker_tells_how_many_probes_each_rate_rests_on(tmp_path: Path):
    """`offers` prints PASS (n): n is the machine's judged probes in the log, 0 for a machine
    never judged (its rate is then the GPU model's alone)."""
    log = tmp_path / "events.jsonl"
    simulate_market(log, rentals=10, seed=2)
    learned = pass_rates_from_log(log)
    seen = max(learned.counts, key=lambda m: learned.counts[m][1])
    rank = ranker(log)

    assert rank.trials == {}
    rank([Offer(1, seen, 0.5), Offer(2, 999_999, 0.4)])

    assert rank.trials == {seen: learned.counts[seen][1], 999_999: 0}
    assert rank.trials[seen] >= 1
