"""Jobs on a rented box: start under tmux, observe, copy results off (M5, M10).

The shell around ``market/watchdog.py``: it finds the box, runs the watchdog's scripts over the
real ``ssh`` (providers/ssh.py: batch mode, pinned host key, no secret in the child's
environment, so no account key ever reaches a box), and records each job in the state store
(``market/jobs/<NAME>``) so the guardian knows what results to copy off.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    NotOwned,
    Refused,
    StillRunning,
    Unavailable,
    UsageError,
)
from gpuops.market import watchdog as w
from gpuops.market.probe import transport_verdict
from gpuops.market.rentals import LIVE, Rental, check_name
from gpuops.model import Instance, InstanceStatus, StepOutput, Verdict
from gpuops.private import open_private
from gpuops.providers import ssh
from gpuops.store.base import Store
from gpuops.store.records import NO_CHANGE, JsonCodec, NoChange, Records

JOBS = "market/jobs/"


@dataclass(frozen=True)
class Job:
    name: str
    owner: str
    instance_id: str
    command: str
    results: str
    started_at: float


CODEC = JsonCodec(Job, "job record")


def latest(current: Job | None, job: Job) -> Job | NoChange:
    """The record names the latest job started: a slower writer of an older job (started
    before the stored one) changes nothing, so the guardian copies the newest results. Pure."""
    if current is not None and current.started_at > job.started_at:
        return NO_CHANGE
    return job


def endpoint_of(instance: Instance) -> ssh.SshEndpoint | None:
    """Where the box answers ssh: Vast's proxy, else its public address and direct port."""
    if instance.ssh_host and instance.ssh_port:
        return ssh.SshEndpoint(instance.ssh_host, instance.ssh_port)
    if instance.public_ipaddr and instance.direct_ssh_port:
        return ssh.SshEndpoint(instance.public_ipaddr, instance.direct_ssh_port)
    return None


class Copies:
    """The results copies a guardian has in flight, each an ssh child in a session of its own:
    registered the moment it starts, so a guardian stopped by a signal ends every one by its
    process group, reaps it and removes the tarball it was writing (M17), instead of leaving
    it to finish in its own session. Once ended, a copy that starts later is ended at once."""

    def __init__(self, started: Callable[[int, Path], object] = lambda pid, target: None) -> None:
        """``started(pid, tarball)``: told of each copy child as it starts (the event log)."""
        self._started = started
        self._lock = threading.Lock()
        self._live: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
        self.ended: str | None = None  # why every copy was ended; None while copies may run

    def add(self, proc: subprocess.Popen[bytes], target: Path) -> bool:
        """Register a copy child just started; False (and it is ended) once ``end`` ran."""
        with self._lock:
            open_ = self.ended is None
            if open_:
                self._live[proc.pid] = (proc, target)
        if not open_:
            _end_copy(proc, target)
            return False
        self._started(proc.pid, target)
        return True

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._live.pop(proc.pid, None)

    def live(self) -> list[int]:
        """The pids (each its process group) of the copies in flight."""
        with self._lock:
            return sorted(self._live)

    def end(self, why: str) -> list[int]:
        """End every copy in flight, and any started from now on: each one's process group
        killed, the child reaped, its tarball removed. Returns their pids."""
        with self._lock:
            self.ended = why
            live = list(self._live.values())
            self._live.clear()
        for proc, target in live:
            _end_copy(proc, target)
        return sorted(proc.pid for proc, _ in live)


def _end_copy(proc: subprocess.Popen[bytes], target: Path) -> None:
    """Kill a copy child's process group (it and whatever it started), reap it, and remove the
    partial tarball and its folder (made for this copy alone, so empty once it is gone)."""
    ssh.end_group(proc)
    target.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        target.parent.rmdir()


@dataclass(frozen=True)
class BoxShell:
    """Runs scripts on boxes over ssh with our identity and each box's own known_hosts."""

    state_dir: Path
    identity_file: Path
    client: ssh.SshClient  # the ssh program and its environment (Settings.ssh())

    def argv(self, instance: Instance, script: str) -> list[str]:
        endpoint = endpoint_of(instance)
        if endpoint is None:
            raise Unavailable(f"instance {instance.instance_id} has no ssh address yet")
        return self.client.argv(
            endpoint,
            script,
            identity_file=self.identity_file,
            known_hosts=self.known_hosts(instance),
        )

    def known_hosts(self, instance: Instance) -> Path:
        return ssh.known_hosts_path(self.state_dir, instance.instance_id)

    def run(self, instance: Instance, script: str) -> StepOutput:
        return self.client.run(self.argv(instance, script), timing.SSH_COMMAND_TIMEOUT_S)

    def stream_to(
        self,
        instance: Instance,
        script: str,
        target: Path,
        budget_s: float,
        copies: Copies | None = None,
    ) -> tuple[str, int | None]:
        """Run ``script`` with its stdout written to ``target`` (bytes): ('', 0) on success,
        else what went wrong and the exit status (None when the budget ran out, or ``copies``
        was ended meanwhile: the ssh is killed and that is said). The ssh runs in a session of
        its own, registered in ``copies`` while it runs."""
        copies = Copies() if copies is None else copies
        with os.fdopen(open_private(target, os.O_WRONLY | os.O_TRUNC), "wb") as out:
            proc = subprocess.Popen(
                self.argv(instance, script),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                env=self.client.child_env(),
                start_new_session=True,
            )
            if not copies.add(proc, target):
                return f"the copy was cut: {copies.ended}", None
            try:
                _, err = proc.communicate(timeout=max(budget_s, 0.0))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                return f"the copy overran its {budget_s:.0f} s budget and was stopped", None
            finally:
                copies.discard(proc)
        if proc.returncode != 0 and copies.ended is not None:  # ended by a stop, not a fault
            return f"the copy was cut: {copies.ended}", None
        if proc.returncode != 0:
            text = err.decode("utf-8", errors="replace").strip().splitlines()
            return f"exit {proc.returncode}: {text[-1] if text else 'no message'}", proc.returncode
        return "", 0


class Jobs:
    """Compare-and-swap access to job records."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.records = Records(store, JOBS, CODEC, check_name=check_name)

    def get(self, name: str) -> Job | None:
        return self.records.get(name)

    def put(self, job: Job) -> Job:
        """Record ``job`` by compare-and-swap (see ``latest``); returns the job now stored."""
        done = self.records.update(job.name, lambda current: latest(current, job))
        return done.after  # type: ignore[return-value]  # never None: `latest` gives a job


def owned_live(rental: Rental | None, name: str, operator: str) -> Rental:
    """The live rental ``name`` of this operator, or a clear refusal (M3)."""
    if rental is not None and rental.owner != operator:
        raise NotOwned(name, rental.owner, operator)
    return live(rental, name)


def live(rental: Rental | None, name: str) -> Rental:
    """The live rental ``name``, whoever owns it (for what only reads its box, such as
    `gpuops logs`), or a usage error naming it: no such rental, or not live (no box)."""
    if rental is None:
        raise UsageError(f"no rental named {name!r}; rent it first (gpuops rent {name} ...)")
    if rental.state != LIVE or rental.instance_id is None:
        raise UsageError(f"{name!r} is {rental.state}, not live")
    return rental


def box_id(rental: Rental) -> str:
    """A live rental's instance id (what ``live`` checked), or the same usage error."""
    if rental.instance_id is None:
        raise UsageError(f"{rental.name!r} is {rental.state}, not live")
    return rental.instance_id


def start(
    rental: Rental,
    instance: Instance,
    shell: BoxShell,
    argv: Sequence[str],
    results: str,
    *,
    clock: Clock = SYSTEM,
) -> Job:
    """Start the job detached under tmux on the box; refuses a second one while it runs."""
    command = w.shell_command(argv)
    w.check_results(results)
    out = shell.run(instance, w.start_script(rental.name, command))
    if out.exit_code == w.ALREADY_RUNNING:
        raise StillRunning(
            f"a job is already running on {rental.name!r} (tmux session "
            f"{w.session_name(rental.name)}); watch it with `gpuops watch {rental.name}`"
        )
    if out.exit_code == w.NO_TMUX:
        raise UsageError(f"tmux is not installed on {rental.name!r}; install it in the image")
    if out.exit_code != 0:
        if transport_verdict(out) is Verdict.SSH_HOST_KEY_CHANGED:
            raise host_key_refused(rental.name, shell.known_hosts(instance))
        raise Unavailable(f"could not start the job on {rental.name!r}: {_why(out)}")
    return Job(rental.name, rental.owner, box_id(rental), command, results, clock.wall())


def host_key_refused(name: str, known_hosts: Path) -> Refused:
    """The box answered with another host key than the one pinned on first contact: nothing
    was run. A changed host key is a refusal, never a retry (M2: not a host fault, not our key;
    the security bar: keys are pinned per box); what to do is said."""
    return Refused(
        "M2",
        f"{name}: the box's ssh host key changed since gpuops pinned it on first contact (a "
        "rebuilt box, or someone in the middle); nothing was run, and a changed host key is "
        f"never retried. Destroy it (`gpuops destroy {name}`) and rent again; the pinned key "
        f"is in {known_hosts}",
    )


# Why a Vast box is stopped, said wherever one is met (watch, the guardian's copy): "Once an
# instance hits its end date it expires and is automatically stopped. Expired instances can not
# restart while expired" (vast.ai/docs/introduction/overview); a stopped box runs nothing.
STOPPED_WHY = (
    "expired at its contract's end, or stopped on its host; nothing runs on it, and Vast may "
    "delete an expired box 48 h later"
)


def observe(
    name: str, instance: Instance | None, shell: BoxShell, *, started: bool = True
) -> w.Status:
    """One look at the job: the box gone is a fact (dead); an unanswered ssh is unknown.
    ``started``: whether a job record says a job was started on this box."""
    if instance is None:
        return w.Status(w.JobState.DEAD, "the box is gone (the provider no longer shows it)")
    if instance.actual_status is InstanceStatus.STOPPED:  # a stopped box runs nothing: a fact
        return w.Status(w.JobState.DEAD, f"the box is stopped: {STOPPED_WHY}")
    out = shell.run(instance, w.observe_script(name))
    if out.timed_out or out.exit_code != 0:
        return w.unreachable(_why(out))
    try:
        return w.judge(w.parse_observation(out.stdout), started=started)
    except UsageError as exc:
        return w.unreachable(str(exc))


def watch(
    look: Callable[[], w.Status],
    report: Callable[[w.Status], None],
    *,
    timeout_s: float,
    clock: Clock = SYSTEM,
) -> w.Status:
    """Look every WATCH_POLL_S (on ``clock``) until the job is dead or ``timeout_s`` passes
    (then it is still open: exit 5, never 'failed'). Each change of state is reported once."""
    ends = clock.monotonic() + timeout_s
    last: w.JobState | None = None
    while True:
        status = look()
        if status.state is not last:
            report(status)
            last = status.state
        if w.settled(status) or clock.monotonic() >= ends:
            return status
        clock.sleep(min(timing.WATCH_POLL_S, max(ends - clock.monotonic(), 0.0)))


def _why(out: StepOutput) -> str:
    if out.timed_out:
        return "ssh timed out"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return f"exit {out.exit_code}: {lines[-1] if lines else 'no message'}"
