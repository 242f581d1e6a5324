"""Building a Lane from the command's Settings (the CLI's path; tests build Lane directly).

From settings.py: the lane's project, zone, instance and bucket (GPUOPS_LANE_*, required), the
GCE endpoint (GPUOPS_GCE_ENDPOINT: an http:// loopback fake, anonymous credentials; else real
GCE), and the clock: the real one, or under GPUOPS_TIME_SCALE the loopback fakes' scaled clock,
so the runner's waits shrink with theirs and its times agree with the bucket's.

The adapters and the alarms are built at their first use (``Deferred``): `lane board` without
--live asks no provider and raises no alarm on a fresh claim, so it loads none of the Google
stack, the transport, the event types or the alarms (tests/test_cli_startup.py pins it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from gpuops.events import EventLog
from gpuops.lane.runner import Bucket, Compute, Lane, LaneConfig
from gpuops.settings import Settings
from gpuops.store import open_store

if TYPE_CHECKING:
    from gpuops.alarms import Alarms


class Deferred:
    """A collaborator built by ``build`` when one of its attributes is first asked for, then
    that one object for every later use."""

    def __init__(self, build: Callable[[], object]) -> None:
        self._build = build
        self._built: list[object] = []

    def __getattr__(self, name: str) -> Any:
        if not self._built:
            self._built.append(self._build())
        return getattr(self._built[0], name)


def open_lane(
    settings: Settings,
    operator: str,
    *,
    usd_per_hour: float | None = None,
    disk_usd_per_day: float | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Lane:
    lane = settings.lane()
    clock = settings.clock()
    events = EventLog(settings.events_path, operator, clock=clock)

    def gce() -> object:
        from gpuops.providers.gce import GceAdapter

        return GceAdapter(
            lane.project, lane.zone, events=events, endpoint=settings.gce_endpoint, clock=clock
        )

    def gcs() -> object:
        from gpuops.providers.gcs import GcsAdapter

        return GcsAdapter(lane.bucket, lane.project, endpoint=settings.storage_emulator_host)

    config = LaneConfig(lane.instance, lane.bucket)
    if usd_per_hour is not None:
        config = LaneConfig(config.instance, config.bucket, usd_per_hour, config.disk_usd_per_day)
    if disk_usd_per_day is not None:
        config = LaneConfig(config.instance, config.bucket, config.usd_per_hour, disk_usd_per_day)
    store = open_store(settings.state_url, settings.s3_endpoint)

    def alarms() -> object:
        from gpuops.alarms import open_alarms

        return open_alarms(settings, store, events, operator=operator, clock=clock)

    return Lane(
        store,
        events,
        operator,
        cast(Compute, Deferred(gce)),
        cast(Bucket, Deferred(gcs)),
        config,
        clock=clock,
        progress=progress,
        alarms=cast("Alarms", Deferred(alarms)),
    )
