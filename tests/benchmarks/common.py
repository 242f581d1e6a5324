"""What every benchmark shares: the machine's load beside each figure, interleaved A/B timing,
the installed `gpuops` entry point, and cleaning up every process a benchmark started."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load() -> str:
    """The 1-minute load average over the core count, as printed beside every figure."""
    return f"load {os.getloadavg()[0]:.2f}/{os.cpu_count()} cores"


def gpuops_argv() -> list[str]:
    """How a user runs the tool: the installed entry point beside this Python."""
    entry = Path(sys.executable).with_name("gpuops")
    found = str(entry) if entry.exists() else shutil.which("gpuops")
    return [found] if found else [sys.executable, "-m", "gpuops"]


def interleaved(
    cases: Mapping[str, Sequence[str]],
    runs: int,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, list[float]]:
    """Wall seconds of each case, run round-robin (A B C A B C ...) so load drift hits all."""
    times: dict[str, list[float]] = {label: [] for label in cases}
    for _ in range(runs):
        for label, argv in cases.items():
            start = time.perf_counter()
            subprocess.run(
                list(argv),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=True,
                env=None if env is None else {**os.environ, **env},
                cwd=cwd,
            )
            times[label].append(time.perf_counter() - start)
    return times


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def stop(process: subprocess.Popen[bytes]) -> None:
    """End a process this benchmark started (its group if it made one), and reap it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Make every process this one starts, however detached, stay our descendant (Linux)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def descendants() -> dict[int, str]:
    """pid -> command line of every live (not zombie) process under this one."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state not in ("Z", "X"):
            parents[int(entry)] = int(ppid)
            names[int(entry)] = cmd.decode(errors="replace").strip()
    me, found = os.getpid(), {}
    for pid in parents:
        up = parents.get(pid)
        while up is not None and up > 1:
            if up == me:
                found[pid] = names[pid]
                break
            up = parents.get(up)
    return found


def end_leftovers() -> list[str]:
    """Reap finished children, then name and kill (by pid) every descendant still alive: what
    a benchmark should have ended itself."""
    import contextlib
    import signal

    reap()
    left = descendants()
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    reap()
    return [f"{pid} {cmd[:80]}" for pid, cmd in sorted(left.items())]


def reap() -> None:
    """Collect the exit status of every finished child (orphans re-parented to us included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
