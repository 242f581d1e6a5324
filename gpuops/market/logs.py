"""A job's log on its box (`gpuops logs NAME`): the scripts that print it, and the stream that
carries it back over ssh.

The job is the one `gpuops run` started (market/watchdog.py): its output goes to
``$HOME/gpuops/<NAME>/log`` on the box, its exit status to ``exit_code`` once it ends. The
scripts here only read that directory. ``tail_script`` prints the last lines; ``follow_script``
prints them, then every byte the log grows by, until the job is no longer running (its exit
code recorded, or its tmux session gone), and says how it ended on stderr (``ENDED``). The
follow is one ssh connection, polling on the box every ``timing.LOGS_FOLLOW_POLL_S``; it stops
on its own if that connection goes (its parent, the ssh session, is gone).

``stream`` runs one such script over ssh (the same argv, pinned host key and scrubbed
environment as every other ssh gpuops runs, jobs.BoxShell) and hands the bytes on as they
arrive, cut at line ends (``LineChunks``), so the printer scrubs whole lines (H3). Bytes are
never decoded here: a log that is not UTF-8 comes back as it is.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gpuops import timing
from gpuops.errors import StillRunning, Unavailable, UsageError
from gpuops.market import watchdog as w
from gpuops.market.jobs import host_key_refused
from gpuops.market.probe import transport_verdict
from gpuops.model import StepOutput, Verdict

NO_LOG = 20  # the scripts' exit status when the box holds no log for the job
ENDED = "gpuops-logs: ended"  # the follow script's last stderr line; `exit_code=N` after it
MAX_LINES = 10_000_000  # `--lines` at most: more than any log a person reads back
CHUNK_BYTES = 65536  # a read from ssh, and the longest piece of a line without an end


def check_lines(lines: int) -> int:
    """``--lines``: a whole number of lines from 1 to MAX_LINES; else a UsageError naming it."""
    if isinstance(lines, bool) or not 1 <= lines <= MAX_LINES:
        raise UsageError(f"--lines must be between 1 and {MAX_LINES:,}, not {lines}")
    return lines


def _no_log(name: str) -> str:
    return (
        f'[ -f "$J/log" ] || {{ echo "gpuops: no job log at $J/log: no job was started on this '
        f'box (gpuops run {name} -- CMD)" >&2; exit {NO_LOG}; }}'
    )


def tail_script(name: str, lines: int) -> str:
    """Print the last ``lines`` lines of the job's log (exit NO_LOG when there is none)."""
    return "\n".join(
        [f"J={w.job_dir(name)}", _no_log(name), f'tail -n {check_lines(lines)} "$J/log"']
    )


def follow_script(name: str, lines: int, poll_s: float = timing.LOGS_FOLLOW_POLL_S) -> str:
    """Print the last ``lines`` lines, then what the log grows by until the job ends; then
    ``ENDED`` (with ``exit_code=`` and the job's exit code when it recorded one) on stderr.

    Whether the job still runs is read *before* the log's size, so what a job wrote before it
    ended is always printed before the loop ends (the job's shell closes the log, then writes
    its exit code). A log that shrinks was started afresh (a new job): it is read from its
    start. The loop also ends, quietly, when its parent (the ssh session) is gone."""
    return "\n".join(
        [
            f"J={w.job_dir(name)}",
            _no_log(name),
            'size() { n=$(wc -c < "$J/log" 2>/dev/null | tr -d " "); echo "${n:-0}"; }',
            "at=$(size)",
            f'head -c "$at" "$J/log" | tail -n {check_lines(lines)}',
            "while :; do",
            f'  if [ -f "$J/exit_code" ] || ! tmux has-session -t ={w.session_name(name)} '
            "2>/dev/null; then ended=1; else ended=0; fi",
            "  now=$(size)",
            '  if [ "$now" -lt "$at" ]; then at=0; fi',
            '  if [ "$now" -gt "$at" ]; then',
            '    tail -c +"$((at + 1))" "$J/log" | head -c "$((now - at))"; at=$now',
            "  fi",
            '  [ "$ended" = 1 ] && break',
            '  kill -0 "$PPID" 2>/dev/null || exit 0',
            f"  sleep {poll_s:g}",
            "done",
            'if [ -f "$J/exit_code" ]; then',
            f'  echo "{ENDED} exit_code=$(head -c 64 "$J/exit_code")" >&2',
            f'else echo "{ENDED}" >&2; fi',
        ]
    )


def ending(stderr: str) -> str | None:
    """How the follow script said the job ended, in words, or None if it never said so."""
    for line in reversed(stderr.split("\n")):
        line = line.removesuffix("\r")
        if line == ENDED:
            return "the job is no longer running: its tmux session is gone, no exit code recorded"
        if line.startswith(f"{ENDED} exit_code="):
            code = line.removeprefix(f"{ENDED} exit_code=").strip()
            word = "succeeded" if code == "0" else "failed" if code.isdigit() else "ended"
            return f"the job {word} with exit code {code}"
    return None


class LineChunks:
    """Bytes cut after their last line end (``\\n`` or ``\\r``, a progress bar's), so every
    piece handed on holds whole lines and a secret is never cut in two by a read; a line with
    no end in CHUNK_BYTES is handed on as it is. Pure."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, data: bytes) -> bytes:
        self.pending += data
        cut = max(self.pending.rfind(b"\n"), self.pending.rfind(b"\r")) + 1
        if cut == 0 and len(self.pending) < CHUNK_BYTES:
            return b""
        cut = cut or len(self.pending)
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> bytes:
        out, self.pending = self.pending, b""
        return out


@dataclass(frozen=True)
class Streamed:
    """How one streamed ssh ended: its exit status (None: stopped at its time limit) and the
    end of what it said on stderr."""

    exit_code: int | None
    stderr: str
    timed_out: bool = False


def stream(
    argv: Sequence[str],
    environ: Mapping[str, str],
    write: Callable[[bytes], None],
    *,
    timeout_s: float | None,
) -> Streamed:
    """Run ``argv`` (an ssh) with its stdout handed to ``write`` as it arrives, in whole lines
    (LineChunks), and its stderr kept. ``timeout_s`` None: until it ends. The ssh runs in a
    session of its own; whatever stops this call (a time limit, Ctrl-C, a signal turned into an
    exception) kills its process group and reaps it first."""
    from gpuops.providers.ssh import end_group, spawn

    started: list[subprocess.Popen[bytes]] = []
    try:  # a signal at any point from here on ends the child (spawn puts it in ``started``)
        proc = spawn(argv, environ, started)
    except BaseException:
        for child in started:
            end_group(child)
        raise
    assert proc.stdout is not None and proc.stderr is not None
    err = bytearray()
    expired = threading.Event()
    drain = threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True)
    timer = None
    try:
        drain.start()
        if timeout_s is not None:

            def expire() -> None:
                expired.set()
                end_group(proc)

            timer = threading.Timer(timeout_s, expire)
            timer.daemon = True
            timer.start()
        chunks = LineChunks()
        while data := os.read(proc.stdout.fileno(), CHUNK_BYTES):
            write(chunks.feed(data))
        write(chunks.flush())
        code = proc.wait()
    except BaseException:
        end_group(proc)
        raise
    finally:
        if timer is not None:
            timer.cancel()
        if drain.ident is not None:  # started: it ends when the pipe closes
            drain.join()
        proc.stdout.close()
        proc.stderr.close()
    said = bytes(err).decode("utf-8", errors="replace")
    return Streamed(None if expired.is_set() else code, said, timed_out=expired.is_set())


def _drain(pipe: IO[bytes], into: bytearray) -> None:
    """Keep the last CHUNK_BYTES of a pipe until it closes (ssh's stderr: never a full pipe)."""
    while data := os.read(pipe.fileno(), CHUNK_BYTES):
        into += data
        del into[:-CHUNK_BYTES]


def judged(name: str, out: Streamed, known_hosts: Path) -> str | None:
    """What a streamed log's end means: None when it was all printed, else raises the typed
    error (no log: StillRunning, exit 5; a changed host key: Refused M2, exit 3; anything else
    from ssh or the box: Unavailable, exit 4). After a follow: how the job ended, in words."""
    if out.exit_code == 0:
        return ending(out.stderr)
    if out.exit_code == NO_LOG:
        raise StillRunning(
            f"{name}: no job log on its box: no job was started there (gpuops run {name} -- CMD)"
        )
    step = StepOutput(out.exit_code, "", out.stderr, out.timed_out)
    if transport_verdict(step) is Verdict.SSH_HOST_KEY_CHANGED:
        raise host_key_refused(name, known_hosts)
    if out.timed_out:
        why = "ssh timed out"
    else:
        lines = out.stderr.strip().splitlines()
        why = f"exit {out.exit_code}: {lines[-1] if lines else 'no message'}"
    raise Unavailable(f"could not read {name}'s job log from its box ({why})")
