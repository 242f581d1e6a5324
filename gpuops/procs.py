"""The processes under this one, read from /proc (Linux): for whatever must leave nothing running
behind it (the demo's keeper, and the test and benchmark harnesses).

A child subreaper (``become_subreaper``) keeps every process it starts, however detached, as
its descendant, so ``descendants`` finds what would otherwise be re-parented to init, and
``reap`` collects their exit statuses so none lingers as a zombie.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

PR_SET_CHILD_SUBREAPER = 36  # prctl(2); not inherited by children


def become_subreaper() -> None:
    """Make this process the reaper of every orphan below it. OSError when the kernel refuses;
    AttributeError where libc has no prctl."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def descendants(of: int | None = None) -> dict[int, list[str]]:
    """pid -> argv of every live (not zombie) process below ``of`` (default: this one)."""
    top = os.getpid() if of is None else of
    parents: dict[int, int] = {}
    argvs: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state not in ("Z", "X"):
            parents[int(entry)] = int(ppid)
            argvs[int(entry)] = [part.decode(errors="replace") for part in cmd if part]
    found: dict[int, list[str]] = {}
    for pid in parents:
        up, seen = parents.get(pid), {pid}
        while up is not None and up > 1 and up not in seen:  # a pid reused mid-read: no loop
            if up == top:
                found[pid] = argvs[pid]
                break
            seen.add(up)
            up = parents.get(up)
    return found


def reap() -> None:
    """Collect the exit status of every finished child (orphans re-parented to us included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """Ctrl-C, SIGTERM and a closed terminal (SIGHUP) raise Interrupted in the main thread, so
    the race destroys its candidates before the process exits (M13); restored afterwards."""
    import signal

    from gpuops.errors import Interrupted

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
