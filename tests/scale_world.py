"""An account with many instances on loopback FakeVast, for the scale test and its benchmark.

``build`` seeds the fake directly (no HTTP) with ``total`` boxes: ``ours`` of them are live
rentals of this operator past their deadline (sweep must destroy and confirm each); the rest
belong to nobody in the ledger (sweep must report them and never touch them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from fakes.scenario import parse_scenario
from fakes.vast import FakeClock, FakeVast
from fakes.vast.server import FakeVastServer, serve_http
from gpuops.events import EventLog
from gpuops.ledger import Ledger, utc_iso
from gpuops.market.rent import Market
from gpuops.market.rentals import LIVE, box_name
from gpuops.market.teardown import label_for
from gpuops.model import Verdict
from gpuops.providers.vast import VastAdapter
from gpuops.store.local import LocalStore

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopsTestKeyForScaleTests00000000000000 scale"


@dataclass
class Account:
    fake: FakeVast
    server: FakeVastServer
    market: Market
    ours: list[str]  # instance ids of our expired rentals
    theirs: list[str]  # instance ids no ledger owns

    def close(self) -> None:
        self.server.close()


def build(tmp: Path, total: int, ours: int) -> Account:
    offers = [
        {"id": 5000 + i, "machine_id": 9000 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
         "dph_total": 0.3, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}
        for i in range(total)
    ]  # fmt: skip
    doc = {"vast": {"api_key": "k-scale", "ssh_keys": [KEY], "offers": offers}}
    fake = FakeVast(parse_scenario(doc), clock=FakeClock())
    server = serve_http(fake)
    store = LocalStore(tmp / "state")
    events = EventLog(tmp / "events.jsonl", "alice")
    ledger = Ledger(store, events, "alice")
    vast = VastAdapter(api_key="k-scale", base_url=server.url)
    market = Market(
        vast, ledger, events, probe=lambda i, b: Verdict.PASS, public_key=KEY,
        rng=random.Random(1),
    )  # fmt: skip
    past = market.clock.wall() - 3600.0
    mine, others = [], []
    for i, offer in enumerate(offers):
        if i < ours:
            name = f"scale-{i}"
            rental = market.rentals.begin_race(name)
            box = box_name(name, rental.race, 0)
            record, _ = ledger.record_intent(box, "vast", deadline_at=utc_iso(past))
            made = fake.create(offer["id"], {"label": label_for(record.intent_id)})
            ledger.mark_live(box, str(made.id))
            market.rentals.update(
                name, state=LIVE, box=box, instance_id=str(made.id), offer_id=offer["id"],
                started_at=past - 3600.0, deadline_at=past, dph_total=0.3,
            )  # fmt: skip
            mine.append(str(made.id))
        else:
            label = None if i % 2 else f"someone-else-{i}"
            made = fake.create(offer["id"], {"label": label} if label else {})
            others.append(str(made.id))
    return Account(fake, server, market, mine, others)
