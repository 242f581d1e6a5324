"""Starting a guardian fully detached from the launching process (M5).

``spawn`` starts ``gpuops guard NAME --foreground`` in its own session, stdin from /dev/null,
output to a log in the state directory, so closing the launching shell, killing its process
group or the watcher leaves it running; it returns once the guardian has reported in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpuops import timing
from gpuops.errors import GpuopsError
from gpuops.market.rentals import check_name
from gpuops.settings import Settings


@dataclass(frozen=True)
class Spawned:
    pid: int
    log: Path


def spawn(name: str, settings: Settings, operator: str) -> Spawned:
    """Start a guardian fully detached from this process, and wait for it to report in. It
    runs with the environment this command's Settings were read from (the same endpoints,
    keys and time scale), and logs under the per-host directory."""
    folder = settings.local_dir / "guardians"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = folder / f"{check_name(name)}.log"
    argv = [sys.executable, "-m", "gpuops", "guard", name, "--foreground"]
    argv += ["--state", settings.state_url, "--operator", operator]
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
            env=settings.child_environ(),
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
