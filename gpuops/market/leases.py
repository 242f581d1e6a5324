"""Guardian leases in the state store: who guards a rental, and when it last said so (M7).

``market/leases/<NAME>`` is compare-and-swap written; the decisions about it are pure
(market/guardian.py). Kept apart from the guardian process so that `boxes` and `rent` read a
lease without importing the market's shells.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, replace

from gpuops.errors import AlreadyExists, CorruptState, VersionConflict
from gpuops.market import guardian as g
from gpuops.market.rentals import check_name
from gpuops.store.base import Store

LEASES = "market/leases/"


class Leases:
    """Compare-and-swap access to guardian leases."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def read(self, name: str) -> tuple[g.Lease | None, str | None]:
        found = self.store.get(LEASES + check_name(name))
        if found is None:
            return None, None
        try:
            return g.Lease(**json.loads(found.data)), found.version
        except (ValueError, TypeError) as exc:
            raise CorruptState(found.key, f"not a guardian lease: {exc}") from exc

    def take(
        self, name: str, me: str, now: float, lease: g.Lease | None, version: str | None
    ) -> bool:
        """Take ``lease`` as read at ``version`` (None: absent), keeping whether results were
        already copied off; False when another guardian got there first."""
        data = _lease_bytes(g.Lease(me, now, copied=lease is not None and lease.copied))
        try:
            if version is None:
                self.store.create(LEASES + name, data)
            else:
                self.store.put(LEASES + name, data, version)
        except (AlreadyExists, VersionConflict):
            return False
        return True

    def renew(self, name: str, me: str, now: float, *, copied: bool = False) -> bool:
        """Renew our lease; False when another guardian holds it now."""
        lease, version = self.read(name)
        if lease is None or lease.holder != me or version is None:
            return False
        fresh = replace(
            lease, heartbeat_at=now, beats=lease.beats + 1, copied=lease.copied or copied
        )
        try:
            self.store.put(LEASES + name, _lease_bytes(fresh), version)
        except VersionConflict:
            return False
        return True

    def drop(self, name: str, me: str) -> None:
        lease, version = self.read(name)
        if lease is not None and lease.holder == me and version is not None:
            with contextlib.suppress(VersionConflict):  # taken meanwhile: it is theirs now
                self.store.delete(LEASES + name, version)


def _lease_bytes(lease: g.Lease) -> bytes:
    return json.dumps(asdict(lease), sort_keys=True).encode()
