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


# --- results synced while the job runs (M5) --------------------------------------------------
def _responsible(box: Box, now: float, beat_at: float) -> g.Action:
    mind = Mind(ME, role=Role.RESPONSIBLE, held=True)
    return g.decide(mind, Lease(ME, beat_at, beats=1), box, now)[1]


def test_a_due_sync_is_made_with_only_the_time_left_before_the_copy():
    """M5: a sync falls due, and may take until the copy starts, never longer."""
    copy_at, _ = g.schedule(BOX.started_at, BOX.deadline_at)
    now = T0 + 3_600.0
    due = Box(False, BOX.started_at, BOX.deadline_at, sync_at=now - 1.0)
    assert _responsible(due, now, now) == g.Sync(copy_at - now)
    exactly = Box(False, BOX.started_at, BOX.deadline_at, sync_at=now)
    assert _responsible(exactly, now, now) == g.Sync(copy_at - now)


def test_a_sync_not_yet_due_is_waited_for_along_with_the_heartbeat_and_the_copy():
    """M5: the wait ends at whichever comes first: the next sync, the heartbeat, the copy."""
    copy_at, _ = g.schedule(BOX.started_at, BOX.deadline_at)
    now = T0 + 3_600.0
    soon = Box(False, BOX.started_at, BOX.deadline_at, sync_at=now + 2.0)
    assert _responsible(soon, now, now) == Wait(2.0)
    later = Box(False, BOX.started_at, BOX.deadline_at, sync_at=now + 600.0)
    assert _responsible(later, now, now) == Wait(timing.GUARDIAN_HEARTBEAT_S)
    near_copy = copy_at - 1.0
    after_copy = Box(False, BOX.started_at, BOX.deadline_at, sync_at=copy_at + 5.0)
    assert _responsible(after_copy, near_copy, near_copy) == Wait(1.0)


def test_past_the_copy_s_start_a_due_sync_gives_way_to_the_copy_and_the_deadline_to_the_destroy():
    """M5: the copy and the destroy never wait for a sync."""
    copy_at, budget = g.schedule(BOX.started_at, BOX.deadline_at)
    due = Box(False, BOX.started_at, BOX.deadline_at, sync_at=T0)
    assert _responsible(due, copy_at, copy_at) == g.Copy(budget)
    assert _responsible(due, BOX.deadline_at, BOX.deadline_at) == g.Destroy()
    assert BOX.sync_at is None  # a box whose rental does not sync
