"""A fake box runs its ``onstart`` for real, on the world's clock (M14).

Vast runs an instance's ``onstart`` when its container starts, with the instance's id and its
per-instance key in the environment (``CONTAINER_ID``, ``CONTAINER_API_KEY``). FakeVast does the
same under ``sh`` in the box's sandbox (fakes/ssh/sandbox.py), so whatever gpuops arranges on the
box (its own ceiling) is judged by what really runs, not by reading the script.

The box's clock is the world's: a box under ``gpuops fakes serve`` lives in scaled time, as every
gpuops process on loopback does (GPUOPS_TIME_SCALE, GPUOPS_TIME_ORIGIN). So the sandbox's
``PATH`` starts with two shims: ``date +%s`` prints the box clock's epoch second and ``sleep N``
waits N box seconds; every other use of ``date`` is the real one. The process is its own
session, recorded in the sandbox, and dies with the box (``sandbox.stop``).

One difference from Vast, on purpose: the fake starts ``onstart`` at create, not when the box
reaches ``running`` (minutes later at Vast). A script that waits for an absolute time, as
gpuops' ceiling does, behaves the same either way; one that acts at once would act early here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from fakes.ssh import sandbox
from gpuops.clock import ScaledClock

__all__ = ["PGID_FILE", "start"]

# The onstart's process group, in the sandbox, for sandbox.stop.
PGID_FILE = ".onstart.pgid"
_SHIMS = ".fakebin"


def start(
    box_sandbox: Path, script: str, *, instance_id: int, instance_key: str, clock: ScaledClock
) -> subprocess.Popen[bytes]:
    """Run ``script`` as box ``instance_id``'s onstart, its clock ``clock`` (scaled time)."""
    box_sandbox.mkdir(mode=0o700, parents=True, exist_ok=True)
    shims = box_sandbox / _SHIMS
    shims.mkdir(mode=0o700, exist_ok=True)
    _write_shims(shims, clock)
    env = sandbox.environment(box_sandbox)
    env.update(
        PATH=f"{shims}:{env['PATH']}",
        CONTAINER_ID=str(instance_id),
        CONTAINER_API_KEY=instance_key,
    )
    proc = subprocess.Popen(
        ["/bin/sh", "-c", script],
        cwd=box_sandbox,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    (box_sandbox / PGID_FILE).write_text(str(proc.pid))
    return proc


def _write_shims(shims: Path, clock: ScaledClock) -> None:
    real_date = shutil.which("date") or "/bin/date"
    real_sleep = shutil.which("sleep") or "/bin/sleep"
    box_now, real_now, factor = clock.wall(), time.time(), clock.factor
    scaled = f"{box_now!r} + (r - {real_now!r}) * {factor!r}"
    _shim(
        shims / "date",
        'if [ "$#" -eq 1 ] && [ "$1" = "+%s" ]; then\n'
        f'  exec awk -v r="$({real_date} +%s.%N)" \'BEGIN {{ printf "%d\\n", {scaled} }}\'\n'
        "fi\n"
        f'exec {real_date} "$@"\n',
    )
    _shim(
        shims / "sleep",
        f'exec {real_sleep} "$(awk -v s="$1" \'BEGIN {{ printf "%.3f", s / {factor!r} }}\')"\n',
    )


def _shim(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o700)
