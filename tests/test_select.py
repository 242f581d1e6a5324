"""Offer selection: the default filter, ranking, and logged propensities (M1, M11)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops.errors import UsageError
from gpuops.market.select import (
    resolve_gpu_name,
    DEFAULT_VRAM_FLOOR_MB,
    EXPLORE_RATE,
    MIN_DISK_MB_PER_S,
    MIN_RELIABILITY,
    Filter,
    distinct,
    pick,
    propensity_of,
    rank_key,
    reasons_to_remove,
    select,
)


@dataclass(frozen=True)
class O:
    """An offer with just the fields selection reads."""

    id: int
    dph_total: float = 0.40
    reliability: float | None = 0.995
    disk_bw: float | None = 2000.0
    gpu_ram: float = 24564.0
    machine_id: int = 0
    end_date: float | None = None


def offers(n: int) -> list[O]:
    return [O(id=i, dph_total=0.30 + i / 100, machine_id=100 + i) for i in range(n)]


def test_the_default_filter_is_the_seeds():
    """M1: reliability >= 0.98 and disk >= 500 MB/s, the filter the seed's data supports."""
    assert (MIN_RELIABILITY, MIN_DISK_MB_PER_S, DEFAULT_VRAM_FLOOR_MB) == (0.98, 500.0, 8192)
    assert EXPLORE_RATE == 0.10
    assert Filter() == Filter(0.98, 500.0, 8192)


@pytest.mark.parametrize(
    ("offer", "reasons"),
    [
        (O(1), []),
        (O(1, reliability=0.98, disk_bw=500.0, gpu_ram=8192.0), []),
        (O(1, reliability=0.9799), ["reliability 0.9799 < 0.98"]),
        (O(1, disk_bw=499.9), ["disk 500 MB/s < 500"]),
        (O(1, gpu_ram=8191.0), ["vram 8191 MB < 8192"]),
        (O(1, machine_id=7), ["quarantined"]),
        (O(1, reliability=None), ["reliability unknown"]),
        (O(1, disk_bw=None), ["disk bandwidth unknown"]),
        (
            O(1, reliability=0.5, disk_bw=10.0, gpu_ram=100.0, machine_id=7),
            [
                "quarantined",
                "reliability 0.5000 < 0.98",
                "disk 10 MB/s < 500",
                "vram 100 MB < 8192",
            ],
        ),
    ],
)
def test_each_filter_reason_is_named(offer, reasons):
    """M1: the filter says exactly why an offer is left out, boundaries included."""
    assert reasons_to_remove(offer, Filter(), frozenset({7})) == reasons


@pytest.mark.parametrize(
    ("price", "cap", "reasons"),
    [
        (0.40, 0.40, []),
        (0.4001, 0.40, ["price $0.4001/h > --max-dph $0.4000"]),
        (1e9, None, []),
        (0.0, 0.0, []),
    ],
)
def test_a_price_cap_removes_only_the_dearer_offers_and_says_so(price, cap, reasons):
    """`--max-dph`: an offer at the cap passes, one a hundredth of a cent dearer is removed
    naming both prices; no cap (the default) removes nothing however dear."""
    assert Filter().max_dph is None
    assert reasons_to_remove(O(1, dph_total=price), Filter(max_dph=cap), frozenset()) == reasons


def test_candidates_are_ranked_cheapest_then_most_reliable_then_by_id():
    """Ranking is total and stable; an unknown reliability ranks as the least reliable."""
    a = O(3, dph_total=0.5, reliability=0.99)
    b = O(2, dph_total=0.4, reliability=0.99)
    c = O(1, dph_total=0.5, reliability=0.999)
    d = O(0, dph_total=0.5, reliability=0.99)
    e = O(4, dph_total=0.5, reliability=None)

    assert sorted([e, a, b, c, d], key=rank_key) == [b, c, d, a, e]


def test_selection_reports_removed_offers_and_counts_quarantine():
    """M2: quarantined machines are left out and counted; the rest keep their reasons."""
    pool = [O(1, machine_id=5), O(2, reliability=0.5), O(3, machine_id=5, disk_bw=1.0), O(4)]

    chosen = select(pool, k=3, rng=random.Random(1), quarantined=frozenset({5}), explore_rate=0)

    assert [o.id for o in chosen.candidates] == [4]
    assert [(r.offer.id, r.reasons[0]) for r in chosen.removed] == [
        (1, "quarantined"),
        (2, "reliability 0.5000 < 0.98"),
        (3, "quarantined"),
    ]
    assert chosen.quarantined == 2
    assert [p.offer.id for p in chosen.picks] == [4]


@pytest.mark.parametrize(
    ("end_date", "reasons"),
    [
        (5000.0, []),
        (4000.0, []),  # ends exactly when needed: enough
        (3999.0, ["contract end 0.0 h too soon"]),
        (4000.0 - 5400.0, ["contract end 1.5 h too soon"]),
        (4000.0 - 360 * 3600.0, ["contract end 360.0 h too soon"]),  # hours of 3600 s
        (None, ["contract end unknown"]),
    ],
)
def test_an_offer_whose_contract_ends_before_it_is_needed_is_removed_h6(end_date, reasons):
    """Vast stops a box at its contract's end: an offer must outlast contract_ends_after, and
    one whose end the provider left out fails (missing is never passing)."""
    rules = Filter(contract_ends_after=4000.0)

    assert reasons_to_remove(O(1, end_date=end_date), rules, frozenset()) == reasons


def test_without_a_contract_end_to_outlast_no_end_date_is_read():
    """Filter() checks no contract end: an offer with none still passes."""
    assert Filter().contract_ends_after is None
    assert reasons_to_remove(O(1, end_date=None), Filter(), frozenset()) == []


def test_selection_counts_the_offers_left_out_for_their_contract_end_h6():
    """The count `offers` and `rent` report: each offer with a contract reason, once."""
    pool = [
        O(1, end_date=100.0, machine_id=1),
        O(2, end_date=None, machine_id=2, reliability=0.5),
        O(3, end_date=9000.0, machine_id=3, reliability=0.5),
        O(4, end_date=9000.0, machine_id=4),
    ]

    chosen = select(pool, k=1, rng=random.Random(1), rules=Filter(contract_ends_after=5000.0))

    assert [o.id for o in chosen.candidates] == [4]
    assert chosen.contract_ended == 2
    assert [r.reasons for r in chosen.removed][1] == (
        "reliability 0.5000 < 0.98",
        "contract end unknown",
    )
    assert select(pool, k=1, rng=random.Random(1)).contract_ended == 0


def test_one_machine_listed_twice_is_raced_once_by_its_best_ranked_offer():
    """vast-cli#260 and skypilot#9117: one candidate per offer and per machine, the first
    ranked kept; a repeated offer is "listed twice", another offer on a machine already
    held names the offer that ranks first; the rest keep their order."""
    pool = [
        O(1, dph_total=0.30, machine_id=7),
        O(1, dph_total=0.30, machine_id=7),  # the same offer, listed twice
        O(2, dph_total=0.31, machine_id=8),
        O(3, dph_total=0.32, machine_id=7),  # another offer on machine 7
        O(2, dph_total=0.33, machine_id=9),  # offer 2 again, under another machine
        O(4, dph_total=0.34, machine_id=9),
    ]

    chosen = select(pool, k=8, rng=random.Random(1), explore_rate=0)

    assert [(o.id, o.machine_id) for o in chosen.candidates] == [(1, 7), (2, 8), (4, 9)]
    assert [(r.offer.id, r.reasons) for r in chosen.removed] == [
        (1, ("listed twice",)),
        (3, ("machine 7 is offer 1's, ranked first",)),
        (2, ("listed twice",)),
    ]
    assert [p.offer.id for p in chosen.picks] == [1, 2, 4]
    assert chosen.quarantined == 0


def test_distinct_keeps_what_it_is_given_when_nothing_repeats():
    """Distinct offers on distinct machines pass through as they are, in their order."""
    pool = [O(5, machine_id=1), O(3, machine_id=2)]

    assert distinct(pool) == (tuple(pool), [])
    assert distinct([]) == ((), [])


def test_without_exploration_the_top_k_are_picked_in_order_with_certainty():
    """M11: a greedy pick has propensity 1."""
    chosen = select(offers(5), k=3, rng=random.Random(0), explore_rate=0.0)

    assert [(p.offer.id, p.rank, p.propensity, p.explored) for p in chosen.picks] == [
        (0, 0, 1.0, False),
        (1, 1, 1.0, False),
        (2, 2, 1.0, False),
    ]


def test_pure_exploration_picks_uniformly_with_matching_propensities():
    """M11: with explore rate 1 each slot is uniform over what remains."""
    picks = pick(offers(4), k=4, rng=random.Random(3), explore_rate=1.0)

    assert [p.propensity for p in picks] == [1 / 4, 1 / 3, 1 / 2, 1.0]
    assert all(p.explored for p in picks)
    assert sorted(p.offer.id for p in picks) == [0, 1, 2, 3]


def test_picks_never_repeat_and_stop_at_the_candidates():
    """k larger than the pool picks every candidate once."""
    picks = pick(offers(2), k=5, rng=random.Random(0), explore_rate=0.5)

    assert sorted(p.offer.id for p in picks) == [0, 1]


def test_k_must_be_positive():
    """A race of zero is a usage bug."""
    with pytest.raises(ValueError, match="k must be at least 1, not 0"):
        select(offers(2), k=0, rng=random.Random(0))
    assert len(select(offers(2), k=1, rng=random.Random(0)).picks) == 1  # one at a time is fine


@given(remaining=st.integers(1, 50), rate=st.floats(0.0, 1.0))
def test_propensities_of_one_slot_sum_to_one(remaining, rate):
    """M11: the logged propensities are a probability distribution over the choices."""
    total = sum(propensity_of(i, remaining, rate) for i in range(remaining))

    assert total == pytest.approx(1.0)
    assert propensity_of(0, remaining, rate) == pytest.approx(1 - rate + rate / remaining)


def test_the_explore_rate_is_what_is_observed():
    """M11: over many seeded draws the top offer is taken 1 - 0.1 + 0.1/n of the time."""
    ranked = offers(5)
    draws = 20_000
    rng = random.Random(2026)

    top = sum(pick(ranked, k=1, rng=rng, explore_rate=0.1)[0].rank == 0 for _ in range(draws))

    assert top / draws == pytest.approx(0.9 + 0.1 / 5, abs=0.01)
    assert propensity_of(0, 5, 0.1) == pytest.approx(0.92)


class Draws(random.Random):
    """A random source that draws ``value`` every time and always takes the last index."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value

    def randrange(self, n: int) -> int:  # type: ignore[override]
        return n - 1


def test_a_draw_equal_to_the_explore_rate_is_greedy():
    """M11: a slot explores only when the draw is strictly below the explore rate."""
    [greedy] = pick(offers(3), k=1, rng=Draws(0.25), explore_rate=0.25)
    [explored] = pick(offers(3), k=1, rng=Draws(0.2499), explore_rate=0.25)

    assert (greedy.offer.id, greedy.rank, greedy.explored) == (0, 0, False)
    assert greedy.propensity == pytest.approx(0.75 + 0.25 / 3)
    assert (explored.offer.id, explored.rank, explored.explored) == (2, 2, True)
    assert explored.propensity == pytest.approx(0.25 / 3)


def test_with_pass_rates_offers_rank_by_price_per_healthy_box():
    """Ranking: dph_total / shrunk pass rate; an unlisted machine counts as always passing,
    a machine that never passed as MIN_PASS_RATE, and no rates means price alone."""
    cheap_bad = O(1, dph_total=0.30, machine_id=11)
    dear_good = O(2, dph_total=0.40, machine_id=12)
    unlisted = O(3, dph_total=0.41, machine_id=13)
    never = O(4, dph_total=0.001, machine_id=14)
    rates = {11: 0.5, 12: 0.98, 14: 0.0}

    assert rank_key(cheap_bad, rates) == (0.6, -0.995, 1)
    assert rank_key(unlisted, rates) == (0.41, -0.995, 3)
    assert rank_key(never, rates) == (pytest.approx(0.1), -0.995, 4)
    assert rank_key(cheap_bad) == rank_key(cheap_bad, None) == (0.30, -0.995, 1)
    chosen = select([cheap_bad, dear_good, unlisted, never], k=1, rng=random.Random(0),
                    explore_rate=0.0, pass_rate=rates)  # fmt: skip
    assert [o.id for o in chosen.candidates] == [4, 2, 3, 1]
    plain = select([cheap_bad, dear_good], k=1, rng=random.Random(0), explore_rate=0.0)
    assert [o.id for o in plain.candidates] == [1, 2]


# --- GPU names: a typo is a usage error, not a stockout -------------------------------------
KNOWN_GPUS = ["RTX 4090", "RTX 3090", "A100 PCIE", "H100 SXM", "RTX 4080"]


@pytest.mark.parametrize("typed", ["RTX 4090", "rtx 4090", "Rtx  4090", " RTX 4090 "])
def test_a_gpu_name_matches_the_market_spelling_in_any_casing_and_spacing(typed):
    """M1: `rtx 4090` is the market's `RTX 4090`; the market's own spelling is returned."""
    assert resolve_gpu_name(typed, KNOWN_GPUS) == "RTX 4090"


def test_a_gpu_name_no_offer_uses_is_a_usage_error_naming_the_three_nearest():
    """A name no offer uses in any casing is exit 2 with the nearest known names, best first."""
    with pytest.raises(UsageError) as caught:
        resolve_gpu_name("RTX 9999", KNOWN_GPUS + ["RTX 4090"])

    assert caught.value.exit_code == 2
    assert str(caught.value) == (
        "no offer names the GPU 'RTX 9999' in any casing; nearest known: "
        "'RTX 4090', 'RTX 3090', 'RTX 4080'"
    )


def test_the_nearest_names_keep_the_market_spelling():
    """The hint shows names as offers spell them, not folded to lower case."""
    with pytest.raises(UsageError, match=r"nearest known: 'A100 PCIE'$"):
        resolve_gpu_name("a100 pcie-x", ["A100 PCIE"])


def test_with_no_offers_at_all_there_is_nothing_to_call_a_typo():
    """An empty market is a stockout for the caller to report, never a usage error."""
    assert resolve_gpu_name("RTX 9999", []) is None


def test_a_folded_gpu_name_has_single_spaces_and_no_case():
    """Any casing and any run of spaces fold to one spelling: `Rtx  4090 ` is `rtx 4090`."""
    from gpuops.market.gpu_names import fold_gpu_name

    assert fold_gpu_name("  Rtx \t 4090 ") == "rtx 4090"


def test_a_name_only_rented_offers_use_is_capacity_in_any_casing():
    """M1: rented_out names the market's spelling when a rented offer uses the name (any
    casing or spacing), else None: then it is the typo resolve_gpu_name said."""
    from gpuops.errors import CapacityExhausted
    from gpuops.market.select import rented_out

    busy = rented_out("rtx  4090", ["RTX 3090", "RTX 4090", "RTX 4090"])

    assert isinstance(busy, CapacityExhausted) and busy.exit_code == 4
    assert str(busy) == (
        "vast has no capacity: every RTX 4090 offer is rented now; try again later, or another GPU"
    )
    assert rented_out("RTX 9999", ["RTX 3090", "RTX 4090"]) is None
    assert rented_out("RTX 4090", []) is None
