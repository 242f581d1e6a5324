"""A lane world for tests: FakeGCE in-process, one clock, one store, a Lane per operator.

The real google SDK clients talk to the fake through ``responses``; the fake's boots run the
installed startup script for real (fakes/gce/boot.py), their shims calling the same model on
a loopback server. Every wait the runner makes is ``World.advance``: let the boots run until
each is blocked on the fake clock (a sleep) or has ended, then move the clock. No wall-clock
deadline decides anything; every boot's processes are killed when the world closes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.inprocess import activate
from fakes.gce.server import serve_http
from fakes.vast.clock import FakeClock
from gpuops.clock import WithSleep
from gpuops.events import EventLog, read_events
from gpuops.lane.runner import Lane, LaneConfig
from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter
from gpuops.store.memory import MemoryStore

BASE = "http://127.0.0.1:9"


@dataclass
class World:
    fake: FakeGCE
    clock: FakeClock
    store: MemoryStore
    events_path: Path
    lines: list[str] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def lane(self, operator: str) -> Lane:
        events = EventLog(
            self.events_path,
            operator,
            clock=self.clock,
        )
        s = self.fake.scenario
        gce = GceAdapter(
            s.project,
            s.zone,
            events=events,
            endpoint=BASE,
            clock=WithSleep(self.clock, self.advance),
        )
        return Lane(
            self.store,
            events,
            operator,
            gce,
            GcsAdapter(s.bucket, s.project, endpoint=BASE),
            LaneConfig(s.instance, s.bucket),
            clock=WithSleep(self.clock, self.advance),
            new_boot_id=lambda: f"boot{next(self._ids)}",
            progress=self.lines.append,
        )

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds``, stopping at every change due on the way (a scheduled
        status, a script's sleep ending) and letting the boots run to their next wait."""
        self.fake.advance(seconds)

    def run_for(self, seconds: float, step: float = 5.0) -> None:
        """Advance in steps, as a watcher polling would."""
        while seconds > 0:
            self.advance(min(step, seconds))
            seconds -= step

    def events(self, kind: str) -> list[dict[str, object]]:
        return [e["payload"] for e in read_events(self.events_path) if e["kind"] == kind]

    def stage(self, job: str, *names: str) -> None:
        for name in names:
            self.fake.put(f"jobs/{job}/inputs/{name}", b"staged\n")


@contextmanager
def lane_world(tmp_path: Path, monkeypatch: object, **scenario: object) -> Iterator[World]:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", BASE)  # type: ignore[attr-defined]
    clock = FakeClock()
    fake = FakeGCE(LaneScenario(**scenario), clock)  # type: ignore[arg-type]
    server = serve_http(fake, ticker=False, boot_root=tmp_path / "boots")
    try:
        with activate(fake, BASE) as mock:
            # an alarm receiver is a real server on loopback (O1); FakeGCE's own port stays mocked
            mock.add_passthru(re.compile(r"http://127\.0\.0\.1:(?!9/)\d+/"))
            yield World(fake, clock, MemoryStore(), tmp_path / "events.jsonl")
    finally:
        server.close()
