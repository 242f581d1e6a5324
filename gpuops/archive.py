"""Released history out of the hot path: `gpuops compact` moves old ended records to an archive.

Every listing of live work (``boxes``, ``destroy``, ``sweep``, a guardian's checks) reads
``ledger/boxes/`` and ``market/rentals/`` in full, so history there costs every command a read
per record. After ``timing.ARCHIVE_AFTER_S`` a record that can never bill again moves to

    ledger/archive/YYYY-MM/boxes/<name>/<digest>      a released ledger record
    market/archive/YYYY-MM/rentals/<name>/<digest>    a released or failed rental

(the month it ended; ``digest`` is a hash of the record's bytes, so a name reused later never
collides and a retried move finds its own copy). Nothing is lost: the event log keeps every
transition and ``boxes --all`` reads the archive too.

Crash-safe by order: copy first (create-if-absent), then delete the live record only at the
version that was copied (compare-and-swap). A crash between the two leaves the record in both
places; the next compaction finds its own copy and finishes the delete. A record that changed
meanwhile (a released name reused by a new intent) fails the delete's compare-and-swap and
stays live: only the copy of its old, released self is archived.

A rental moves only once no live ledger record of its boxes is left: its boxes are archived
first, so the rental (the record that names them) is the last thing to go. A rental that
ended without an end time (a failed race) has its boxes' records as its clock; one that
failed before creating any box has nothing that can bill and goes at the next compaction.

Nobody has to remember to compact: `boxes` reads every live record anyway, and when ``due``
says some of what it read would move, it starts `gpuops compact` detached after printing its
list (cli/market.py), so history costs one slow listing, never every listing. ``box_due`` and ``rental_due`` are the two
judgments, shared by ``compact`` and ``due``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpuops import timing
from gpuops.errors import AlreadyExists, CorruptState, VersionConflict
from gpuops.ledger import PREFIX as LEDGER_LIVE
from gpuops.ledger import BoxState, Record, decode
from gpuops.store.base import Store, Versioned
from gpuops.timestamps import epoch_of

if TYPE_CHECKING:
    from pathlib import Path

    from gpuops.market.rentals import Rental
    from gpuops.settings import Settings

LEDGER_ARCHIVE = "ledger/archive/"
RENTALS_LIVE = "market/rentals/"  # rentals.PREFIX, without importing the market package
RENTALS_ARCHIVE = "market/archive/"
ENDED_RENTAL = frozenset({"released", "failed"})


@dataclass(frozen=True)
class Compaction:
    """What one compaction moved, and what it left because it changed or could not be read."""

    boxes: int = 0
    rentals: int = 0
    changed: int = 0
    unreadable: tuple[str, ...] = ()


def month_of(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m")


def archive_key(archive: str, month: str, kind: str, name: str, data: bytes) -> str:
    import hashlib  # compaction only: `boxes` imports this module for the archive's reader

    return f"{archive}{month}/{kind}/{name}/{hashlib.sha256(data).hexdigest()[:16]}"


def box_due(record: Record, cutoff_s: float) -> bool:
    """A box record compaction moves: released, and last changed at or before ``cutoff_s``."""
    ended_s = _epoch(record.updated_at)
    return record.state is BoxState.RELEASED and ended_s is not None and ended_s <= cutoff_s


def rental_due(state: str, ended_s: float | None, has_live_box: bool, cutoff_s: float) -> bool:
    """A rental compaction moves: ended (released or failed) at or before ``cutoff_s``, or
    with no time at all to judge it by, and no live box record of it left. ``ended_s`` is
    ``ended_by``'s: a rental that failed before any box (a typo'd GPU) has no end time, and
    was once archived at once, called history "that ended over a week ago"."""
    return state in ENDED_RENTAL and not has_live_box and (ended_s or 0.0) <= cutoff_s


def ended_by(rental: Rental) -> float | None:
    """When a rental ended, for its retention: its end time, else its deadline (set before
    its first create: it ended no later), else when its box was kept; None when it has none."""
    for when in (rental.ended_at, rental.deadline_at, rental.started_at):
        if when is not None:
            return when
    return None


def due(records: Iterable[Record], rentals: Iterable[Rental], now_s: float) -> bool:
    """Whether ``compact`` at ``now_s`` would move any of these (every live box record and
    rental a listing read): the same two judgments, decided from what was already read."""
    cutoff = now_s - timing.ARCHIVE_AFTER_S
    records = list(records)
    live = {record.name.partition("+")[0] for record in records if not box_due(record, cutoff)}
    return any(box_due(record, cutoff) for record in records) or any(
        rental_due(rental.state, ended_by(rental), rental.name in live, cutoff)
        for rental in rentals
    )


def compact(store: Store, now_s: float) -> Compaction:
    """Move every released ledger record and ended rental older than the retention window."""
    cutoff = now_s - timing.ARCHIVE_AFTER_S
    moved_boxes = moved_rentals = changed = 0
    unreadable: list[str] = []
    live_boxes: set[str] = set()  # rentals that still have a live box record
    for key in store.list(LEDGER_LIVE):
        found = _get(store, key, unreadable)
        if found is None:
            continue
        try:
            record = decode(key, found.data)
        except CorruptState:
            unreadable.append(key)
            continue
        ended_s = _epoch(record.updated_at)
        if ended_s is None or not box_due(record, cutoff):
            live_boxes.add(record.name.partition("+")[0])
            continue
        target = archive_key(LEDGER_ARCHIVE, month_of(ended_s), "boxes", record.name, found.data)
        done = _move(store, found, target)
        moved_boxes += done
        changed += not done
        if not done:
            live_boxes.add(record.name.partition("+")[0])
    for key in store.list(RENTALS_LIVE):
        found = _get(store, key, unreadable)
        if found is None:
            continue
        rental = _rental(key, found.data, unreadable)
        if rental is None:
            continue
        name, state, ended_s = rental
        if not rental_due(state, ended_s, name in live_boxes, cutoff):
            continue
        month = month_of(ended_s if ended_s is not None else now_s)
        target = archive_key(RENTALS_ARCHIVE, month, "rentals", name, found.data)
        done = _move(store, found, target)
        moved_rentals += done
        changed += not done
    return Compaction(moved_boxes, moved_rentals, changed, tuple(unreadable))


def archived(store: Store, kind: str) -> list[tuple[str, bytes]]:
    """Every archived record of ``kind`` ("boxes" or "rentals"): (key, bytes), oldest month
    first. For the audit view (``boxes --all``), never for live work."""
    root = LEDGER_ARCHIVE if kind == "boxes" else RENTALS_ARCHIVE
    out = []
    for key in store.list(root):
        if key.split("/")[3] != kind:
            continue
        found = store.get(key)
        if found is not None:
            out.append((key, found.data))
    return out


def archived_rentals(store: Store, wanted: bool = True) -> list[Rental]:
    """The archived rentals for `boxes --all` (nothing when not ``wanted``)."""
    if not wanted:
        return []
    from gpuops.market.rentals import CODEC

    return [CODEC.decode(key, data) for key, data in archived(store, "rentals")]


def _move(store: Store, found: Versioned, target: str) -> bool:
    """Copy ``found`` to ``target``, then delete it at the version copied. False: it changed."""
    try:
        store.create(target, found.data)
    except AlreadyExists:
        copy = store.get(target)
        if copy is None or copy.data != found.data:  # pragma: no cover (a 64-bit hash clash)
            raise CorruptState(target, "an archived record with the same digest differs") from None
    try:
        store.delete(found.key, found.version)
    except VersionConflict:
        return False  # moved on since it was read (a reused name): it stays live
    return True


def _get(store: Store, key: str, unreadable: list[str]) -> Versioned | None:
    try:
        return store.get(key)
    except CorruptState:
        unreadable.append(key)  # a human decides (store/local.py); never archived
        return None


def _rental(key: str, data: bytes, unreadable: list[str]) -> tuple[str, str, float | None] | None:
    from gpuops.market.rentals import CODEC  # the rental's one strict codec

    try:
        rental = CODEC.decode(key, data)
    except CorruptState:
        unreadable.append(key)
        return None
    return rental.name, rental.state, ended_by(rental)


def _epoch(iso: str) -> float | None:
    try:
        return epoch_of(iso)
    except ValueError:
        return None


def compact_in_background(settings: Settings, operator: str) -> tuple[int, Path] | None:
    """Start `gpuops compact` detached, unless one this host started still runs: history past
    the retention window costs every listing a read per record, and moving it costs a write
    or two per record (minutes for a long backlog), which no listing should wait for. The
    child inherits the lock this takes and holds it until it exits (archive.py: copy, then a
    compare-and-swap delete; a compaction racing another, or live work, loses nothing).
    The child's pid and log, or None when one already runs."""
    import fcntl
    import os
    import sys

    from gpuops.private import open_private, private_dirs

    # per-host files: the state directory, or the user's for s3://
    folder = private_dirs(settings.local_dir)
    log = folder / "compact.log"
    lock = open_private(folder / "compact.lock", os.O_RDWR)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # a compaction is running: it moves these too
        os.set_inheritable(lock, True)  # the child's from here on: released when it exits
        out = open_private(log, os.O_WRONLY | os.O_APPEND)
        try:
            pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-m", "gpuops", "--state", settings.state_url]
                + ["--operator", operator, "compact"],
                settings.child_environ(),
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, out, 1),
                    (os.POSIX_SPAWN_DUP2, out, 2),
                ],
                setsid=True,  # outlives this listing, its terminal and its process group
            )
        finally:
            os.close(out)
    finally:
        os.close(lock)
    return pid, log
