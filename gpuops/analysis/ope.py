"""Off-policy evaluation of offer-selection policies from the logged races (M11).

Every race logs its full ranked candidate set and each pick's propensity (select.py). The
race's lead pick (slot 0) was made with the logged propensity ``mu``, unconditionally; for a
target policy ``pi`` over the same candidates, ``w = pi(pick) / mu``. Inverse propensity
scoring estimates the target's mean outcome as ``mean(w * r)``; the self-normalised version
``sum(w * r) / sum(w)`` trades a little bias for much less variance. Intervals are normal
approximations (the delta method for the self-normalised one).

Outcomes of a lead pick: ``passed`` (its probe passed; a taken offer did not), ``seconds``
(from the selection to its verdict or failed create) and ``cost_usd`` (what the box billed
until its verdict: ``dph_total`` times the hours from its create). A policy's time to a healthy
box is estimated as seconds / pass rate (one pick after another until one passes).

Pure: ``Decisions.add`` folds events into ``Decision`` rows, each read through
``event_types.decode`` (one that does not decode is counted in ``skipped``, never fatal; a
logged propensity outside (0, 1] does not decode); ``evaluate`` computes, and refuses a row
whose propensity is not positive with a ValueError rather than dividing by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuops import event_types as ev
from gpuops.analysis.stats import CREATE_OK, hours_between
from gpuops.market.select import EXPLORE_RATE, propensity_of
from gpuops.model import Verdict

KINDS = frozenset(kind.KIND for kind in (ev.Selection, ev.Create, ev.Probe))
Z95 = 1.959964
METRICS = ("passed", "seconds", "cost_usd")


@dataclass(frozen=True)
class Candidate:
    id: int
    machine_id: int
    dph_total: float
    reliability: float | None
    disk_bw: float | None


@dataclass(frozen=True)
class Decision:
    gpu_name: str
    candidates: tuple[Candidate, ...]  # ranked as logged
    chosen: int  # index of the lead pick in candidates
    propensity: float
    passed: bool
    seconds: float
    cost_usd: float

    def outcome(self, metric: str) -> float:
        return float(getattr(self, metric))


@dataclass
class _Open:
    gpu_name: str
    started: str
    candidates: tuple[Candidate, ...]
    chosen: int
    propensity: float
    created: str | None = None


@dataclass
class Decisions:
    """Folds market events into one Decision per race whose lead pick reached an outcome."""

    rows: list[Decision] = field(default_factory=list)
    open: dict[str, _Open] = field(default_factory=dict)
    skipped: int = 0

    def add(self, ts: str, kind: str, p: Mapping[str, object]) -> None:
        """Fold one event in from its payload (``add_event`` of its decoding)."""
        self.add_event(ts, ev.decode(kind, p))

    def add_event(self, ts: str, event: ev.Event | None) -> None:
        """Fold one typed event in; None (a payload that did not decode) is counted."""
        if event is None:
            self.skipped += 1
            return
        try:
            self._add(ts, event)
        except (ValueError, OverflowError):  # a stamp not ISO-8601, a number past float range
            self.skipped += 1

    def _add(self, ts: str, event: ev.Event) -> None:
        if isinstance(event, ev.Selection):
            self._open(ts, event)
            return
        if not isinstance(event, ev.Create | ev.Probe):
            return
        race = self.open.get(event.name)
        if race is None or event.offer_id != race.candidates[race.chosen].id:
            return
        if isinstance(event, ev.Probe):
            self._close(event.name, race, ts, passed=event.verdict is Verdict.PASS)
        elif event.outcome in CREATE_OK:
            race.created = ts
        else:
            self._close(event.name, race, ts, passed=False)

    def _open(self, ts: str, event: ev.Selection) -> None:
        if not event.picks:
            return  # a race with no pick made no decision
        lead = event.picks[0]
        if lead.propensity is None:
            self.skipped += 1  # not logged: nothing to reweight it by
            return
        cands = tuple(_candidate(c) for c in event.candidates)
        chosen = [c.id for c in cands].index(lead.id)  # decode: a pick is one of the candidates
        self.open[event.name] = _Open(event.gpu_name, ts, cands, chosen, float(lead.propensity))

    def _close(self, name: str, race: _Open, ts: str, *, passed: bool) -> None:
        del self.open[name]
        price = race.candidates[race.chosen].dph_total
        cost = price * hours_between(race.created, ts) if race.created else 0.0
        seconds = hours_between(race.started, ts) * 3600.0
        self.rows.append(
            Decision(
                race.gpu_name, race.candidates, race.chosen, race.propensity, passed, seconds, cost
            )
        )


def _candidate(c: ev.Offered) -> Candidate:
    rel, disk = c.reliability, c.disk_bw
    return Candidate(
        c.id,
        c.machine_id,
        float(c.dph_total),
        None if rel is None else float(rel),
        None if disk is None else float(disk),
    )


# --- policies: candidates (ranked as logged) -> probability of each ---------------------------
Policy = Callable[[Decision], Sequence[float]]


def _one_hot(n: int, index: int) -> list[float]:
    return [1.0 if i == index else 0.0 for i in range(n)]


def logged(d: Decision) -> list[float]:
    """The deployed epsilon-greedy selector's lead pick (the log's own policy)."""
    n = len(d.candidates)
    return [propensity_of(i, n, EXPLORE_RATE) for i in range(n)]


def greedy(d: Decision) -> list[float]:
    """The default ranking's best, never exploring."""
    return _one_hot(len(d.candidates), 0)


def uniform(d: Decision) -> list[float]:
    n = len(d.candidates)
    return [1.0 / n] * n


def most_reliable(d: Decision) -> list[float]:
    """The offer with the highest listed reliability; the cheaper among equals."""
    best = min(
        range(len(d.candidates)),
        key=lambda i: (-(d.candidates[i].reliability or 0.0), d.candidates[i].dph_total, i),
    )
    return _one_hot(len(d.candidates), best)


def by_score(score: Callable[[Decision, Candidate], float]) -> Policy:
    """The offer with the lowest score (ties: the logged rank)."""

    def policy(d: Decision) -> list[float]:
        best = min(range(len(d.candidates)), key=lambda i: (score(d, d.candidates[i]), i))
        return _one_hot(len(d.candidates), best)

    return policy


# --- estimates -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    metric: str
    logged_mean: float
    ips: float
    ips_half_width: float
    snips: float
    snips_half_width: float


@dataclass(frozen=True)
class Evaluation:
    decisions: int
    matched: int  # decisions whose lead pick the target policy could have made
    effective_n: float  # (sum w)^2 / sum w^2
    estimates: tuple[Estimate, ...]

    def estimate(self, metric: str) -> Estimate:
        return next(e for e in self.estimates if e.metric == metric)

    @property
    def seconds_to_healthy(self) -> float | None:
        """Seconds per pick over the pass rate (self-normalised estimates)."""
        passed = self.estimate("passed").snips
        return self.estimate("seconds").snips / passed if passed > 0 else None


def evaluate(rows: Sequence[Decision], policy: Policy) -> Evaluation:
    if not rows:
        raise ValueError("no logged decisions to evaluate")
    unweighable = sum(1 for d in rows if not d.propensity > 0)
    if unweighable:
        raise ValueError(
            f"{unweighable} logged decisions have a propensity that is not positive; "
            "off-policy evaluation cannot reweight them"
        )
    weights = [policy(d)[d.chosen] / d.propensity for d in rows]
    total = sum(weights)
    n = len(rows)
    estimates = []
    for metric in METRICS:
        r = [d.outcome(metric) for d in rows]
        wr = [w * x for w, x in zip(weights, r, strict=True)]
        ips = sum(wr) / n
        ips_sd = math.sqrt(sum((x - ips) ** 2 for x in wr) / max(n - 1, 1))
        snips = sum(wr) / total if total > 0 else math.nan
        spread = sum((w * (x - snips)) ** 2 for w, x in zip(weights, r, strict=True))
        snips_se = math.sqrt(spread) / total if total > 0 else math.nan
        estimates.append(
            Estimate(metric, sum(r) / n, ips, Z95 * ips_sd / math.sqrt(n), snips, Z95 * snips_se)
        )
    squares = sum(w * w for w in weights)
    return Evaluation(
        n,
        sum(1 for w in weights if w > 0),
        total * total / squares if squares else 0.0,
        tuple(estimates),
    )


POLICY_NAMES = ("logged", "greedy", "uniform", "reliable", "shrunk")


def named(name: str, rates: object = None) -> Policy:
    """A policy by its CLI name; ``shrunk`` needs PassRates (analysis/shrink.py)."""
    if name == "shrunk":
        from gpuops.analysis.shrink import PassRates
        from gpuops.market.select import MIN_PASS_RATE

        if not isinstance(rates, PassRates):
            raise ValueError("the shrunk policy needs pass rates")
        return by_score(
            lambda d, c: c.dph_total / max(rates.rate(c.machine_id, d.gpu_name), MIN_PASS_RATE)
        )
    table: dict[str, Policy] = {
        "logged": logged,
        "greedy": greedy,
        "uniform": uniform,
        "reliable": most_reliable,
    }
    if name not in table:
        raise ValueError(f"no policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    return table[name]
