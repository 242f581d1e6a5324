"""Where a fake box runs real commands: a sandbox directory per box, with its own tmux server.

Any command that is not a probe step runs for real, under ``sh -c``, with the box's sandbox as
``$HOME`` and working directory, so ``gpuops run`` and ``gpuops watch`` drive real processes
under a real local tmux (M10 is tested on real deaths and stalls). Each box gets its own tmux
server (``TMUX_TMPDIR``), which is killed when FakeVast destroys the box, as a destroyed box's
jobs die with it. The environment is a fresh minimal one: no key or token reaches a box (H3).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def sandbox_dir(table: Path, seed: str) -> Path:
    """The sandbox of the box whose host-key seed is ``seed`` (both its endpoints share it)."""
    return table.resolve().parent / "sandboxes" / _UNSAFE.sub("_", seed)


def tmux_tmpdir(sandbox: Path) -> Path:
    """A short TMUX_TMPDIR for the box: socket paths must stay under 108 bytes."""
    digest = hashlib.sha1(str(sandbox).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"gpuops-tmux-{digest}"


def environment(sandbox: Path) -> dict[str, str]:
    return {
        "HOME": str(sandbox),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SHELL": "/bin/sh",
        "LANG": "C.UTF-8",
        "USER": "root",
        "TMUX_TMPDIR": str(tmux_tmpdir(sandbox)),
    }


def start(sandbox: Path, command: str) -> subprocess.Popen[bytes]:
    """Start ``command`` as the box's shell would; stdout and stderr pass through as bytes. It
    stays in the fake ssh's process group, so a client that kills the ssh's group ends it."""
    sandbox.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = tmux_tmpdir(sandbox)
    tmp.mkdir(mode=0o700, exist_ok=True)
    (tmp / "sandbox").write_text(str(sandbox))  # who this tmux belongs to, for stop_all
    return subprocess.Popen(["/bin/sh", "-c", command], cwd=sandbox, env=environment(sandbox))


def run(sandbox: Path, command: str) -> int:
    """Run ``command`` to its end (see :func:`start`)."""
    return start(sandbox, command).wait()


def kill(proc: subprocess.Popen[bytes]) -> None:
    """End a command started by :func:`start` and everything it started in this session (a box
    going away); a tmux server it started has its own session and dies with :func:`stop`."""
    for pid in _tree(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def _tree(root: int) -> list[int]:
    """``root`` and its descendants in its session, from /proc (Linux, as the fake ssh is)."""
    children: dict[int, list[int]] = {}
    session = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # it ended while we looked
        pid = int(stat.parent.name)
        children.setdefault(int(fields[1]), []).append(pid)
        session[pid] = int(fields[3])
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if session.get(pid) == session.get(root):
            found.append(pid)
            todo.extend(children.get(pid, []))
    return found


def stop(sandbox: Path) -> None:
    """Kill the box's tmux server and every job in it, and its onstart (fakes/vast/onstart.py),
    as a destroyed box's processes die."""
    pgid = sandbox / ".onstart.pgid"
    with contextlib.suppress(OSError, ValueError):
        leader = int(pgid.read_text())
        pgid.unlink()
        os.killpg(leader, signal.SIGKILL)
    tmp = tmux_tmpdir(sandbox)
    tmux = shutil.which("tmux")
    if tmux is not None and tmp.is_dir():
        subprocess.run(
            [tmux, "kill-server"],
            env=environment(sandbox),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
        )
    shutil.rmtree(tmp, ignore_errors=True)


def stop_all(table: Path) -> None:
    """Stop every sandbox of the box table ``table`` (a fake world shutting down)."""
    root = table.resolve().parent / "sandboxes"
    if root.is_dir():
        for sandbox in root.iterdir():
            stop(sandbox)
