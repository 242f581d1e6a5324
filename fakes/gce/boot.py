"""A FakeGCE boot runs the installed startup script for real: ``bash`` in a sandbox directory.

As fake Vast boxes run jobs under a real tmux (fakes/ssh/sandbox.py), a boot of the fake lane
instance runs its ``startup-script`` metadata under ``/bin/bash`` in ``<root>/boot-<n>/``, in
its own session (so the whole boot can be signalled or killed at once), with a minimal
environment: no key or token of the test host reaches it (H3).

- ``bin/`` (first on PATH) holds the fake VM's curl, gsutil, gcloud, poweroff, shutdown, sleep
  and df (fakes/gce/shim.py), all talking to the FakeGCE server on loopback;
- ``python3`` is the real interpreter, with ``site/`` on PYTHONPATH: the modules the fake
  VM image has installed (``LaneScenario.installed``) as empty stubs, and each of
  ``broken_imports`` as a module whose import fails;
- ``GPUOPS_LANE_ROOT`` is the sandbox: the template keeps ``/work``, ``/var/log`` and ``/tmp``
  under it (on a VM it is unset and they are the real ones);
- ``work/job.py`` is the fake image's workload: it sleeps ``job_runtime_s`` on the fake clock
  (through the sleep shim) and writes ``results`` files under ``work/results/``.

Nothing but the script's own ``poweroff``/``shutdown`` powers the fake VM off. A boot's
processes are killed when the instance reaches TERMINATED, and by ``stop`` (a test's teardown,
``gpuops fakes serve`` exiting).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SHIM = Path(__file__).resolve().with_name("shim.py")
PROGRAMS = ("curl", "gsutil", "gcloud", "poweroff", "shutdown", "sleep", "df")
# How long ``settle`` waits for a boot to block or end before saying so loudly; generous,
# since a loaded 2-core test host can take seconds to start a handful of processes.
SETTLE_TIMEOUT = 120.0
SETTLE_POLL = 0.01
# Quiet snapshots, SETTLE_POLL apart, that must agree (same processes, states and CPU time)
# before a boot counts as blocked on the fake clock.
QUIET_SNAPSHOTS = 3

JOB_PY = '''"""The fake VM image's workload: {runtime} fake seconds, {results} results spread over it."""
import os, subprocess
work = os.path.dirname(os.path.abspath(__file__))
n = {results}
for i in range(max(n, 1)):
    subprocess.run(["sleep", repr({runtime} / max(n, 1))], check=True)
    if i < n:
        with open(os.path.join(work, "results", f"out-{{i + 1:03d}}.png"), "wb") as f:
            f.write(b"png")
        print(f"result {{i + 1}}/{{n}}", flush=True)
'''


@dataclass
class Boot:
    """One boot's process session and sandbox."""

    number: int
    sandbox: Path
    process: subprocess.Popen[bytes]
    sleepers: dict[int, float] = field(default_factory=dict)  # pid -> fake wake time
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every process of the boot, as systemd does at shutdown.

        Only while some process of the boot's session is alive: then its id (the session's
        and the group's) cannot have been reused. Once the session is empty the number is
        free, may already lead somebody else's process group, and is never signalled."""
        if self.killed or not self.processes():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        """The VM is gone: every process of the boot dies now. Returns once none is left
        (a SIGKILL is delivered when its process next runs: on a loaded host one may still
        show as running just after the group kill; any left in the session is killed by pid,
        while the session still has it, so the number cannot have been reused)."""
        self.signal(signal.SIGKILL)
        self.killed = True
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=SETTLE_TIMEOUT)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while (left := self.processes()) and time.monotonic() < deadline:
            for pid, (_, state, _) in left.items():
                if state != "Z":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(SETTLE_POLL)

    def processes(self) -> dict[int, tuple[int, str, int]]:
        """pid -> (parent pid, state, CPU ns so far) of every live process in the boot's
        session.

        Every process on the host is asked its session with ``getsid`` (one system call) and
        only the boot's own are read from /proc: a settle takes many of these snapshots, and
        reading every process's stat file for each cost several times more CPU, on a test
        host running hundreds of processes. The stat file still decides (its session too)."""
        found: dict[int, tuple[int, str, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if os.getsid(int(entry)) != self.pid:
                    continue
                raw = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            rest = raw[raw.rindex(")") + 2 :].split()
            state, ppid, session = rest[0], int(rest[1]), int(rest[3])
            if session == self.pid and state != "X" and not (state == "Z" and ppid == 1):
                try:
                    ran = int(Path(f"/proc/{entry}/schedstat").read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    ran = -1
                found[int(entry)] = (ppid, state, ran)
        return found

    def blocked(self, now: float) -> bool:
        """True when nothing in the boot can move before the fake clock does: every leaf
        process is a sleep waiting for a later fake time, every other one is waiting on its
        children, and two snapshots a moment apart agree (a process that exits between the
        listing and the read cannot hide a step, nor one that used the CPU between two
        snapshots). A boot with no process left is blocked."""
        if self.killed:
            return True
        self.process.poll()  # reap the script itself once it has exited
        first = self._quiet(now)
        if first is None:
            return False
        for _ in range(QUIET_SNAPSHOTS):
            time.sleep(SETTLE_POLL)
            if self._quiet(now) != first:  # a process came, went, or used the CPU
                return False
        return True

    def _quiet(self, now: float) -> dict[int, tuple[int, str, int]] | None:
        sleepers = dict(self.sleepers)
        procs = self.processes()
        parents = {ppid for ppid, _, _ in procs.values()}
        for pid, (_, state, _) in procs.items():
            if state not in ("S",):
                return None  # running, in I/O, a zombie not yet reaped: busy
            if pid not in parents and sleepers.get(pid, now) <= now:
                return None  # a leaf that is not a sleep waiting for the fake clock
        return procs


def make_sandbox(
    root: Path,
    number: int,
    *,
    installed: tuple[str, ...],
    broken: tuple[str, ...],
    runtime_s: float,
    results: int,
) -> Path:
    sandbox = root / f"boot-{number}"
    for sub in ("bin", "site", "work/results", "work/inputs", "var/log", "tmp"):
        (sandbox / sub).mkdir(parents=True, exist_ok=True)
    for program in PROGRAMS:
        shim = sandbox / "bin" / program
        shim.write_text(f'#!/bin/sh\nexec /usr/bin/python3 -S {SHIM} {program} "$@"\n')
        shim.chmod(0o755)
    for module in installed:
        top = sandbox / "site" / module.split(".")[0]
        top.mkdir(exist_ok=True)
        (top / "__init__.py").write_text('"""A stub: installed on the fake VM image."""\n')
    for module in broken:
        first = module.split(".")[0]
        (sandbox / "site" / f"{first}.py").write_text(
            f'raise ImportError("{module}: broken on this fake VM image (scenario)")\n'
        )
        if (sandbox / "site" / first).is_dir():
            (sandbox / "site" / first / "__init__.py").write_text(
                f'raise ImportError("{module}: broken on this fake VM image (scenario)")\n'
            )
    (sandbox / "work" / "job.py").write_text(
        JOB_PY.format(runtime=f"{runtime_s:g}", results=results)
    )
    return sandbox


STARTUP_SCRIPT = "startup-script"  # the boot runs `bash <sandbox>/startup-script`


def spawn(
    sandbox: Path, number: int, script: str, *, server: str, disk_gb: int
) -> subprocess.Popen[bytes]:
    path = sandbox / STARTUP_SCRIPT
    path.write_text(script)
    env = {
        "PATH": f"{sandbox / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(sandbox),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(sandbox / "site"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "GPUOPS_LANE_ROOT": str(sandbox),
        "GPUOPS_FAKE_GCE": server,
        "GPUOPS_FAKE_BOOT": str(number),
        "GPUOPS_FAKE_DISK_GB": str(disk_gb),
    }
    return subprocess.Popen(
        ["/bin/bash", str(path)],
        cwd=sandbox,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=open(sandbox / "console.txt", "wb"),  # noqa: SIM115 (the child keeps it)
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_blocked(
    boots: list[Boot], now: Callable[[], float], timeout: float = SETTLE_TIMEOUT
) -> None:
    """Wait (real time) until every boot is blocked on the fake clock or has ended."""
    deadline = time.monotonic() + timeout
    while not all(boot.blocked(now()) for boot in boots):
        if time.monotonic() > deadline:
            busy = [boot.number for boot in boots if not boot.blocked(now())]
            print(f"FakeGCE: boots {busy} still busy after {timeout:g} s", file=sys.stderr)
            return
        time.sleep(SETTLE_POLL)
