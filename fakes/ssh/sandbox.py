"""Where a fake box runs real commands: a sandbox directory per box, with its own tmux server.

Any command that is not a probe step runs for real, under ``sh -c``, with the box's sandbox as
``$HOME`` and working directory, so ``gpuops run`` and ``gpuops watch`` drive real processes
under a real local tmux (M10 is tested on real deaths and stalls). Each box gets its own tmux
server (``TMUX_TMPDIR``), which is killed when FakeVast destroys the box, as a destroyed box's
jobs die with it. The environment is a fresh minimal one: no key or token reaches a box (H3).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
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


def run(sandbox: Path, command: str) -> int:
    """Run ``command`` as the box's shell would; stdout and stderr pass through as bytes."""
    sandbox.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = tmux_tmpdir(sandbox)
    tmp.mkdir(mode=0o700, exist_ok=True)
    (tmp / "sandbox").write_text(str(sandbox))  # who this tmux belongs to, for stop_all
    return subprocess.call(["/bin/sh", "-c", command], cwd=sandbox, env=environment(sandbox))


def stop(sandbox: Path) -> None:
    """Kill the box's tmux server and every job in it, as a destroyed box's jobs die."""
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
