"""A seeded, deterministic soak of the market's shells (M13, H5): faulty rent -> deadline
lifecycles through the real Market, adapter, guardian and sweep against FakeVast in-process on
a fake clock, with a crash or an interrupt injected at any provider call or store write.

Each lifecycle draws offers with random fates, a random set of the faults FakeVast can script
(lost creates with a closed connection or a 5xx, lists that answer empty, 429s on create,
destroys that fail, destroy lag, a list that misses new boxes, a show that lags), a stranger's
box on the account, whether a guardian runs and whether it too is killed (by SIGKILL, or by
SIGTERM, whose handler must give the lease up and exit 143; then a successor takes over;
with no guardian, cron runs sweep every five minutes from the deadline), and one point at
which rent dies: SIGKILL (nothing of rent runs after it) or an interrupt (its
clean-up runs; one that comes around a create waits for the create's answer and its record,
as rent's hold makes a real signal wait, and is counted as held). The verdicts ask the fake,
never gpuops:

- leaked: a box of ours still billing at the deadline plus OWNER_GRACE_S;
- wrong destroys: a box gpuops does not own was destroyed;
- premature releases: a record released while the fake still showed its box;
- exit 0 while billing: a guardian or `destroy` said "all gone" while a box of the rental billed;
- early: the kept box ended before its owner's own guardian would begin its copy (no `destroy`
  by hand), whichever host's clock judged it;
- (reached, not judged) a guardian killed or stopped during its results copy: its successor
  copies again, into the same incarnation's folder;
- a failed copy unheard: the guardian's results destination refused the delivery, and it
  exited 0 (it must still destroy in time, judged by the leak and early verdicts, and exit
  non-zero: M17);
- left lying: once every process has ended, the disk has room and cron has swept past an
  unclear create's window, alice's rental still says racing or live, or a box record of hers
  is not released (her own record edited by hand is a person's to repair: not judged);
- results overwritten: a kept box's job wrote results (half of them do), and what its guardian
  delivered is not that incarnation's, whole, under ``<results>/job/<rental id>/`` (M16), or an
  earlier incarnation's delivery there changed, or a delivery's sync manifest does not match
  its files (size and sha256); every lifecycle of a run shares one results folder and the name
  "job", so each delivery meets all the earlier ones. A third of the rentals sync their results
  while the job runs (every minute), a third once in the rental (every four), the rest only
  before the destroy: a periodic sync and the last one deliver into that same folder.

The world is a team (M17): a second operator, bob, rents on another host sharing the store,
and his box must outlive everything alice's processes do (M3); alice's guardian may run on a
host whose wall clock is up to 15 minutes off hers (ahead or behind), and so may cron's sweep;
a record of bob's, or alice's own kept record, may be edited by hand into garbage; the
store may refuse every write from some point on (a full disk). Each of these is counted as
reached, so a run that never met one says so. With ``s3_every``, some lifecycles run over an S3
state instead (moto's server on loopback), each host through a boto3 client of its own, behind
a proxy that may let one conditional write land and lose its answer (tests/s3_proxy.py).

Used by tests/test_soak.py (a CI slice) and tests/benchmarks/bench_soak.py (the full run).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import random
import signal
import tarfile
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3_proxy import LossyProxy

from fakes import seam
from fakes.scenario import parse_scenario
from fakes.simulate import VERDICT_OF
from fakes.vast import FakeClock, FakeVast
from fakes.vast.server import site
from gpuops import timing
from gpuops.errors import GpuopsError, Interrupted, Refused, StillRunning, StoreUnavailable
from gpuops.ledger import PREFIX, Ledger
from gpuops.market import jobs
from gpuops.market import sync_plan as sp
from gpuops.market import watchdog as w
from gpuops.market.ending import destroy_rental
from gpuops.market.guard import Guardian, stopped
from gpuops.market.guardian import schedule
from gpuops.market.leases import Leases
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import LIVE, RACING
from gpuops.market.results import LocalResults
from gpuops.market.sweep import sweep
from gpuops.market.teardown import exit_code, intent_of
from gpuops.model import Instance, StepOutput, Verdict
from gpuops.procs import hold_interrupt
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings
from gpuops.store.memory import MemoryStore
from gpuops.store.s3 import S3Store

BASE = "https://console.vast.ai"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpuopsSoakTestKey000000000000000000000000 soak"
FATES = {**VERDICT_OF, "taken": Verdict.PASS}  # a taken offer's box is never probed
HOURS = 0.1
DAY_S = 86400.0 + timing.OWNER_GRACE_S
CRON_S = 300.0  # a rental with no guardian is swept by cron this often (a list can lag)
STRANGER = 9999
BOBS = 9998  # bob's own offer (another GPU): alice's races see the market they always did


class Killed(BaseException):
    """A process died here (SIGKILL): nothing after this point of it runs."""


class KilledMarket(Market):
    """A market whose process a ``Killed`` ends mid-race: the race's clean-up never runs (the
    process is gone); any other ending cleans up as ``Market`` does."""

    def _abandon(self, rental: Any, why: BaseException) -> Any:
        return [] if isinstance(why, Killed) else super()._abandon(rental, why)


class Terminated(BaseException):
    """A guardian stopped here by SIGTERM: its handler (guard.stopped) ran, then it exited."""

    def __init__(self, code: object) -> None:
        super().__init__(code)
        self.code = code


def _sigterm(guardian: Guardian) -> BaseException:
    """What SIGTERM does to a running guardian, at the call the tripwire picked: its handler
    runs there (as Python runs one between two bytecodes), gives the lease up and exits."""
    try:
        stopped(guardian, signal.SIGTERM)
    except SystemExit as exc:
        return Terminated(exc.code)
    raise AssertionError("guard.stopped returned")


class Stuck(BaseException):
    """A guardian still looping a day past its deadline's grace: a hang, counted as a failure."""


class Tripwire:
    """Fires once, at the n-th provider call or store write it counts (before or after it)."""

    def __init__(self) -> None:
        self.left: int | None = None
        self.after = False
        self.fire: Callable[[], BaseException] = Killed
        self.fired = False
        self.held = False  # an interrupt that fired inside rent's hold around a create

    def arm(self, n: int | None, after: bool, fire: Callable[[], BaseException]) -> None:
        self.left, self.after, self.fire, self.fired = n, after, fire, False
        self.held = False

    def tick(self, done: bool) -> None:
        if self.left is None or done != self.after:
            return
        self.left -= 1
        if self.left <= 0:
            self.left, self.fired = None, True
            fired = self.fire()
            # a signal's handler inside rent's hold around a create: held until its answer is
            # on record, then raised (procs.interrupts_held), as in a real process
            if isinstance(fired, Interrupted) and hold_interrupt(fired.signum):
                self.held = True
                return
            raise fired


class Disk:
    """What every store client of one lifecycle shares: the tripwire, and whether the disk
    (or the bucket) refuses every write from now on (``full``), as a full disk does."""

    def __init__(self, wire: Tripwire) -> None:
        self.wire = wire
        self.full = False

    def wired(self, write: Callable[..., Any], *args: Any) -> Any:
        if self.full:
            raise StoreUnavailable("cannot write: No space left on device")
        self.wire.tick(done=False)
        result = write(*args)
        self.wire.tick(done=True)
        return result


class WiredStore(MemoryStore):
    """A MemoryStore whose writes count towards the tripwire and stop on a full ``disk``."""

    def __init__(self, disk: Disk) -> None:
        super().__init__()
        self.disk = disk

    def _wired(self, write: Callable[..., Any], *args: Any) -> Any:
        return self.disk.wired(write, *args)

    def raw_edit(self, key: str, edit: Callable[[bytes], bytes]) -> None:
        """A hand's edit of one stored object, past the tripwire."""
        found = MemoryStore.get(self, key)
        if found is not None:
            MemoryStore.put(self, key, edit(found.data), found.version)

    def create(self, key: str, data: bytes) -> str:
        return self._wired(super().create, key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        return self._wired(super().put, key, data, version)

    def delete(self, key: str, version: str) -> None:
        self._wired(super().delete, key, version)


class WiredS3(S3Store):
    """One host's client of an S3 state (moto's server, through a proxy that can lose an
    answer): its writes count towards the tripwire and stop on a full ``disk``."""

    def __init__(self, disk: Disk, bucket: str, prefix: str, client: Any) -> None:
        super().__init__(bucket, prefix, client=client)
        self.disk = disk

    def create(self, key: str, data: bytes) -> str:
        return self.disk.wired(super().create, key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        return self.disk.wired(super().put, key, data, version)

    def delete(self, key: str, version: str) -> None:
        self.disk.wired(super().delete, key, version)

    def raw_edit(self, key: str, edit: Callable[[bytes], bytes]) -> None:
        """A person's edit: a plain put, no precondition (a conditional one whose answer the
        proxy loses could not be proved ours: garbage carries no writer's token)."""
        found = S3Store.get(self, key)
        if found is not None:
            self._s3().put_object(Bucket=self.bucket, Key=self._name(key), Body=edit(found.data))


@dataclass
class S3World:
    """moto's S3 on loopback behind a proxy that can lose a conditional write's answer, and
    one boto3 client per host (separate store clients); each lifecycle its own prefix."""

    server: Any
    proxy: LossyProxy
    clients: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls) -> S3World:
        from fakes.s3 import serve_s3

        server = serve_s3()
        return cls(server, LossyProxy(server.url))

    def client(self, host: str) -> Any:
        if host not in self.clients:
            import boto3

            self.clients[host] = boto3.client(
                "s3",
                endpoint_url=self.proxy.url,
                region_name="us-east-1",
                aws_access_key_id="soak",
                aws_secret_access_key="soak",
            )
        return self.clients[host]

    def close(self) -> None:
        self.proxy.close()
        self.server.close()


class WiredVast:
    """The real adapter, with every call counting towards the tripwire."""

    def __init__(self, inner: VastAdapter, wire: Tripwire) -> None:
        self.inner, self.wire = inner, wire

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.wire.tick(done=False)
            result = attr(*args, **kwargs)
            self.wire.tick(done=True)
            return result

        return call


@dataclass
class Tally:
    lifecycles: int = 0
    leaked: int = 0
    wrong_destroys: int = 0
    premature_releases: int = 0
    exit_0_while_billing: int = 0
    stuck: int = 0  # guardians still looping a day past the deadline's grace
    kept: int = 0  # rents that ended with a kept box
    killed: int = 0  # rents killed mid-way (SIGKILL)
    interrupted: int = 0
    interrupts_held: int = 0  # ...of which arrived around a create and waited for its answer
    guardians_killed: int = 0
    guardians_terminated: int = 0  # SIGTERM: its lease must be given up, its exit non-zero
    leases_left_by_sigterm: int = 0  # ...and was not, with a store that could take the drop
    unguarded: int = 0  # --no-guard: sweep is the owner
    early: int = 0  # a kept box ended before its owner's own guardian would have begun to
    jobs_run: int = 0  # a kept box's job wrote results for its guardian to copy
    killed_in_copy: int = 0  # a guardian killed or stopped mid-copy: streamed, never said
    destinations_lost: int = 0  # the guardian's results destination refused (M17: it destroys)
    copy_failures_unheard: int = 0  # ...and its guardian exited 0 all the same (M17: a bug)
    results_delivered: int = 0  # ...and they were delivered whole, under its incarnation
    results_overwritten: int = 0  # a delivery not its incarnation's, or one that changed (M16)
    synced_rentals: int = 0  # rentals whose guardian syncs results while the job runs (M5)
    syncs_made: int = 0  # ...and the syncs that delivered, periodic and last
    # the team's rare paths, each counted as reached (a run that never met one says so)
    skewed_owners: int = 0  # alice's guardian or cron sweep on a host whose clock is off hers
    others_corrupt: int = 0  # bob's box record edited into garbage
    own_corrupt: int = 0  # alice's kept record edited into garbage
    full_disks: int = 0  # the store refusing every write from some point on
    names_reused: int = 0  # bob rents alice's name once all her processes have ended
    names_left_unusable: int = 0  # ...and was refused or left unresolved (M16: a bug)
    left_lying: int = 0  # settled, and her rental or a box record still claims a box (M13)
    s3_lifecycles: int = 0  # over an S3 state, a client per host
    crashed: int = 0  # a lifecycle an exception escaped (a bug: counted bad, with its seed)
    lost_answers: int = 0  # conditional S3 writes that landed and whose answer was lost
    # the protocol's rare paths, each counted as reached
    lost_creates: int = 0  # a create whose answer was lost (closed or 5xx), made or not
    never_found: int = 0  # an unclear create never found by its label, recorded so (M13)
    takeovers: int = 0  # a guardian took the lease another guardian had held
    sweep_finished: int = 0  # a sweep ended a destroy that something else began
    # rent killed (SIGKILL) right after alice's ledger wrote this transition ("none": before any)
    kills_after: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # the first few, with their seeds

    def bad(self) -> int:
        return (
            self.leaked
            + self.wrong_destroys
            + self.premature_releases
            + self.exit_0_while_billing
            + self.early
            + self.results_overwritten
            + self.names_left_unusable
            + self.left_lying
            + self.copy_failures_unheard
            + self.leases_left_by_sigterm
            + self.crashed
        )


class BoxDisks:
    """What the lifecycle's jobs wrote on their boxes' disks: each kept box whose job ran holds
    a results folder (its rental id, and a checkpoint) that only that box has."""

    def __init__(self, wire: Tripwire) -> None:
        self.files: dict[int, dict[str, bytes]] = {}
        self.streams = 0  # results tarballs streamed off a box
        self.listings = 0  # results listings a sync asked of a box
        self.wire = wire
        self.copy_kill: str | None = None  # "kill" or "term": the guardian dies mid-copy
        self.no_destination = False  # the guardian's results destination refuses delivery
        self.fire_in_copy: Callable[[], BaseException] | None = None  # ...armed by _guard

    def write(self, instance_id: int, rental_id: str, rng: random.Random) -> None:
        self.files[instance_id] = {
            "rental_id": rental_id.encode(),
            "ckpt/step-1.bin": rng.randbytes(rng.randint(1, 4096)),
        }


@dataclass(frozen=True)
class SoakShell(jobs.BoxShell):
    """The guardian's ssh to a box, on the fake's disks: the results script's tarball of the
    job's folder, made here as tar would make it on the box, or its "no results directory" exit
    when the job wrote none. Anything but the results script is refused (nothing else is asked
    of a box in the soak)."""

    disks: BoxDisks  # the lifecycle's: its boxes' files and the tripwire a copy may arm

    def run(self, instance: Instance, script: str) -> StepOutput:
        """A sync's listing of the job's results, as find prints it on the box."""
        if script != sp.listing_script("job", "results"):
            raise AssertionError(f"the soak's boxes list only the results, not {script!r}")
        files = self.disks.files.get(int(instance.instance_id))
        if files is None:
            said = "gpuops: the job has no results directory results"
            return StepOutput(w.NO_RESULTS, "", said)
        self.disks.listings += 1
        listing = "".join(f"{len(data)} 1.0 {name}\0" for name, data in sorted(files.items()))
        return StepOutput(0, listing)

    def stream_to(
        self,
        instance: Instance,
        script: str,
        target: Path,
        budget_s: float,
        copies: jobs.Copies | None = None,
    ) -> tuple[str, int | None]:
        files = self.disks.files.get(int(instance.instance_id))
        wanted = None if files is None else _fetched(script, sorted(files))
        if script != w.results_script("job", "results") and wanted is None:
            raise AssertionError(f"the soak's boxes run only the results scripts, not {script!r}")
        if files is None:
            return "exit 19: gpuops: the job has no results directory results", w.NO_RESULTS
        self.disks.streams += 1
        if self.disks.fire_in_copy is not None:  # dies at its next call: mid-copy
            self.disks.wire.arm(1, False, self.disks.fire_in_copy)
            self.disks.fire_in_copy = None
        with tarfile.open(target, "w:gz" if wanted is None else "w") as tar:
            for name, data in sorted(files.items()):
                if wanted is not None and name not in wanted:
                    continue
                member = tarfile.TarInfo(f"./{name}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        return "", 0


def _fetched(script: str, names: list[str]) -> set[str] | None:
    """The files a sync's fetch script asks for, among ``names`` (None: not a fetch script)."""
    for mask in range(1, 2 ** len(names)):
        subset = [n for i, n in enumerate(names) if mask >> i & 1]
        if script == sp.fetch_script("job", "results", subset):
            return set(subset)
    return None


class Deliveries:
    """Judges every delivery a run's guardians made under one results folder (M16): each is a
    folder named by a rental id holding exactly that incarnation's files, whole, and none
    changes once seen, whichever lifecycle's guardian delivered later."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.seen: dict[str, dict[str, bytes] | None] = {}  # None: judged bad once already

    def judge(self, tally: Tally, audit: Audit, expected: dict[str, dict[str, bytes]]) -> None:
        """Judge the folder after a lifecycle whose jobs wrote ``expected`` (by rental id)."""
        named = self.root / "job"
        for entry in sorted(named.iterdir()) if named.is_dir() else []:
            found = _files(entry) if entry.is_dir() else None
            if entry.name in self.seen:
                before = self.seen[entry.name]
                if before is not None and found != before:
                    tally.results_overwritten += 1
                    self.seen[entry.name] = None
                    audit.note(f"the results delivered under {entry.name} changed later")
                continue
            want = expected.get(entry.name)
            if found is None or want is None or found != want:
                tally.results_overwritten += 1
                self.seen[entry.name] = None
                audit.note(f"results/job/{entry.name} is not that incarnation's results")
            else:
                tally.results_delivered += 1
                self.seen[entry.name] = found


def _files(folder: Path) -> dict[str, bytes] | None:
    """A delivery's files, the sync manifest aside; None when a manifest is there and does not
    match them (each file it names whole, of its size and sha256, and no other)."""
    files = {
        str(path.relative_to(folder)): path.read_bytes()
        for path in folder.rglob("*")
        if path.is_file() and path.relative_to(folder) != Path(sp.MANIFEST)
    }
    manifest = folder / sp.MANIFEST
    if not manifest.exists():
        return files
    try:
        named = sp.decode_manifest(manifest.read_bytes())
    except GpuopsError:
        return None
    same = {path: (f.size, f.sha256) for path, f in named.items()} == {
        path: (len(data), hashlib.sha256(data).hexdigest()) for path, data in files.items()
    }
    return files if same else None


class Audit:
    """An event sink that checks every release against the fake as it happens."""

    def __init__(self, fake: FakeVast, tally: Tally, seed: int) -> None:
        self.fake, self.tally, self.seed = fake, tally, seed
        self.last = "none"  # alice's last ledger transition, before -> after
        self.sweeping = False  # a sweep is running (set around each call)
        self.copies_said = 0  # guard.copy events: copies that ran to their end

    def append(self, kind: str, /, **payload: Any) -> None:
        if kind == "ledger.transition" and payload.get("owner") == "alice":
            self.last = f"{payload.get('before')}->{payload.get('after')}"
            if self.sweeping and payload.get("before") == "destroying":
                self.tally.sweep_finished += 1
        elif kind == "ledger.never_found":
            self.tally.never_found += 1
        elif kind == "guard.lease.taken" and payload.get("previous"):
            self.tally.takeovers += 1
        elif kind == "guard.copy":  # a guardian's copy has ended, and said how
            self.copies_said += 1
        elif kind == "guard.sync" and payload.get("ok"):
            self.tally.syncs_made += 1
        if kind == "ledger.transition" and payload.get("after") == "released":
            instance_id = payload.get("instance_id")
            if instance_id and self.fake.show(int(instance_id)) is not None:
                self.tally.premature_releases += 1
                self.note(f"released {payload['name']} while instance {instance_id} billed")

    @contextlib.contextmanager
    def in_sweep(self) -> Any:
        self.sweeping = True
        try:
            yield
        finally:
            self.sweeping = False

    def note(self, what: str) -> None:
        if len(self.tally.failures) < 10:
            self.tally.failures.append(f"seed {self.seed}: {what}")


def _scenario(rng: random.Random) -> dict[str, Any]:
    n = rng.randint(2, 5)
    offers = [
        {
            "id": 4000 + i,
            "machine_id": 900 + i,
            "gpu_name": "RTX 4090",
            "gpu_ram": 24564,
            "dph_total": round(0.3 + rng.random() / 10, 4),
            "reliability": 0.995,
            "disk_bw": 2000.0,
            "fate": rng.choice(list(FATES)),
        }
        for i in range(n)
    ]
    stranger = {**offers[0], "id": STRANGER, "machine_id": 999, "fate": "healthy"}
    bobs = {**offers[0], "id": BOBS, "machine_id": 998, "gpu_name": "RTX 3090", "fate": "healthy"}
    faults: dict[str, Any] = {}
    if rng.random() < 0.3:
        faults["lost_creates"] = [
            {"offer": rng.choice(offers)["id"], "answer": rng.choice(["close", 503])}
        ]
    if rng.random() < 0.2:
        faults["rate_limits"] = [{"count": rng.randint(1, 2), "route": "create"}]
    if rng.random() < 0.25:
        faults["destroy_failures"] = [
            {"offer": rng.choice(offers)["id"], "count": rng.randint(1, 3), "status": 503}
        ]
    if rng.random() < 0.3:
        faults["empty_list"] = {"count": rng.randint(1, 3)}
    vast: dict[str, Any] = {
        "api_key": "k-soak",
        "ssh_keys": [KEY],
        "offers": [*offers, stranger, bobs],
        "destroy_lag_s": rng.choice([0.0, 0.0, 10.0, 30.0]),
        "boot": {"provisioning_s": rng.choice([5.0, 10.0, 60.0]), "loading_s": 10.0},
    }
    if faults:
        vast["faults"] = faults
    # eventual consistency: the list misses new boxes, show answers an older state
    vast["list_lag_s"] = rng.choice([0.0, 0.0, 8.0, 30.0])
    vast["show_lag_s"] = rng.choice([0.0, 0.0, 5.0, 20.0])
    return {"vast": vast}


class Host:
    """A host's clock: its wall time ``skew_s`` off the provider's, its monotonic time and its
    waits the fake's own (``sleep`` may be a guardian's, which watches for a hang)."""

    def __init__(self, fake: FakeVast, skew_s: float, sleep: Callable[[float], None]) -> None:
        self.fake, self.skew_s, self._sleep = fake, skew_s, sleep

    def wall(self) -> float:
        return self.fake.now() + self.skew_s

    def monotonic(self) -> float:
        return self.fake.now()

    def sleep(self, seconds: float) -> None:
        self._sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return self.fake.clock.wait(event, seconds)  # as the fake's own: real seconds


def lifecycle(
    seed: int,
    tally: Tally,
    tmp: Path,
    s3: S3World | None = None,
    deliveries: Deliveries | None = None,
) -> None:
    """One faulty rent -> deadline lifecycle, judged by the fake; with ``s3``, over an S3
    state that each host reaches with its own client, and that may lose one answer. Its
    guardians deliver results under ``tmp/results``, judged by ``deliveries`` (the run's)."""
    rng = random.Random(seed)
    job_rng = random.Random(seed ^ 0x5EED)  # its own draws: the lifecycle's others unchanged
    deliveries = Deliveries(tmp / "results") if deliveries is None else deliveries
    expected: dict[str, dict[str, bytes]] = {}
    fake = FakeVast(parse_scenario(_scenario(rng)), clock=FakeClock())
    wire = Tripwire()
    disks = BoxDisks(wire)
    audit = Audit(fake, tally, seed)
    disk = Disk(wire)
    stores: dict[str, Any] = {}

    def store_of(host: str) -> Any:
        if host not in stores:
            if s3 is None:  # one local state, shared
                stores[host] = stores.get("hostA") or WiredStore(disk)
            else:
                stores[host] = WiredS3(disk, s3.server.bucket, f"soak/{seed}", s3.client(host))
        return stores[host]

    store = store_of("hostA")
    tally.lifecycles += 1
    if s3 is not None:
        tally.s3_lifecycles += 1
        if rng.random() < 0.5:  # one conditional write lands and its answer is lost
            s3.proxy.drop(1, rng.choice(["PUT", "DELETE"]), skip=rng.randint(0, 40))
    with seam.direct(site(fake), BASE):  # without responses' overhead: a quarter faster
        stranger = fake.create(STRANGER, {"label": "someone-else", "image": "x", "disk": 5}).id

        def market(operator: str = "alice", host: str = "hostA", skew_s: float = 0.0) -> Market:
            def probe(instance: Instance, box: str) -> Verdict:
                return FATES[fake.instances[int(instance.instance_id)].fate.kind]

            clock = Host(fake, skew_s, fake.advance)
            adapter = VastAdapter(api_key="k-soak", base_url=BASE, clock=fake.ticking())
            return KilledMarket(
                WiredVast(adapter, wire),  # type: ignore[arg-type]
                Ledger(store_of(host), audit, operator, clock=clock),
                audit,
                probe=probe,
                public_key=KEY,
                clock=clock,
                rng=random.Random(seed),
                host=host,
            )

        # bob, on host B, rents first: his box must outlive all that alice does (M3)
        bobs = _bob_rents(market, fake, rng)
        others = {stranger, *(() if bobs is None else (bobs[0],))}
        # where alice's owner runs: her own host, or one whose clock is up to 15 min off
        elsewhere = rng.random() < 0.3
        skew_s = rng.uniform(-timing.CLOCK_SKEW_S, timing.CLOCK_SKEW_S) if elsewhere else 0.0
        owner_host = "hostB" if elsewhere else "hostA"
        if elsewhere:
            tally.skewed_owners += 1

        guarded = rng.random() < 0.85
        if not guarded:
            tally.unguarded += 1
        # rent, with one crash or interrupt at a random provider call or store write
        how = rng.random()  # a third die (SIGKILL), a fifth are interrupted, the rest live
        fire: Callable[[], BaseException] = Killed if how < 0.35 else (lambda: Interrupted(2))
        wire.arm(rng.randint(1, 60) if how < 0.55 else None, rng.random() < 0.5, fire)
        # results synced every minute, once in the rental, or only before the destroy (M5):
        # its own draw, so the lifecycle's others are unchanged
        every = random.Random(seed ^ 0x5C).choice([60.0, 240.0, None])
        tally.synced_rentals += every is not None
        request = RentRequest(
            "job", "RTX 4090", HOURS, race_k=rng.randint(1, 3), sync_every_s=every
        )
        started = fake.now()
        deadline = started + HOURS * 3600.0
        kept: tuple[int, float] | None = None  # the kept box and when its copy would begin
        try:
            rental = market().rent(request)
            tally.kept += 1
            if rental.instance_id is not None and rental.started_at is not None:
                kept = (int(rental.instance_id), schedule(rental.started_at, deadline)[0])
        except Killed:
            tally.killed += 1
            tally.kills_after[audit.last] += 1
        except Interrupted:
            tally.interrupted += 1
            tally.interrupts_held += wire.held
        except GpuopsError:
            pass  # refused, unavailable, unresolved: the owner still ends what exists
        wire.arm(None, False, Killed)
        if kept is not None and job_rng.random() < 0.5:  # her job writes results as it runs
            _run_job(market(), disks, expected, kept[0], job_rng, tally)
            if job_rng.random() < 0.3:  # ...and her guardian dies during its copy
                disks.copy_kill = job_rng.choice(["kill", "term"])
            if job_rng.random() < 0.15:  # ...or its results destination is gone (M17)
                disks.no_destination = True
                tally.destinations_lost += 1
        # the fake's own count of the lost creates it answered during her race
        tally.lost_creates += sum(entry.spec.count - entry.left for entry in fake._lost)

        if bobs is not None and rng.random() < 0.15:  # bob's record edited by hand
            tally.others_corrupt += 1
            _spoil(store, bobs[1])
        own_before = tally.own_corrupt
        if kept is not None and rng.random() < 0.25:  # alice's own kept record, too
            tally.own_corrupt += 1
            rental = market().rentals.get("job")
            if rental is not None and rental.box is not None:
                _spoil(store, rental.box)
        if guarded and rng.random() < 0.1:  # the disk under the guardian's state fills up
            tally.full_disks += 1
            disk.full = True

        by_hand = rng.random() < 0.2
        if by_hand:  # the user destroys it by hand at some point
            fake.advance(rng.uniform(0, HOURS * 1800.0))
            try:
                outcomes = destroy_rental(market(), "job")
            except GpuopsError:
                outcomes = None
            if outcomes is not None and exit_code(outcomes) == 0 and _ours_billing(fake, others):
                tally.exit_0_while_billing += 1
                audit.note("destroy exited 0 while a box billed")

        if guarded:
            _guard(fake, market, wire, rng, tally, audit, others, tmp, owner_host, skew_s, disks)
        else:  # cron's sweep, every CRON_S from the deadline: the owner with no guardian
            fake.advance(max(0.0, deadline - fake.now()) + rng.uniform(0, 60.0))
            # the allowance for another host's clock is part of the grace (timing.py)
            while fake.now() < deadline + timing.OWNER_GRACE_S + abs(skew_s):
                with contextlib.suppress(StoreUnavailable), audit.in_sweep():  # a full disk
                    sweep(market("alice", owner_host, skew_s))
                fake.advance(CRON_S)

        # a host whose clock runs behind hers sees the deadline that much later (M17)
        limit = deadline + timing.OWNER_GRACE_S + abs(skew_s)
        if fake.now() < limit:
            fake.advance(limit - fake.now())
        if fake.now() <= limit + 1.0:
            for box in _ours_billing(fake, others):
                tally.leaked += 1
                audit.note(f"instance {box} billed at the deadline + grace + skew")
        for other in sorted(others):
            if fake.instances[other].destroyed_at is not None:
                tally.wrong_destroys += 1
                audit.note(f"another's box {other} was destroyed")
        if kept is not None and not by_hand:
            ended = fake.instances[kept[0]].destroyed_at
            if ended is not None and ended < kept[1]:
                tally.early += 1
                audit.note(f"instance {kept[0]} ended {kept[1] - ended:.0f} s before its copy")
        deliveries.judge(tally, audit, expected)  # M16: each incarnation's results its own
        spoiled = tally.own_corrupt > own_before  # her own record awaits a person: not reused
        if spoiled:
            return
        wire.arm(None, False, Killed)  # every process of hers has ended: no tripwire left
        _settle(market, fake, disk, audit)
        for lie in _lying(market()):
            tally.left_lying += 1
            audit.note(f"once every process had ended and cron had swept: {lie}")
        if rng.random() < 0.3:  # bob takes her name
            _reuse(market, fake, tally, audit, others)


def _settle(market: Callable[..., Market], fake: FakeVast, disk: Disk, audit: Audit) -> None:
    """Every process of alice's has ended: the disk has room again, and cron's sweep runs
    once past any unclear create's window."""
    disk.full = False
    fake.advance(timing.UNCLEAR_CREATE_WINDOW_S)
    with contextlib.suppress(GpuopsError), audit.in_sweep():
        sweep(market())


def _lying(market: Market) -> list[str]:
    """What alice's state still claims once everything has settled (M13: none lies): her
    rental racing or live, or a box record of hers not released. Her boxes no longer bill by
    now (the leak verdict has passed), so each of these would be a claim no box stands for."""
    lies: list[str] = []
    rental = market.rentals.get("job")
    if rental is not None and rental.owner == "alice" and rental.state in (RACING, LIVE):
        lies.append(f"her rental still says {rental.state}")
    for record in market.ledger.records(skip_corrupt=True):
        if record.owner == "alice" and record.active:
            lies.append(f"her box record {record.name} still says {record.state.value}")
    return lies


def _run_job(
    market: Market,
    disks: BoxDisks,
    expected: dict[str, dict[str, bytes]],
    instance_id: int,
    rng: random.Random,
    tally: Tally,
) -> None:
    """alice's job on her kept box: its record declares the results folder (as `gpuops run`
    writes it) and the box's disk holds what the job wrote there."""
    rental = market.rentals.get("job")
    if rental is None or rental.rental_id is None or rental.instance_id != str(instance_id):
        return
    job = jobs.Job("job", "alice", str(instance_id), "train", "results", market.clock.wall())
    try:
        jobs.Jobs(market.ledger.store).put(job)
    except GpuopsError:
        return  # its record never landed: the guardian knows of no job, and copies nothing
    disks.write(instance_id, rental.rental_id, rng)
    expected[rental.rental_id] = disks.files[instance_id]
    tally.jobs_run += 1


def _reuse(
    market: Callable[..., Market],
    fake: FakeVast,
    tally: Tally,
    audit: Audit,
    others: set[int],
) -> None:
    """bob rents "job" on host B once alice's lifecycle is over and settled (``_settle``). Her
    name must be usable (M16, M13: no state left stuck), and his box ends by his own
    `destroy`."""
    tally.names_reused += 1
    try:
        rental = market("bob", "hostB", 0.0).rent(RentRequest("job", "RTX 4090", HOURS, race_k=1))
    except (Refused, StillRunning) as exc:
        if isinstance(exc, Refused) and exc.rule not in ("M3", "M16"):
            return  # refused for his own reasons (every probe failed on auth: M2)
        tally.names_left_unusable += 1
        audit.note(f"bob could not rent alice's ended name: {exc}")
        return
    except GpuopsError:
        return  # no capacity left, or an unclear create of his own: not the name's fault
    if rental.instance_id is not None:
        others.add(int(rental.instance_id))  # bob's, never alice's to end
    with contextlib.suppress(GpuopsError):
        destroy_rental(market("bob", "hostB", 0.0), "job")


def _bob_rents(
    market: Callable[..., Market], fake: FakeVast, rng: random.Random
) -> tuple[int, str] | None:
    """bob rents a box of his own on host B (its clock his own); his (instance, box record),
    or None when no healthy offer took his race."""
    with contextlib.suppress(GpuopsError):
        request = RentRequest("bobjob", "RTX 3090", 10 * HOURS, race_k=1)
        rental = market("bob", "hostB", rng.uniform(-60.0, 60.0)).rent(request)
        if rental.instance_id is not None and rental.box is not None:
            return int(rental.instance_id), rental.box
    return None


def _spoil(store: WiredStore | WiredS3, box: str) -> None:
    """Edit ledger record ``box`` by hand into bytes no codec reads."""
    store.raw_edit(PREFIX + box, lambda data: data[: len(data) // 2])


def _guard(
    fake: FakeVast,
    market: Callable[..., Market],
    wire: Tripwire,
    rng: random.Random,
    tally: Tally,
    audit: Audit,
    others: set[int],
    tmp: Path,
    host: str,
    skew_s: float,
    disks: BoxDisks,
) -> None:
    """The rental's guardian (started before the first create) runs to its exit, on ``host``
    whose clock is ``skew_s`` off the renter's; it may be killed at a random call, and then a
    successor (systemd's restart) takes over."""
    try:
        rental = market().rentals.get("job")
    except GpuopsError:
        rental = None  # its own record is unreadable: the guardian still reads its deadline
    limit = (rental.deadline_at if rental and rental.deadline_at else fake.now()) + DAY_S

    def sleep(seconds: float) -> None:
        fake.advance(seconds)
        if fake.now() > limit:
            raise Stuck

    for attempt in range(2):
        guardian = Guardian(
            market("alice", host, skew_s),
            "job",
            shell=SoakShell(
                tmp / "local", tmp / "id_ed25519", Settings.from_environ().ssh(), disks
            ),
            results=LocalResults(_lost(tmp) if disks.no_destination else tmp / "results"),
            me=f"alice/{host}/{attempt}/g",
            clock=Host(fake, skew_s, sleep),
            say=lambda line: None,
        )
        if attempt == 0 and rng.random() < 0.25:  # killed at one of its first calls...
            sigterm = rng.random() < 0.4  # ...by SIGTERM (systemd's stop) or SIGKILL
            fire = functools.partial(_sigterm, guardian) if sigterm else Killed
            wire.arm(rng.randint(1, 30), rng.random() < 0.5, fire)
        elif attempt == 0 and disks.copy_kill is not None:  # killed once its copy is under way
            term = disks.copy_kill == "term"
            disks.fire_in_copy = functools.partial(_sigterm, guardian) if term else Killed
        else:
            disks.fire_in_copy = None
        streams, said, listings = disks.streams, audit.copies_said, disks.listings

        def mid_copy() -> None:  # streamed its results, never said how the copy ended
            if disks.streams > streams and audit.copies_said == said:
                tally.killed_in_copy += 1  # its successor copies again, into the same place

        try:
            code = guardian.run()
        except Terminated as stop:
            mid_copy()
            tally.guardians_terminated += 1
            wire.arm(None, False, Killed)
            store = guardian.market.ledger.store
            try:
                lease, _ = Leases(store).read(guardian.lease_key)  # its incarnation's
            except GpuopsError:
                lease = None  # its lease edited into garbage: nothing stands for it
            full = store.disk.full  # the drop could not land
            if stop.code != 128 + signal.SIGTERM or (
                lease is not None and lease.holder == guardian.me and not full
            ):
                tally.leases_left_by_sigterm += 1
                audit.note(f"a guardian stopped by SIGTERM exited {stop.code}, lease {lease}")
            continue
        except Stuck:
            tally.stuck += 1
            audit.note("a guardian still looped a day past its deadline")
            return
        except Killed:
            mid_copy()
            tally.guardians_killed += 1
            wire.arm(None, False, Killed)
            continue
        except GpuopsError:
            wire.arm(None, False, Killed)  # its tripwire never fired: nothing after it dies
            return  # e.g. no rental at all: rent died before writing one; nothing to own
        wire.arm(None, False, Killed)
        reached = disks.streams > streams or disks.listings > listings
        if code == 0 and disks.no_destination and reached:
            tally.copy_failures_unheard += 1  # its copy could not be delivered: loud (M17)
            audit.note("a guardian whose results could not be delivered exited 0")
        if code == 0 and _ours_billing(fake, others):
            tally.exit_0_while_billing += 1
            audit.note("a guardian exited 0 while a box billed")
        return


def _lost(tmp: Path) -> Path:
    """A results destination that refuses every delivery: a folder under a plain file."""
    blocker = tmp / "results-lost"
    blocker.touch()
    return blocker / "results"


def _ours_billing(fake: FakeVast, others: int | set[int]) -> list[int]:
    """alice's boxes still billing: gpuops-labelled, and neither the stranger's nor bob's."""
    skip = others if isinstance(others, set) else {others}
    return [b.id for b in fake.boxes() if b.id not in skip and intent_of(b.label) is not None]


def run(count: int, seed: int = 0, s3_every: int = 0) -> tuple[Tally, float]:
    """``count`` lifecycles from ``seed`` (every ``s3_every``-th over an S3 state, 0: none);
    the tally and the wall seconds they took."""
    tally = Tally()
    started = time.perf_counter()
    s3 = S3World.start() if s3_every else None
    try:
        with tempfile.TemporaryDirectory(prefix="gpuops-soak-") as tmp:
            deliveries = Deliveries(Path(tmp) / "results")  # one folder for every lifecycle
            for i in range(count):
                over = s3 if s3 is not None and i % s3_every == 0 else None
                one = seed * 1_000_003 + i
                try:
                    lifecycle(one, tally, Path(tmp), over, deliveries)
                except Exception as exc:  # escaped every owner: a crash, counted with its seed
                    tally.crashed += 1
                    where = traceback.extract_tb(exc.__traceback__)[-3:]
                    frames = " < ".join(f"{f.name}:{f.lineno}" for f in reversed(where))
                    tally.failures.append(f"seed {one}: {type(exc).__name__}: {exc} ({frames})")
                if over is not None:
                    over.proxy.clear()  # an answer left to lose is this lifecycle's only
    finally:
        if s3 is not None:
            tally.lost_answers = len(s3.proxy.dropped)
            s3.close()
    return tally, time.perf_counter() - started
