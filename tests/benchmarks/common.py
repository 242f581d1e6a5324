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

from gpuops import procs

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


def descendants() -> dict[int, str]:
    """pid -> command line of every live (not zombie) process under this one."""
    return {pid: " ".join(argv) for pid, argv in procs.descendants().items()}


def end_leftovers() -> list[str]:
    """Reap finished children, then name and kill (by pid) every descendant still alive: what
    a benchmark should have ended itself."""
    import contextlib
    import signal

    procs.reap()
    left = descendants()
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    procs.reap()
    return [f"{pid} {cmd[:80]}" for pid, cmd in sorted(left.items())]
