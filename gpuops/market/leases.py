"""Guardian leases in the state store: who guards a rental, and when it last said so (M7).

``market/leases/<NAME>+<rental id>`` (``rentals.lease_key``: one lease per incarnation, M16)
is compare-and-swap written; the decisions about it are pure
(market/guardian.py). Kept apart from the guardian process so that `boxes` and `rent` read a
lease without importing the market's shells.
"""

from __future__ import annotations

from dataclasses import replace

from gpuops.market import guardian as g
from gpuops.market.rentals import check_lease_key
from gpuops.store.base import Store
from gpuops.store.records import NO_CHANGE, JsonCodec, NoChange, Records

LEASES = "market/leases/"
CODEC = JsonCodec(g.Lease, "guardian lease")


class Leases:
    """Compare-and-swap access to guardian leases."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.records = Records(store, LEASES, CODEC, check_name=check_lease_key)

    def read(self, name: str) -> tuple[g.Lease | None, str | None]:
        """The lease and its version; an unreadable one is CorruptState naming the field."""
        return self.records.read(name)

    def take(self, name: str, me: str, now: float, lease: g.Lease | None) -> bool:
        """Take ``lease`` as read (None: absent), keeping whether results were already copied
        off; False when another guardian got there first (the lease is no longer as read)."""
        fresh = g.Lease(me, now, copied=lease is not None and lease.copied)
        done = self.records.update(name, lambda current: fresh if current == lease else NO_CHANGE)
        return done.written

    def renew(self, name: str, me: str, now: float, *, copied: bool = False) -> bool:
        """Renew our lease; False when another guardian holds it now."""

        def bump(current: g.Lease | None) -> g.Lease | NoChange:
            if current is None or current.holder != me:
                return NO_CHANGE
            return replace(
                current,
                heartbeat_at=now,
                beats=current.beats + 1,
                copied=current.copied or copied,
            )

        return self.records.update(name, bump).written

    def drop(self, name: str, me: str) -> None:
        """Give our lease up; one taken meanwhile is theirs now, and stays."""
        self.records.remove(name, lambda lease: lease.holder == me)
