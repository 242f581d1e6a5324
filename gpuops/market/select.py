"""Offer selection: the default filter, the ranking, and exploration with logged propensities (M11).

Pure: offers in, a Selection out. The seed's data: inside the default filter (reliability
>= 0.98, disk bandwidth >= 500 MB/s) hosts failed 2.3% of the time, outside it 71%. So the
filter is the policy's backbone; the ranking orders what passes it; and 10% of the time a
pick is made uniformly among the candidates so that another policy can later be scored from
the log without renting anything (the full ranked set and each pick's propensity are kept).
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gpuops.errors import CapacityExhausted, UsageError
from gpuops.market.gpu_names import fold_gpu_name

MIN_RELIABILITY = 0.98
MIN_DISK_MB_PER_S = 500.0
DEFAULT_VRAM_FLOOR_MB = 8192
EXPLORE_RATE = 0.10
# How many known GPU names a misspelt one is shown beside.
NEAREST_NAMES = 3
# A machine's pass rate divides its price; a machine that never passed still has a finite cost.
MIN_PASS_RATE = 0.01
# How every contract-end reason starts, so the ones left out for it are counted.
CONTRACT_END = "contract end"


class OfferLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def machine_id(self) -> int: ...
    @property
    def reliability(self) -> float | None: ...
    @property
    def disk_bw(self) -> float | None: ...
    @property
    def gpu_ram(self) -> float: ...
    @property
    def dph_total(self) -> float: ...
    @property
    def end_date(self) -> float | None: ...


@dataclass(frozen=True)
class Filter:
    min_reliability: float = MIN_RELIABILITY
    min_disk_mb_per_s: float = MIN_DISK_MB_PER_S
    vram_floor_mb: float = DEFAULT_VRAM_FLOOR_MB
    max_dph: float | None = None  # `--max-dph`: the most $/hour an offer may cost; None: no cap
    # Epoch s the offer's contract must outlast (the rental's deadline plus
    # timing.CONTRACT_END_MARGIN_S): Vast stops a box at its contract's end. None: not checked.
    contract_ends_after: float | None = None


OfferT = TypeVar("OfferT", bound=OfferLike)  # the caller's own offer type, handed back as it came


@dataclass(frozen=True)
class Removed(Generic[OfferT]):
    offer: OfferT
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Pick(Generic[OfferT]):
    offer: OfferT
    rank: int  # 0-based position in the ranked candidates
    propensity: float  # probability this pick was made, given the picks before it
    explored: bool


@dataclass(frozen=True)
class Selection(Generic[OfferT]):
    candidates: tuple[OfferT, ...]  # ranked, best first
    removed: tuple[Removed[OfferT], ...]  # by the filter or quarantine, with reasons
    quarantined: int  # how many offers were left out because their machine is quarantined
    picks: tuple[Pick[OfferT], ...]
    contract_ended: int = 0  # how many were left out because their contract ends too soon


def reasons_to_remove(offer: OfferLike, rules: Filter, quarantined: frozenset[int]) -> list[str]:
    """Why the default filter leaves this offer out; empty when it passes."""
    reasons = []
    if offer.machine_id in quarantined:
        reasons.append("quarantined")
    # a field the provider left out fails its filter: missing is never passing
    if offer.reliability is None:
        reasons.append("reliability unknown")
    elif offer.reliability < rules.min_reliability:
        reasons.append(f"reliability {offer.reliability:.4f} < {rules.min_reliability}")
    if offer.disk_bw is None:
        reasons.append("disk bandwidth unknown")
    elif offer.disk_bw < rules.min_disk_mb_per_s:
        reasons.append(f"disk {offer.disk_bw:.0f} MB/s < {rules.min_disk_mb_per_s:.0f}")
    if offer.gpu_ram < rules.vram_floor_mb:
        reasons.append(f"vram {offer.gpu_ram:.0f} MB < {rules.vram_floor_mb:.0f}")
    if rules.max_dph is not None and offer.dph_total > rules.max_dph:
        reasons.append(f"price ${offer.dph_total:.4f}/h > --max-dph ${rules.max_dph:.4f}")
    needed = rules.contract_ends_after
    if needed is not None:
        if offer.end_date is None:
            reasons.append(f"{CONTRACT_END} unknown")
        elif offer.end_date < needed:
            short_h = (needed - offer.end_date) / 3600.0
            reasons.append(f"{CONTRACT_END} {short_h:.1f} h too soon")
    return reasons


def rank_key(
    offer: OfferLike, pass_rate: Mapping[int, float] | None = None
) -> tuple[float, float, int]:
    """Cheapest first; among equal prices the more reliable; then the lower id (stable).

    With ``pass_rate`` (machine id -> shrunk pass rate, analysis/shrink.py) the price is the
    expected price per healthy box, ``dph_total / pass_rate``; a machine it does not list
    counts as always passing, so the caller lists every offer's machine (the GPU prior's
    mean for a machine never seen)."""
    price = offer.dph_total
    if pass_rate is not None:
        price = price / max(pass_rate.get(offer.machine_id, 1.0), MIN_PASS_RATE)
    return (price, -(offer.reliability or 0.0), offer.id)


def select(
    offers: Iterable[OfferT],
    *,
    k: int,
    rng: random.Random,
    rules: Filter = Filter(),
    quarantined: frozenset[int] = frozenset(),
    explore_rate: float = EXPLORE_RATE,
    pass_rate: Mapping[int, float] | None = None,
) -> Selection[OfferT]:
    """Filter, rank (by price per healthy box when ``pass_rate`` is given), and pick up to
    ``k`` distinct candidates (M11)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    kept: list[OfferT] = []
    removed: list[Removed[OfferT]] = []
    for offer in offers:
        why = reasons_to_remove(offer, rules, quarantined)
        if why:
            removed.append(Removed(offer, tuple(why)))
        else:
            kept.append(offer)
    ranked, repeated = distinct(sorted(kept, key=lambda offer: rank_key(offer, pass_rate)))
    removed += repeated
    picks = pick(ranked, k=k, rng=rng, explore_rate=explore_rate)
    in_quarantine = sum(1 for r in removed if "quarantined" in r.reasons)
    ended = sum(1 for r in removed if any(x.startswith(CONTRACT_END) for x in r.reasons))
    return Selection(ranked, tuple(removed), in_quarantine, picks, ended)


def distinct(ranked: Iterable[OfferT]) -> tuple[tuple[OfferT, ...], list[Removed[OfferT]]]:
    """One candidate per offer and per machine, the best-ranked kept: search can list one
    machine twice (vast-ai/vast-cli#260), and Vast accepts two purchases of one offer and
    launches both, the later failing where the client never hears it
    (skypilot-org/skypilot#9117). So the race never creates twice on one offer or machine."""
    kept: list[OfferT] = []
    removed: list[Removed[OfferT]] = []
    ids: set[int] = set()
    by_machine: dict[int, OfferT] = {}
    for offer in ranked:
        if offer.id in ids:
            removed.append(Removed(offer, ("listed twice",)))
            continue
        ids.add(offer.id)
        first = by_machine.setdefault(offer.machine_id, offer)
        if first is offer:
            kept.append(offer)
        else:
            why = f"machine {offer.machine_id} is offer {first.id}'s, ranked first"
            removed.append(Removed(offer, (why,)))
    return tuple(kept), removed


def pick(
    ranked: Sequence[OfferT], *, k: int, rng: random.Random, explore_rate: float
) -> tuple[Pick[OfferT], ...]:
    """Epsilon-greedy without replacement: each slot takes the best remaining offer, or with
    probability ``explore_rate`` a uniformly random remaining one. The propensity of a pick
    is its probability given the slots before it."""
    remaining = list(range(len(ranked)))
    picks = []
    for _ in range(min(k, len(ranked))):
        explored = rng.random() < explore_rate
        chosen = remaining[rng.randrange(len(remaining))] if explored else remaining[0]
        position = remaining.index(chosen)
        propensity = propensity_of(position, len(remaining), explore_rate)
        picks.append(Pick(ranked[chosen], chosen, propensity, explored))
        remaining.remove(chosen)
    return tuple(picks)


def propensity_of(position: int, remaining: int, explore_rate: float) -> float:
    """Probability that one epsilon-greedy slot picks the offer at ``position`` (0 = best)
    among ``remaining`` offers."""
    share = explore_rate / remaining
    return share + (1.0 - explore_rate) if position == 0 else share


def rented_out(requested: str, rented: Iterable[str]) -> CapacityExhausted | None:
    """Capacity (exit 4) when ``requested``, in any casing, names the GPU of offers that are
    all rented now: a known GPU with no rentable offer is not a typo (exit 2); None when no
    rented offer names it either (then it is the typo ``resolve_gpu_name`` said)."""
    for name in sorted(set(rented)):
        if fold_gpu_name(name) == fold_gpu_name(requested):
            return CapacityExhausted(
                "vast", f"every {name} offer is rented now; try again later, or another GPU"
            )
    return None


def resolve_gpu_name(requested: str, known: Iterable[str]) -> str | None:
    """The market's own spelling of ``requested`` (any casing, any spacing), given the GPU names
    the offers use; None when there are no offers to compare with (a stockout, not a typo).

    A name no offer uses in any casing is a UsageError listing the nearest known names: a typo
    must not look like a stockout (exit 4) and be retried in vain."""
    names = sorted(set(known))
    if not names:
        return None
    for name in names:
        if fold_gpu_name(name) == fold_gpu_name(requested):
            return name
    by_fold = {fold_gpu_name(name): name for name in names}
    near = difflib.get_close_matches(
        fold_gpu_name(requested), list(by_fold), n=NEAREST_NAMES, cutoff=0
    )
    raise UsageError(
        f"no offer names the GPU {requested!r} in any casing; nearest known: "
        + ", ".join(repr(by_fold[n]) for n in near)
    )
