"""What ending a rental's boxes needs of a market (M13): ``MarketContext``, the collaborators
the race (``rent.Market``), the guardian, `destroy` and `sweep` share, and ``Vast``, the
provider calls they make. ``rent.Market`` is one; ``ending``, ``sweep`` and ``pacing`` are
written against these protocols, so none of them imports the race.
"""

from __future__ import annotations

from typing import Protocol

from gpuops.clock import Clock
from gpuops.ledger import EventSink, Ledger
from gpuops.market.rentals import Rentals
from gpuops.model import Instance, Offer, SshKey


class Vast(Protocol):
    base_url: str  # where the provider answers: a box's own ceiling calls it too (M14)

    def search_offers(
        self,
        gpu_name: str | None = None,
        num_gpus: int | None = None,
        *,
        rented: bool | None = None,
    ) -> list[Offer]: ...
    def create(
        self, offer_id: int, *, label: str, image: str, disk_gb: float, onstart: str | None = None
    ) -> str: ...
    def show(self, instance_id: str) -> Instance | None: ...
    def list_instances(self, *, label: str | None = None) -> list[Instance]: ...
    def destroy(self, instance_id: str) -> None: ...
    def list_ssh_keys(self) -> list[SshKey]: ...


class MarketContext(Protocol):
    """The provider, the ledger, the rentals, the event log and the clock of one command or
    guardian, on one host (``host``: whose wall clock ``clock`` reads, M17)."""

    vast: Vast
    ledger: Ledger
    rentals: Rentals
    events: EventSink
    clock: Clock
    host: str

    def reconcile(self, label: str) -> Instance | None:
        """The box whose label is ``label``, looked up on the provider (M12), or None."""
        ...

    def on(self, *, vast: Vast | None = None) -> MarketContext:
        """The same market calling the provider through ``vast`` (a sweep's paced calls)."""
        ...
