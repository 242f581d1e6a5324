"""The startup-script contract (L5, L6), its template, and the linter `lane install` runs.

A lane job is a startup script attached as instance metadata: the machine boots, runs it,
uploads results and powers itself off. Every lane incident (docs/rules.md) that "looked like
nothing" was a script that broke the contract: reports uploaded under a misspelt job name,
an import that failed a whole boot later, a reused script fetching inputs never staged. So
the script is checked *before anything boots*: ``lint`` returns every breach, each naming
its rule, and ``unconditional_fetches`` gives what the script will fetch whatever happens
(compared with the job's staged inputs by the runner, L10).

Paths in the bucket, all under ``jobs/<job>/``: ``boot/<attempt>`` (the boot marker: this
attempt's id, read from the ``gpuops-attempt`` metadata key the runner sets before each
start, L2), ``status`` (one line: stage, attempt, reason), ``log.txt``, ``inputs/``,
``results/`` (any depth), and ``manifest``: written after every result is uploaded and
checked, before ``succeeded``: a header line ``gpuops-manifest <attempt> <count>``, then one
line ``<md5 hex> <bytes> <name under results/>`` per result. `lane watch` checks it against
the bucket (L9): a status that says succeeded is success only when storage agrees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuops.lane.shell import Command, Parsed, parse

ATTEMPT_KEY = "gpuops-attempt"
JOB_KEY = "gpuops-job"
SCRIPT_KEY = "startup-script"
MANIFEST = "manifest"  # jobs/<job>/manifest: the results as the script uploaded them (L9)

# Commands that declare or assign a variable named by an argument (L4 counts JOB in them).
_DECLARERS = frozenset({"export", "declare", "typeset", "readonly", "local"})
# What powers a VM off (the fake and GCE agree: fakes/gce/shim.py).
_HALT_FLAGS = frozenset({"-h", "-P", "--poweroff", "--halt", "now"})
# The order the contract needs: the EXIT trap, the marker, the gates, then the work.
ORDER = ("trap", "boot_marker", "preflight_imports", "disk_gate", "run_job")


@dataclass(frozen=True)
class Finding:
    """One breach of the contract: the rule and what is wrong."""

    rule: str
    message: str


def _all(parsed: Parsed) -> list[Command]:
    """Every command, top level and in every function body, with their substitutions."""
    out: list[Command] = []
    pending = [*parsed.top, *(c for body in parsed.functions.values() for c in body)]
    while pending:
        command = pending.pop(0)
        out.append(command)
        pending.extend(command.inner)
    return out


def _job_values(parsed: Parsed) -> list[tuple[str, bool]]:
    """(value, is-literal) of every assignment or export of JOB, anywhere in the script."""
    found: list[tuple[str, bool]] = []
    for command in sorted(_all(parsed), key=lambda c: c.pos):
        for text in command.assignments:
            if text.startswith("JOB="):
                found.append((text[4:], "$" not in text and "`" not in text))
        if command.name in _DECLARERS:
            for word, literal in zip(command.words[1:], command.literal[1:], strict=True):
                if word == "JOB":
                    found.append(("?", False))
                elif word.startswith("JOB="):
                    found.append((word[4:], literal))
        if command.name == "read" and "JOB" in command.words[1:]:
            found.append(("?", False))
    return found


def lint(script: str, claimed_job: str) -> list[Finding]:
    """Every breach of the contract; empty when the script may be installed for the job."""
    parsed = parse(script)
    if parsed.error is not None:
        return [
            Finding("L5", f"the script cannot be parsed, so it cannot be checked: {parsed.error}")
        ]
    found: list[Finding] = []
    values = _job_values(parsed)
    if len(values) != 1:
        found.append(
            Finding("L4", f"the script must set JOB exactly once, not {len(values)} times")
        )
    elif not values[0][1]:
        found.append(Finding("L4", "the script's JOB must be a literal name, not an expansion"))
    elif values[0][0] != claimed_job:
        found.append(
            Finding(
                "L4", f"the script's JOB={values[0][0]!r} is not the claimed job {claimed_job!r}"
            )
        )
    steps = [c for c in parsed.top if not c.conditional]
    names = [c.name for c in steps]
    if "boot_marker" not in names:
        found.append(Finding("L5", "missing a boot marker written first (boot_marker)"))
    if not any(c.words == ("sync_log_every", "30") and c.background for c in steps):
        found.append(Finding("L5", "missing the log synced every 30 s (sync_log_every 30 &)"))
    if "stage" not in names:
        found.append(Finding("L5", "missing a status file with the current stage (stage ...)"))
    handler = _exit_handler(steps)
    if handler is None:
        found.append(Finding("L5", "missing a final log upload on exit (trap on_exit EXIT)"))
    else:
        found += _escapes(parsed, handler)
        reach = _reachable(parsed, handler)
        if not any(_halts(c) for c in reach):
            found.append(
                Finding("L12", "missing a power-off reachable on every path from the EXIT trap")
            )
        if not _fallback_reached(parsed, handler):
            found.append(
                Finding("L5", "missing a gsutil-to-REST fallback with retries in the EXIT trap")
            )
    if "upload_results" not in names:
        found.append(
            Finding("L9", "missing the checked results upload and manifest (upload_results)")
        )
    if not any(c.name == "preflight_imports" and len(c.words) > 1 for c in steps):
        found.append(
            Finding("L6", "missing an import gate before work (preflight_imports NAME...)")
        )
    if not any(c.name == "disk_gate" and len(c.words) == 2 and c.words[1].isdigit() for c in steps):
        found.append(Finding("L6", "missing a disk-capacity gate before work (disk_gate GB)"))
    found += _order(steps)
    return found


def _exit_handler(steps: list[Command]) -> str | None:
    """The command string an unconditional ``trap HANDLER ... EXIT`` runs at exit."""
    for command in steps:
        action = _trap_action(command) if command.name == "trap" else None
        if action is not None and action[1] and action[0] not in ("", "-"):
            return action[0]
    return None


# Signals the shell cannot catch: killed or stopped by one, it never runs its EXIT trap.
_UNCATCHABLE = frozenset({"KILL", "9", "STOP", "19"})
# Words that name the script's own shell (or its process group) to ``kill``.
_OWN_SHELL = frozenset({"$$", "${$}", "-$$", "-${$}", "0", "-0"})
_OWN_PROCESS = frozenset({"$BASHPID", "${BASHPID}"})  # the script itself unless in a subshell
_DEFAULT_SIGNAL = "TERM"  # kill's, which the shell catches (and so runs its EXIT trap)
_SIGNAL_FLAGS = frozenset({"-s", "-n"})  # the signal as the next word
_NOT_SIGNALS = frozenset({"--", "-$$", "-${$}"})  # first words of kill that name no signal


def _escapes(parsed: Parsed, handler: str) -> list[Finding]:
    """Every command outside the EXIT trap that ends the script without running it (L12):
    the trap removed or replaced (``trap - EXIT``), the shell replaced (``exec CMD``), or the
    shell killed or stopped by a signal it cannot catch (``kill -9 $$``). A command inside a
    subshell removes or replaces only the subshell's; ``kill`` of ``$$`` reaches the script
    from anywhere. Conditional or not: any one path that skips the power-off bills."""
    skip = {c.name for c in parse(handler).top}  # the handler's own functions may clear it
    set_at = next(  # the trap that sets the handler (_exit_handler found it among these)
        c.pos for c in parsed.top if c.name == "trap" and _trap_action(c) == (handler, True)
    )
    found: list[Finding] = []
    for where, command in _outside(parsed, skip):
        what = " ".join(word or "''" for word in command.words)
        action = _trap_action(command) if command.name == "trap" else None
        if action is not None and action[1] and action[0] != handler and not command.subshell:
            if where != "the script" or command.pos > set_at:
                found.append(Finding("L12", f"`{what}` in {where} removes the EXIT trap: {_SKIPS}"))
        elif command.name == "exec" and len(command.words) > 1 and not command.subshell:
            found.append(Finding("L12", f"`{what}` in {where} replaces the shell: {_SKIPS}"))
        elif command.name == "kill" and _kills_self(command):
            found.append(Finding("L12", f"`{what}` in {where} kills or stops the shell: {_SKIPS}"))
    return found


_SKIPS = "the script would exit without its EXIT trap, so without the power-off"


def _outside(parsed: Parsed, skip: set[str]) -> list[tuple[str, Command]]:
    """(where, command) for every command the script can run outside the functions in
    ``skip``: top level, substitutions, the functions called (and their calls), and the
    handlers of its other traps."""
    out: list[tuple[str, Command]] = []
    pending = [("the script", c) for c in parsed.top]
    seen: set[str] = set()
    while pending:
        where, command = pending.pop(0)
        out.append((where, command))
        pending.extend((where, c) for c in command.inner)
        action = _trap_action(command) if command.name == "trap" else None
        if action is not None and not action[1]:  # another signal's handler: it runs too
            pending.extend((f"the trap {action[0]!r}", c) for c in parse(action[0]).top)
        body = parsed.functions.get(command.name)
        if body is not None and command.name not in seen and command.name not in skip:
            seen.add(command.name)
            pending.extend((f"function {command.name}", c) for c in body)
    return out


def _trap_action(command: Command) -> tuple[str, bool] | None:
    """A ``trap`` command's (action, whether it touches EXIT); None when it lists traps.
    The action is ``-`` for a reset (``trap - EXIT``, ``trap EXIT``), ``""`` for ignore."""
    words = [w for w in command.words[1:] if w != "--"]
    if not words or words[0] in ("-p", "-l"):
        return None
    if len(words) == 1:
        return "-", words[0] in ("EXIT", "0")
    return words[0], any(w in ("EXIT", "0") for w in words[1:])


def _kills_self(command: Command) -> bool:
    """``kill`` sending the script's own shell a signal it cannot catch (KILL, STOP)."""
    words = list(command.words[1:])
    signal = _DEFAULT_SIGNAL
    if words and words[0] in _SIGNAL_FLAGS:  # kill -s KILL, kill -n 9
        signal, words = "".join(words[1:2]), words[2:]
    elif words and words[0].startswith("-") and words[0] not in _NOT_SIGNALS:
        signal, words = words[0][1:], words[1:]  # kill -9, kill -KILL, kill -SIGKILL
    own = _OWN_SHELL | (set() if command.subshell else _OWN_PROCESS)  # `--` is none of these
    return signal.upper().removeprefix("SIG") in _UNCATCHABLE and any(w in own for w in words)


def _reachable(parsed: Parsed, handler: str) -> list[Command]:
    """Commands that run on every path of ``handler``, through the functions it calls."""
    start = parse(handler)
    out: list[Command] = []
    pending = [c for c in start.top if not c.conditional]
    seen: set[str] = set()
    while pending:
        command = pending.pop(0)
        out.append(command)
        body = parsed.functions.get(command.name)
        if body is not None and command.name not in seen:
            seen.add(command.name)
            pending.extend(c for c in body if not c.conditional)
    return out


def _fallback_reached(parsed: Parsed, handler: str) -> bool:
    """Some function the EXIT trap reaches uploads with gsutil and, when that fails, with the
    REST fallback (``gsutil ... || upload_rest ...``, L5)."""
    called = {c.name for c in _reachable(parsed, handler)}
    for name in sorted(called & set(parsed.functions)):
        body = parsed.functions[name]
        for first, then in zip(body, body[1:], strict=False):
            if first.name == "gsutil" and first.guarded and then.name == "upload_rest":
                return True
    return False


def _halts(command: Command) -> bool:
    if command.name in ("poweroff", "/sbin/poweroff", "/usr/sbin/poweroff"):
        return True
    if command.name in ("shutdown", "/sbin/shutdown", "/usr/sbin/shutdown"):
        return bool(_HALT_FLAGS & set(command.words[1:])) and "-r" not in command.words
    return command.words[:2] == ("systemctl", "poweroff")


def _order(steps: list[Command]) -> list[Finding]:
    positions = []
    for word in ORDER:
        at = [c.pos for c in steps if c.name == word and (word != "trap" or "EXIT" in c.words)]
        if not at:
            return [] if word != "run_job" else [Finding("L6", "missing the job step (run_job)")]
        positions.append(at[0])
    if positions != sorted(positions):
        return [
            Finding(
                "L6",
                "the EXIT trap, the boot marker and both gates must come before run_job, in order",
            )
        ]
    return []


def unconditional_fetches(script: str) -> list[str]:
    """Every input the script reads from ``inputs/`` on every path, by any command (L10).

    A read inside a branch or loop whose test is not constant, or one whose failure is caught
    by an ``||`` that carries on, is not unconditional; one caught by an ``||`` that ends the
    script (``cmd || fail ...``, ``cmd || exit 1``) is: the job cannot run without it. A
    function's reads count where it is called, with ``$1`` taken from the call. A name the
    parse cannot know (an expansion) is returned as written, so it can never match a staged
    input.
    """
    parsed = parse(script)
    out: list[str] = []
    for command in parsed.top:
        if command.conditional or command.background:
            continue
        if command.guarded and not _ends(parsed, command.rescue, set()):
            continue
        out += _reads(parsed, command, (), set())
    return out


def _ends(parsed: Parsed, commands: tuple[Command, ...] | list[Command], seen: set[str]) -> bool:
    """Whether these commands may end the script: an ``exit``, or a call of a function that
    may (counted wherever it sits: a fetch rescued by one is treated as needed, L10)."""
    for command in commands:
        if command.name == "exit":
            return True
        body = parsed.functions.get(command.name)
        if body is not None and command.name not in seen:
            if _ends(parsed, body, seen | {command.name}):
                return True
    return False


def _reads(parsed: Parsed, command: Command, args: tuple[str, ...], seen: set[str]) -> list[str]:
    names: list[str] = []
    if command.name == "fetch_input":  # the template's fetch, by contract: its argument
        return [_positional(w, args) for w in command.words[1:2]]
    for word in command.words:
        _, sep, tail = word.partition("inputs/")
        if sep and tail:
            names.append(_positional(tail, args))
    for inner in command.inner:
        names += _reads(parsed, inner, args, seen)
    body = parsed.functions.get(command.name)
    if body is not None and command.name not in seen:
        call = tuple(_positional(w, args) for w in command.words[1:])
        for step in body:
            if not (step.conditional or step.background):
                names += _reads(parsed, step, call, seen | {command.name})
    return names


def _positional(text: str, args: tuple[str, ...]) -> str:
    """``$1``..``$9`` (the whole word) replaced by the call's argument, when it has one."""
    if len(text) == 2 and text[0] == "$" and text[1].isdigit() and 0 < int(text[1]) <= len(args):
        return args[int(text[1]) - 1]
    return text


_DECLARED = re.compile(r"^# gpuops: max-hours (\d+(?:\.\d+)?)\s*$", re.M)


def declared_hours(script: str) -> float | None:
    """The job's declared length (a ``# gpuops: max-hours H`` line), if it has one."""
    found = _DECLARED.search(script)
    return None if found is None else float(found.group(1))


def missing_inputs(script: str, staged: list[str]) -> list[str]:
    """Unconditional fetches with no staged input of that name (L10)."""
    have = set(staged)
    return [name for name in unconditional_fetches(script) if name not in have]


def render(
    job: str,
    bucket: str,
    command: str,
    *,
    imports: tuple[str, ...] = ("torch",),
    inputs: tuple[str, ...] = (),
    min_free_gb: int = 20,
    max_hours: float | None = None,
) -> str:
    """A startup script for ``job`` that keeps the whole contract (L5, L6)."""
    fetches = "\n".join(f"fetch_input {name}" for name in inputs)
    declared = "" if max_hours is None else f"# gpuops: max-hours {max_hours:g}\n"
    return declared_line(
        TEMPLATE.format(
            job=job,
            bucket=bucket,
            command=command,
            imports=" ".join(imports),
            fetches=fetches or "# (no staged inputs)",
            min_free_gb=min_free_gb,
        ),
        declared,
    )


def declared_line(body: str, declared: str) -> str:
    """The script with its declared-length line after the shebang (none when empty)."""
    first, _, rest = body.partition("\n")
    return f"{first}\n{declared}{rest}"


TEMPLATE = r"""#!/bin/bash
# gpuops lane startup script (contract: rules L5, L6, L12). Installed by `gpuops lane install`.
# Every path ends in on_exit (the EXIT trap): stop the log sync, end the status, upload the
# final log (gsutil, then REST, with retries) and power off. Nobody else may stop this VM (L1).
set -uo pipefail
JOB="{job}"
BUCKET="{bucket}"
ROOT="${{GPUOPS_LANE_ROOT:-}}"  # empty on a VM; a fake's sandbox directory in tests
WORK="$ROOT/work"
LOG="$ROOT/var/log/gpuops-job.log"
SCRATCH="$ROOT/tmp"  # the status, boot marker and manifest before each upload
MD=http://metadata.google.internal/computeMetadata/v1
ATTEMPT=$(curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/attributes/gpuops-attempt" \
  || echo unknown)
PREFIX="gs://$BUCKET/jobs/$JOB"
ENDED=""
SYNC_PID=""
mkdir -p "$WORK/inputs" "$WORK/results" "$(dirname "$LOG")" "$SCRATCH"

upload_rest() {{  # $1 local file, $2 object name: the JSON API with the VM's token
  local token
  token=$(curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/service-accounts/default/token" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])') || return 1
  curl -sf -X POST -H "Authorization: Bearer $token" --data-binary @"$1" \
    "https://storage.googleapis.com/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=$2"
}}
put() {{  # $1 local file, $2 path under jobs/$JOB/: gsutil, then REST, three tries each
  for pause in 5 10 15; do
    gsutil -q cp "$1" "$PREFIX/$2" || upload_rest "$1" "jobs/$JOB/$2" && return 0
    sleep "$pause"
  done
  return 1
}}
stage() {{  # the status file: stage, attempt, reason
  if [ "$1" = succeeded ] || [ "$1" = failed ]; then ENDED="$1"; fi
  echo "$1 $ATTEMPT ${{2:-}}" > "$SCRATCH/gpuops-status-$$" && put "$SCRATCH/gpuops-status-$$" status
}}
fail() {{ stage failed "$1"; exit 1; }}
boot_marker() {{
  echo "$ATTEMPT $(date -u +%FT%TZ)" > "$SCRATCH/gpuops-boot-$$" && put "$SCRATCH/gpuops-boot-$$" "boot/$ATTEMPT"
}}
sync_log_every() {{ while sleep "$1"; do put "$LOG" log.txt; done; }}
final_log() {{ put "$LOG" log.txt || echo "final log upload failed" >&2; }}
on_exit() {{  # every path: success, failure, preflight, SIGTERM
  local rc=$?
  trap - EXIT TERM INT HUP
  if [ -n "$SYNC_PID" ]; then kill "$SYNC_PID" 2>/dev/null; wait "$SYNC_PID" 2>/dev/null; fi
  [ -n "$ENDED" ] || stage failed "the script exited with status $rc before the job ended"
  final_log
  poweroff
}}
fetch_input() {{
  gsutil -q cp "$PREFIX/inputs/$1" "$WORK/inputs/" || fail "missing staged input $1"
}}
preflight_imports() {{
  for module in "$@"; do
    python3 -c "import $module" >> "$LOG" 2>&1 || fail "preflight: import $module failed"
  done
}}
disk_gate() {{
  local free
  free=$(df --output=avail -BG "$WORK" | tail -1 | tr -dc 0-9)
  [ "${{free:-0}}" -ge "$1" ] || fail "preflight: ${{free:-0}} GB free on /work, need $1"
}}
run_job() {{ ( {command} ) >> "$LOG" 2>&1; }}
upload_results() {{  # every file under results/, at any depth, each upload checked; then the
  # manifest (this attempt, and each file's md5, size and name) last: storage decides (L9)
  local f rel count=0 list="$SCRATCH/gpuops-manifest-$$"
  : > "$list.body"
  while IFS= read -r -d '' f; do
    rel=${{f#"$WORK/results/"}}
    put "$f" "results/$rel" || fail "results/$rel did not reach storage: the results are incomplete"
    echo "$(md5sum < "$f" | cut -d' ' -f1) $(wc -c < "$f" | tr -dc 0-9) $rel" >> "$list.body"
    count=$((count + 1))
  done < <(find "$WORK/results" -type f -print0 | sort -z)
  {{ echo "gpuops-manifest $ATTEMPT $count"; cat "$list.body"; }} > "$list"
  put "$list" manifest || fail "the results manifest did not reach storage"
}}

exec >> "$LOG" 2>&1
# The log sync starts before the traps: a subshell forked after them holds them until it has
# run a little, and one killed in that moment (on_exit's kill, after a fast failure) ran
# on_exit itself and wrote a wrong reason over the status.
sync_log_every 30 &
SYNC_PID=$!
trap on_exit EXIT
trap 'fail "terminated by a signal (the VM is shutting down)"' TERM INT HUP
boot_marker
stage preflight
preflight_imports {imports}
disk_gate {min_free_gb}
stage fetching
{fetches}
stage running
run_job || fail "the job exited non-zero"
stage uploading
upload_results
stage succeeded
"""
