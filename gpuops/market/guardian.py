"""The guardian's decisions: the billing ceiling (M5) and one responsible guardian (M7).

Pure: plain values in, one action out; ``market/guard.py`` performs it and reports back.

On 20 September every guardian decided it had been superseded and exited 0, because three
timing constants in three modules disagreed; the backstop never fired and ten boxes billed
until a human noticed (docs/rules.md, M5, M7). So here:

- every duration comes from :mod:`gpuops.timing`, through one :class:`Clockwork`;
- a guardian is *responsible* only while it holds the box's lease; a newcomer that finds a
  fresh lease waits as a standby and takes over only once that lease is stale;
- a guardian that lost its lease leaves as superseded only after watching its successor renew
  the lease over SUPERSESSION_VERIFY_S; a successor that never renews is taken over again;
- the only clean exit is a box the provider confirms gone (GONE, 0); supersession has its own
  code (SUPERSEDED, 7), and everything else is loud and non-zero (M7).

Near the deadline the responsible guardian copies results off, then destroys; the copy may run
until the deadline at most, and the destroy follows whether or not it finished. Before that,
while the job runs, it syncs the results whenever a sync falls due (``Box.sync_at``), each sync
given only the time left before the copy: a sync never delays the copy or the destroy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum

from gpuops import timing
from gpuops.errors import ExitCode

GONE = ExitCode.OK  # the box is confirmed gone
UNKNOWN = ExitCode.UNKNOWN  # an intent still unresolved long past the deadline; sweep goes on
SUPERSEDED = ExitCode.SUPERSEDED  # a successor was seen renewing the lease (verified, M7)


@dataclass(frozen=True)
class Clockwork:
    """The lease's durations, read from timing.py together so they cannot disagree (M6).

    They are counted on the guardian's one clock and never divided: under GPUOPS_TIME_SCALE
    that clock is the loopback fakes' scaled one (settings.clock()), so they pass as fast.
    """

    heartbeat_s: float = timing.GUARDIAN_HEARTBEAT_S
    lease_ttl_s: float = timing.LEASE_TTL_S
    poll_s: float = timing.LEASE_POLL_S
    verify_s: float = timing.SUPERSESSION_VERIFY_S
    confirm_poll_s: float = timing.DESTROY_CONFIRM_POLL_S


NORMAL = Clockwork()


class Role(Enum):
    STANDBY = "standby"  # another guardian holds a fresh lease; take over when it goes stale
    RESPONSIBLE = "responsible"  # holds the lease: copies, destroys, confirms
    VERIFYING = "verifying"  # lost the lease; watching the successor renew before leaving


@dataclass(frozen=True)
class Lease:
    """``market/leases/<NAME>``: who guards the box, and when it last said so."""

    holder: str
    heartbeat_at: float  # epoch seconds of the holder's last renewal
    beats: int = 0  # renewals since it was taken: a successor that renews raises it
    copied: bool = False  # results were copied off by some holder: a successor skips the copy


@dataclass(frozen=True)
class Box:
    """What the guardian knows of its box this round."""

    gone: bool  # every box of the rental is confirmed gone (or was never created)
    started_at: float  # epoch seconds the box was kept
    deadline_at: float  # the wall-clock billing ceiling
    ended: bool = False  # the rental failed or was released: whatever is left is ended now
    unresolved: bool = False  # all that is left are intents no look-up by label has found
    # a racing rental's (racer, beat): the racer's heartbeat, which stands still once it dies
    racer: tuple[str, int] | None = None
    sync_at: float | None = None  # when the next results sync falls due; None: syncs are off


@dataclass(frozen=True)
class Mind:
    """What one guardian remembers between rounds."""

    me: str
    role: Role = Role.STANDBY
    held: bool = False  # it has held the lease at some point
    watching: str | None = None  # the successor it is verifying
    watch_beats: int = 0  # the successor's beats when watching began
    watch_since: float = 0.0
    copied: bool = False  # it made its copy attempt (success or not)
    # What this guardian last saw of the lease, (holder, beats), and when, on its own
    # monotonic clock: a lease is stale when seen standing still for a whole TTL, never by
    # comparing the holder's clock with ours (hosts sharing s3:// state disagree on the time).
    # Bookkeeping for is_stale, pinned by its own tests, so left out of equality.
    seen: tuple[str, int] | None = field(default=None, compare=False)
    seen_since: float = field(default=0.0, compare=False)
    # The same for the racer's heartbeat while the rental races (M13), on the same clock.
    racer_seen: tuple[str, int] | None = field(default=None, compare=False)
    racer_since: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class Take:
    """Take the lease: it is free, or its holder's heartbeat is stale."""


@dataclass(frozen=True)
class Renew:
    """Renew our own lease: the heartbeat is due."""


@dataclass(frozen=True)
class Wait:
    seconds: float


@dataclass(frozen=True)
class Copy:
    """Copy results off for at most ``budget_s``: it never runs past the deadline."""

    budget_s: float


@dataclass(frozen=True)
class Sync:
    """Sync the results that changed, for at most ``budget_s``: it ends before the copy."""

    budget_s: float


@dataclass(frozen=True)
class Destroy:
    """Destroy the box, confirm it gone by asking for it, release the record."""


@dataclass(frozen=True)
class EndRace:
    """The racer's heartbeat stood still for RACER_TTL_S: its process is dead. Fail the race
    it ran (only if it is still that racer at that beat) and end its unkept boxes now, not at
    the deadline (M13)."""

    racer: str
    beat: int


@dataclass(frozen=True)
class Leave:
    code: int
    reason: str


Action = Take | Renew | Wait | Sync | Copy | Destroy | EndRace | Leave


def schedule(started_at: float, deadline_at: float) -> tuple[float, float]:
    """(when the copy starts, how long it may take) for a box kept at ``started_at``.

    The margin is DEADLINE_MARGIN_S, or DEADLINE_MARGIN_FRACTION of a rental too short for it;
    the copy budget keeps the same share of the margin as RESULTS_COPY_BUDGET_S has of
    DEADLINE_MARGIN_S, so the destroy has room before the deadline either way.
    """
    length = max(0.0, deadline_at - started_at)
    margin = min(timing.DEADLINE_MARGIN_S, length * timing.DEADLINE_MARGIN_FRACTION)
    budget = margin * timing.RESULTS_COPY_BUDGET_S / timing.DEADLINE_MARGIN_S
    return deadline_at - margin, budget


def looks_stale(lease: Lease, now: float, clock: Clockwork = NORMAL) -> bool:
    """The holder's last heartbeat a whole TTL before ``now``: meaningful only when both were
    read from one clock (a holder on this host; ``judge_lease``). Never used to take a lease."""
    return now - lease.heartbeat_at >= clock.lease_ttl_s


class Guarded(Enum):
    """Whether a rental is guarded, as a one-shot command (`boxes`, `rent`, `guard`) can know
    without watching the lease over time as a guardian does (M7, M17)."""

    LIVE = "live"  # a guardian process on this host holds the lease and beats, by our clock
    DEAD = "dead"  # no lease, or its holder certainly stopped: start a guardian
    ELSEWHERE = "elsewhere"  # held from another host: fresh or not, only a watcher can tell


def holder_host(holder: str) -> tuple[str, int] | None:
    """(host, pid) of a guardian id (operator/host/pid/nonce), or None for another shape."""
    parts = holder.split("/")
    if len(parts) != 4 or not parts[1] or not parts[2].isdecimal():
        return None
    return parts[1], int(parts[2])


def judge_lease(
    lease: Lease | None,
    now: float,
    here: str,
    alive: Callable[[int], bool],
    clock: Clockwork = NORMAL,
) -> Guarded:
    """Judge a lease on facts this host has (M17: no two hosts' clocks compared): a holder on
    this host by its process being alive and its heartbeat on our one clock; a holder on
    another host only as certainly stopped, when its last heartbeat is a TTL plus the whole
    skew allowance old (``alive`` is asked of this host's pids only)."""
    if lease is None:
        return Guarded.DEAD
    where = holder_host(lease.holder)
    if where is not None and where[0] == here:
        fresh = alive(where[1]) and not looks_stale(lease, now, clock)
        return Guarded.LIVE if fresh else Guarded.DEAD
    if now - lease.heartbeat_at >= clock.lease_ttl_s + timing.CLOCK_SKEW_S:
        return Guarded.DEAD
    return Guarded.ELSEWHERE


def observe(mind: Mind, lease: Lease | None, mono: float) -> Mind:
    """Remember when the lease last changed hands or beat, on this guardian's own clock."""
    mark = None if lease is None else (lease.holder, lease.beats)
    if mind.seen == mark and mark is not None:
        return mind
    return replace(mind, seen=mark, seen_since=mono)


def is_stale(mind: Mind, mono: float, clock: Clockwork = NORMAL) -> bool:
    """The lease was seen standing still (same holder, same beats) for a whole TTL: its
    guardian is presumed dead. Only our own clock is read (M7 across hosts)."""
    return mind.seen is not None and mono - mind.seen_since >= clock.lease_ttl_s


def observe_racer(mind: Mind, racer: tuple[str, int] | None, mono: float) -> Mind:
    """Remember when the racer's (id, beat) last changed, on this guardian's own clock."""
    if mind.racer_seen == racer:
        return mind
    return replace(mind, racer_seen=racer, racer_since=mono)


def racer_dead(mind: Mind, mono: float) -> bool:
    """The racer's heartbeat was seen standing still for RACER_TTL_S, on this guardian's own
    clock (the racer beats on its own). Only our own clock is read (M13, M17)."""
    return mind.racer_seen is not None and mono - mind.racer_since >= timing.RACER_TTL_S


def decide(
    mind: Mind,
    lease: Lease | None,
    box: Box,
    now: float,
    clock: Clockwork = NORMAL,
    mono: float | None = None,
) -> tuple[Mind, Action]:
    """The guardian's next step, and what it remembers afterwards. ``now`` is the wall clock
    (deadlines are wall-clock times); ``mono`` is this guardian's monotonic clock, the only
    one lease staleness is judged on (``now`` where the caller has one clock)."""
    mono = now if mono is None else mono
    mind = observe_racer(observe(mind, lease, mono), box.racer, mono)
    if box.gone:
        return mind, Leave(GONE, "every box of the rental is confirmed gone")
    if box.unresolved and now >= box.deadline_at + timing.OWNER_GRACE_S:
        return mind, Leave(UNKNOWN, "an unresolved create outlived the grace; sweep goes on")
    if lease is None or (lease.holder != mind.me and is_stale(mind, mono, clock)):
        return mind, Take()
    if lease.holder == mind.me:
        mind = replace(mind, role=Role.RESPONSIBLE, held=True, watching=None)
        if now - lease.heartbeat_at >= clock.heartbeat_s:
            return mind, Renew()
        if box.racer is not None and racer_dead(mind, mono):
            return mind, EndRace(*box.racer)
        return mind, _duty(mind, lease, box, now, clock)
    if not mind.held:
        return replace(mind, role=Role.STANDBY), Wait(clock.poll_s)
    if mind.watching != lease.holder:
        watching = replace(
            mind,
            role=Role.VERIFYING,
            watching=lease.holder,
            watch_beats=lease.beats,
            watch_since=now,
        )
        return watching, Wait(clock.poll_s)
    if lease.beats > mind.watch_beats and now - mind.watch_since >= clock.verify_s:
        return mind, Leave(SUPERSEDED, f"superseded by {lease.holder}, seen renewing the lease")
    return mind, Wait(clock.poll_s)


def _duty(mind: Mind, lease: Lease, box: Box, now: float, clock: Clockwork) -> Action:
    """The responsible guardian's work: wait (syncing when a sync falls due), copy, then
    destroy (the ceiling wins)."""
    if box.ended or now >= box.deadline_at or mind.copied or lease.copied:
        return Destroy()
    copy_at, budget = schedule(box.started_at, box.deadline_at)
    if now < copy_at:
        if box.sync_at is not None and now >= box.sync_at:
            return Sync(copy_at - now)
        due = [lease.heartbeat_at + clock.heartbeat_s - now, copy_at - now]
        return Wait(min(due if box.sync_at is None else [*due, box.sync_at - now]))
    return Copy(min(budget, box.deadline_at - now))
