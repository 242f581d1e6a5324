"""Building a Lane from the command's Settings (the CLI's path; tests build Lane directly).

From settings.py: the lane's project, zone, instance and bucket (GPUOPS_LANE_*, required), the
GCE endpoint (GPUOPS_GCE_ENDPOINT: an http:// loopback fake, anonymous credentials; else real
GCE), and the clock: the real one, or under GPUOPS_TIME_SCALE the loopback fakes' scaled clock,
so the runner's waits shrink with theirs and its times agree with the bucket's.

The adapters and the alarms are built at their first use (``Deferred``), and `lane board` without
--live builds no Lane at all but its store-only part (``open_board``: stored.py's
``StoredLane``): it asks no provider and raises no alarm on a fresh claim, so it loads neither
the runner nor the script linter, nor any of the Google stack, the transport, the event log,
the event types or the alarms (tests/test_cli_startup.py pins it). Only a missing board, which
the instance's evidence decides (L12), builds the full Lane, once: the free board it proves is
written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from gpuops.lane.stored import LaneConfig, StoredLane
from gpuops.settings import Settings

if TYPE_CHECKING:
    from gpuops.alarms import Alarms
    from gpuops.events import EventLog
    from gpuops.lane.runner import Lane


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
    return _Parts(settings, operator, usd_per_hour, disk_usd_per_day).lane(progress)


def open_board(
    settings: Settings,
    operator: str,
    *,
    usd_per_hour: float | None = None,
    disk_usd_per_day: float | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> StoredLane:
    """The lane as the store shows it, for `lane board` without --live and `lane board
    --history`: what ``open_lane`` gives, less the runner. A missing board is a free lane only
    while the instance's evidence allows (L12): the full Lane, built then, decides it."""
    parts = _Parts(settings, operator, usd_per_hour, disk_usd_per_day)
    return StoredLane(
        parts.store,
        parts.config,
        clock=parts.clock,
        alarms=parts.alarms,
        fresh=lambda: parts.lane(progress).fresh(),
        operator=operator,
    )


class _Parts:
    """What a lane is built from: the settings' lane, clock, event log, store and prices,
    the adapters and the alarms built at their first use."""

    def __init__(
        self,
        settings: Settings,
        operator: str,
        usd_per_hour: float | None,
        disk_usd_per_day: float | None,
    ) -> None:
        self.settings, self.operator = settings, operator
        self.values = lane = settings.lane()
        self.clock = clock = settings.clock()
        prices = {"usd_per_hour": usd_per_hour, "disk_usd_per_day": disk_usd_per_day}
        given = {name: value for name, value in prices.items() if value is not None}
        self.config = LaneConfig(lane.instance, lane.bucket, **given)  # else its defaults
        self.store = store = settings.open_state()

        def alarms() -> object:
            from gpuops.alarms import open_alarms

            return open_alarms(settings, store, self.events, operator=operator, clock=clock)

        self.alarms = cast("Alarms", Deferred(alarms))

    @functools.cached_property
    def events(self) -> EventLog:
        """The operator's event log, opened at its first use: a board read from the store
        writes no event, and loads neither the log nor its scrubbing."""
        from gpuops.events import EventLog

        return EventLog(self.settings.events_path, self.operator, clock=self.clock)

    def lane(self, progress: Callable[[str], None]) -> Lane:
        from gpuops.lane.runner import Bucket, Compute, Lane

        settings, lane, events, clock = self.settings, self.values, self.events, self.clock

        def gce() -> object:
            from gpuops.providers.gce import GceAdapter

            return GceAdapter(
                lane.project, lane.zone, events=events, endpoint=settings.gce_endpoint, clock=clock
            )

        def gcs() -> object:
            from gpuops.providers.gcs import GcsAdapter

            return GcsAdapter(lane.bucket, lane.project, endpoint=settings.storage_emulator_host)

        return Lane(
            self.store,
            events,
            self.operator,
            cast(Compute, Deferred(gce)),
            cast(Bucket, Deferred(gcs)),
            self.config,
            clock=clock,
            progress=progress,
            alarms=self.alarms,
        )
