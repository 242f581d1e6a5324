"""What the market learns from its own log at rent time: shrunk pass rates for ranking.

The shell around analysis/shrink.py: take the per-machine tallies (from the index in the state
store, index.py, which folds only what the log gained since its checkpoint), fit the priors,
and answer ``rates(offers)`` with a rate for every offer's machine (the GPU prior's mean for a
machine never judged), as select.py's ``pass_rate`` wants.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gpuops.analysis.shrink import PassRates
from gpuops.store.base import Store
from gpuops.store.memory import MemoryStore


class OfferOfMachine(Protocol):
    @property
    def machine_id(self) -> int: ...
    @property
    def gpu_name(self) -> str: ...


class Ranker:
    """``ranker(offers)``: each offer's machine's shrunk pass rate, from the index in ``store``
    brought up to date when asked (so a long-lived process sees what was learned since it
    started); without a store, an in-memory index that lives as long as the ranker.
    ``skipped`` is how many lines of the log the last answer could not read (they are left out
    of the rates, never fatal); ``offers`` and ``rent`` say so. ``trials`` is how many probes
    of each offer's machine the last answer's rate rests on (0: its GPU model's rate alone),
    which ``offers`` prints beside the rate."""

    def __init__(self, path: Path, store: Store | None = None) -> None:
        self.path = path
        self.store: Store = store if store is not None else MemoryStore()
        self.skipped = 0
        self.trials: dict[int, int] = {}

    def __call__(self, offers: Sequence[OfferOfMachine]) -> dict[int, float]:
        from gpuops.analysis.index import machine_counts

        counts = machine_counts(self.path, self.store)
        self.skipped = counts.skipped
        learned = PassRates.from_counts(counts)
        self.trials = {o.machine_id: learned.counts.get(o.machine_id, (0, 0))[1] for o in offers}
        return {o.machine_id: learned.rate(o.machine_id, o.gpu_name) for o in offers}


def ranker(path: Path, store: Store | None = None) -> Ranker:
    return Ranker(path, store)


def skipped_line(skipped: int) -> str | None:
    """What ``offers`` and ``rent`` print on stderr when the pass rates left lines out."""
    if skipped <= 0:
        return None
    lines, verb = ("line", "was") if skipped == 1 else ("lines", "were")
    return (
        f"gpuops: {skipped} {lines} of the event log did not decode and {verb} left out of the "
        "pass rates (`gpuops stats` counts them by kind)"
    )
