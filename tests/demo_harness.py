"""Runs `gpuops demo` (or a slice of it, or with one rule broken) as a child of a subreaper.

    python tests/demo_harness.py OUT.json [--acts A,B] [--break NAME] [--interrupt-on TEXT]
                                 [--keep DIR] [--json]

Every process the demo starts that outlives it (a guardian in its own session, a daemonised
tmux server, a fake boot) is re-parented here rather than to init, so what is still running
once the demo has exited is exactly what it left behind. Writes {"rc", "stdout", "stderr",
"left"} to OUT.json, then ends whatever was left, so a failing test leaves nothing either.
With --interrupt-on, the demo runs in its own process group and gets SIGINT there (as a
terminal's Ctrl-C sends it) as soon as a line of its output contains TEXT: an event, not a time.
With --keep, the demo's scratch directory (its state, its results, its fakes' files) is DIR, an
empty 0700 directory the caller made, and is left there to be judged; the demo runs under umask
002 (a common login default: group-writable unless gpuops chose a mode itself).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from gpuops import procs

ROOT = Path(__file__).resolve().parent.parent

# A rule broken on purpose, inside the demo's process, before it runs.
BREAKS = {
    # the linter accepts anything: the typo'd script is installed (L4 must be seen to fail)
    "lint": "import gpuops.lane.script as s; s.lint = lambda text, job: []",
    # the fake never destroys the kept box: it answers 503 to every destroy of that offer
    "destroy": (
        "import gpuops.demo.market as m; doc = m.scenario_doc; "
        "m.scenario_doc = lambda: {**doc(), 'vast': {**doc()['vast'], 'faults': "
        "{'destroy_failures': [{'offer': 18432117, 'count': 100000, 'status': 503}]}}}"
    ),
}

# The demo's scratch directory is a given one, kept (not a temporary one, removed).
KEEP = (
    "import contextlib, os, types, gpuops.demo as d\n"
    "os.umask(0o002)\n"
    "d.tempfile = types.SimpleNamespace(\n"
    "    TemporaryDirectory=lambda prefix: contextlib.nullcontext({keep!r}))\n"
)


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    acts, broken, interrupt_on, keep, rest = "lane,market", None, None, None, argv[1:]
    while rest and rest[0] in ("--acts", "--break", "--interrupt-on", "--keep"):
        if rest[0] == "--acts":
            acts = rest[1]
        elif rest[0] == "--break":
            broken = rest[1]
        elif rest[0] == "--keep":
            keep = rest[1]
        else:
            interrupt_on = rest[1]
        rest = rest[2:]
    procs.become_subreaper()
    code = (
        # Ctrl-C reaches the demo as it reaches a terminal's: a suite started in the background
        # of a non-interactive shell passes SIGINT down ignored, and Python keeps it so
        "import signal, sys\n"
        + "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        + (BREAKS[broken] + "\n" if broken else "")
        + (KEEP.format(keep=keep) if keep else "")
        + "from gpuops.demo import run_demo\n"
        + "from gpuops.settings import Settings\n"
        + "settings = Settings.from_environ()\n"
        + f"sys.exit(run_demo(settings, 'alice', {'--json' in rest}, tuple({acts.split(',')!r})))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=interrupt_on is not None,
    )
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True)
    reader.start()
    lines, interrupted = [], False
    for line in proc.stdout:
        lines.append(line)
        if interrupt_on is not None and not interrupted and interrupt_on in line:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
            interrupted = True
    rc = proc.wait()
    reader.join()
    left = _descendants()
    out.write_text(
        json.dumps(
            {"rc": rc, "stdout": "".join(lines), "stderr": "".join(errors),
             "interrupted": interrupted, "left": sorted(left.values())}  # fmt: skip
        )
    )
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return 0


def _descendants() -> dict[int, str]:
    """pid -> command line of every live (not zombie) process under this one."""
    return {pid: " ".join(argv) for pid, argv in procs.descendants().items()}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
