"""FakeGCE's state: one lane instance, its zone operations, its bucket, on an injected clock.

The instance moves TERMINATED -> PROVISIONING -> STAGING -> RUNNING -> STOPPING -> TERMINATED.
A start on an instance that is not TERMINATED is the silent no-op the seed describes: the
operation is DONE with no error and nothing changes (provider-formats.md B.2; an assumption
to confirm on a real project). Scripted start outcomes play stockouts and quota in the
finished operation, as GCE reports them (B.3).

A boot runs the installed ``startup-script`` for real (fakes/gce/boot.py): ``bash`` in a
sandbox, its curl/gsutil/poweroff/sleep reaching this model through the loopback server
(``attach``). Nothing but the script's own power-off (or the provider-native
``scheduling.maxRunDuration``, when set) moves the instance to STOPPING: a script that never
powers off leaves the instance RUNNING, and billing, as GCE would (H4). Nothing here reads
the wall clock; the script's ``sleep`` runs on this model's clock.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import itertools
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from fakes.gce import boot as real_boot
from fakes.gce.scenario import LaneScenario
from fakes.vast.clock import Clock

if TYPE_CHECKING:
    from fakes.seam import Reply, Request

# The JSON API's object preconditions (query parameters), each an int64.
PRECONDITIONS = (
    "ifGenerationMatch",
    "ifGenerationNotMatch",
    "ifMetagenerationMatch",
    "ifMetagenerationNotMatch",
)
# How often a waiting sleep re-reads a scaled clock between ticks (loopback mode).
SLEEP_POLL = 0.05


# Outcomes that refuse a start synchronously (an HTTP error, no operation), with the recording
# of each answer (recordings/gce/).
REFUSALS = {"quota-403": "start_403_quota", "unavailable-503": "start_503"}
# scheduling.maxRunDuration's documented bounds (Compute Engine, "Limit the run time of a
# VM"): 30 seconds to 120 days; setScheduling answers anything else with a 400.
MIN_RUN_S = 30.0
MAX_RUN_S = 120 * 86400.0
# The first zone-operation id; every operation gets the next one (ids are int64 strings).
OPERATION_ID_BASE = 7781325593318204113


@dataclass
class Operation:
    """A zone operation: PENDING for ``pending_s`` after ``insert_at``, then RUNNING for
    ``running_s``, then DONE (with its outcome's error, if any). Times are the fake clock's."""

    name: str
    kind: str
    outcome: str  # ok | stockout | ... (fakes/gce/scenario.py START_OUTCOMES) | not-ready
    id: str = ""
    insert_at: float = 0.0
    pending_s: float = 0.0
    running_s: float = 0.0

    @property
    def start_at(self) -> float:
        return self.insert_at + self.pending_s

    @property
    def end_at(self) -> float:
        return self.start_at + self.running_s

    def status(self, now: float) -> str:
        if now >= self.end_at:
            return "DONE"
        return "RUNNING" if now >= self.start_at else "PENDING"


@dataclass(frozen=True)
class StartRefused:
    """A start refused synchronously: ``recording`` is the HTTP error answer (403, 503)."""

    recording: str


def fingerprint(number: int, what: str = "metadata") -> str:
    """The metadata (or labels) fingerprint after ``number`` writes: opaque base64 of 8 bytes,
    as GCE's (``wSsOXn1oPgE=``), never readable as a counter."""
    digest = hashlib.sha256(f"fake-gce-{what}-{number}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


# GCE's label rules (Compute Engine, "Organize resources using labels"): at most 64 labels;
# a key starts with a lowercase letter; keys and values are up to 63 lowercase letters,
# digits, '_' and '-' (values may be empty).
MAX_LABELS = 64
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


def fingerprint_of_labels(number: int) -> str:
    return fingerprint(number, "labels")


@dataclass
class Upload:
    """A resumable upload in progress: the bytes received so far, in order."""

    name: str
    content_type: str
    query: dict[str, str]  # the initiating request's query (its preconditions)
    data: bytearray = field(default_factory=bytearray)


@dataclass
class StoredObject:
    """One live object generation in the fake bucket (a bucket without versioning: an
    overwrite replaces the generation, and the old one is gone)."""

    data: bytes
    generation: int
    metageneration: int = 1
    updated: float = 0.0
    content_type: str = "application/octet-stream"
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeGCE:
    scenario: LaneScenario
    clock: Clock
    status: str = "TERMINATED"
    metadata: dict[str, str] = field(default_factory=dict)
    fingerprint: str = field(default_factory=lambda: fingerprint(0))
    labels: dict[str, str] = field(default_factory=dict)
    label_fingerprint: str = field(default_factory=lambda: fingerprint(0, "labels"))
    objects: dict[str, bytes] = field(default_factory=dict)  # name -> the live generation's bytes
    stored: dict[str, StoredObject] = field(default_factory=dict)  # name -> its live generation
    uploads: dict[str, Upload] = field(default_factory=dict)  # resumable sessions, by upload_id
    serial: str = ""
    operations: dict[str, Operation] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)  # "METHOD route" of every request, in order
    # Each sees every routed exchange (request, reply), as FakeVast's taps (the H6 judge).
    taps: list[Callable[[Request, Reply], None]] = field(default_factory=list)
    updated: dict[str, float] = field(default_factory=dict)  # object name -> last write time
    boots: int = 0
    max_run_s: float | None = None  # scheduling.maxRunDuration, when set (setScheduling)
    termination_action: str = ""  # scheduling.instanceTerminationAction
    # resourceStatus.scheduling.terminationTimestamp (fake time): "automatically defined by
    # Compute Engine whenever a VM has a time limit and enters the RUNNING state" and
    # "automatically cleared whenever a VM is stopped or suspended" (Compute Engine, "Limit the
    # run time of a VM"); so maxRunDuration counts afresh from every start, not from the
    # setScheduling call (GoogleCloudPlatform/magic-modules#10683: "max_run_duration is not a
    # one time intent"). The field: google-cloud-compute 1.57's ResourceStatusScheduling.
    termination_at: float | None = None
    processes: dict[int, real_boot.Boot] = field(default_factory=dict)  # boot number -> boot

    def __post_init__(self) -> None:
        self.lock = threading.RLock()
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._fp = itertools.count(1)
        self._label_fp = itertools.count(1)
        self._ops = itertools.count(1)
        self._last_generation = 0
        self._uploads = 0
        self._starts = list(self.scenario.starts)
        self._races = self.scenario.fingerprint_races
        self._boot_id = 0
        self._applying: float | None = None
        self._server: str | None = None
        self._root: Path | None = None
        self._own_root = False
        self.wakeup = threading.Condition()
        self._closed = False
        self.unattached: list[int] = []  # boots that found no server to run on
        self._changes = 0  # bumped whenever a boot may run (spawned, woken, signalled)
        self._settled = 0  # the value of _changes the last settle saw through
        self._outage_from: float | None = None  # the first write under the outage prefix
        for name in self.scenario.staged:
            self.put(name, b"staged input\n")
        if self.scenario.run_ceiling_s:
            self.max_run_s, self.termination_action = self.scenario.run_ceiling_s, "STOP"
        if self.scenario.running_job:
            self.foreign_start(self.scenario.running_job)

    # --- the clock ----------------------------------------------------------------------------
    def _at(self, delay_s: float, action: Callable[[], None]) -> None:
        """Schedule ``action`` ``delay_s`` after now, or after the event being applied: a
        change applied late (nobody asked for a while) still schedules its sequels on time."""
        base = self.clock.wall() if self._applying is None else self._applying
        heapq.heappush(self._events, (base + delay_s, next(self._seq), action))

    def tick(self) -> None:
        """Apply every scheduled change whose time has come, in order."""
        with self.lock:
            now = self.clock.wall()
            while self._events and self._events[0][0] <= now:
                when, _, action = heapq.heappop(self._events)
                self._applying = when
                self._changes += 1
                try:
                    action()
                finally:
                    self._applying = None
            for boot in self.processes.values():
                if any(wake <= now for wake in boot.sleepers.values()):
                    self._changes += 1  # a sleep ends: that boot runs again
        with self.wakeup:
            self.wakeup.notify_all()

    # --- compute ------------------------------------------------------------------------------
    def start(self) -> Operation | StartRefused:
        """A start: an operation (its outcome played when it is DONE), or a synchronous
        refusal (``StartRefused``: HTTP 403 or 503, no operation) when the scenario says so."""
        outcome = "ok"
        if self.status == "TERMINATED":
            outcome = self._starts.pop(0) if self._starts else "ok"
            if outcome in REFUSALS:
                return StartRefused(REFUSALS[outcome])
            if outcome == "ok":
                self._power_on()
        elif self.status in ("STOPPING",):
            outcome = "not-ready"
        return self._operation("start", outcome, self.scenario.start_operation_s)

    def set_metadata(self, fingerprint: str, items: dict[str, str]) -> Operation | None:
        """None: the fingerprint is stale (412). A scripted race changes it first."""
        if self._races > 0:
            self._races -= 1
            self._new_fingerprint()
        if fingerprint != self.fingerprint:
            return None
        self.metadata = dict(items)
        self._new_fingerprint()
        return self._operation("setMetadata", "ok", self.scenario.write_operation_s)

    def set_labels(self, fingerprint: str, labels: dict[str, str]) -> Operation | None:
        """setLabels: the whole label set, only under the current label fingerprint (None:
        stale, 412), as GCE's compare-and-swap of an instance's labels."""
        if fingerprint != self.label_fingerprint:
            return None
        self.labels = dict(labels)
        self.label_fingerprint = fingerprint_of_labels(next(self._label_fp))
        return self._operation("setLabels", "ok", self.scenario.write_operation_s)

    def set_scheduling(self, max_run_s: float | None, action: str) -> Operation:
        """The provider-native ceiling: GCE applies ``action`` (STOP) after ``max_run_s``
        of running (reconstructed from the API reference, recordings/gce/)."""
        self.max_run_s = max_run_s if max_run_s else None
        self.termination_action = action
        return self._operation("setScheduling", "ok", self.scenario.write_operation_s)

    def _ceiling(self, number: int) -> None:
        """maxRunDuration ran out: GCE stops the instance (an ACPI shutdown: the guest's
        processes get SIGTERM, so the script's trap still runs) whatever the script does."""
        if number != self._boot_id or self.status not in ("RUNNING", "STAGING"):
            return
        self._serial("compute: maxRunDuration reached; instanceTerminationAction STOP")
        boot = self.processes.get(number)
        self._power_off()
        if boot is not None:
            boot.signal(15)

    def _new_fingerprint(self) -> None:
        self.fingerprint = fingerprint(next(self._fp))

    def _now(self) -> float:
        return self._applying if self._applying is not None else self.clock.wall()

    def _operation(self, kind: str, outcome: str, running_s: float) -> Operation:
        """A new zone operation, inserted now: a unique id and name, its phases' times."""
        number = next(self._ops)
        now = self._now()
        op = Operation(
            name=f"operation-{int(now * 1000)}-{number:06d}-fake-gce",
            kind=kind,
            outcome=outcome,
            id=str(OPERATION_ID_BASE + number),
            insert_at=now,
            pending_s=self.scenario.operation_pending_s,
            running_s=running_s,
        )
        self.operations[op.name] = op
        return op

    def foreign_start(self, job: str, runtime_s: float | None = None) -> None:
        """A third operator starts the instance with their own tooling and their own script
        (the same template, their job, no gpuops claim)."""
        from gpuops.lane.script import render

        self.metadata = {
            "startup-script": render(job, self.scenario.bucket, 'python3 "$WORK/job.py"'),
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
        self.termination_at = None  # cleared whenever the VM is stopped
        self._serial("systemd-shutdown: powering off")
        self._at(self.scenario.stopping_s, self._terminated)

    def _terminated(self) -> None:
        self.status = "TERMINATED"
        for boot in self.processes.values():
            if not boot.killed:
                boot.kill()

    def poweroff(self, number: int) -> bool:
        """The script of boot ``number`` ran poweroff/shutdown. False: that boot is gone."""
        with self.lock:
            self.tick()
            live = number == self._boot_id and self.status in ("RUNNING", "STAGING")
            if live:
                self._power_off()
            return live

    # --- real boots (fakes/gce/boot.py) ------------------------------------------------------
    def attach(self, server_url: str, root: Path | None = None) -> None:
        """Boots run for real from now on, their shims calling ``server_url``."""
        self._server = server_url
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="gpuops-fake-gce-"))
            self._own_root = True
        self._root = root

    def _boot(self, number: int, runtime_s: float | None) -> None:
        self.status = "RUNNING"
        self.boots += 1
        if self.max_run_s is not None and self.termination_action == "STOP":
            self._at(self.max_run_s, partial(self._ceiling, number))  # counted from RUNNING
            self.termination_at = self._now() + self.max_run_s  # re-armed at every start
        script = self.metadata.get("startup-script", "")
        if self._server is None or self._root is None:
            self.unattached.append(number)
            self._serial("fake-gce: no boot host attached; the script never ran")
            return
        s = self.scenario
        sandbox = real_boot.make_sandbox(
            self._root,
            number,
            installed=s.installed,
            broken=s.broken_imports,
            runtime_s=s.job_runtime_s if runtime_s is None else runtime_s,
            results=max(s.results, 0),
        )
        self._serial(f"google_metadata_script_runner: starting startup-script (boot {number})")
        process = real_boot.spawn(
            sandbox, number, script, server=self._server, disk_gb=s.disk_free_gb
        )
        self.processes[number] = real_boot.Boot(number, sandbox, process)

    def sleep_until(self, number: int, pid: int, seconds: float) -> None:
        """A boot's ``sleep``: block (this server thread) until the model's clock says so."""
        with self.lock:
            boot = self.processes.get(number)
            wake = self.clock.wall() + max(seconds, 0.0)
            if boot is not None:
                boot.sleepers[pid] = wake
        try:
            with self.wakeup:
                while not self._closed and self.clock.wall() < wake:
                    if boot is not None and boot.killed:
                        return
                    self.wakeup.wait(SLEEP_POLL)
        finally:
            if boot is not None:
                with self.lock:
                    boot.sleepers.pop(pid, None)
                    # That boot runs again. Counted here as well as in ``tick``: this thread
                    # may see the clock pass ``wake`` and leave before a test's ``advance``
                    # reaches its tick, which then finds no sleep due and would let the next
                    # settle skip a boot that is running (and the clock move under it).
                    self._changes += 1

    def settled(self) -> bool:
        """Whether no boot was spawned, woken or signalled since the last settle."""
        return self._changes == self._settled

    def settle(self) -> None:
        """Wait (real time) until every live boot is blocked on this clock or has ended.
        Nothing to wait for when no boot was spawned, woken or signalled since the last."""
        seen = self._changes
        if self.settled():
            return
        live = [b for b in self.processes.values() if not b.killed]
        real_boot.wait_blocked(live, self.clock.wall)
        self._settled = seen

    def next_change(self) -> float | None:
        """The earliest fake time at which something is due: a scheduled change or a boot's
        sleep ending (a test's clock steps to it, so nothing wakes late)."""
        with self.lock:
            times = [when for when, _, _ in self._events[:1]]
            for boot in self.processes.values():
                if not boot.killed:
                    times += list(boot.sleepers.values())
        return min(times) if times else None

    def advance(self, seconds: float) -> None:
        """A test's FakeClock moves ``seconds``, stopping at every change due on the way and
        letting the boots run to their next wait at each stop."""
        advance = self.clock.advance  # type: ignore[attr-defined]  # a test's FakeClock only
        target = self.clock.wall() + seconds
        while True:
            self.settle()
            due = self.next_change()
            step_to = target if due is None or due > target else max(due, self.clock.wall())
            advance(step_to - self.clock.wall())
            self.tick()
            if step_to >= target:
                break
        self.settle()

    def signal_boot(self, sig: int) -> None:
        """Send ``sig`` to every process of the current boot (an ACPI shutdown, a test)."""
        boot = self.processes.get(self._boot_id)
        if boot is not None:
            self._changes += 1
            boot.signal(sig)

    def close(self) -> None:
        """Kill every boot's processes and remove the sandboxes this model made."""
        self._closed = True
        with self.wakeup:
            self.wakeup.notify_all()
        for boot in self.processes.values():
            boot.kill()
        if self._own_root and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def _serial(self, line: str) -> None:
        self.serial += f"{line}\n"

    # --- the bucket ---------------------------------------------------------------------------
    def begin_upload(self, name: str, content_type: str, query: dict[str, str]) -> str:
        """A resumable upload session for ``name``: its id. Its preconditions are checked
        again when the last byte arrives."""
        self._uploads += 1
        upload_id = f"fake-gcs-upload-{self._uploads}"
        self.uploads[upload_id] = Upload(name, content_type, dict(query))
        return upload_id

    def write_refused(self, name: str) -> bool:
        """Whether a write of ``name`` falls in the scenario's storage outage (503): from the
        first write under ``gcs_write_outage_prefix``, for ``gcs_write_outage_s``."""
        prefix = self.scenario.gcs_write_outage_prefix
        if not prefix or not name.startswith(prefix):
            return False
        now = self._now()
        if self._outage_from is None:
            self._outage_from = now
        return now < self._outage_from + self.scenario.gcs_write_outage_s

    def write_forbidden(self, name: str) -> bool:
        """Whether a write or delete of ``name`` is refused (403): it falls under the
        scenario's ``gcs_write_forbidden_prefix``."""
        prefix = self.scenario.gcs_write_forbidden_prefix
        return bool(prefix) and name.startswith(prefix)

    def delete(self, name: str) -> bool:
        """Delete the live generation of ``name``; False when there is none."""
        if self.live(name) is None:
            return False
        for kept in (self.objects, self.stored, self.updated):
            kept.pop(name, None)
        return True

    def _next_generation(self) -> int:
        """A new object generation: microseconds on the fake clock (as GCS's look), strictly
        increasing, so two writes in the same instant still differ."""
        self._last_generation = max(int(self._now() * 1_000_000), self._last_generation + 1)
        return self._last_generation

    def put(self, name: str, data: bytes, content_type: str = "") -> StoredObject:
        """Write a new generation of ``name`` (metageneration 1). Preconditions are checked
        by the route first (``precondition``)."""
        now = self._now()
        stored = StoredObject(bytes(data), self._next_generation(), 1, now)
        if content_type:
            stored.content_type = content_type
        self.stored[name] = stored
        self.objects[name] = stored.data
        self.updated[name] = now
        return stored

    def live(self, name: str) -> StoredObject | None:
        """The live generation of ``name``; a test that wrote ``objects`` directly gets one."""
        data = self.objects.get(name)
        if data is None:
            self.stored.pop(name, None)
            return None
        stored = self.stored.get(name)
        if stored is None or stored.data is not data:
            stored = self.put(name, data)
        return stored

    def patch(self, name: str, content_type: str | None, metadata: dict[str, str]) -> StoredObject:
        """A metadata update of the live generation: metageneration + 1, data unchanged."""
        stored = self.live(name)
        assert stored is not None
        if content_type:
            stored.content_type = content_type
        stored.metadata.update(metadata)
        stored.metageneration += 1
        stored.updated = self._now()
        self.updated[name] = stored.updated
        return stored

    def precondition(self, name: str, query: Mapping[str, str]) -> bool:
        """Whether the request's generation preconditions hold for the live ``name``
        (JSON API query parameters; a missing object has generation 0)."""
        stored = self.live(name)
        generation = stored.generation if stored is not None else 0
        for key, value in query.items():
            if key not in PRECONDITIONS or value == "":
                continue
            wanted = int(value)
            if key == "ifGenerationMatch" and generation != wanted:
                return False
            if key == "ifGenerationNotMatch" and (stored is None or generation == wanted):
                return False
            if key == "ifMetagenerationMatch" and (
                stored is None or stored.metageneration != wanted
            ):
                return False
            if key == "ifMetagenerationNotMatch" and (
                stored is None or stored.metageneration == wanted
            ):
                return False
        return True
