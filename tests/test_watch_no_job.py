"""`watch` on a box where no job was ever started says so (exit 5), over the real fake ssh."""

from __future__ import annotations

from test_guard import World, world  # noqa: F401  (world is a fixture)

from gpuops.market import jobs
from gpuops.market import watchdog as w


def test_a_rented_box_with_no_job_started_is_no_job_and_exit_5(world: World):
    """M10: no job record and nothing on the box: "no job", exit 5; with a record, dead."""
    market = world.rent(hours=1.0)
    rental = market.rentals.get("job")
    assert rental is not None and rental.instance_id is not None
    instance = market.vast.show(rental.instance_id)

    fresh = jobs.observe("job", instance, world.shell(), started=False)
    lost = jobs.observe("job", instance, world.shell(), started=True)

    assert fresh.state is w.JobState.NO_JOB and w.watch_exit_code(fresh) == 5
    assert lost.state is w.JobState.DEAD and w.watch_exit_code(lost) == 6
