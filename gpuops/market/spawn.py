"""Starting a guardian fully detached from the launching process (M5).

``spawn`` starts ``gpuops guard NAME --foreground`` in its own session, stdin from /dev/null,
output to a log in the state directory, so closing the launching shell, killing its process
group or the watcher leaves it running; it returns once the guardian has reported in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import GpuopsError
from gpuops.market import guardian as g
from gpuops.market.rentals import Rental, check_lease_key, check_name
from gpuops.private import open_private, private_dirs
from gpuops.settings import Settings
from gpuops.store.base import Store


@dataclass(frozen=True)
class Spawned:
    pid: int
    log: Path


def spawn(
    name: str,
    settings: Settings,
    operator: str,
    key: str | None = None,
    *,
    clock: Clock = SYSTEM,
) -> Spawned:
    """Start a guardian fully detached from this process, and wait for it to report in. It
    runs with the environment this command's Settings were read from (the same endpoints,
    keys and time scale), and logs under the per-host directory. ``key``: the incarnation's
    lease key (rentals.lease_key), which names its pid file: a guardian still ending an
    earlier incarnation of the name never stands in for this one's (M16). ``clock``: what the
    wait for its report reads and sleeps on."""
    folder = private_dirs(settings.local_dir / "guardians")
    log = folder / f"{check_name(name)}.log"
    argv = [sys.executable, "-m", "gpuops", "guard", name, "--foreground"]
    argv += ["--state", settings.state_url, "--operator", operator]
    fd = open_private(log, os.O_WRONLY | os.O_APPEND)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # its own session: no terminal, no shared process group
            close_fds=True,
            cwd="/",
            env=settings.child_environ(),
        )
    finally:
        os.close(fd)
    ready = f"(pid {proc.pid})"
    ends = clock.monotonic() + timing.GUARD_SPAWN_WAIT_S
    while clock.monotonic() < ends:
        code = proc.poll()
        text = log.read_text(errors="replace")
        if ready in text:
            _write_pid(folder / f"{check_lease_key(key or name)}.pid", proc.pid)
            return Spawned(proc.pid, log)
        if code is not None:
            tail = "\n".join(text.splitlines()[-5:])
            raise GuardFailed(f"the guardian for {name!r} exited {code} at start:\n{tail}")
        clock.sleep(timing.GUARD_SPAWN_POLL_S)
    raise GuardFailed(f"the guardian for {name!r} (pid {proc.pid}) did not report in; see {log}")


class GuardFailed(GpuopsError):
    """A guardian could not be started: the box has no ceiling, which is loud (M5)."""


def _write_pid(path: Path, pid: int) -> None:
    """Which guardian of a rental this host started last, written whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{pid}\n")
    os.replace(tmp, path)


def running_here(name: str, settings: Settings, key: str | None = None) -> int | None:
    """The pid of a guardian of ``name`` (of incarnation ``key``) this host started and that
    still runs (asked of the process itself: its command line must be that guardian's)."""
    path = settings.local_dir / "guardians" / f"{check_lease_key(key or name)}.pid"
    try:
        pid = int(path.read_text())
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if f"\0guard\0{name}\0".encode() in command else None


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (a zombie counts until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's: it exists
    return True


def already_guarded(
    name: str,
    lease: g.Lease | None,
    now: float,
    here: str,
    settings: Settings,
    key: str | None = None,
) -> str | None:
    """Why no guardian need start for ``name``, or None: start one (M5, M7, M17). A lease
    held on this host is judged by its holder's process and our one clock; one held from
    another host cannot be judged without watching it, so a guardian starts here too, as a
    standby that takes over a TTL after the holder stops (once per host: a guardian this
    host started that still runs is enough)."""
    verdict = g.judge_lease(lease, now, here, alive)
    if verdict is g.Guarded.LIVE and lease is not None:
        return f"already guarded by {lease.holder}"
    pid = running_here(name, settings, key)
    if pid is not None:
        return f"already guarded here by guardian pid {pid}"
    return None


def ensure_guardian(
    rental: Rental,
    settings: Settings,
    store: Store,
    now: float,
    host: str,
    operator: str,
    *,
    standby: bool = False,
) -> dict[str, Any]:
    """M5: a rented box gets a detached guardian, unless a live one already guards it: the
    lease and pid file of ``rental``'s own incarnation (M16), as the race returned it
    (``standby``: start one all the same, a backup). What happened, as `rent`, `guard` and the
    demo show it: the pid and log, or the holder and why not."""
    from gpuops.market.leases import Leases
    from gpuops.market.rentals import lease_key

    name, key = rental.name, lease_key(rental)
    lease, _ = Leases(store).read(key)
    why = already_guarded(name, lease, now, host, settings, key)
    if why is not None and not standby:
        return {"holder": lease.holder if lease else None, "detail": why}
    spawned = spawn(name, settings, operator, key)
    return {
        "pid": spawned.pid,
        "log": str(spawned.log),
        "detail": f"guardian pid {spawned.pid} runs detached until the deadline; log {spawned.log}",
    }
