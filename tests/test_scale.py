"""Sweep and boxes over an account with 1,000 instances, over loopback HTTP (DESIGN §4 Scale).

Correctness only; the time it takes is measured by tests/benchmarks/bench_sweep.py.
"""

from __future__ import annotations

import pytest
from scale_world import build

from gpuops.market.pacing import Pace
from gpuops.market.sweep import sweep
from gpuops.market.teardown import Ending
from gpuops.market.rentals import RELEASED

pytestmark = [pytest.mark.slow, pytest.mark.process]


@pytest.mark.parametrize("workers", [1, 16])
def test_sweep_over_a_thousand_instances_ends_ours_and_reports_every_other_untouched(
    tmp_path, workers, monkeypatch
):
    """M3/M4: 100 expired boxes of ours destroyed and confirmed, one at a time or sixteen at
    once within a call budget; 900 others only reported; the ledger listed once."""
    account = build(tmp_path, total=1000, ours=100)
    try:
        listed = account.market.vast.list_instances()
        assert len(listed) == 1000  # every page of the paged v1 list
        store = account.market.ledger.store
        listings: list[str] = []
        real_list = store.list

        def counted(prefix: str = "") -> list[str]:
            listings.append(prefix)
            return real_list(prefix)

        monkeypatch.setattr(store, "list", counted)

        report = sweep(account.market, workers=workers, pace=Pace(0.0))

        assert sum(prefix.startswith("ledger/boxes/") for prefix in listings) == 1

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
