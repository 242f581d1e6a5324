"""The startup-script contract (L5, L6), its template, and the linter `lane install` runs.

A lane job is a startup script attached as instance metadata: the machine boots, runs it,
uploads results and powers itself off. Every failure in seeds/000 that "looked like
nothing" was a script that broke the contract: reports uploaded under a misspelt job name,
an import that failed a whole boot later, a reused script fetching inputs never staged. So
the script is checked *before anything boots*: ``lint`` returns every breach, each naming
its rule, and ``unconditional_fetches`` gives what the script will fetch whatever happens
(compared with the job's staged inputs by the runner, L10).

Paths in the bucket, all under ``jobs/<job>/``: ``boot/<attempt>`` (the boot marker: this
attempt's id, read from the ``gpuops-attempt`` metadata key the runner sets before each
start, L2), ``status`` (one line: stage, attempt, reason), ``log.txt``, ``inputs/``,
``results/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STAGES = ("booted", "preflight", "fetching", "running", "uploading", "succeeded", "failed")
ATTEMPT_KEY = "gpuops-attempt"
JOB_KEY = "gpuops-job"
SCRIPT_KEY = "startup-script"

_JOB_LINE = re.compile(r'^JOB="?([^"\s]*)"?\s*$', re.M)
_FETCH = re.compile(r"^(\s*)fetch_input\s+(\S+)\s*(.*)$")
_OPENERS = re.compile(r"^\s*(if|for|while|until|case)\b")
_CLOSERS = re.compile(r"(?:^|;)\s*(?:fi|done|esac)\b")
_FUNCTION = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*\(\)\s*\{")

# What the contract requires, each as (rule, what, a pattern that must match somewhere).
REQUIRED: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("L5", "a boot marker written first (boot_marker)", re.compile(r"^boot_marker\s*$", re.M)),
    (
        "L5",
        "the log synced every 30 s (sync_log_every 30 &)",
        re.compile(r"^sync_log_every 30 &\s*$", re.M),
    ),
    ("L5", "a status file with the current stage (stage ...)", re.compile(r"^stage \w+", re.M)),
    (
        "L5",
        "a final log upload on exit (trap on_exit EXIT)",
        re.compile(r"^trap \w+ EXIT\s*$", re.M),
    ),
    (
        "L5",
        "a gsutil-to-REST fallback with retries in final_log",
        re.compile(r"gsutil[^\n]*\|\|[^\n]*upload_rest", re.M),
    ),
    (
        "L6",
        "an import gate before work (preflight_imports NAME...)",
        re.compile(r"^preflight_imports \w", re.M),
    ),
    ("L6", "a disk-capacity gate before work (disk_gate GB)", re.compile(r"^disk_gate \d+", re.M)),
    ("L5", "power-off at the end (poweroff)", re.compile(r"^\s*poweroff\b", re.M)),
)
# The order the contract needs: marker, then the gates, then the work.
ORDER = ("boot_marker", "preflight_imports", "disk_gate", "run_job")


@dataclass(frozen=True)
class Finding:
    """One breach of the contract: the rule and what is wrong."""

    rule: str
    message: str


def job_names(script: str) -> list[str]:
    """Every ``JOB=`` assignment in the script, in order."""
    return _JOB_LINE.findall(script)


def lint(script: str, claimed_job: str) -> list[Finding]:
    """Every breach of the contract; empty when the script may be installed for the job."""
    found: list[Finding] = []
    names = job_names(script)
    if len(names) != 1:
        found.append(Finding("L4", f"the script must set JOB exactly once, not {len(names)} times"))
    elif names[0] != claimed_job:
        found.append(
            Finding("L4", f"the script's JOB={names[0]!r} is not the claimed job {claimed_job!r}")
        )
    for rule, what, pattern in REQUIRED:
        if not pattern.search(script):
            found.append(Finding(rule, f"missing {what}"))
    found += _order(script)
    return found


def _order(script: str) -> list[Finding]:
    positions = []
    for word in ORDER:
        match = re.search(rf"^{word}\b(?!\s*\()", script, re.M)
        if match is None:
            return [] if word != "run_job" else [Finding("L6", "missing the job step (run_job)")]
        positions.append(match.start())
    if positions != sorted(positions):
        return [Finding("L6", "the boot marker and both gates must come before run_job, in order")]
    return []


def unconditional_fetches(script: str) -> list[str]:
    """Inputs the script fetches at top level, outside any if/loop and without a fallback.

    A fetch inside a function body, a conditional or a loop, or ending in ``|| true``, is not
    unconditional; everything else is what the seed's reused script tripped on (L10).
    """
    depth = 0
    in_function = 0
    out = []
    for line in script.splitlines():
        code = line.split(" #", 1)[0].rstrip()
        fetch = _FETCH.match(code)
        if fetch and depth == 0 and in_function == 0 and "|| true" not in fetch.group(3):
            out.append(fetch.group(2))
        if _FUNCTION.match(code) and not code.endswith("}"):
            in_function += 1
        elif in_function and code.strip() == "}":
            in_function -= 1
        depth += (1 if _OPENERS.match(code) else 0) - len(_CLOSERS.findall(code))
        depth = max(depth, 0)
    return out


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
) -> str:
    """A startup script for ``job`` that keeps the whole contract (L5, L6)."""
    fetches = "\n".join(f"fetch_input {name}" for name in inputs)
    return TEMPLATE.format(
        job=job,
        bucket=bucket,
        command=command,
        imports=" ".join(imports),
        fetches=fetches or "# (no staged inputs)",
        min_free_gb=min_free_gb,
    )


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
MD=http://metadata.google.internal/computeMetadata/v1
ATTEMPT=$(curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/attributes/gpuops-attempt" \
  || echo unknown)
PREFIX="gs://$BUCKET/jobs/$JOB"
ENDED=""
SYNC_PID=""
mkdir -p "$WORK/inputs" "$WORK/results" "$(dirname "$LOG")"

upload_rest() {{  # $1 local file, $2 object name: the JSON API with the VM's token
  local token
  token=$(curl -sf -H 'Metadata-Flavor: Google' "$MD/instance/service-accounts/default/token" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_token"])') || return 1
  curl -sf -X POST -H "Authorization: Bearer $token" --data-binary @"$1" \
    "https://storage.googleapis.com/upload/storage/v1/b/$BUCKET/o?uploadType=media&name=$2"
}}
put() {{  # $1 local file, $2 path under jobs/$JOB/: gsutil, then REST, three tries each
  for try in 1 2 3; do
    gsutil -q cp "$1" "$PREFIX/$2" || upload_rest "$1" "jobs/$JOB/$2" && return 0
    sleep $((try * 5))
  done
  return 1
}}
stage() {{  # the status file: stage, attempt, reason
  case "$1" in succeeded|failed) ENDED="$1" ;; esac
  echo "$1 $ATTEMPT ${{2:-}}" > /tmp/gpuops-status-$$ && put /tmp/gpuops-status-$$ status
}}
fail() {{ stage failed "$1"; exit 1; }}
boot_marker() {{
  echo "$ATTEMPT $(date -u +%FT%TZ)" > /tmp/gpuops-boot-$$ && put /tmp/gpuops-boot-$$ "boot/$ATTEMPT"
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

exec >> "$LOG" 2>&1
trap on_exit EXIT
trap 'fail "terminated by a signal (the VM is shutting down)"' TERM INT HUP
boot_marker
sync_log_every 30 &
SYNC_PID=$!
stage preflight
preflight_imports {imports}
disk_gate {min_free_gb}
stage fetching
{fetches}
stage running
run_job || fail "the job exited non-zero"
stage uploading
for f in "$WORK"/results/*; do [ -e "$f" ] && put "$f" "results/$(basename "$f")"; done
stage succeeded
"""
