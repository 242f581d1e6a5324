"""A long simulated market run against FakeVast, writing a real event log.

``simulate_market`` rents and destroys ``rentals`` times through the real Market shell and
the real VastAdapter, with FakeVast answering in process on a FakeClock. Each machine has a
true pass rate (the truth the learning code must recover); every round lists fresh offers
for a few machines and draws each offer's fate from its machine's rate, so the event log
holds what a real month would: taken offers, SSH failures that pass another time, host
faults, quarantines and the cost of each box. The probe verdict is the fate's (the probe
itself is tested on recordings in tests/test_probe.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from fakes.scenario import parse_offer, parse_scenario
from fakes.vast import FakeClock, FakeVast
from gpuops.errors import GpuopsError
from gpuops.events import EventLog
from gpuops.ledger import Ledger
from gpuops.market.ending import destroy_rental
from gpuops.market.rent import Market, RentRequest
from gpuops.model import Instance, Verdict
from gpuops.store.memory import MemoryStore

BASE = "https://console.vast.ai"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopsSimulatedMarketKey00000000000000000 sim"
VERDICT_OF = {
    "healthy": Verdict.PASS,
    "ssh-auth": Verdict.SSH_AUTH,
    "unreachable": Verdict.SSH_UNREACHABLE,
    "slow-disk": Verdict.SLOW_DISK,
    "no-gpu": Verdict.NO_GPU,
    "cuda-broken": Verdict.CUDA_BROKEN,
}
HOST_FAULT_FATES = ("slow-disk", "no-gpu", "cuda-broken")


@dataclass(frozen=True)
class Machine:
    machine_id: int
    gpu_name: str
    pass_rate: float  # the truth: chance a probe of this machine passes its hardware checks
    dph_total: float


@dataclass
class SimTruth:
    machines: dict[int, Machine]
    rentals: int = 0
    probed_true_rates: list[float] = field(default_factory=list)  # each probed box's machine
    failed_rentals: int = 0
    fates: dict[str, int] = field(default_factory=dict)
    create_statuses: dict[int, int] = field(default_factory=dict)  # FakeVast's own count


def machines_for(rng: random.Random, per_model: int = 12) -> dict[int, Machine]:
    """Two GPU models with different pools: most hosts good, a few bad (beta-distributed)."""
    out: dict[int, Machine] = {}
    for model, (a, b, base_price) in {
        "RTX 4090": (8.0, 1.5, 0.35),
        "RTX 3090": (4.0, 2.0, 0.2),
    }.items():
        for _ in range(per_model):
            machine_id = 500 + len(out)
            price = round(base_price + rng.uniform(0.0, 0.1), 4)
            out[machine_id] = Machine(machine_id, model, rng.betavariate(a, b), price)
    return out


def simulate_market(
    log_path: Path,
    *,
    rentals: int,
    seed: int = 1,
    offers_per_round: int = 6,
    taken_rate: float = 0.2,
    ssh_rate: float = 0.15,
    box_hours: float = 0.5,
    learn: bool = False,
) -> SimTruth:
    """``learn``: rank by the shrunk pass rates read from the log so far (gpuops' default)."""
    rng = random.Random(seed)
    truth = SimTruth(machines_for(rng))
    fake = FakeVast(
        parse_scenario({"vast": {"api_key": "k-sim", "ssh_keys": [KEY], "offers": []}}),
        clock=FakeClock(),
    )
    store = MemoryStore()
    next_offer = [10_000]

    events = EventLog(log_path, "sim@fakes", clock=fake.clock)

    def probe(instance: Instance, box: str) -> Verdict:
        truth.probed_true_rates.append(truth.machines[instance.machine_id or 0].pass_rate)
        return VERDICT_OF[fake.instances[int(instance.instance_id)].fate.kind]

    from gpuops.analysis.learned import ranker as learned_ranker
    from gpuops.providers.vast import VastAdapter

    with fake.activate(BASE):
        vast = VastAdapter(api_key="k-sim", base_url=BASE, clock=fake.ticking())
        ledger = Ledger(store, events, "sim@fakes", clock=fake.clock)
        market = Market(
            vast,
            ledger,
            events,
            probe=probe,
            public_key=KEY,
            clock=fake.ticking(),
            rng=random.Random(seed),
            pass_rates=learned_ranker(log_path) if learn else None,
        )
        for i in range(rentals):
            model = rng.choice(sorted({m.gpu_name for m in truth.machines.values()}))
            pool = [m for m in truth.machines.values() if m.gpu_name == model]
            for machine in rng.sample(pool, min(offers_per_round, len(pool))):
                fate = _fate(rng, machine, taken_rate, ssh_rate)
                truth.fates[fate] = truth.fates.get(fate, 0) + 1
                next_offer[0] += 1
                fake.add_offer(parse_offer(_offer_doc(next_offer[0], machine, fate)))
            name = f"sim-{i}"
            try:
                market.rent(RentRequest(name=name, gpu_name=model, hours=2.0, race_k=2))
                truth.rentals += 1
                fake.advance(box_hours * 3600.0)
            except GpuopsError:
                truth.failed_rentals += 1
            destroy_rental(market, name)
            for offer_id in [o for o, s in fake.offers.items() if s.held_by is None]:
                del fake.offers[offer_id]  # the round's unrented offers leave the market
            fake.advance(600.0)
    for call in fake.calls:
        if call.route == "create":
            truth.create_statuses[call.status] = truth.create_statuses.get(call.status, 0) + 1
    return truth


def _fate(rng: random.Random, machine: Machine, taken_rate: float, ssh_rate: float) -> str:
    if rng.random() < taken_rate:
        return "taken"
    if rng.random() < ssh_rate:
        return rng.choice(("ssh-auth", "unreachable"))
    return "healthy" if rng.random() < machine.pass_rate else rng.choice(HOST_FAULT_FATES)


def _offer_doc(offer_id: int, machine: Machine, fate: str) -> dict[str, object]:
    return {
        "id": offer_id,
        "machine_id": machine.machine_id,
        "gpu_name": machine.gpu_name,
        "gpu_ram": 24564,
        "dph_total": machine.dph_total,
        "reliability": 0.99,
        "disk_bw": 1500.0,
        "fate": fate,
    }
