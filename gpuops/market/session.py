"""Building the market from the command's ``Settings``: adapter, event log, ledger, SSH prober.

The CLI calls ``open_market``; tests build ``Market`` directly with fakes. What ranks offers by
what the log has learned (``analysis/learned.py``'s ranker) sits above the market: a command
that ranks hands it in as ``rank``, and nothing here imports the analysis. Keys come from
Settings (the environment, read once in settings.py) or the providers' own files and are never
logged (H3).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops import timing
from gpuops.clock import SYSTEM, Clock, WithSleep
from gpuops.errors import UsageError
from gpuops.events import EventLog
from gpuops.ledger import Ledger
from gpuops.market.rent import Market, PassRates, Prober
from gpuops.market.select import MIN_DISK_MB_PER_S
from gpuops.model import Instance, Verdict
from gpuops.settings import Settings
from gpuops.store.base import Store

if TYPE_CHECKING:
    from gpuops.market.jobs import BoxShell
    from gpuops.providers.ssh import SshClient

# Builds the market's pass rates from the event log's path and the state store (the ranker
# ``offers`` and ``rent`` use: ``gpuops.analysis.learned.ranker``).
Rank = Callable[[Path, Store], PassRates]


def read_public_key(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise UsageError(f"cannot read the SSH public key {path}: {exc.strerror}") from exc
    if not text.startswith(("ssh-", "ecdsa-", "sk-")):
        raise UsageError(f"{path} does not hold an SSH public key")
    return text


def ssh_prober(
    state_dir: Path, identity_file: Path, vram_floor_mb: int, client: SshClient
) -> Prober:
    from gpuops.market.jobs import endpoint_of
    from gpuops.market.probing import probe as probe_box
    from gpuops.providers import ssh

    def probe(instance: Instance, box: str) -> Verdict:
        endpoint = endpoint_of(instance)
        if endpoint is None:
            return Verdict.SSH_UNREACHABLE
        result = probe_box(
            endpoint,
            client=client,
            identity_file=identity_file,
            known_hosts=ssh.known_hosts_path(state_dir, instance.instance_id),
            vram_floor_mb=vram_floor_mb,
            disk_floor_mb_per_s=MIN_DISK_MB_PER_S,
            clock=SYSTEM,  # real seconds: it bounds this machine's own ssh processes
        )
        return result.cause

    return probe


def open_market(
    settings: Settings,
    operator: str,
    *,
    vram_floor_mb: int = 8192,
    progress: Callable[[str], None] = lambda line: None,
    need_key: bool = True,
    rng: random.Random | None = None,
    clock: Clock | None = None,
    waits: Callable[[float], None] | None = None,
    retry_waits: Callable[[float], None] | None = None,
    create_pacing_s: float | None = None,
    attested: bool = False,
    rank: Rank | None = None,
) -> Market:
    """The market on the command's one clock (``settings.clock()``: the real one, or under
    GPUOPS_TIME_SCALE the loopback fakes' scaled one, so every deadline, lease, wait and spend
    reads as the fakes render it). The probe alone is timed on the real clock: it bounds this
    machine's own ssh processes, which no scale makes faster. ``clock``: another (a test's;
    None: that one). ``waits``: how the market's own waits (race polls, a destroy's
    confirmation) are slept, ``retry_waits`` how the adapter's backoff and pacing are (None:
    the clock's own sleep; a command that says what it waits for gives one that does, on the
    same clock). ``create_pacing_s``: the least time between two creates (None: Vast's
    documented interval, timing.CREATE_PACING_S). ``attested``: the operator's id was attested by the provider (identity.py), recorded on
    each rental it races for (M3). ``rank``: what ranks offers by price per healthy box, given
    the event log's path and the store (None: offers are ranked on price and filters alone)."""
    clock = settings.clock() if clock is None else clock
    from gpuops.providers import vastai_lazy
    from gpuops.providers.vast import VastAdapter, find_api_key

    vastai_lazy.install()  # the SDK's API layer, without its package start-up (about a second)

    store = settings.open_state()
    here = settings.local_dir
    events = EventLog(settings.events_path, operator, clock=clock)
    from gpuops.market.pacing import Pace

    # one call budget: a sweep's threads and the adapter's 429 waits
    pace = Pace(clock=clock if retry_waits is None else WithSleep(clock, retry_waits))
    vast = VastAdapter(
        # VAST_API_KEY, else the config file's vast_api_key, else vastai's key files
        api_key=find_api_key(settings.environ, settings.vast_api_key),
        base_url=settings.vast_url,
        events=events,
        clock=WithSleep(clock, pace.hold),  # every wait is a place in the budget
    )
    public_key = read_public_key(settings.ssh_key) if need_key else ""
    prober = ssh_prober(here, settings.identity_file(), vram_floor_mb, settings.ssh())
    ledger = Ledger(store, events, operator, clock=clock)
    from gpuops.alarms import open_alarms
    from gpuops.market.budgets import Budgets

    return Market(
        vast,
        ledger,
        events,
        probe=prober,
        public_key=public_key,
        clock=clock if waits is None else WithSleep(clock, waits),
        progress=progress,
        rng=rng,
        # rank by price per healthy box, from the index in the store: the same cost at any log size
        pass_rates=None if rank is None else rank(events.path, store),
        pace=pace,
        # M15: the team's and the operator's limits, asked before a race's first create
        budget=Budgets(
            store,
            operator,
            clock=clock,
            alarms=open_alarms(settings, store, events, operator=operator, clock=clock),
        ),
        create_pacing_s=timing.CREATE_PACING_S if create_pacing_s is None else create_pacing_s,
        attested=attested,
    )


def box_shell(settings: Settings) -> BoxShell:
    """Runs scripts on our boxes with our key (the private half of GPUOPS_SSH_KEY)."""
    from gpuops.market.jobs import BoxShell

    return BoxShell(settings.local_dir, settings.identity_file(), settings.ssh())
