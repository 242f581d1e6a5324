"""The lane's claim journal (L12, L13): the last transition of its board, next to the board in
the shared store, so that every host reads the same evidence of a claim.

The event log is one host's file: with the board deleted, an operator on another host saw no
recent lane event and the lane looked free. So every board write (claim, attempt, boot,
release, repair) is also written here, by compare-and-swap, and L12's "a recent lane event"
is read from here, never from a log scan. An entry never replaces one of a later board
revision (two writers finishing out of order). ``at`` is the writer's wall clock: its age is
judged on the reader's, against timing.STALE_CLAIM_S (hours), far beyond any clock skew.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuops.store.records import JsonCodec


@dataclass(frozen=True)
class JournalEntry:
    """The board as its last write left it: state, owner, job, attempt, revision, epoch;
    when (epoch seconds, the writer's clock), by whom, and whether it was a repair."""

    lane: str
    state: str
    owner: str | None
    job: str | None
    attempt: int
    revision: int
    epoch: int
    at: float
    writer: str
    repaired: bool = False


CODEC = JsonCodec(JournalEntry, "lane claim journal")


def journal_key(instance: str) -> str:
    """The journal's store key, beside ``lane/<instance>/board``."""
    return f"lane/{instance}/journal"
