"""The pass-rate index: per-machine tallies kept in the state store, folded from the log by offset.

``offers`` and ``rent`` rank by shrunk pass rates (shrink.py). Reading the whole event log for
them made both cost seconds at 1,000,000 events; instead the tallies (``MachineCounts``) are
checkpointed in the store with the byte offset of the log they cover, and each call folds only
the lines written since. Folding from the log, rather than updating the store as each probe is
written, keeps the log the one source of truth (no second write on rent's path that a crash
could split from the event) and needs no hook in the market shell.

The checkpoint is per log (an event log is per host; the key hashes the host and the log's
path). It also holds the log's first bytes: a log that was replaced or shrank is folded again
from the start. A checkpoint that does not parse is rebuilt the same way, never trusted. Writes
go through ``Records.replace`` (compare-and-swap; an unreadable checkpoint is replaced); one
another process stored meanwhile for as much of the log is as good, and is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
from dataclasses import dataclass
from pathlib import Path

from gpuops.analysis.scan import ScanCounts, scan_events
from gpuops.analysis.shrink import KINDS, MachineCounts
from gpuops.errors import CorruptState, VersionConflict
from gpuops.store.base import Store
from gpuops.store.records import NO_CHANGE, NoChange, Records

PREFIX = "index/pass-rates/"
HEAD_BYTES = 256  # enough of the log's start to tell a replaced log from a grown one
FORMAT = 2  # 2: the count of lines that did not decode is kept with the tallies


@dataclass(frozen=True)
class Checkpoint:
    offset: int  # the log's bytes folded into ``counts``: whole lines only
    head: str  # sha256 of the log's first HEAD_BYTES bytes when it was folded
    counts: MachineCounts


def index_key(log: Path) -> str:
    where = f"{socket.gethostname()}:{log.expanduser().absolute()}"
    return PREFIX + hashlib.sha256(where.encode()).hexdigest()[:32]


def encode(checkpoint: Checkpoint) -> bytes:
    c = checkpoint.counts
    body = {
        "format": FORMAT,
        "offset": checkpoint.offset,
        "head": checkpoint.head,
        "passes": c.passes,
        "trials": c.trials,
        "gpu": c.gpu,
        "race_gpu": c.race_gpu,
        "skipped": c.skipped,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes) -> Checkpoint | None:
    """The checkpoint, or None for anything unreadable (it is then rebuilt from the log)."""
    try:
        body = json.loads(data)
        if body["format"] != FORMAT or not isinstance(body["offset"], int):
            return None
        counts = MachineCounts(
            passes={int(k): int(v) for k, v in body["passes"].items()},
            trials={int(k): int(v) for k, v in body["trials"].items()},
            gpu={int(k): str(v) for k, v in body["gpu"].items()},
            race_gpu={str(k): str(v) for k, v in body["race_gpu"].items()},
            skipped=int(body["skipped"]),
        )
        return Checkpoint(body["offset"], str(body["head"]), counts)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError):
        return None  # OverflowError: int(Infinity); RecursionError: JSON nested too deep


def _head(log: Path, offset: int) -> str:
    """The hash of the log's first bytes that a checkpoint at ``offset`` covered."""
    with log.open("rb") as f:
        return hashlib.sha256(f.read(min(HEAD_BYTES, offset))).hexdigest()


class _CheckpointCodec:
    """The checkpoint as a record for ``Records``: anything ``decode`` cannot read is
    CorruptState (the checkpoint is then rebuilt from the log, and replaced)."""

    what = "pass-rate checkpoint"

    def encode(self, value: Checkpoint) -> bytes:
        return encode(value)

    def decode(self, key: str, data: bytes) -> Checkpoint:
        found = decode(data)
        if found is None:
            raise CorruptState(key, "not a pass-rate checkpoint (rebuilt from the log)")
        return found


CODEC = _CheckpointCodec()


def machine_counts(log: Path, store: Store) -> MachineCounts:
    """The tallies for every complete line of ``log``: the checkpoint plus what came since."""
    if not log.is_file():  # none yet, or a device (/dev/full) that would never end: no tallies
        return MachineCounts()
    checkpoints = Records(store, PREFIX, CODEC)
    name = index_key(log).removeprefix(PREFIX)
    try:
        checkpoint, version = checkpoints.read(name)
        stored = version is not None
    except CorruptState:  # unreadable, its envelope or its body: folded again, then replaced
        checkpoint, stored = None, True
    if (
        checkpoint is None
        or checkpoint.offset > log.stat().st_size
        or checkpoint.head != _head(log, checkpoint.offset)
    ):
        checkpoint = Checkpoint(0, _head(log, 0), MachineCounts())  # replaced, shrunk, unreadable
    counts, scanned = checkpoint.counts, ScanCounts()
    for *_, event in scan_events(
        log, kinds=KINDS, start=checkpoint.offset, counts=scanned, tail=False
    ):
        counts.add_event(event)
    if scanned.offset != checkpoint.offset or not stored:
        head = checkpoint.head if checkpoint.offset >= HEAD_BYTES else _head(log, scanned.offset)
        _save(checkpoints, name, Checkpoint(scanned.offset, head, counts))
    return counts


def _save(checkpoints: Records[Checkpoint], name: str, checkpoint: Checkpoint) -> None:
    """Store ``checkpoint`` over an older or unreadable one; one another process stored
    meanwhile for as much of the same log is as good, and stays."""

    def newer(current: Checkpoint | None) -> Checkpoint | NoChange:
        if current is not None and current.head == checkpoint.head:
            if current.offset >= checkpoint.offset:
                return NO_CHANGE
        return checkpoint

    with contextlib.suppress(VersionConflict):  # it kept losing: the others' are as good
        checkpoints.replace(name, newer)
