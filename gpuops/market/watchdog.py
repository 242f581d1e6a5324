"""Detached jobs under tmux and the watchdog's judgment (M10): pure scripts and verdicts.

A job runs on the box in ``$HOME/gpuops/<NAME>/`` inside the tmux session ``gpuops-<NAME>``:
its output goes to ``log`` and, when the command ends, its exit status to ``exit_code``
(written to a temporary name, then renamed, so it is never read half-written). The results it
declares (default ``results/``, relative to the job's directory) are what the guardian copies
off before the deadline.

Dead is a fact: the tmux session is gone, or an exit code was recorded. Stalled is a
judgment: no log progress for STALL_THRESHOLD_S, by the box's own clock. A stalled job is
reported and alerted on, never acted on (M10). An unreachable box is unknown, not dead.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from gpuops import timing
from gpuops.errors import ExitCode, UsageError

JOBS_DIR = "gpuops"  # under the box user's $HOME
DEFAULT_RESULTS = "results"
_EOF = "GPUOPS_JOB_EOF"
_RESULTS = re.compile(r"[A-Za-z0-9_./-]{1,255}")
ALREADY_RUNNING = 17  # the start script's exit status when the session already exists
NO_TMUX = 18  # ... and when tmux is not installed on the box


class JobState(Enum):
    RUNNING = "running"
    DEAD = "dead"  # a fact: act on it
    STALLED = "stalled"  # a judgment: alert only, the box is never touched
    UNKNOWN = "unknown"  # the box could not be asked
    NO_JOB = "no job"  # no job was ever started on the box: nothing to watch (exit 5)


@dataclass(frozen=True)
class Observation:
    """One look at the job, parsed from :func:`observe_script`'s output."""

    tmux: bool  # tmux is installed on the box
    session: bool  # the job's tmux session exists
    box_now: int  # the box's clock, epoch seconds
    exit_code: str | None = None  # the exit_code file's content, when the job ended
    log_bytes: int | None = None
    log_mtime: int | None = None  # by the box's clock
    last_line: str = ""


@dataclass(frozen=True)
class Status:
    state: JobState
    detail: str
    exit_code: int | None = None  # the job's own exit status, once dead

    @property
    def succeeded(self) -> bool:
        return self.state is JobState.DEAD and self.exit_code == 0


def session_name(name: str) -> str:
    return f"gpuops-{name}"


def job_dir(name: str) -> str:
    """The job's directory on the box, as a shell word (``$HOME`` expands there)."""
    return f'"$HOME/{JOBS_DIR}/{name}"'


def check_results(path: str) -> str:
    """A results path: relative to the job directory, plain characters, no '..'."""
    if not _RESULTS.fullmatch(path) or path.startswith(("/", "-")) or ".." in path.split("/"):
        raise UsageError(
            f"results path {path!r} must be relative to the job directory, "
            "with letters, digits and _./- only, and no '..'"
        )
    return path


def shell_command(argv: Sequence[str]) -> str:
    """The command as the box's shell runs it: one argument is a shell string, several are
    quoted word by word (as `ssh host a b` would not)."""
    if not argv or not any(part.strip() for part in argv):
        raise UsageError("give the job's command after --, e.g. gpuops run NAME -- python train.py")
    command = argv[0] if len(argv) == 1 else shlex.join(argv)
    if any(line.strip() == _EOF for line in command.splitlines()):
        raise UsageError(f"the command may not contain a line reading {_EOF}")
    return command


def start_script(name: str, command: str) -> str:
    """Start ``command`` detached under tmux, unless this job's session already exists."""
    session = session_name(name)
    return "\n".join(
        [
            f"command -v tmux >/dev/null 2>&1 || {{ echo 'gpuops: tmux is not installed' >&2; "
            f"exit {NO_TMUX}; }}",
            f"J={job_dir(name)}",
            'mkdir -p "$J" && cd "$J" || exit 1',
            f"if tmux has-session -t ={session} 2>/dev/null; then",
            f"  echo 'gpuops: the job is already running in tmux session {session}' >&2",
            f"  exit {ALREADY_RUNNING}",
            "fi",
            "rm -f exit_code exit_code.partial",
            f"cat > job.sh <<'{_EOF}'",
            'cd "$(dirname "$0")"',
            "(",
            command,
            ") >> log 2>&1",
            "echo $? > exit_code.partial && mv exit_code.partial exit_code",
            _EOF,
            ": > log",
            f'tmux new-session -d -s {session} -c "$J" "sh job.sh" || exit 1',
            'echo "started in $J"',
        ]
    )


def observe_script(name: str) -> str:
    """Print what the watchdog judges, one ``key=value`` per line."""
    return "\n".join(
        [
            f"J={job_dir(name)}",
            "if command -v tmux >/dev/null 2>&1; then echo tmux=1; else echo tmux=0; fi",
            f"if tmux has-session -t ={session_name(name)} 2>/dev/null; "
            "then echo session=1; else echo session=0; fi",
            'if [ -f "$J/exit_code" ]; then echo "exit_code=$(head -c 64 "$J/exit_code")"; fi',
            'if [ -f "$J/log" ]; then',
            '  echo "log_bytes=$(wc -c < "$J/log")"',
            '  echo "log_mtime=$(stat -c %Y "$J/log")"',
            # the newest progress: after the last carriage return of the last non-blank line
            "  echo \"last_line=$(tail -c 4096 \"$J/log\" | tr '\\r' '\\n' "
            "| grep -av '^[[:space:]]*$' | tail -n 1 | cut -c1-200)\"",
            "fi",
            'echo "now=$(date +%s)"',
        ]
    )


NO_RESULTS = 19  # the results script's exit status when the directory does not exist


def results_script(name: str, results: str) -> str:
    """Stream the job's results directory as a gzipped tar on stdout."""
    quoted = shlex.quote(check_results(results))
    return (
        f'J={job_dir(name)}; cd "$J" || exit 1; '
        f"if [ -d {quoted} ]; then tar -C {quoted} -czf - .; else "
        f"echo 'gpuops: the job has no results directory {results}' >&2; exit {NO_RESULTS}; fi"
    )


def parse_observation(stdout: str) -> Observation:
    """Parse :func:`observe_script`'s output; missing or malformed required lines are a
    UsageError naming the line, never a guess."""
    seen: dict[str, str] = {}
    # the shell ends lines at "\n" only: str.splitlines() would also split at \f, \v, \x1c,
    # \u2028..., and let a job's log line forge an exit code
    for line in stdout.split("\n"):
        line = line.removesuffix("\r")
        key, sep, value = line.partition("=")
        if sep and key in _KEYS and key not in seen:
            seen[key] = value.strip() if key != "last_line" else value
    for required in ("tmux", "session", "now"):
        if required not in seen:
            raise UsageError(f"the job's status has no {required!r} line: {stdout[-200:]!r}")
    return Observation(
        tmux=_flag(seen, "tmux"),
        session=_flag(seen, "session"),
        box_now=_int(seen, "now"),
        exit_code=seen.get("exit_code"),
        log_bytes=_int(seen, "log_bytes") if "log_bytes" in seen else None,
        log_mtime=_int(seen, "log_mtime") if "log_mtime" in seen else None,
        last_line=seen.get("last_line", ""),
    )


_KEYS = frozenset({"tmux", "session", "exit_code", "log_bytes", "log_mtime", "last_line", "now"})


def _flag(seen: dict[str, str], key: str) -> bool:
    if seen[key] not in ("0", "1"):
        raise UsageError(f"the job's status line {key}={seen[key]!r} is not 0 or 1")
    return seen[key] == "1"


def _int(seen: dict[str, str], key: str) -> int:
    try:
        return int(seen[key])
    except ValueError:
        raise UsageError(f"the job's status line {key}={seen[key]!r} is not a number") from None


def judge(obs: Observation, *, started: bool = True) -> Status:
    """Running, dead (a fact) or stalled (a judgment), from one observation (M10).

    ``started`` is whether our own records say a job was started on this box: without one, a
    box with no session, no exit code and no log never ran a job (not dead, nothing to act on);
    with one, the same look is a job whose traces were lost (dead)."""
    if obs.exit_code is not None:  # a recorded exit code is a fact, whatever else is true
        try:
            code = int(obs.exit_code)
        except ValueError:
            return Status(JobState.DEAD, f"ended; its exit code file holds {obs.exit_code!r}")
        word = "succeeded" if code == 0 else "failed"
        return Status(JobState.DEAD, f"{word} with exit code {code}", code)
    if not obs.tmux:
        return Status(JobState.UNKNOWN, "tmux is not installed on the box")
    if not obs.session and obs.log_mtime is None and not started:
        # the start script creates the log before tmux starts: no log and no record of a start
        return Status(
            JobState.NO_JOB, "no job was ever started on this box (gpuops run NAME -- CMD)"
        )
    if not obs.session:
        return Status(
            JobState.DEAD,
            "the tmux session is gone and no exit code was recorded (killed, or the box rebooted)",
        )
    if obs.log_mtime is None:
        return Status(JobState.RUNNING, "running; no log yet")
    quiet_s = obs.box_now - obs.log_mtime
    if quiet_s >= timing.STALL_THRESHOLD_S:
        return Status(
            JobState.STALLED,
            f"no log progress for {quiet_s} s (alert only; the box is left alone): "
            f"{obs.last_line!r}",
        )
    return Status(JobState.RUNNING, f"running; log {obs.log_bytes} bytes: {obs.last_line!r}")


def unreachable(detail: str) -> Status:
    """The box could not be asked: unknown, never dead (M10, L9)."""
    return Status(JobState.UNKNOWN, f"cannot reach the box: {detail}")


def settled(status: Status) -> bool:
    """Whether watching longer can change the answer: a dead job, or no job at all."""
    return status.state in (JobState.DEAD, JobState.NO_JOB)


def watch_exit_code(status: Status) -> int:
    """`gpuops watch`: 0 a job that succeeded, 6 a dead job otherwise, 5 anything still open."""
    if status.state is JobState.DEAD:
        return ExitCode.OK if status.exit_code == 0 else ExitCode.FAILED
    return ExitCode.UNKNOWN
