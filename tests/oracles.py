"""Test oracles: plain reference answers the tests compare gpuops with. None of these is
product code (nothing in gpuops/ calls them), so they live here rather than in the package."""

from __future__ import annotations

from pathlib import Path

from gpuops.analysis.scan import scan_events
from gpuops.analysis.shrink import KINDS, MachineCounts, PassRates
from gpuops.lane import script
from gpuops.providers import RECORDINGS
from gpuops.rules import RULES, Rule


def pass_rates_from_log(path: Path) -> PassRates:
    """The shrunk pass rates from one full read of the event log (what the index folds in
    steps must equal)."""
    counts = MachineCounts()
    if path.is_file():
        for *_, event in scan_events(path, kinds=KINDS):
            counts.add_event(event)
    return PassRates.from_counts(counts)


def recording_names(provider: str) -> list[str]:
    """Every recording of ``provider``, by name, sorted."""
    return sorted(path.stem for path in (RECORDINGS / provider).glob("*.yaml"))


def job_names(body: str) -> list[str]:
    """Every value the script gives JOB, in order ('?' for one that is not a literal), as the
    linter's parse sees them."""
    return [value for value, _ in script._job_values(script.parse(body))]


def rule(rule_id: str) -> Rule:
    """The rule ``rule_id``; KeyError for an unknown one."""
    for each in RULES:
        if each.id == rule_id:
            return each
    raise KeyError(rule_id)
