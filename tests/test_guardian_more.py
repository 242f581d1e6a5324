"""More of the guardian's pure decisions (M7): the role comes from the lease, not from memory.

Added for the mutation measurement of gpuops/market/guardian.py; tests/test_guardian.py holds
the rest.
"""

from __future__ import annotations

import pytest

from gpuops import timing
from gpuops.market import guardian as g
from gpuops.market.guardian import Box, Lease, Mind, Role, Wait

T0 = 1_800_000_000.0
BOX = Box(gone=False, started_at=T0, deadline_at=T0 + 36_000.0)
ME, OTHER = "alice/pi/1/aa", "alice/laptop/2/bb"


@pytest.mark.parametrize("role", list(Role))
def test_a_guardian_that_never_held_the_lease_waits_as_a_standby_whatever_role_it_had(role):
    """M7: facing another's fresh lease, a guardian that never held one is a standby, no more."""
    fresh = Lease(OTHER, T0, beats=2)

    mind, action = g.decide(Mind(ME, role=role), fresh, BOX, T0 + 1)

    assert action == Wait(timing.LEASE_POLL_S)
    assert mind == Mind(ME, role=Role.STANDBY)
