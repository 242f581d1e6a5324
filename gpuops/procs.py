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


class _Hold:
    """Whether the main thread is inside ``interrupts_held``, and the interrupt it holds."""

    holding = False
    held: int | None = None


_HOLD = _Hold()


@contextlib.contextmanager
def interrupts_raised() -> Iterator[None]:
    """Ctrl-C, SIGTERM and a closed terminal (SIGHUP) raise Interrupted in the main thread, so
    the race destroys its candidates before the process exits (M13); restored afterwards.
    Inside ``interrupts_held`` the first one waits for the block's end."""
    import signal
    import sys

    from gpuops.errors import Interrupted

    def stop(signum: int, frame: FrameType | None) -> None:
        if hold_interrupt(signum):
            print(
                "gpuops: interrupted: waiting for the create on the wire to answer, then ending "
                "the race (interrupt again to leave the race to its guardian)",
                file=sys.stderr,
                flush=True,
            )
            return
        raise Interrupted(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, stop) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """A block an interrupt must not cut in two: a create on the wire and the record of its
    answer. Under ``interrupts_raised``, a first interrupt that arrives inside is held and
    raised as Interrupted when the block ends, whatever it ended with; a second is raised at
    once. Without ``interrupts_raised`` (no handler of ours), or off the main thread (signals
    are handled there), nothing is held."""
    import threading

    from gpuops.errors import Interrupted

    if threading.current_thread() is not threading.main_thread() or _HOLD.holding:
        yield
        return
    _HOLD.holding, _HOLD.held = True, None
    try:
        yield
    finally:
        signum, _HOLD.holding, _HOLD.held = _HOLD.held, False, None
        if signum is not None:
            raise Interrupted(signum)


def hold_interrupt(signum: int) -> bool:
    """What ``interrupts_raised``'s handler does with an interrupt first: inside
    ``interrupts_held`` with none held yet, it is held (True: the block's end raises it);
    otherwise False, and the caller raises it now."""
    if _HOLD.holding and _HOLD.held is None:
        _HOLD.held = signum
        return True
    return False


def interrupt_pending() -> bool:
    """Whether ``interrupts_held`` holds an interrupt now (it is raised when the block ends)."""
    return _HOLD.held is not None
