"""A state directory with a long released history, as a team's would be after months of use."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterator

from gpuops import timing
from gpuops.ledger import BoxState, Record, encode, utc_iso
from gpuops.market.rentals import PREFIX as RENTALS
from gpuops.market.rentals import Rental
from gpuops.store import local
from gpuops.store.local import LocalStore

DAY_S = 86400.0


def seed(state: str, rentals: int, operator: str = "bench@host", *, recent: bool = False) -> None:
    """``rentals`` released rentals, each with its released box record, all ended past the
    retention window, or yesterday with ``recent`` (released this week: nothing `compact`
    moves). Written in their final form, in the store's own file format but without a sync
    per file: the history, not its making, is the point."""
    store = LocalStore(state)
    ended = time.time() - (DAY_S if recent else timing.ARCHIVE_AFTER_S + DAY_S)
    for key, data in released(rentals, ended, operator, "recent" if recent else "past"):
        _write(store, key, data)


def released(
    rentals: int, ended: float, operator: str = "bench@host", prefix: str = "recent"
) -> Iterator[tuple[str, bytes]]:
    """(key, value) of ``rentals`` rentals released at ``ended``, each with its released box
    record, as gpuops stores them (any backend)."""
    for i in range(rentals):
        name = f"{prefix}-{i}"
        record = Record(
            name=f"{name}+1-0",
            owner=operator,
            state=BoxState.RELEASED,
            intent_id=f"{i:016x}",
            provider="vast",
            revision=5,
            updated_at=utc_iso(ended),
            instance_id=str(10_000_000 + i),
        )
        yield f"ledger/boxes/{record.name}", encode(record)
        rental = Rental(
            name=name,
            owner=operator,
            state="released",
            race=1,
            box=record.name,
            instance_id=record.instance_id,
            dph_total=0.4,
            started_at=ended - 3600.0,
            deadline_at=ended,
            ended_at=ended,
        )
        yield RENTALS + name, json.dumps(dataclasses.asdict(rental)).encode()


def _write(store: LocalStore, key: str, data: bytes) -> None:
    """A value file as LocalStore.create writes it (header, checksum, 0600), unsynced."""
    path = store.root / (key + "~")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(local._encode(data, "1.00000000"))
