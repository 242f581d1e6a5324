"""The guardian process: a billing ceiling that outlives the laptop (M5, M7).

``Guardian.run`` applies ``market/guardian.py``'s decisions: it holds the box's lease in the
state store (``market/leases/<NAME>``) with a heartbeat, waits as a standby while another
guardian's lease is fresh, copies results off near the deadline, destroys the box, confirms it
gone by asking for that instance, releases the records, and exits 0 only then. Every step goes
to the event log; every exit other than a confirmed-gone box is non-zero and said on stderr.

``spawn`` starts one fully detached (its own session, stdin from /dev/null, output to a log in
the state directory), so closing the launching shell, killing its process group or the
watcher leaves it running. ``systemd_unit`` prints a unit for an always-on host.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Protocol

from gpuops import event_types as ev
from gpuops import timing
from gpuops.errors import (
    GpuopsError,
    NotOwned,
    Unavailable,
    UnexpectedResponse,
    UsageError,
    VersionConflict,
)
from gpuops.ledger import BoxState, utc_iso
from gpuops.market import guardian as g
from gpuops.market import watchdog as w
from gpuops.market.jobs import BoxShell, Jobs
from gpuops.market.leases import Leases
from gpuops.market.rent import Market, destroy_rental, owned_records
from gpuops.market.rentals import FAILED, RELEASED, check_name, process_id

SCALE_ENV = "GPUOPS_GUARD_TIME_SCALE"  # process tests only: divides every lease duration
RESULTS_ENV = "GPUOPS_RESULTS"  # where results go: a directory or s3://bucket/prefix


def guardian_id(operator: str) -> str:
    return process_id(operator)


def clockwork_from_env() -> g.Clockwork:
    raw = os.environ.get(SCALE_ENV)
    if not raw:
        return g.NORMAL
    try:
        return g.NORMAL.scaled(float(raw))
    except ValueError as exc:
        raise UsageError(f"{SCALE_ENV}={raw!r}: {exc}") from None


# --- where results go ----------------------------------------------------------------------
class Results(Protocol):
    def deliver(self, name: str, tarball: Path) -> str: ...


@dataclass(frozen=True)
class LocalResults:
    root: Path

    def deliver(self, name: str, tarball: Path) -> str:
        target = self.root / name
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tarfile.open(tarball, "r:gz") as tar:
            tar.extractall(target, filter="data")  # no absolute paths, no '..', no devices
        return str(target)


@dataclass(frozen=True)
class S3Results:
    bucket: str
    prefix: str

    def deliver(self, name: str, tarball: Path) -> str:
        import boto3

        client = boto3.client("s3", endpoint_url=os.environ.get("GPUOPS_S3_ENDPOINT") or None)
        base = f"{self.prefix.strip('/')}/{name}".strip("/")
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                key = f"{base}/{member.name.removeprefix('./')}"
                client.put_object(Bucket=self.bucket, Key=key, Body=handle.read())
        return f"s3://{self.bucket}/{base}/"


def open_results(url: str) -> Results:
    if url.startswith("s3://"):
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise UsageError(f"{RESULTS_ENV}={url!r} names no bucket")
        return S3Results(bucket, prefix)
    return LocalResults(Path(url.removeprefix("file://")).expanduser())


# --- the guardian --------------------------------------------------------------------------
class Guardian:
    def __init__(
        self,
        market: Market,
        name: str,
        *,
        shell: BoxShell,
        results: Results,
        me: str | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] | None = None,
        clockwork: g.Clockwork = g.NORMAL,
        say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    ) -> None:
        self.market = market
        self.name = check_name(name)
        self.operator = market.ledger.operator
        self.me = me or guardian_id(self.operator)
        self.shell = shell
        self.results = results
        self.clock = clock
        # leases are judged stale on this clock alone (never another host's): the real
        # monotonic clock, or the injected clock in tests that pass one
        self.monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        self._sleep = sleep
        self.clockwork = clockwork
        self.say = say
        self.leases = Leases(market.ledger.store)
        self.jobs = Jobs(market.ledger.store)
        self.events = market.events
        self.mind = g.Mind(self.me)
        self.instance_id: str | None = None
        self.deadline_at = 0.0
        market.sleep = self.sleep  # every wait inside a destroy keeps the heartbeat going
        market.clock = clock

    # --- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        self.bind()
        while True:
            try:
                code = self.step()
            except (Unavailable, VersionConflict) as exc:
                # the store or the provider, or a write that kept losing its race: loud, retried
                self._log("guard.error", error=f"{type(exc).__name__}: {exc}")
                self.say(f"gpuops guard: {self.name}: {exc}; retrying")
                self._sleep(self.clockwork.poll_s)
                continue
            except BaseException as exc:  # anything else ends it: loudly, never silently (M7)
                code = exc.exit_code if isinstance(exc, GpuopsError) else 1
                if not isinstance(exc, SystemExit):  # the signal handler logged its own
                    self._log("guard.exit", code=code, reason=f"{type(exc).__name__}: {exc}")
                raise
            if code is not None:
                return code

    def bind(self) -> None:
        """Refuse anything but our own rental with a deadline (M3). A racing rental is bound
        too: the guardian answers for every box its race creates (M13)."""
        if self.deadline_at:
            return
        rental = self.market.rentals.get(self.name)
        if rental is None:
            raise UsageError(f"no rental named {self.name!r}; rent it first")
        if rental.owner != self.operator:
            raise NotOwned(self.name, rental.owner, self.operator)
        if rental.deadline_at is None:
            raise UsageError(
                f"{self.name!r} has no deadline; give one: gpuops guard {self.name} --hours H"
            )
        self.instance_id = rental.instance_id
        self.deadline_at = rental.deadline_at
        self._log(
            "guard.start",
            deadline=utc_iso(rental.deadline_at),
            pid=os.getpid(),
            time_scale=g.NORMAL.heartbeat_s / self.clockwork.heartbeat_s,
        )
        self.say(
            f"gpuops guard: guardian {self.me} (pid {os.getpid()}) guards {self.name} "
            f"({rental.state}, instance {self.instance_id}) until {utc_iso(rental.deadline_at)}"
        )

    def step(self) -> int | None:
        """One round: read, decide, act. Returns an exit code when the guardian is done."""
        self.bind()
        lease, _ = self.leases.read(self.name)
        box = self._box()
        now = self.clock()
        before = self.mind.role
        self.mind, action = g.decide(self.mind, lease, box, now, self.clockwork, self.monotonic())
        if self.mind.role is not before:
            self._log(
                "guard.role", role=self.mind.role.value, holder=lease.holder if lease else None
            )
            self.say(f"gpuops guard: {self.name}: {self.mind.role.value}")
        if isinstance(action, g.Leave):
            if action.code == g.GONE:
                self.leases.drop(self.name, self.me)
            self._log("guard.exit", code=action.code, reason=action.reason)
            self.say(f"gpuops guard: {self.name}: {action.reason} (exit {action.code})")
            return action.code
        if isinstance(action, g.Take):
            if self.leases.take(self.name, self.me, now, lease):
                self.mind = replace(self.mind, held=True)
                self._log("guard.lease.taken", previous=lease.holder if lease else None)
        elif isinstance(action, g.Renew):
            self.leases.renew(self.name, self.me, now)
        elif isinstance(action, g.Wait):
            self._sleep(action.seconds)
        elif isinstance(action, g.Copy):
            self._copy(action.budget_s)
            self.mind = replace(self.mind, copied=True)
        else:
            self._destroy()
        return None

    def sleep(self, seconds: float) -> None:
        """Sleep, renewing our lease whenever its heartbeat falls due."""
        ends = self.clock() + seconds
        while True:
            due = self._heartbeat()
            nap = min(ends - self.clock(), due)
            if nap <= 0:
                return
            self._sleep(nap)
            if self.clock() >= ends:
                return

    def _heartbeat(self) -> float:
        """Renew our lease if its heartbeat is due; seconds until the next one is (a whole
        heartbeat when another guardian holds the lease: nothing of ours to renew)."""
        lease, _ = self.leases.read(self.name)
        if lease is None or lease.holder != self.me:
            return self.clockwork.heartbeat_s
        due = lease.heartbeat_at + self.clockwork.heartbeat_s - self.clock()
        if due > 0:
            return due
        self.leases.renew(self.name, self.me, self.clock())
        return self.clockwork.heartbeat_s

    # --- what the box is ---------------------------------------------------------------
    def _box(self) -> g.Box:
        """What is left of the rental: its active records, and whether it has ended."""
        rental = self.market.rentals.get(self.name)
        if rental is not None and rental.owner == self.operator:
            self.instance_id = rental.instance_id or self.instance_id
            self.deadline_at = rental.deadline_at or self.deadline_at
        started_at = rental.started_at if rental and rental.started_at else self.deadline_at
        ended = rental is None or rental.state in (FAILED, RELEASED)
        left = owned_records(self.market, self.name)
        unresolved = bool(left) and all(r.state is BoxState.INTENT for r in left)
        gone = ended and not left and (self.instance_id is None or self._shown_gone())
        return g.Box(gone, started_at, self.deadline_at, ended=ended, unresolved=unresolved)

    def _shown_gone(self) -> bool:
        """Gone only when the provider, asked for this very instance, says so (M4, M7)."""
        assert self.instance_id is not None
        try:
            return self.market.vast.show(self.instance_id) is None
        except UnexpectedResponse:
            return False

    # --- copy, destroy -----------------------------------------------------------------
    def _copy(self, budget_s: float) -> None:
        job = self.jobs.get(self.name)
        if job is None or job.instance_id != self.instance_id:
            self._log("guard.copy", ok=False, detail="no job declared results: nothing to copy")
            return
        started = self.clock()
        instance = self.market.vast.show(job.instance_id)
        if instance is None:
            self._log("guard.copy", ok=False, detail="the box is already gone")
            return
        folder = Path(tempfile.mkdtemp(prefix="gpuops-results-"))
        tarball = folder / "results.tar.gz"
        outcome: dict[str, str] = {}

        def pull() -> None:
            script = w.results_script(self.name, job.results)
            try:
                outcome["error"] = self.shell.stream_to(instance, script, tarball, budget_s)
            except OSError as exc:  # ssh could not even start: a failed copy, said so
                outcome["error"] = f"the copy could not start: {type(exc).__name__}: {exc}"

        worker = threading.Thread(target=pull, daemon=True)
        worker.start()
        # The worker enforces the budget itself (stream_to kills the ssh when it overruns), so
        # wait for it to end: removing its folder while it still writes there lost results.
        while worker.is_alive():
            worker.join(self.clockwork.poll_s)  # the copy is a real process: wait for real
            self._heartbeat()  # and keep the lease through it
        error = outcome.get("error", "the copy ended without a result")
        destination = None
        if not error:
            try:
                destination = self.results.deliver(self.name, tarball)
            except (OSError, tarfile.TarError, GpuopsError) as exc:
                error = f"delivering the results failed: {type(exc).__name__}: {exc}"
        size = tarball.stat().st_size if tarball.exists() else 0
        shutil.rmtree(folder, ignore_errors=True)
        if not error:
            self.leases.renew(self.name, self.me, self.clock(), copied=True)
        self._log(
            "guard.copy",
            ok=not error,
            detail=error or f"copied {size} bytes to {destination}",
            seconds=round(self.clock() - started, 3),
        )
        self.say(f"gpuops guard: {self.name}: " + (error or f"results copied to {destination}"))

    def _destroy(self) -> None:
        self._log("guard.destroy", deadline=utc_iso(self.deadline_at))
        outcomes = destroy_rental(self.market, self.name)
        rental = self.market.rentals.get(self.name)
        if rental is not None and rental.state == RELEASED and all(o.released for o in outcomes):
            now = self.clock()
            gone = ev.ConfirmedGone(
                name=self.name,
                instance_id=self.instance_id,
                guardian=self.me,
                deadline=utc_iso(self.deadline_at),
                delay_s=round(now - self.deadline_at, 3),
            )
            self.events.append(gone.KIND, **gone.to_payload())
            self.say(
                f"gpuops guard: {self.name}: every box confirmed gone "
                f"({len(outcomes)} ended), {now - self.deadline_at:+.1f} s from its deadline"
            )
            return
        details = "; ".join(f"{o.name}: {o.detail}" for o in outcomes if not o.released)
        self._log("guard.destroy.pending", detail=details)
        self.say(f"gpuops guard: {self.name}: not all confirmed gone yet: {details}")
        self.sleep(self.clockwork.confirm_poll_s)

    def _log(self, kind: str, **payload: object) -> None:
        self.events.append(
            kind, name=self.name, instance_id=self.instance_id, guardian=self.me, **payload
        )


# --- starting one --------------------------------------------------------------------------
@dataclass(frozen=True)
class Spawned:
    pid: int
    log: Path


def spawn(name: str, state_url: str, operator: str, log_dir: Path) -> Spawned:
    """Start a guardian fully detached from this process, and wait for it to report in."""
    folder = log_dir / "guardians"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = folder / f"{check_name(name)}.log"
    argv = [sys.executable, "-m", "gpuops", "guard", name, "--foreground"]
    argv += ["--state", state_url, "--operator", operator]
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # its own session: no terminal, no shared process group
            close_fds=True,
            cwd="/",
        )
    finally:
        os.close(fd)
    ready = f"(pid {proc.pid})"
    ends = time.monotonic() + timing.GUARD_SPAWN_WAIT_S
    while time.monotonic() < ends:
        code = proc.poll()
        text = log.read_text(errors="replace")
        if ready in text:
            return Spawned(proc.pid, log)
        if code is not None:
            tail = "\n".join(text.splitlines()[-5:])
            raise GuardFailed(f"the guardian for {name!r} exited {code} at start:\n{tail}")
        time.sleep(timing.GUARD_SPAWN_POLL_S)
    raise GuardFailed(f"the guardian for {name!r} (pid {proc.pid}) did not report in; see {log}")


class GuardFailed(GpuopsError):
    """A guardian could not be started: the box has no ceiling, which is loud (M5)."""


def systemd_unit(state_url: str, operator: str) -> str:
    """A template unit (``gpuops-guard@NAME.service``) for guardians on an always-on host."""
    restart_s = int(timing.LEASE_TTL_S)
    return f"""\
# gpuops guardian for one box: systemctl --user enable --now gpuops-guard@NAME
# Install as ~/.config/systemd/user/gpuops-guard@.service. Put the provider's key in
# ~/.config/gpuops/env (VAST_API_KEY=...); it stays on this host and never reaches a box.
[Unit]
Description=gpuops guardian for box %i (billing ceiling, rule M5)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=-%h/.config/gpuops/env
ExecStart={sys.executable} -m gpuops guard %i --foreground --state {state_url} --operator {operator}
# 0: the box is confirmed gone. 7: another guardian was verified alive and guards it (M7).
SuccessExitStatus=7
# 3: refused (not ours, or no such rental): restarting cannot help.
RestartPreventExitStatus=3
Restart=on-failure
RestartSec={restart_s}

[Install]
WantedBy=default.target
"""


def install_signal_handlers(guardian: Guardian) -> None:
    """SIGTERM and SIGINT end the guardian loudly (event log and stderr), never silently;
    SIGHUP, which a closing terminal sends, is ignored."""

    def stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        guardian._log("guard.exit", code=128 + signum, reason=f"stopped by {name}")
        guardian.say(f"gpuops guard: {guardian.name}: stopped by {name}; the box has NO ceiling")
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
