"""FakeGCE's state: one lane instance, its zone operations, its bucket, on an injected clock.

The instance moves TERMINATED -> PROVISIONING -> STAGING -> RUNNING -> STOPPING -> TERMINATED.
A start on an instance that is not TERMINATED is the silent no-op the seed describes: the
operation is DONE with no error and nothing changes (provider-formats.md B.2; an assumption
to confirm on a real project). Scripted start outcomes play stockouts and quota in the
finished operation, as GCE reports them (B.3).

A "boot" plays the installed startup script's contract (gpuops/lane/script.py) on the clock,
reading only what a real boot would: the ``startup-script`` and ``gpuops-attempt`` metadata
and the bucket. It writes the boot marker under the script's own JOB (so a typo'd JOB uploads
to the wrong prefix, as on 13 November), stages, log syncs every 30 s, results, the final
log, and powers off. Scripted failures: a broken import (preflight), too little disk, a
fetch of an input not staged. Nothing here reads the wall clock.
"""

from __future__ import annotations

import heapq
import itertools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from fakes.gce.scenario import LaneScenario
from fakes.vast.clock import Clock

LOG_SYNC_EVERY_S = 30.0  # the contract's sync period, as the fake script plays it
_JOB = re.compile(r'^JOB="?([^"\s]*)"?\s*$', re.M)
_IMPORTS = re.compile(r"^preflight_imports\s+(.+)$", re.M)
_DISK = re.compile(r"^disk_gate\s+(\d+)", re.M)
_FETCH = re.compile(r"^fetch_input\s+(\S+)\s*$", re.M)


@dataclass
class Operation:
    name: str
    kind: str
    outcome: str  # ok | stockout | ... (fakes/gce/scenario.py START_OUTCOMES) | not-ready


@dataclass
class FakeGCE:
    scenario: LaneScenario
    clock: Clock
    status: str = "TERMINATED"
    metadata: dict[str, str] = field(default_factory=dict)
    fingerprint: str = "fp-0"
    objects: dict[str, bytes] = field(default_factory=dict)
    serial: str = ""
    operations: dict[str, Operation] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)  # "METHOD route" of every request, in order
    updated: dict[str, float] = field(default_factory=dict)  # object name -> last write time
    boots: int = 0

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._fp = itertools.count(1)
        self._ops = itertools.count(1)
        self._starts = list(self.scenario.starts)
        self._races = self.scenario.fingerprint_races
        self._boot_id = 0
        self._applying: float | None = None
        for name in self.scenario.staged:
            self.put(name, b"staged input\n")
        if self.scenario.running_job:
            self.foreign_start(self.scenario.running_job)

    # --- the clock ----------------------------------------------------------------------------
    def _at(self, delay_s: float, action: Callable[[], None]) -> None:
        """Schedule ``action`` ``delay_s`` after now, or after the event being applied: a
        change applied late (nobody asked for a while) still schedules its sequels on time."""
        base = self.clock.now() if self._applying is None else self._applying
        heapq.heappush(self._events, (base + delay_s, next(self._seq), action))

    def tick(self) -> None:
        """Apply every scheduled change whose time has come, in order."""
        with self.lock:
            now = self.clock.now()
            while self._events and self._events[0][0] <= now:
                when, _, action = heapq.heappop(self._events)
                self._applying = when
                try:
                    action()
                finally:
                    self._applying = None

    # --- compute ------------------------------------------------------------------------------
    def start(self) -> Operation:
        outcome = "ok"
        if self.status == "TERMINATED":
            outcome = self._starts.pop(0) if self._starts else "ok"
            if outcome == "ok":
                self._power_on()
        elif self.status in ("STOPPING",):
            outcome = "not-ready"
        return self._operation("start", outcome)

    def set_metadata(self, fingerprint: str, items: dict[str, str]) -> Operation | None:
        """None: the fingerprint is stale (412). A scripted race changes it first."""
        if self._races > 0:
            self._races -= 1
            self._new_fingerprint()
        if fingerprint != self.fingerprint:
            return None
        self.metadata = dict(items)
        self._new_fingerprint()
        return self._operation("setMetadata", "ok")

    def _new_fingerprint(self) -> None:
        self.fingerprint = f"fp-{next(self._fp)}"

    def _operation(self, kind: str, outcome: str) -> Operation:
        op = Operation(f"operation-{next(self._ops):06d}-fake", kind, outcome)
        self.operations[op.name] = op
        return op

    def foreign_start(self, job: str, runtime_s: float | None = None) -> None:
        """A third operator starts the instance with their own tooling and their own script."""
        self.metadata = {
            "startup-script": f'#!/bin/bash\nJOB="{job}"\nboot_marker\n',
            "gpuops-attempt": "foreign",
        }
        self._new_fingerprint()
        self._power_on(runtime_s)

    def _power_on(self, runtime_s: float | None = None) -> None:
        self._boot_id += 1
        boot = self._boot_id
        s = self.scenario
        self.status = "PROVISIONING"
        self._at(s.provisioning_s, partial(self._set_status, "STAGING"))
        self._at(s.provisioning_s + s.staging_s, partial(self._boot, boot, runtime_s))

    def _set_status(self, status: str) -> None:
        self.status = status

    def _power_off(self) -> None:
        self.status = "STOPPING"
        self._serial("systemd-shutdown: powering off")
        self._at(self.scenario.stopping_s, partial(self._set_status, "TERMINATED"))

    # --- the boot: the startup-script contract, played -----------------------------------------
    def _boot(self, boot: int, runtime_s: float | None) -> None:
        self.status = "RUNNING"
        self.boots += 1
        script = self.metadata.get("startup-script", "")
        attempt = self.metadata.get("gpuops-attempt", "unknown")
        found = _JOB.search(script)
        runtime = self.scenario.job_runtime_s if runtime_s is None else runtime_s
        if found is None:  # not a lane script: it runs for a while and powers off
            self._serial("startup-script: no JOB line; nothing to report")
            self._at(runtime, self._power_off)
            return
        job = found.group(1)
        play = _Play(self, job, attempt)
        play.marker()
        for module in (_IMPORTS.search(script) or _empty).group(1).split():
            if module in self.scenario.broken_imports:
                self._at(4.0, partial(play.fail, f"preflight: import {module} failed"))
                return
        need = _DISK.search(script)
        if need and int(need.group(1)) > self.scenario.disk_free_gb:
            free, gb = self.scenario.disk_free_gb, need.group(1)
            self._at(4.0, partial(play.fail, f"preflight: {free} GB free on /work, need {gb}"))
            return
        for name in _FETCH.findall(script):
            if f"jobs/{job}/inputs/{name}" not in self.objects:
                self._at(6.0, partial(play.fail, f"missing staged input {name}"))
                return
        play.run(runtime)

    def _serial(self, line: str) -> None:
        self.serial += f"{line}\n"

    def put(self, name: str, data: bytes) -> None:
        self.objects[name] = data
        self.updated[name] = self._applying if self._applying is not None else self.clock.now()


class _Empty:
    def group(self, index: int) -> str:
        return ""


_empty = _Empty()


@dataclass
class _Play:
    """One boot's writes to the bucket, under the JOB the script names."""

    fake: FakeGCE
    job: str
    attempt: str
    log: list[str] = field(default_factory=list)

    def _path(self, rest: str) -> str:
        return f"jobs/{self.job}/{rest}"

    def _stage(self, stage: str, reason: str = "") -> None:
        self.fake.put(self._path("status"), f"{stage} {self.attempt} {reason}".strip().encode())
        self._log(f"stage {stage} {reason}".strip())

    def _log(self, line: str) -> None:
        self.log.append(line)
        self.fake._serial(f"startup-script: {line}")

    def _sync(self) -> None:
        self.fake.put(self._path("log.txt"), ("\n".join(self.log) + "\n").encode())

    def marker(self) -> None:
        self.fake.put(self._path(f"boot/{self.attempt}"), f"{self.attempt}\n".encode())
        self._log(f"boot marker {self.attempt}")
        self._stage("booted")
        self._stage("preflight")
        self._sync()

    def fail(self, reason: str) -> None:
        self._stage("failed", reason)
        self._sync()
        self.fake._power_off()

    def run(self, runtime_s: float) -> None:
        fake, n = self.fake, max(self.fake.scenario.results, 0)
        fake._at(6.0, partial(self._stage, "running"))
        syncs = int(runtime_s // LOG_SYNC_EVERY_S)
        for k in range(1, syncs + 1):
            fake._at(6.0 + k * LOG_SYNC_EVERY_S, partial(self._progress, k))
        for i in range(n):
            fake._at(6.0 + runtime_s * (i + 1) / n, partial(self._result, i + 1, n))
        fake._at(6.0 + runtime_s + 1.0, self._finish)

    def _progress(self, k: int) -> None:
        self._log(f"progress {k}")
        self._sync()

    def _result(self, i: int, n: int) -> None:
        self.fake.put(self._path(f"results/out-{i:03d}.png"), b"png")
        self._log(f"result {i}/{n}")

    def _finish(self) -> None:
        self._stage("uploading")
        self._stage("succeeded")
        self._sync()
        self.fake._power_off()
