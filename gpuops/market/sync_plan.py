"""Results synced while the job runs: the pure decisions (M5).

The guardian (``market/guard.py``, over ``market/sync.py``) copies what changed in the job's
results directory to the results destination every ``sync_every_s`` while the job runs, and
once more before the destroy. Everything it decides is here, from plain values:

- whether a sync is due (``next_sync_at``), on the guardian's own wall clock;
- the box's scripts: a listing of every regular file (size, mtime, path; NUL-separated, so any
  name survives) and a tar of the files that changed, read from stdin by nobody (``./``-named);
- which files to fetch: those the manifest does not hold as that size and mtime
  (``to_fetch``), and which fetched files to deliver: only those whose size and mtime stood
  still from the listing before the tar to the listing after it and whose tar member has that
  size (``settle``), so a file the job was writing as it was read waits for the next sync;
- the manifest: every delivered file's size, mtime and sha256, written after each sync so a
  reader can verify what was delivered (``encode_manifest``, ``decode_manifest``);
- what a failed sync means: an alarm once per run of failures (``SyncState``), never a step
  the destroy waits for;
- the last sync's age as ``boxes`` and ``watch`` show it (``sync_age``).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gpuops.errors import CorruptState, UsageError
from gpuops.market.watchdog import NO_RESULTS, check_results, job_dir

# The names a sync keeps for itself at the top of a delivery: the manifest, and the folder a
# file is written in before it is renamed into place. A job file of either name is not synced.
MANIFEST = ".gpuops-sync.json"
PARTIAL = ".gpuops-partial"
RESERVED = frozenset({MANIFEST, PARTIAL})
MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Seen:
    """One regular file as the box lists it: its size in bytes and mtime (find's ``%T@``)."""

    size: int
    mtime: str


@dataclass(frozen=True)
class Synced:
    """One file as it was delivered: the box's size and mtime, and the sha256 of the bytes."""

    size: int
    mtime: str
    sha256: str


# --- when ------------------------------------------------------------------------------------
def sync_every_s(minutes: float) -> float:
    """`rent --sync-every MINUTES` in seconds: 0 is off; anything negative or not finite is a
    usage error naming the flag."""
    if not math.isfinite(minutes) or minutes < 0:
        raise UsageError(f"--sync-every must be 0 (off) or a number of minutes, not {minutes!r}")
    return minutes * 60.0


def next_sync_at(
    every_s: float | None, started_at: float, last_try_at: float | None
) -> float | None:
    """When the next periodic sync falls due: ``every_s`` after the last try (a failed one
    too: a failing box is not asked every poll), the first one ``every_s`` after the box was
    kept. None: syncs are off (0, or a rental from before they were recorded)."""
    if every_s is None or every_s <= 0:
        return None
    return (started_at if last_try_at is None else last_try_at) + every_s


# --- the box's scripts -----------------------------------------------------------------------
def listing_script(name: str, results: str) -> str:
    """List every regular file under the job's results directory as ``SIZE MTIME PATH`` records,
    each ended by a NUL; exit NO_RESULTS when the directory does not exist."""
    quoted = shlex.quote(check_results(results))
    return (
        f'J={job_dir(name)}; cd "$J" || exit 1; '
        f"if [ -d {quoted} ]; then cd {quoted} && find . -type f -printf '%s %T@ %P\\0'; else "
        f"echo 'gpuops: the job has no results directory {results}' >&2; exit {NO_RESULTS}; fi"
    )


def fetch_script(name: str, results: str, paths: Sequence[str]) -> str:
    """Stream ``paths`` (relative to the results directory) as an uncompressed tar on stdout.
    A file gone since the listing is left out (``--ignore-failed-read``), and tar's exit 1 (a
    file changed as it was read) is no failure: ``settle`` leaves such a file for later."""
    quoted = shlex.quote(check_results(results))
    names = " ".join(shlex.quote(f"./{path}") for path in paths)
    return (
        f'J={job_dir(name)}; cd "$J" || exit 1; cd {quoted} || exit {NO_RESULTS}; '
        f"tar --ignore-failed-read -cf - {names}; s=$?; [ $s -eq 1 ] && s=0; exit $s"
    )


def parse_listing(stdout: str) -> tuple[dict[str, Seen], list[str]]:
    """The listing's files, and the names left out: a reserved name at the top, or a path
    that climbs out ('..'). A record that is not ``SIZE MTIME PATH`` is a UsageError naming it,
    never a guess."""
    seen: dict[str, Seen] = {}
    left: list[str] = []
    for record in stdout.split("\0"):
        if not record:
            continue
        size, _, rest = record.partition(" ")
        mtime, _, path = rest.partition(" ")
        if not size.isdecimal() or not _is_mtime(mtime) or not path:
            raise UsageError(
                f"the box's results listing has a record gpuops cannot read: {record!r}"
            )
        parts = path.split("/")
        if parts[0] in RESERVED or ".." in parts or "" in parts:
            left.append(path)
            continue
        seen[path] = Seen(int(size), mtime)
    return seen, left


def _is_mtime(text: str) -> bool:
    whole, dot, part = text.partition(".")
    return whole.isdecimal() and (not dot or part.isdecimal())


# --- what to fetch, what to deliver ----------------------------------------------------------
def to_fetch(manifest: Mapping[str, Synced], listing: Mapping[str, Seen]) -> list[str]:
    """The files the manifest does not hold as the box lists them (new, or another size or
    mtime), in order. A file gone from the box stays delivered: the manifest keeps it."""
    return sorted(
        path
        for path, seen in listing.items()
        if (had := manifest.get(path)) is None or (had.size, had.mtime) != (seen.size, seen.mtime)
    )


def settle(
    wanted: Sequence[str],
    before: Mapping[str, Seen],
    after: Mapping[str, Seen],
    members: Mapping[str, int],
) -> tuple[list[str], list[str]]:
    """(deliver, deferred) of the files fetched: a file is delivered only when it stood still
    from the listing before the tar to the one after it and its tar member has that size (the
    bytes read are the file's as listed); any other is deferred to the next sync."""
    deliver: list[str] = []
    deferred: list[str] = []
    for path in wanted:
        first, last = before.get(path), after.get(path)
        still = first is not None and first == last and members.get(path) == first.size
        (deliver if still else deferred).append(path)
    return deliver, deferred


# --- the manifest ----------------------------------------------------------------------------
def encode_manifest(rental_id: str | None, synced_at: str, files: Mapping[str, Synced]) -> bytes:
    """The manifest's bytes: version, incarnation, when, and every delivered file."""
    body = {
        "version": MANIFEST_VERSION,
        "rental_id": rental_id,
        "synced_at": synced_at,
        "files": {
            path: {"size": f.size, "mtime": f.mtime, "sha256": f.sha256}
            for path, f in sorted(files.items())
        },
    }
    return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode()


def decode_manifest(data: bytes) -> dict[str, Synced]:
    """A manifest's files; anything else than ``encode_manifest``'s shape is CorruptState
    naming what was wrong (a successor then syncs every file again, never trusts a guess)."""
    try:
        body = json.loads(data)
        files = body["files"]
        if body["version"] != MANIFEST_VERSION or not isinstance(files, dict):
            raise ValueError("not a version 1 manifest")
        out = {}
        for path, f in files.items():
            size, mtime, sha = f["size"], f["mtime"], f["sha256"]
            if type(size) is not int or not isinstance(mtime, str) or not isinstance(sha, str):
                raise ValueError(f"{path!r} has a field of the wrong type")
            out[path] = Synced(size, mtime, sha)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptState(MANIFEST, f"{type(exc).__name__}: {exc}") from None
    return out


# --- what a failed sync means ----------------------------------------------------------------
@dataclass(frozen=True)
class SyncState:
    """A guardian's memory of its syncs: the last try, the last success, and since when syncs
    have failed in a row (None: the last one worked, or none failed yet)."""

    last_try_at: float | None = None
    last_ok_at: float | None = None
    failing_since: float | None = None


def after_sync(state: SyncState, now: float, ok: bool) -> tuple[SyncState, bool]:
    """The state after a sync at ``now``, and whether it is an alarm: the first failure of a
    run of failures is (O1: heard once per run, its cause the run's start), a success ends the
    run. A failed sync is never a reason to hold the destroy back: nothing here returns one."""
    if ok:
        return replace(state, last_try_at=now, last_ok_at=now, failing_since=None), False
    first = state.failing_since is None
    since = now if first else state.failing_since
    return replace(state, last_try_at=now, failing_since=since), first


# --- what boxes and watch show ---------------------------------------------------------------
def sync_age(every_s: float | None, synced_at: float | None, now: float) -> str:
    """The last sync's age in words: "off", "never", or "N s/min/h ago"."""
    if every_s is None or every_s <= 0:
        return "off"
    if synced_at is None:
        return "never"
    age = max(0.0, now - synced_at)
    if age < 60:
        return f"{age:.0f} s ago"
    if age < 3600:
        return f"{age / 60:.0f} min ago"
    return f"{age / 3600:.1f} h ago"
