"""The market's test world: FakeVast in-process, the real adapter over the real `vastai` client,
a store, an event sink, and a `Market` per operator built the one way.

Like tests/lane_world.py for the lane. The provider is FakeVast answering the real SDK through
``responses``; a box's probe verdict comes from its offer's scripted ``fate`` unless a test
passes its own probe (the probe itself is tested on recordings in test_probe.py and through the
fake ssh in test_ssh.py). ``ssh_boxes`` adds the fake ssh program, whose boxes run jobs for real
in their sandboxes (fakes/ssh/README.md).

Every safety check asks the fake what still bills (``World.billing``), never what gpuops printed.
"""

from __future__ import annotations

import copy
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from store_fakes import Events

from fakes.scenario import parse_scenario
from fakes.simulate import VERDICT_OF
from fakes.ssh import sandbox
from fakes.ssh.boxes import write_identity
from fakes.vast import FakeClock, FakeVast
from gpuops.clock import Clock
from gpuops.ledger import Ledger
from gpuops.market.rent import Market, RentRequest
from gpuops.model import Instance, Verdict
from gpuops.providers.vast import VastAdapter
from gpuops.store.base import Store
from gpuops.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
FAKE_SSH = ROOT / "fakes" / "ssh" / "ssh"
BASE = "https://console.vast.ai"
API_KEY = "k-test"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopsTestKeyForRentTests000000000000000 test"
GPU = "RTX 4090"
# The verdict the probe reaches on a box of each scripted fate (the simulation's own table).
FATES = VERDICT_OF

Probe = Callable[[Instance, str], Verdict]


def offer(
    i: int, fate: str = "healthy", price: float | None = None, *, first_id: int = 1000,
    first_machine: int = 500,
) -> dict[str, Any]:  # fmt: skip
    """The ``i``-th RTX 4090 offer of a scenario: $0.30/h plus a cent per place unless priced."""
    return {
        "id": first_id + i,
        "machine_id": first_machine + i,
        "gpu_name": GPU,
        "gpu_ram": 24564,
        "dph_total": 0.30 + i / 100 if price is None else price,
        "reliability": 0.995,
        "disk_bw": 2000.0,
        "fate": fate,
    }


def scenario(*fates: str, api_key: str = API_KEY, **vast: Any) -> dict[str, Any]:
    """A FakeVast scenario with one offer per fate, in price order; ``vast`` adds fields."""
    offers = [offer(i, fate) for i, fate in enumerate(fates)]
    return {"vast": {"api_key": api_key, "ssh_keys": [KEY], "offers": offers, **vast}}


def request(name: str = "job", k: int = 3, hours: float = 2.0) -> RentRequest:
    return RentRequest(name=name, gpu_name=GPU, hours=hours, race_k=k)


def scripted_probe(fake: FakeVast) -> Probe:
    """A probe whose verdict is the box's scripted fate."""

    def probe(instance: Instance, box: str) -> Verdict:
        return FATES[fake.instances[int(instance.instance_id)].fate.kind]

    return probe


def build_market(
    fake: FakeVast,
    store: Store,
    events: Any,
    operator: str = "alice",
    *,
    probe: Probe | None = None,
    api_key: str = API_KEY,
    seed: int = 7,
    clock: Clock | None = None,
    ledger_clock: Clock | None = None,
    **extra: Any,
) -> Market:
    """A `Market` for ``operator`` on the fake: the real adapter and ledger, the fake's clock
    (or ``clock``), and ``extra`` passed through (progress, budget, pass_rates, host...)."""
    return Market(
        VastAdapter(api_key=api_key, base_url=BASE, clock=fake.ticking()),
        Ledger(store, events, operator, clock=ledger_clock or fake.clock),
        events,
        probe=probe or scripted_probe(fake),
        public_key=KEY,
        clock=clock or fake.ticking(),
        rng=random.Random(seed),
        **extra,
    )


@dataclass
class World:
    fake: FakeVast
    store: MemoryStore = field(default_factory=MemoryStore)
    events: Events = field(default_factory=Events)
    tmp: Path | None = None

    def market(self, operator: str = "alice", **kwargs: Any) -> Market:
        return build_market(self.fake, self.store, self.events, operator, **kwargs)

    def billing(self) -> list[int]:
        """The fake's own record: every box that still bills."""
        return sorted(box.id for box in self.fake.boxes())

    alive = billing

    def create_calls(self) -> list[Any]:
        return [call for call in self.fake.calls if call.route == "create"]

    def creates(self) -> int:
        return len(self.create_calls())


@contextmanager
def fake_vast(doc: dict[str, Any], state_dir: Path | None = None) -> Iterator[FakeVast]:
    """FakeVast on a copy of ``doc``, on its own clock, answering the SDK at ``BASE``."""
    fake = FakeVast(parse_scenario(copy.deepcopy(doc)), clock=FakeClock(), state_dir=state_dir)
    with fake.activate(BASE):
        yield fake


@contextmanager
def ssh_boxes(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fake ssh program for a fake whose state is ``tmp / "fake"``: boxes reachable over it,
    the account's key written to ``tmp / "id_ed25519"``; every sandbox stopped afterwards."""
    fake_dir = tmp / "fake"
    monkeypatch.setenv("GPUOPS_SSH", str(FAKE_SSH))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_PYTHON", sys.executable)
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake_dir / "boxes.yaml"))
    write_identity(tmp / "id_ed25519", KEY)  # the key the account (and each box) holds
    try:
        yield fake_dir
    finally:
        sandbox.stop_all(fake_dir / "boxes.yaml")
