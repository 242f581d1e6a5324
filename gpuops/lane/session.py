"""Building a Lane from the environment (the CLI's path; tests build Lane directly).

GPUOPS_LANE_PROJECT, GPUOPS_LANE_ZONE, GPUOPS_LANE_INSTANCE, GPUOPS_LANE_BUCKET  required
GPUOPS_GCE_ENDPOINT       an http:// loopback fake (anonymous credentials); else real GCE
STORAGE_EMULATOR_HOST     google-cloud-storage's own variable for a fake bucket
GPUOPS_LANE_TIME_SCALE    loopback only: the fake's time scale, so waits shrink with it
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from gpuops.errors import UsageError
from gpuops.events import EventLog
from gpuops.lane.runner import Lane, LaneConfig
from gpuops.store import open_store

REQUIRED = ("GPUOPS_LANE_PROJECT", "GPUOPS_LANE_ZONE", "GPUOPS_LANE_INSTANCE", "GPUOPS_LANE_BUCKET")


def lane_env() -> dict[str, str]:
    missing = [name for name in REQUIRED if not os.environ.get(name)]
    if missing:
        raise UsageError(f"the lane needs {', '.join(missing)} in the environment")
    return {name: os.environ[name] for name in REQUIRED}


def _clock() -> tuple[Callable[[], float], Callable[[float], None]]:
    text = os.environ.get("GPUOPS_LANE_TIME_SCALE")
    if not text:
        return time.time, time.sleep
    try:
        scale = float(text)
    except ValueError:
        raise UsageError(f"GPUOPS_LANE_TIME_SCALE={text!r} is not a number") from None
    if not scale > 0:
        raise UsageError("GPUOPS_LANE_TIME_SCALE must be positive")
    try:
        origin = float(os.environ.get("GPUOPS_LANE_TIME_ORIGIN") or time.time())
    except ValueError:
        raise UsageError("GPUOPS_LANE_TIME_ORIGIN is not an epoch in seconds") from None

    def now() -> float:
        return origin + (time.time() - origin) * scale

    def sleep(seconds: float) -> None:
        time.sleep(seconds / scale)

    return now, sleep


def open_lane(
    state_url: str,
    operator: str,
    events_path: Path,
    *,
    usd_per_hour: float | None = None,
    disk_usd_per_day: float | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Lane:
    from gpuops.providers.gce import GceAdapter
    from gpuops.providers.gcs import GcsAdapter

    env = lane_env()
    now, sleep = _clock()
    events = EventLog(events_path, operator, clock=lambda: datetime.fromtimestamp(now(), UTC))
    gce = GceAdapter(
        env["GPUOPS_LANE_PROJECT"],
        env["GPUOPS_LANE_ZONE"],
        events=events,
        endpoint=os.environ.get("GPUOPS_GCE_ENDPOINT") or None,
        clock=now,
        sleep=sleep,
    )
    gcs = GcsAdapter(
        env["GPUOPS_LANE_BUCKET"],
        env["GPUOPS_LANE_PROJECT"],
        endpoint=os.environ.get("STORAGE_EMULATOR_HOST") or None,
    )
    config = LaneConfig(env["GPUOPS_LANE_INSTANCE"], env["GPUOPS_LANE_BUCKET"])
    if usd_per_hour is not None:
        config = LaneConfig(config.instance, config.bucket, usd_per_hour, config.disk_usd_per_day)
    if disk_usd_per_day is not None:
        config = LaneConfig(config.instance, config.bucket, config.usd_per_hour, disk_usd_per_day)
    return Lane(
        open_store(state_url),
        events,
        operator,
        gce,
        gcs,
        config,
        clock=now,
        sleep=sleep,
        progress=progress,
    )
