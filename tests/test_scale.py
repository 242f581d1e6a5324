"""Sweep and boxes over an account with 1,000 instances, over loopback HTTP (DESIGN §4 Scale).

Correctness only; the time it takes is measured by tests/benchmarks/bench_sweep.py.
"""

from __future__ import annotations

import pytest
from scale_world import build

from gpuops.market.rent import sweep
from gpuops.market.teardown import Ending
from gpuops.market.rentals import RELEASED

pytestmark = [pytest.mark.slow, pytest.mark.process]


def test_sweep_over_a_thousand_instances_ends_ours_and_reports_every_other_untouched(tmp_path):
    """M3/M4: 100 expired boxes of ours destroyed and confirmed; 900 others only reported."""
    account = build(tmp_path, total=1000, ours=100)
    try:
        listed = account.market.vast.list_instances()
        assert len(listed) == 1000  # every page of the paged v1 list

        report = sweep(account.market)

        assert len(report.expired) == 100
        assert {o.ending for o in report.expired} == {Ending.GONE}
        assert len(report.unowned) == 900
        assert sorted(line.split()[1] for line in report.unowned) == sorted(account.theirs)
        alive = {str(box.id) for box in account.fake.boxes()}
        assert alive == set(account.theirs)
        rentals = account.market.rentals.all()
        assert len(rentals) == 100 and {r.state for r in rentals} == {RELEASED}
        assert account.market.ledger.retry_list() == []
    finally:
        account.close()
