"""A state directory with a long released history, as a team's would be after months of use."""

from __future__ import annotations

import dataclasses
import json
import time

from gpuops import timing
from gpuops.ledger import BoxState, Record, encode, utc_iso
from gpuops.market.rentals import PREFIX as RENTALS
from gpuops.market.rentals import Rental
from gpuops.store.local import LocalStore


def seed(state: str, rentals: int, operator: str = "bench@host") -> None:
    """``rentals`` released rentals, each with its released box record, all ended past the
    retention window (written in their final form: the history, not its making, is the point)."""
    store = LocalStore(state)
    ended = time.time() - timing.ARCHIVE_AFTER_S - 86400.0
    for i in range(rentals):
        name = f"past-{i}"
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
        store.create(f"ledger/boxes/{record.name}", encode(record))
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
        store.create(RENTALS + name, json.dumps(dataclasses.asdict(rental)).encode())
