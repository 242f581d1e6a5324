"""Building a Lane from the command's Settings (the CLI's path; tests build Lane directly).

From settings.py: the lane's project, zone, instance and bucket (GPUOPS_LANE_*, required), the
GCE endpoint (GPUOPS_GCE_ENDPOINT: an http:// loopback fake, anonymous credentials; else real
GCE), and the clock: the real one, or under GPUOPS_TIME_SCALE the loopback fakes' scaled clock,
so the runner's waits shrink with theirs and its times agree with the bucket's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from gpuops.events import EventLog
from gpuops.lane.runner import Lane, LaneConfig
from gpuops.settings import Settings
from gpuops.store import open_store


def open_lane(
    settings: Settings,
    operator: str,
    *,
    usd_per_hour: float | None = None,
    disk_usd_per_day: float | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Lane:
    from gpuops.providers.gce import GceAdapter
    from gpuops.providers.gcs import GcsAdapter

    lane = settings.lane()
    clock = settings.clock()
    events = EventLog(
        settings.events_path, operator, clock=lambda: datetime.fromtimestamp(clock.wall(), UTC)
    )
    gce = GceAdapter(
        lane.project,
        lane.zone,
        events=events,
        endpoint=settings.gce_endpoint,
        clock=clock,
    )
    gcs = GcsAdapter(lane.bucket, lane.project, endpoint=settings.storage_emulator_host)
    config = LaneConfig(lane.instance, lane.bucket)
    if usd_per_hour is not None:
        config = LaneConfig(config.instance, config.bucket, usd_per_hour, config.disk_usd_per_day)
    if disk_usd_per_day is not None:
        config = LaneConfig(config.instance, config.bucket, config.usd_per_hour, disk_usd_per_day)
    from gpuops.alarms import open_alarms

    store = open_store(settings.state_url, settings.s3_endpoint)
    return Lane(
        store,
        events,
        operator,
        gce,
        gcs,
        config,
        clock=clock,
        progress=progress,
        alarms=open_alarms(settings, store, events, operator=operator, clock=clock),
    )
