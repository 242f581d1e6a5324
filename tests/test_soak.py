"""A CI slice of the market soak (M13, H5): 320 faulty lifecycles, every verdict from the fake.

tests/soak.py says what a lifecycle draws and what each count means; the full run (10,000 and
more) is tests/benchmarks/bench_soak.py, whose figures go in the notes.
"""

from __future__ import annotations

import pytest
from soak import run

pytestmark = pytest.mark.soak

SLICES = 4  # xdist spreads the slices over the workers; each is short on a loaded machine too
PER_SLICE = 80
S3_LIFECYCLES = 4  # each ~1.5 s: moto's server behind a proxy, boto3 on both ends


@pytest.mark.parametrize("part", range(SLICES))
def test_faulty_lifecycles_leak_nothing_destroy_nothing_of_others_and_never_lie_m13(part):
    """M13/H5: crashes and interrupts at any provider call or store write, every scripted
    fault: no box bills past deadline + grace, no stranger's box is destroyed, no record is
    released while its box bills, no `destroy` or guardian says 0 while one does, and no
    guardian loops on past its deadline; in a team: bob's box on another host outlives all of
    alice's processes, and her owner, on a host whose clock is up to 15 minutes off, a full
    disk or a record of bob's or her own edited by hand, still ends hers in time and never
    early (M17); and each kept job's results land whole under its own incarnation (M16)."""
    tally, _ = run(PER_SLICE, seed=1000 + part)

    assert tally.lifecycles == PER_SLICE
    assert tally.failures == []
    assert (tally.leaked, tally.wrong_destroys) == (0, 0)
    assert (tally.premature_releases, tally.exit_0_while_billing, tally.stuck) == (0, 0, 0)
    assert tally.killed > 0 and tally.interrupted > 0 and tally.kept > 0
    assert tally.interrupts_held > 0  # a signal around a create waited for its answer (M13)
    assert tally.guardians_killed > 0 and tally.unguarded > 0
    assert tally.guardians_terminated > 0  # SIGTERM: the lease given up, the exit 143 (M17)
    assert tally.early == 0  # M17: no host's clock ends a box before its owner would
    # the team's rare paths, each reached (M17): a slice that never met one proves nothing
    assert tally.skewed_owners > 0 and tally.others_corrupt > 0
    assert tally.own_corrupt > 0 and tally.full_disks > 0
    assert tally.names_reused > 0 and tally.names_left_unusable == 0  # M16
    assert tally.left_lying == 0  # settled: no rental or box record claims a gone box
    # M16: every delivery is its incarnation's, whole, and none changes later
    assert tally.results_delivered > 0 and tally.results_overwritten == 0
    # M5: some rentals synced their results while the job ran, into the same layout
    assert tally.synced_rentals > 0 and tally.syncs_made > 0
    # the protocol's rare paths (the full run asserts every one, never_found included)
    assert tally.lost_creates > 0 and tally.takeovers > 0 and tally.sweep_finished > 0
    assert len(tally.kills_after) >= 4  # rent killed after at least four kinds of ledger write


def test_over_an_s3_state_with_a_client_per_host_and_lost_answers_the_same_verdicts_hold_m17():
    """The same lifecycles over an S3 state (moto's server), alice's and bob's hosts each with
    a client of their own, through a proxy that lets a conditional write land and loses its
    answer: the writer resolves it by reading back, and nothing leaks or lies."""
    tally, _ = run(S3_LIFECYCLES, seed=2001, s3_every=1)

    assert tally.s3_lifecycles == S3_LIFECYCLES and tally.failures == []
    assert (tally.leaked, tally.wrong_destroys) == (0, 0)
    assert (tally.premature_releases, tally.exit_0_while_billing, tally.stuck) == (0, 0, 0)
    assert tally.bad() == 0
    assert tally.lost_answers > 0  # reached: an answer was lost and resolved
