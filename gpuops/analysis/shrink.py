"""Per-machine pass rates shrunk toward a per-GPU-model prior (empirical-Bayes beta-binomial).

The seed: a learned classifier with 15 positive examples did worse than the filter; "the
right next model is a per-machine pass rate shrunk toward a per-GPU prior". A machine seen
once is not a 100% or a 0% machine: its estimate is ``(passes + a) / (trials + a + b)``,
where ``Beta(a, b)`` is fitted to all machines of the same GPU model by the method of moments
(Kleinman 1973): the spread of the per-machine rates beyond what binomial noise explains
sets how much each machine's own record counts. A model with too few machines borrows the
prior fitted to every machine; with no data at all every machine gets the same rate, so the
ranking is the filter's and price's alone.

A trial is a probe that judged the hardware: a pass or a host fault. SSH failures are not
the host's fault (M2; about half those machines passed at another time), so they are not
counted against it.

Pure: ``MachineCounts.add`` folds events (read through ``event_types.decode``: an event that
does not decode is counted in ``skipped``, never fatal); ``fit`` and ``PassRates`` compute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuops.event_types import Event, Probe, RentDone, RentStopped, Selection, decode
from gpuops.model import Verdict

KINDS = frozenset(kind.KIND for kind in (Selection, Probe, RentDone, RentStopped))
MIN_MACHINES = 3  # fewer machines of a model than this: use the prior fitted to all machines
MAX_STRENGTH = 1000.0  # a + b when machines differ no more than chance: pool almost fully
MIN_STRENGTH = 0.5  # a + b when machines differ wildly: trust each machine's own record
NO_DATA = (1.0, 1.0)  # the prior before any machine was ever judged: uniform


@dataclass(frozen=True)
class Prior:
    alpha: float
    beta: float

    @property
    def mean(self) -> float:
        return self.alpha / (self.alpha + self.beta)

    def shrunk(self, passes: int, trials: int) -> float:
        return (passes + self.alpha) / (trials + self.alpha + self.beta)


def fit(counts: Iterable[tuple[int, int]], fallback: Prior) -> Prior:
    """A Beta prior for ``(passes, trials)`` per machine, by the method of moments."""
    data = [(k, n) for k, n in counts if n > 0]
    total = sum(n for _, n in data)
    if len(data) < MIN_MACHINES:
        return fallback
    mean = sum(k for k, _ in data) / total
    if mean in (0.0, 1.0):  # no spread to measure: keep the fallback's strength at this mean
        strength = fallback.alpha + fallback.beta
        mean = (mean * total + fallback.alpha) / (total + strength)
        return Prior(mean * strength, (1.0 - mean) * strength)
    spread = sum(n * (k / n - mean) ** 2 for k, n in data) / (mean * (1.0 - mean))
    room = total - sum(n * n for _, n in data) / total - (len(data) - 1)
    if room <= 0:  # every machine seen once: between- and within-machine spread are one
        strength = fallback.alpha + fallback.beta
    else:
        rho = (spread - (len(data) - 1)) / room
        strength = (
            MAX_STRENGTH if rho <= 0 else max(MIN_STRENGTH, min(MAX_STRENGTH, 1.0 / rho - 1.0))
        )
    return Prior(mean * strength, (1.0 - mean) * strength)


@dataclass
class MachineCounts:
    """Passes and hardware-judged probes per machine, and each machine's GPU model."""

    passes: dict[int, int] = field(default_factory=dict)
    trials: dict[int, int] = field(default_factory=dict)
    gpu: dict[int, str] = field(default_factory=dict)
    race_gpu: dict[str, str] = field(default_factory=dict)
    skipped: int = 0  # events of KINDS that did not decode

    def add(self, kind: str, payload: Mapping[str, object]) -> None:
        """Fold one event in from its payload (``add_event`` of its decoding)."""
        self.add_event(decode(kind, payload))

    def add_event(self, event: Event | None) -> None:
        """Fold one typed event in; None (a payload that did not decode) is counted."""
        if event is None:
            self.skipped += 1
        elif isinstance(event, Selection):
            self.race_gpu[event.name] = event.gpu_name
        elif isinstance(event, RentDone | RentStopped):
            self.race_gpu.pop(event.name, None)
        elif isinstance(event, Probe) and (
            event.verdict is Verdict.PASS or event.verdict.host_fault
        ):
            machine = event.machine_id
            self.trials[machine] = self.trials.get(machine, 0) + 1
            self.passes[machine] = self.passes.get(machine, 0) + (event.verdict is Verdict.PASS)
            if event.name in self.race_gpu:
                self.gpu[machine] = self.race_gpu[event.name]


@dataclass(frozen=True)
class PassRates:
    """Shrunk pass rates: one prior per GPU model, one for all machines."""

    counts: Mapping[int, tuple[int, int]]  # machine -> (passes, trials)
    gpu: Mapping[int, str]
    priors: Mapping[str, Prior]
    pooled: Prior

    @classmethod
    def from_counts(cls, counts: MachineCounts) -> PassRates:
        pairs = {m: (counts.passes[m], counts.trials[m]) for m in counts.trials}
        pooled = fit(pairs.values(), Prior(*NO_DATA))
        by_model: dict[str, list[tuple[int, int]]] = {}
        for machine, pair in pairs.items():
            by_model.setdefault(counts.gpu.get(machine, ""), []).append(pair)
        priors = {model: fit(rows, pooled) for model, rows in by_model.items()}
        return cls(pairs, dict(counts.gpu), priors, pooled)

    def prior_for(self, gpu_name: str) -> Prior:
        return self.priors.get(gpu_name, self.pooled)

    def rate(self, machine_id: int, gpu_name: str) -> float:
        passes, trials = self.counts.get(machine_id, (0, 0))
        return self.prior_for(self.gpu.get(machine_id, gpu_name)).shrunk(passes, trials)

    def raw(self, machine_id: int) -> float | None:
        if machine_id not in self.counts:
            return None
        passes, trials = self.counts[machine_id]  # trials >= 1: only judged machines are counted
        return passes / trials
