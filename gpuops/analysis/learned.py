"""What the market learns from its own log at rent time: shrunk pass rates for ranking.

The shell around analysis/shrink.py: stream the event log once, fit the priors, and answer
``rates(offers)`` with a rate for every offer's machine (the GPU prior's mean for a machine
never judged), as select.py's ``pass_rate`` wants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from gpuops.analysis.scan import scan
from gpuops.analysis.shrink import KINDS, MachineCounts, PassRates


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


def ranker(path: Path) -> Callable[[Sequence[OfferOfMachine]], dict[int, float]]:
    """``rates(offers)``: each offer's machine's shrunk pass rate, read from the log when asked
    (so a long-lived process sees what was learned since it started)."""

    def rates(offers: Sequence[OfferOfMachine]) -> dict[int, float]:
        learned = pass_rates_from_log(path)
        return {o.machine_id: learned.rate(o.machine_id, o.gpu_name) for o in offers}

    return rates
