"""The lane's history: every past board transition, and what each job cost, in the shared store.

The board's prose lines are one file's, capped, and gone with a lost or repaired board; the
claim journal holds only the last write; the event log is one host's. So every board write
(claim, start attempt, stockout, boot, release, repair) and every install is also one object
of its own, ``lane-history/<instance>/<revision:012d>``, made with the store's create-if-absent:
two hosts never overwrite each other's entry, nothing is ever rewritten, and a lost board's
revisions stay readable on every host (L13: the evidence lives in the shared state). An install
(it moves no board) and a board that reused a revision number (rebuilt without its history)
take the next free ``<revision>.<n>`` after it. The history is never read for a decision; it is
what `gpuops lane board --history` shows. An entry that does not read blocks only itself: it is
named and skipped.

It lives beside ``lane/``, not under it: the budget lists ``lane/`` for the boards' running jobs
on every snapshot, and that listing must stay the size of the boards, not of the lane's past.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuops.errors import CorruptState, StateError
from gpuops.lane import board as b
from gpuops.lane.cost import JobCost
from gpuops.store.base import Store
from gpuops.store.records import JsonCodec, Records

ROOT = "lane-history"
# The entries one revision can hold after its transition: its installs, a reused number.
MAX_PER_REVISION = 999
_NAME = re.compile(r"(?P<revision>\d{12})(?:\.(?P<seq>\d{3}))?")


@dataclass(frozen=True)
class Entry:
    """One transition: the board revision it wrote, what it did (``kind``, and the board's own
    prose line as ``what``), the state it left, the claim it concerned (for a release, the
    claim released), who wrote it and when (the writer's clock). A release also carries the
    job's outcome and cost."""

    lane: str
    revision: int
    kind: str
    state: str
    owner: str | None
    job: str | None
    attempt: int
    stockouts: int
    epoch: int
    at: float
    writer: str
    what: str
    outcome: str | None = None
    waiting_s: float | None = None
    running_s: float | None = None
    held_s: float | None = None
    usd_per_hour: float | None = None
    disk_usd_per_day: float | None = None
    cost_usd: float | None = None

    @property
    def cost(self) -> JobCost | None:
        """The job's cost, when this entry ended one."""
        if (
            self.running_s is None
            or self.held_s is None
            or self.usd_per_hour is None
            or self.disk_usd_per_day is None
            or self.cost_usd is None
        ):
            return None
        return JobCost(
            self.running_s, self.held_s, self.usd_per_hour, self.disk_usd_per_day, self.cost_usd
        )


CODEC = JsonCodec(Entry, "lane history entry")


def entry(
    kind: str,
    what: str,
    after: b.Board,
    claim: b.Board,
    at: float,
    writer: str,
    ended: tuple[str, float, JobCost] | None = None,
) -> Entry:
    """The entry of a write that left ``after``, about ``claim``'s job; ``ended``: the job's
    (outcome, waiting_s, cost) when it ended the claim."""
    outcome, waiting_s, cost = ended if ended is not None else (None, None, None)
    return Entry(
        after.lane,
        after.revision,
        kind,
        after.state,
        claim.owner,
        claim.job,
        claim.attempt,
        claim.stockouts,
        claim.epoch,
        at,
        writer,
        what,
        outcome,
        waiting_s,
        None if cost is None else cost.running_s,
        None if cost is None else cost.held_s,
        None if cost is None else cost.usd_per_hour,
        None if cost is None else cost.disk_usd_per_day,
        None if cost is None else cost.cost_usd,
    )


def prefix(instance: str) -> str:
    return f"{ROOT}/{instance}/"


def name(revision: int, seq: int) -> str:
    return f"{revision:012d}" if seq == 0 else f"{revision:012d}.{seq:03d}"


def order(entry_name: str) -> tuple[int, int] | None:
    """(revision, n) of an entry's name, or None for a name no entry has."""
    match = _NAME.fullmatch(entry_name)
    if match is None:
        return None
    return int(match["revision"]), int(match["seq"] or 0)


def append(store: Store, instance: str, value: Entry, *, first: int = 0) -> str:
    """Create ``value`` under its revision (from the ``first``-th name on), never over another
    entry: a taken name moves it to the next. The key written."""
    entries = Records(store, prefix(instance), CODEC)
    for seq in range(first, MAX_PER_REVISION + 1):
        if entries.create(name(value.revision, seq), value):
            return entries.key(name(value.revision, seq))
    raise StateError(
        f"{prefix(instance)}: revision {value.revision} has {MAX_PER_REVISION} entries"
    )


def last_revision(store: Store, instance: str) -> int:
    """The highest revision the history holds (0 when none): a board rebuilt without its file
    goes on from there, so its entries never share a name with the lost board's."""
    orders = [order(key.removeprefix(prefix(instance))) for key in store.list(prefix(instance))]
    return max((o[0] for o in orders if o is not None), default=0)


@dataclass(frozen=True)
class Page:
    """The last ``limit`` entries (``window`` of them), oldest first, with their keys; the
    objects that did not read, named with why; the revisions the window's span lacks; how
    many entries there are in all."""

    entries: tuple[tuple[str, Entry], ...]
    corrupt: tuple[tuple[str, str], ...]
    missing: tuple[int, ...]
    window: int
    total: int


def read(store: Store, instance: str, limit: int) -> Page:
    """The newest ``limit`` entries by (revision, n). A key that is not an entry's name, an
    object that does not decode, or one whose revision is not its name's is corrupt: named
    and skipped; the rest are shown."""
    where = prefix(instance)
    named: list[tuple[tuple[int, int], str]] = []
    corrupt: list[tuple[str, str]] = []
    for key in store.list(where):
        at = order(key.removeprefix(where))
        if at is None:
            corrupt.append((key, "not a history entry's name (<revision:012d>[.<n:03d>])"))
        else:
            named.append((at, key))
    named.sort()
    shown = named[-limit:] if limit > 0 else []
    entries: list[tuple[str, Entry]] = []
    for (revision, _), key in shown:
        try:
            found = store.get(key)
            if found is None:
                continue  # deleted since the listing
            value = CODEC.decode(key, found.data)
        except CorruptState as exc:
            corrupt.append((key, exc.reason))
            continue
        if value.revision != revision:
            corrupt.append((key, f"its revision is {value.revision}, its name {revision}"))
            continue
        entries.append((key, value))
    revisions = sorted({r for (r, _), _ in shown})
    missing = tuple(
        r for low, high in zip(revisions, revisions[1:], strict=False) for r in range(low + 1, high)
    )
    return Page(tuple(entries), tuple(corrupt), missing, len(shown), len(named))


def line(key: str, value: Entry) -> str:
    """One entry as a human reads it: revision, when (UTC), who, the state left, the claim,
    what happened; a release adds the job's outcome and cost."""
    label = key.rsplit("/", 1)[-1].lstrip("0") or "0"
    claim = (
        f"{value.job} (owner {value.owner}, attempt {value.attempt}, "
        f"{value.stockouts} stockouts, epoch {value.epoch})"
        if value.job
        else f"no claim (epoch {value.epoch})"
    )
    text = f"r{label} {b.stamp(value.at)} {value.writer} {value.kind} -> {value.state}: {claim}"
    text += f"; {value.what}"
    cost = value.cost
    if value.outcome is not None:
        text += f"; job {value.outcome}"
    if cost is not None:
        text += f", cost {cost.explained()}"
    return text
