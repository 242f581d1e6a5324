"""What the market learns from its own log at rent time: shrunk pass rates for ranking.

The shell around analysis/shrink.py: take the per-machine tallies (from the index in the state
store, index.py, which folds only what the log gained since its checkpoint; or, for ``stats``
and tests, from one full read of the log), fit the priors, and answer ``rates(offers)`` with a
rate for every offer's machine (the GPU prior's mean for a machine never judged), as
select.py's ``pass_rate`` wants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from gpuops.analysis.scan import scan
from gpuops.analysis.shrink import KINDS, MachineCounts, PassRates
from gpuops.store.base import Store
from gpuops.store.memory import MemoryStore


class OfferOfMachine(Protocol):
    @property
    def machine_id(self) -> int: ...
    @property
    def gpu_name(self) -> str: ...


def pass_rates_from_log(path: Path) -> PassRates:
    counts = MachineCounts()
    if path.exists():
        for _, kind, payload in scan(path, kinds=KINDS):
            counts.add(kind, payload)
    return PassRates.from_counts(counts)


def ranker(
    path: Path, store: Store | None = None
) -> Callable[[Sequence[OfferOfMachine]], dict[int, float]]:
    """``rates(offers)``: each offer's machine's shrunk pass rate, from the index in ``store``
    brought up to date when asked (so a long-lived process sees what was learned since it
    started); without a store, an in-memory index that lives as long as the ranker."""
    from gpuops.analysis.index import machine_counts

    held: Store = store if store is not None else MemoryStore()

    def rates(offers: Sequence[OfferOfMachine]) -> dict[int, float]:
        learned = PassRates.from_counts(machine_counts(path, held))
        return {o.machine_id: learned.rate(o.machine_id, o.gpu_name) for o in offers}

    return rates
