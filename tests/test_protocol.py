"""The guardian protocol explored exhaustively over its pure core (M5, M7, M17): every
interleaving of a small scope, breadth first, judged by the provider's record (tests/protocol.py
says what the world holds and what each verdict means; tests/benchmarks/bench_protocol.py runs
the larger scopes)."""

from __future__ import annotations

import pytest
from protocol import RENTER, Scope, explore

from gpuops import timing
from gpuops.market import guardian as g
from gpuops.market import rentals

# Small scopes, a second or two together; alice's cron and bob's sweep run in each.
# A second guardian and a stall longer than the lease's TTL: a takeover while the holder lives,
# and a supersession the stalled holder verifies before it leaves (a rental long enough for it).
STALLED = Scope(hours_s=200.0, kills=0, destroy_failures=0, copy_failures=0, slow_copies=0)
# A second guardian started at any moment, and a SIGKILL of either at any moment.
KILLED = Scope(hours_s=60.0, stalls=0, destroy_failures=0, copy_failures=0, slow_copies=0)
# Guardians on the renter's host and on one 15 minutes behind; cron on one 15 minutes ahead.
SKEWED = Scope(hours_s=60.0, hosts=((RENTER, 0.0), ("B", -timing.CLOCK_SKEW_S)),
               cron=("C", timing.CLOCK_SKEW_S), stalls=0, destroy_failures=0, copy_failures=0,
               slow_copies=0)  # fmt: skip
# One guardian: a copy that fails or runs its budget, a refused destroy, alice's own destroy.
FAULTS = Scope(starts=0, stalls=0, destroy_failures=1, copy_failures=1, slow_copies=1, by_hand=1)
SCOPES = {"stalled": STALLED, "killed": KILLED, "skewed": SKEWED, "faults": FAULTS}


@pytest.mark.parametrize("name", SCOPES)
def test_every_interleaving_of_the_scope_ends_the_box_in_time_and_never_early(name):
    """M5/M7/M17: no state reached has a box ended early, billing past deadline + grace +
    skew, a guardian left running or exiting 0 while it bills, a supersession left to nobody,
    or bob's sweep ending alice's box; and the rare paths were reached, so the search proved
    something."""
    scope = SCOPES[name]
    report = explore(scope)

    assert dict(report.violations) == {}
    assert report.states > 300 and report.terminals > 0
    assert report.reached["destroy"] > 0 and report.reached[f"leave {g.GONE}"] > 0
    assert report.reached["copy"] > 0
    if scope.starts:
        assert report.reached["start"] > 0 and report.reached["takeover"] > 0
    if scope.kills:  # cron's sweep ended some box: the backstop was met
        assert report.reached["kill"] > 0 and report.reached["sweep"] > 0
    if scope is STALLED:  # a stalled holder saw its successor renew, and left
        assert report.reached["stall"] > 0 and report.reached[f"leave {g.SUPERSEDED}"] > 0
    if scope is FAULTS:
        assert report.reached["copy failed"] > 0 and report.reached["destroy failed"] > 0
        assert report.reached["destroy by hand"] > 0 and report.reached["slow copy"] > 0


def test_a_guardian_that_destroys_before_its_copy_time_is_found_early(monkeypatch):
    """The search can fail: a guardian deciding to destroy a minute before its deadline (the
    copy skipped) is reported as an early destroy, found in a few states."""
    duty = g._duty

    def hasty(mind, lease, box, now, clock):
        return g.Destroy() if now >= box.deadline_at - 60 else duty(mind, lease, box, now, clock)

    monkeypatch.setattr(g, "_duty", hasty)
    report = explore(Scope(starts=0, kills=0, stalls=0, destroy_failures=0, copy_failures=0,
                           slow_copies=0))  # fmt: skip
    assert set(report.violations) == {"early"}


def test_a_sweep_without_the_skew_allowance_is_found_ending_a_box_early(monkeypatch):
    """The search can fail on the sweep too: with another host's deadline enforced on the
    sweeping host's own clock (no CLOCK_SKEW_S allowance), cron on a host 15 minutes ahead
    ends the box at once."""
    monkeypatch.setattr(rentals, "enforce_at", lambda rental, deadline, here: rentals.due_at(rental, deadline))
    report = explore(SKEWED)
    assert "early" in report.violations
