"""Race benchmark: time to a healthy box and spend, racing K offers at once.

    python tests/benchmarks/bench_race.py [--trials N] [--seed S] [--ks 1,2,3,5] [--jobs J]

A simulation, not a test. Each trial is one random market (seeded: trial i is the same market
for every K, so the rows compare like with like), served by FakeVast in process on a fake clock
and rented by the real ``Market.rent`` through the real ``VastAdapter``. Every sleep in the
shell, the adapter and teardown advances the fake clock, so a trial takes milliseconds.

The market follows the seed's recorded rates (shared/seeds/001, "What the data says"):
- 34% of create calls fail: each offer is ``taken`` between search and rent with probability
  ``p_taken``, and each create call is answered 429 with probability ``--rate-limited``
  (a scripted one-call burst on the create route), so 1 - (1 - p_rl)(1 - p_taken) = 34%;
- 29% of probes fail on SSH, half for good (``ssh-auth``), half passing at another time
  (``ssh-auth-transient:1``: the first probe of that box is refused, a later one passes);
- 2.3% of offers inside the default filter are host faults (slow-disk / no-gpu / cuda-broken);
- a few offers outside the filter (71% host faults, as recorded) that selection must remove.

Boot time varies per offer (uniform in --boot-min..--boot-max seconds, a third of it
provisioning, the rest loading). The scenario format has one boot time per scenario, so this
script subclasses FakeVast and overrides only ``status``/``_transitions`` to read each box's
own boot time; everything else is the fake as shipped.

The probe verdict comes from each box's fate, as tests/test_rent.py does (no ssh subprocess).
A probe takes the fake seconds its recordings say: of the probe's steps only dd's recorded
output carries a duration ("copied, 0.708477 s"), so a probe that reaches the disk step takes
its dd recording's seconds and one that stops earlier (ssh-auth, no-gpu, cuda-broken) takes
none (an underestimate of every probe, said in the output). A healthy box's dd is drawn per box
from the passing 1 GiB recordings (dd-1gib-fast, reconstructed, 0.5 s; dd-1gib-ext4-captured,
captured, 0.708 s), a slow-disk box's is dd-1gib-overlay-disk (captured, 2.33 s); the draw is
seeded by trial and offer, so every K and both probing modes see the same durations.

Every row is run twice: ``parallel``, as gpuops probes (the boxes up in one poll are probed at
once, so that batch ends at its longest probe), and ``serial``, each probe's seconds added one
after another; the table prints both times to a box and their ratio. ``--probe-scale`` multiplies
every recorded duration (a box whose real probe, connect and GPU checks included, is slower).

Spend is the sum over every box the race created of its offer's dph_total times the seconds it
existed at the fake (created_at to destroyed_at, or to the end of the rent for the kept box).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import random
import re
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fakes.scenario import RateLimitBurst, parse_scenario  # noqa: E402
from fakes.ssh.replay import load as load_ssh_recording  # noqa: E402
from fakes.vast import FakeClock, FakeVast  # noqa: E402
from fakes.vast.model import InstanceState  # noqa: E402
from gpuops.errors import GpuopsError, Refused  # noqa: E402
from gpuops.event_ops import Step  # noqa: E402
from gpuops.ledger import Ledger  # noqa: E402
from gpuops.market.rent import Market, RentRequest  # noqa: E402
from gpuops.model import (
    Instance,  # noqa: E402
    Verdict,  # noqa: E402
)
from gpuops.providers.vast import VastAdapter  # noqa: E402
from gpuops.store.memory import MemoryStore  # noqa: E402
from tests.benchmarks.common import load  # noqa: E402

BASE = "https://console.vast.ai"
API_KEY = "k-bench"
PUBLIC_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopsBenchKeyForRaceBenchmark00000000000000 bench"
)
GPU = "RTX 4090"

# The seed's recorded rates (shared/seeds/001).
CREATE_FAIL = 0.34  # of create calls
SSH_FAIL = 0.29  # of probes; about half of those machines passed at another time
HOST_FAULT_IN_FILTER = 0.023
HOST_FAULT_OUT_OF_FILTER = 0.71
HOST_FAULTS = ("slow-disk", "no-gpu", "cuda-broken")

VERDICTS = {
    "healthy": Verdict.PASS,
    "ssh-auth": Verdict.SSH_AUTH,
    "slow-disk": Verdict.SLOW_DISK,
    "no-gpu": Verdict.NO_GPU,
    "cuda-broken": Verdict.CUDA_BROKEN,
}


@dataclass(frozen=True)
class Params:
    seed: int
    offers_in: int
    offers_out: int
    rate_limited: float  # of create calls
    boot_min_s: float
    boot_max_s: float
    probe_scale: float

    @property
    def p_taken(self) -> float:
        """Per offer, so that creates fail CREATE_FAIL of the time with the 429s on top."""
        return 1.0 - (1.0 - CREATE_FAIL) / (1.0 - self.rate_limited)


# The dd recordings a probe's duration is drawn from, by the box's fate (module docstring).
PASSING_DD = ("dd-1gib-fast", "dd-1gib-ext4-captured")
SLOW_DD = "dd-1gib-overlay-disk"
_DD_SECONDS = re.compile(r"copied, ([0-9.]+) s,")
MODES = ("parallel", "serial")
# A batch of parallel probes whose size the bench miscounted would wait forever; after this
# much wall time it goes on, and the run says how often (it should be never).
BATCH_WAIT_S = 5.0


def recorded_seconds(name: str) -> float:
    """The seconds dd reported in recordings/ssh/NAME.yaml."""
    found = _DD_SECONDS.search(load_ssh_recording(name).stderr)
    if found is None:
        raise SystemExit(f"recordings/ssh/{name}.yaml carries no dd duration")
    return float(found[1])


def probe_seconds(p: Params, trial: int, offer_id: int, verdict: Verdict) -> float:
    """Fake seconds this probe takes: its dd recording's, 0 when it stops before the disk."""
    if verdict is Verdict.SLOW_DISK:
        return recorded_seconds(SLOW_DD) * p.probe_scale
    if verdict is not Verdict.PASS:
        return 0.0
    rng = random.Random(f"bench-race-probe:{p.seed}:{trial}:{offer_id}")
    return recorded_seconds(rng.choice(PASSING_DD)) * p.probe_scale


class SerialProbes:
    """Each probe's seconds after the last one's: probing one box at a time."""

    def __init__(self, fake: FakeVast) -> None:
        self.fake = fake
        self.lock = threading.Lock()
        self.stalls = 0

    def take(self, box: InstanceState, seconds: float) -> None:
        with self.lock:
            self.fake.advance(seconds)


class ParallelProbes:
    """The probes gpuops starts together (every box up and not yet probed when the first of
    them starts) run at once: none moves the clock until all have started, and the batch
    ends at its longest probe."""

    def __init__(self, fake: FakeVast) -> None:
        self.fake = fake
        self.cond = threading.Condition()
        self.probed: set[int] = set()
        self.batch_at: float | None = None
        self.expected = 0
        self.arrived = 0
        self.stalls = 0

    def _up_unprobed(self) -> int:
        return sum(
            1
            for b in self.fake.instances.values()
            if b.destroyed_at is None
            and b.id not in self.probed
            and self.fake.status(b) == "running"
        )

    def take(self, box: InstanceState, seconds: float) -> None:
        with self.cond:
            now = self.fake.now()
            if self.batch_at != now or self.arrived >= self.expected:
                self.batch_at, self.arrived, self.expected = now, 0, self._up_unprobed()
            started = self.batch_at
            self.arrived += 1
            self.probed.add(box.id)
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.arrived >= self.expected, BATCH_WAIT_S):
                self.stalls += 1
            late = started + seconds - self.fake.now()
            if late > 0:
                self.fake.advance(late)


# --- the market of one trial -------------------------------------------------------------------
@dataclass
class MarketDraw:
    offers: list[dict[str, Any]]
    boot_s: dict[int, float]  # offer id -> seconds from create to running
    rate_limited_calls: list[int]  # 1-based create call numbers answered 429


def draw_market(p: Params, trial: int) -> MarketDraw:
    rng = random.Random(f"bench-race:{p.seed}:{trial}")
    offers, boot = [], {}
    for i in range(p.offers_in + p.offers_out):
        inside = i < p.offers_in
        offer_id = 20000 + i
        if rng.random() < p.p_taken:
            fate = "taken"
        else:
            u = rng.random()
            fault = HOST_FAULT_IN_FILTER if inside else HOST_FAULT_OUT_OF_FILTER
            if u < fault:
                fate = rng.choice(HOST_FAULTS)
            elif inside and u < fault + SSH_FAIL / 2:
                fate = "ssh-auth"
            elif inside and u < fault + SSH_FAIL:
                fate = "ssh-auth-transient:1"
            else:
                fate = "healthy"
        reliability, disk_bw = round(rng.uniform(0.98, 0.999), 4), round(rng.uniform(600, 3500), 1)
        if not inside:  # the filter removes it: unreliable or a slow disk
            if rng.random() < 0.5:
                reliability = round(rng.uniform(0.85, 0.979), 4)
            else:
                disk_bw = round(rng.uniform(100, 499), 1)
        offers.append(
            {
                "id": offer_id,
                "machine_id": 9000 + i,
                "gpu_name": GPU,
                "gpu_ram": 24564,
                "dph_total": round(rng.uniform(0.28, 0.60), 4),
                "reliability": reliability,
                "disk_bw": disk_bw,
                "fate": fate,
            }
        )
        boot[offer_id] = rng.uniform(p.boot_min_s, p.boot_max_s)
    limited = [n for n in range(1, 41) if rng.random() < p.rate_limited]
    return MarketDraw(offers, boot, limited)


class BootingFakeVast(FakeVast):
    """FakeVast with a boot time per offer (the scenario format has one per scenario)."""

    def __init__(self, *args: Any, boot_s: dict[int, float], **kwargs: Any) -> None:
        self.boot_s = boot_s
        super().__init__(*args, **kwargs)

    def _phases(self, box: InstanceState) -> tuple[float, float]:
        total = self.boot_s[box.offer_id]
        return total / 3.0, total * 2.0 / 3.0  # provisioning, loading

    def status(self, box: InstanceState, at: float | None = None) -> str | None:
        provisioning, loading = self._phases(box)
        age_s = (self.now() if at is None else at) - box.created_at
        if age_s < provisioning:
            return None
        if age_s < provisioning + loading:
            return "loading"
        running_for = age_s - provisioning - loading
        if box.fate.kind == "dies-after" and running_for >= box.fate.minutes * 60:
            return "exited"
        return "running"

    def _transitions(self, box: InstanceState) -> list[float]:
        provisioning, loading = self._phases(box)
        times = [box.created_at + provisioning, box.created_at + provisioning + loading]
        if box.fate.kind == "dies-after":
            times.append(times[1] + box.fate.minutes * 60)
        return times


class TimedEvents:
    """The event sink, stamping each event with the fake clock."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.events: list[tuple[float, str, dict[str, Any]]] = []

    def append(self, kind: str, /, **payload: Any) -> None:
        self.events.append((self.clock(), kind, payload))


# --- one trial -----------------------------------------------------------------------------------
@dataclass
class Result:
    k: int
    ok: bool
    mode: str = "parallel"
    stalls: int = 0  # parallel batches the bench miscounted (waited BATCH_WAIT_S)
    failure: str | None = None  # "M2" (stopped, blaming our key) or "exhausted"
    to_kept_s: float | None = None
    gap_s: float | None = None  # to_kept_s minus the boot time of the fastest healthy raced offer
    spend_usd: float = 0.0
    creates: int = 0
    create_failures: int = 0
    probes: dict[str, int] = field(default_factory=dict)  # verdict -> count


def run_trial(p: Params, trial: int, k: int, mode: str = "parallel") -> Result:
    draw = draw_market(p, trial)
    doc = {"vast": {"api_key": API_KEY, "ssh_keys": [PUBLIC_KEY], "offers": draw.offers}}
    fake = BootingFakeVast(parse_scenario(doc), clock=FakeClock(), boot_s=draw.boot_s)
    for n in draw.rate_limited_calls:
        fake.add_rate_limit(RateLimitBurst(count=1, after_calls=n - 1, route="create"))
    events = TimedEvents(fake.now)
    probes: dict[str, int] = {}
    probed_before: dict[int, int] = {}
    timing = ParallelProbes(fake) if mode == "parallel" else SerialProbes(fake)
    tally = threading.Lock()

    def probe(instance: Instance, box: str) -> Verdict:
        state = fake.instances[int(instance.instance_id)]
        with tally:
            if state.fate.kind == "ssh-auth-transient":
                seen = probed_before.get(state.id, 0)
                probed_before[state.id] = seen + 1
                verdict = Verdict.SSH_AUTH if seen < state.fate.count else Verdict.PASS
            else:
                verdict = VERDICTS[state.fate.kind]
            probes[verdict.value] = probes.get(verdict.value, 0) + 1
        seconds = probe_seconds(p, trial, state.offer_id, verdict)
        timing.take(state, seconds)
        return verdict

    result = Result(k, ok=False, mode=mode)
    with fake.activate(BASE):
        vast = VastAdapter(
            api_key=API_KEY, base_url=BASE, clock=fake.ticking()
        )
        ledger = Ledger(MemoryStore(), events, "bench", clock=fake.clock)
        market = Market(
            vast,
            ledger,
            events,
            probe=probe,
            public_key=PUBLIC_KEY,
            clock=fake.ticking(),
            rng=random.Random(f"bench-race-select:{p.seed}:{trial}"),
        )
        began = fake.now()
        try:
            market.rent(RentRequest(name="bench", gpu_name=GPU, hours=2.0, race_k=k))
            result.ok = True
        except Refused as exc:
            result.failure = "M2" if exc.rule == "M2" else f"refused {exc.rule}"
        except GpuopsError:
            result.failure = "exhausted"
        ended = fake.now()

    for box in fake.instances.values():
        until = box.destroyed_at if box.destroyed_at is not None else ended
        result.spend_usd += float(box.offer_row["dph_total"]) * (until - box.created_at) / 3600.0
    create_calls = [c for c in fake.calls if c.route == "create"]
    result.creates = len(create_calls)
    result.create_failures = sum(1 for c in create_calls if c.status >= 400)
    result.probes = probes
    result.stalls = timing.stalls
    if result.ok:
        kept_at = [
            t
            for t, kind, e in events.events
            if kind == "market.candidate" and e["step"] == Step.KEPT.value  # typed, not `what`
        ]
        result.to_kept_s = kept_at[0] - began
        boxes = fake.instances.values()
        healthy = [draw.boot_s[b.offer_id] for b in boxes if b.fate.kind == "healthy"]
        result.gap_s = result.to_kept_s - min(healthy)
    return result


def run_chunk(args: tuple[Params, int, Sequence[int]]) -> list[Result]:
    """Both probing modes of each trial, one after the other (interleaved A/B)."""
    p, k, trials = args
    return [run_trial(p, trial, k, mode) for trial in trials for mode in MODES]


# --- the table -----------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


def main(argv: Sequence[str] | None = None) -> list[tuple[str, str, str]]:
    """Run the table; returns its rows for ``python -m tests.benchmarks``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ks", default="1,2,3,5", help="race widths, comma-separated")
    parser.add_argument("--offers-in", type=int, default=24, help="offers inside the filter")
    parser.add_argument("--offers-out", type=int, default=6, help="offers the filter removes")
    parser.add_argument(
        "--rate-limited", type=float, default=0.05, help="share of create calls answered 429"
    )
    parser.add_argument("--boot-min", type=float, default=30.0)
    parser.add_argument("--boot-max", type=float, default=300.0)
    parser.add_argument(
        "--probe-scale", type=float, default=1.0, help="multiplies every recorded probe duration"
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = parser.parse_args(argv)
    if a.offers_in + a.offers_out > 32:
        parser.error("at most 32 offers: the adapter's search answers 32")
    p = Params(
        a.seed, a.offers_in, a.offers_out, a.rate_limited, a.boot_min, a.boot_max, a.probe_scale
    )
    ks = [int(x) for x in a.ks.split(",")]

    # requests scans the whole environment for proxies on every request (a third of the run);
    # nothing here leaves the process (responses answers in process), so keep only the basics
    # while the trials run, and give the caller its environment back after.
    saved = dict(os.environ)
    for name in list(os.environ):
        if name not in ("PATH", "HOME", "LANG", "TMPDIR"):
            del os.environ[name]
    try:
        started = time.perf_counter()
        for module in ("client", "instances", "offers", "keys"):  # once, before workers fork
            importlib.import_module(f"vastai.api.{module}")
        chunks = [(p, k, range(j, a.trials, a.jobs)) for k in ks for j in range(a.jobs)]
        if a.jobs > 1:
            import multiprocessing

            with multiprocessing.get_context("fork").Pool(a.jobs) as pool:
                parts = pool.map(run_chunk, chunks)
        else:
            parts = [run_chunk(c) for c in chunks]
        wall = time.perf_counter() - started
    finally:
        os.environ.clear()
        os.environ.update(saved)
    results: dict[tuple[str, int], list[Result]] = {(m, k): [] for m in MODES for k in ks}
    for part in parts:
        for res in part:
            results[(res.mode, res.k)].append(res)
    return report(a, p, ks, results, wall)


def p50_to_box(rows: Sequence[Result]) -> float | None:
    times = [r.to_kept_s or 0.0 for r in rows if r.ok]
    return statistics.median(times) if times else None


def report(
    a: argparse.Namespace,
    p: Params,
    ks: Sequence[int],
    results: dict[tuple[str, int], list[Result]],
    wall: float,
) -> list[tuple[str, str, str]]:
    """Print the table (both probing modes, their ratio) and return its summary rows."""
    head = (
        f"{'race':<8} {'to box p50':>10} {'serial p50':>10} {'ratio':>6} {'p90':>7} "
        f"{'vs fastest':>10} {'spend p50':>10} {'creates':>8} {'failed':>7} {'of which M2':>11}"
    )
    print(head)
    print("-" * len(head))
    summary: list[tuple[str, str, str]] = []
    for k in ks:
        rows, serial = results[("parallel", k)], results[("serial", k)]
        ok = [r for r in rows if r.ok]
        failed = len(rows) - len(ok)
        m2 = sum(1 for r in rows if r.failure == "M2")
        par_s, ser_s = p50_to_box(rows), p50_to_box(serial)
        if ok and par_s is not None and ser_s is not None:
            times = [r.to_kept_s or 0.0 for r in ok]
            ratio = ser_s / par_s
            cells = (
                f"{par_s:9.1f}s {ser_s:9.1f}s {ratio:6.3f} {percentile(times, 90):6.0f}s "
                f"{statistics.median(r.gap_s or 0.0 for r in ok):+9.0f}s "
                f"${statistics.median(r.spend_usd for r in ok):9.4f}"
            )
            summary.append(
                (f"race K={k}: p50 time to a healthy box", f"{par_s:.1f} s ({ser_s:.1f} s serial)",
                 f"serial/parallel {ratio:.3f}; {a.trials} markets")
            )  # fmt: skip
        else:
            cells = f"{'-':>10} {'-':>10} {'-':>6} {'-':>7} {'-':>10} {'-':>10}"
        print(
            f"{'K=' + str(k):<8} {cells} {statistics.fmean(r.creates for r in rows):8.2f} "
            f"{failed / len(rows):6.1%} {m2 / len(rows):10.1%}"
        )

    every = [r for k in ks for r in results[("parallel", k)]]
    creates = sum(r.creates for r in every)
    verdicts: dict[str, int] = {}
    for r in every:
        for v, n in r.probes.items():
            verdicts[v] = verdicts.get(v, 0) + n
    probes = sum(verdicts.values())
    host = sum(n for v, n in verdicts.items() if v in HOST_FAULTS)
    stalls = sum(r.stalls for m in MODES for k in ks for r in results[(m, k)])
    durations = ", ".join(f"{n} {recorded_seconds(n):g} s" for n in (*PASSING_DD, SLOW_DD))
    print(
        f"how: real Market.rent + VastAdapter vs in-process FakeVast, fake clock; {a.trials} "
        f"seeded markets (--seed {a.seed}, the same ones for every K and both probing modes) of "
        f"{a.offers_in}+{a.offers_out} {GPU} offers in+out of the default filter; offers taken "
        f"{p.p_taken:.1%} + creates 429 {a.rate_limited:.0%} (34% of creates fail); box fates "
        f"ssh-auth {SSH_FAIL / 2:.1%}, ssh-auth-transient:1 {SSH_FAIL / 2:.1%}, host fault "
        f"{HOST_FAULT_IN_FILTER:.1%}; boot U({a.boot_min:g},{a.boot_max:g}) s per offer; probe "
        f"verdict from fate, duration from its dd recording x {a.probe_scale:g} ({durations}; "
        f"no other probe step records a duration, so those count 0 s); 'to box' as gpuops "
        f"probes (a poll's probes at once), 'serial' one probe after another, ratio = "
        f"serial/parallel; times/spend over successful rents only; 'vs fastest' = time minus "
        f"boot of the fastest healthy offer raced; spend = dph_total x seconds alive, every box; "
        f"{a.jobs} jobs, {wall:.1f} s wall; {load()}"
    )
    print(
        f"realised over all rows: {sum(r.create_failures for r in every) / max(creates, 1):.1%} of "
        f"{creates} creates failed; {verdicts.get('ssh-auth', 0) / max(probes, 1):.1%} of {probes} "
        f"probes failed on ssh, {host / max(probes, 1):.1%} on a host fault; parallel batches "
        f"miscounted: {stalls}"
    )
    return summary


if __name__ == "__main__":
    main()
    sys.exit(0)
