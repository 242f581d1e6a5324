"""An exhaustive exploration of the guardian protocol (M5, M7, M17) over its pure core.

The guardians of one rental share one lease (``market/leases/<NAME>``) and one box. Every
decision a guardian takes is ``gpuops.market.guardian.decide``; this module runs that very
function, with the real Clockwork and timing.py's constants, over every interleaving a small
scope allows, breadth first, and checks each reachable state against the provider's record
(is the box still billing, and since when), never against what a guardian believed.

The world (one box, kept at T0 with a deadline ``hours_s`` later, its deadline written by the
renter's host A):

- guardians run on host A (the renter's clock) or on another host whose wall clock is
  ``skew`` seconds off A's; a guardian on another host enforces the deadline CLOCK_SKEW_S late,
  the whole schedule with it, as ``guard.py`` does (``late``);
- each step of a guardian reads the lease and the box, calls ``decide``, and performs the
  action as ``guard.py``'s ``step`` does; the lease's writes are compare-and-swap in the
  store, so a step (read, decide, write) is atomic here: the loser of a race reads the
  winner's lease on its next step, as it does for real;
- nondeterminism, each bounded by the scope: a guardian started at any moment (``guard NAME``
  on either host, up to the grace), a SIGKILL of any guardian at any moment, a guardian
  stopped for longer than the lease's TTL (a suspended laptop: another takes over while it
  lives, and it must see its successor renew before it leaves), a results copy that fails or
  takes its whole budget, a destroy the provider refuses (retried after a poll), and alice's
  own `gpuops destroy` at any moment;
- alice's cron runs `gpuops sweep` every CRON_S on its host, from ``cron_phase``, judged by
  ``rentals.due_records`` (the sweep's pure core), and so does bob's, which must never end
  her box (M3).

A dead guardian does nothing, and the lease changes only when a guardian steps, so a kill
between two of a guardian's own steps is one state however much time passes; time advances
only to the next moment some guardian wakes.

Verdicts, on every state reached:

- early: the box destroyed before the owner's own copy would start (``schedule``), other than
  by alice's own hand;
- leaked: the box billing past deadline + OWNER_GRACE_S + the skew (one cron run later for
  each destroy the provider refused), whatever was killed: cron's sweep is the backstop;
- late: with every guardian on the renter's host and nothing killed, stalled or refused, the
  box billing a heartbeat past its deadline. (A guardian started on another host may win the
  lease before rent's own takes it; it then ends the box CLOCK_SKEW_S late by its own clock,
  inside the bound above: the allowance, not a fault.)
- wrong destroy: bob's process ended alice's box;
- stuck: a guardian still running at the horizon although the box is gone;
- exit 0 while billing: a guardian leaving with GONE while the box bills;
- abandoned: with no guardian killed, every guardian has left while the box bills, or one left
  as superseded while no running guardian held the lease.

Used by tests/test_protocol.py (a small scope in the suite) and
tests/benchmarks/bench_protocol.py (larger scopes, with the figures).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from gpuops import ledger, timing
from gpuops.market import guardian as g
from gpuops.market import rentals
from gpuops.market.rentals import Rental

T0 = 0.0
RENTER = "A"
RUN, DEAD, LEFT = "run", "dead", "left"
CRON_S = 300.0  # alice's cron runs `gpuops sweep` every five minutes (as in tests/soak.py)
NAME = "k"


@dataclass(frozen=True)
class Scope:
    hours_s: float = 120.0  # the rental's length: deadline - kept
    hosts: tuple[tuple[str, float], ...] = ((RENTER, 0.0),)  # (host, its clock's skew)
    starts: int = 1  # guardians started after the first one, at any moment
    kills: int = 1  # SIGKILLs of any guardian, at any moment
    destroy_failures: int = 1  # destroys the provider refuses
    copy_failures: int = 1  # results copies that fail
    # results copies that take their whole budget; the lease is renewed when one ends, so keep
    # the budget (0.7 of a quarter of hours_s for a short rental) inside the lease's TTL
    slow_copies: int = 1
    stalls: int = 1  # a guardian stopped (a suspended laptop) for longer than the lease's TTL
    by_hand: int = 0  # alice's own `gpuops destroy NAME`, at any moment
    cron: tuple[str, float] = (RENTER, 0.0)  # where alice's cron runs `gpuops sweep`
    cron_phase: float = 0.0  # its first run, after the box was kept (then every CRON_S)
    clock: g.Clockwork = g.NORMAL

    @property
    def hosts_all(self) -> tuple[tuple[str, float], ...]:
        return (*self.hosts, self.cron)

    @property
    def deadline(self) -> float:
        return T0 + self.hours_s

    @property
    def copy_at(self) -> float:
        """When the owner's own guardian starts its copy (the rule, read from timing.py here,
        not from the ``schedule`` under test): nothing may end the box earlier."""
        margin = min(timing.DEADLINE_MARGIN_S, self.hours_s * timing.DEADLINE_MARGIN_FRACTION)
        return self.deadline - margin

    @property
    def max_skew(self) -> float:
        return max(abs(skew) for _, skew in self.hosts_all)

    @property
    def bound(self) -> float:
        """The latest a box may bill (the soak's bound): deadline + grace + the real skew."""
        return self.deadline + timing.OWNER_GRACE_S + self.max_skew

    @property
    def last_start(self) -> float:
        return self.deadline + timing.OWNER_GRACE_S

    @property
    def horizon(self) -> float:
        """Long enough for a guardian started or left last to take over and end the box."""
        c = self.clock
        slack = c.lease_ttl_s + c.verify_s + 4 * c.poll_s + c.confirm_poll_s
        return self.bound + timing.CLOCK_SKEW_S + slack


@dataclass(frozen=True)
class Guardian:
    me: str
    host: str
    skew: float
    started: float
    mind: g.Mind
    wake: float
    status: str = RUN
    code: int | None = None

    def key(self) -> tuple[object, ...]:
        m = self.mind  # Mind leaves its bookkeeping out of equality: it is state here
        mind = (m, m.seen, m.seen_since, m.racer_seen, m.racer_since)
        return (self.me, self.host, self.skew, self.started, mind, self.wake, self.status,
                self.code)  # fmt: skip


@dataclass(frozen=True)
class World:
    t: float
    lease: g.Lease | None
    billing: bool
    guardians: tuple[Guardian, ...]
    starts: int
    kills: int
    destroy_failures: int
    copy_failures: int
    slow_copies: int
    stalls: int
    by_hand: int
    cron_at: float  # the next moment cron runs `gpuops sweep` (every CRON_S, on its own phase)
    destroyed_at: float | None = None
    killed: bool = False
    refused: int = 0  # destroys the provider refused: each moves the bound one cron run on
    ended_by_hand: bool = False
    wrong: bool = False  # another operator's process ended the box
    stalled: bool = False

    def key(self) -> tuple[object, ...]:
        return (self.t, self.lease, self.billing, tuple(x.key() for x in self.guardians),
                self.starts, self.kills, self.destroy_failures, self.copy_failures,
                self.slow_copies, self.stalls, self.by_hand, self.cron_at, self.destroyed_at,
                self.killed, self.refused, self.ended_by_hand, self.wrong,
                self.stalled)  # fmt: skip


@dataclass
class Report:
    states: int = 0
    transitions: int = 0
    terminals: int = 0
    violations: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))
    reached: collections.Counter[str] = field(default_factory=collections.Counter)

    def bad(self) -> int:
        return sum(len(v) for v in self.violations.values())


def initial(scope: Scope) -> World:
    first = _new_guardian(scope, 0, RENTER, 0.0, T0)
    return World(T0, None, True, (first,), scope.starts, scope.kills, scope.destroy_failures,
                 scope.copy_failures, scope.slow_copies, scope.stalls, scope.by_hand,
                 T0 + scope.cron_phase)  # fmt: skip


def _new_guardian(scope: Scope, n: int, host: str, skew: float, t: float) -> Guardian:
    return Guardian(f"alice/{host}/{100 + n}/g{n}", host, skew, t, g.Mind(f"alice/{host}/{100 + n}/g{n}"), t)


def _late(guardian: Guardian) -> float:
    return 0.0 if guardian.host == RENTER else timing.CLOCK_SKEW_S


def _with(world: World, i: int, guardian: Guardian, **changes: object) -> World:
    guardians = world.guardians[:i] + (guardian,) + world.guardians[i + 1 :]
    return replace(world, guardians=guardians, **changes)  # type: ignore[arg-type]


def steps(scope: Scope, world: World, i: int) -> Iterator[tuple[str, World]]:
    """Guardian ``i``'s step at ``world.t``, as guard.py's ``step`` performs it: each outcome."""
    me = world.guardians[i]
    late, now = _late(me), world.t + me.skew
    box = g.Box(not world.billing, T0 + late, scope.deadline + late)
    mind, action = g.decide(me.mind, world.lease, box, now, scope.clock, world.t)
    me = replace(me, mind=mind)
    lease = world.lease
    if isinstance(action, g.Leave):
        if action.code == g.GONE and lease is not None and lease.holder == me.me:
            lease = None
        left = replace(me, status=LEFT, code=action.code)
        yield f"leave {action.code}", _with(world, i, left, lease=lease)
    elif isinstance(action, g.Take):
        fresh = g.Lease(me.me, now, copied=lease is not None and lease.copied)
        taken = replace(me, mind=replace(mind, held=True), wake=world.t)
        yield ("take" if lease is None else "takeover"), _with(world, i, taken, lease=fresh)
    elif isinstance(action, g.Renew):
        yield "renew", _with(world, i, replace(me, wake=world.t), lease=_renewed(lease, me, now))
    elif isinstance(action, g.Wait):
        yield "wait", _with(world, i, replace(me, wake=world.t + action.seconds))
    elif isinstance(action, g.Copy):
        done = replace(me, mind=replace(mind, copied=True), wake=world.t)
        copied = _renewed(lease, me, now, copied=True)
        yield "copy", _with(world, i, done, lease=copied)
        if world.copy_failures:
            yield "copy failed", _with(world, i, done, copy_failures=world.copy_failures - 1)
        if world.slow_copies:  # the copy runs its whole budget, its heartbeat kept meanwhile
            end = world.t + action.budget_s
            slow = _renewed(lease, me, now + action.budget_s, copied=True)
            yield "slow copy", _with(world, i, replace(done, wake=end), lease=slow,
                                     slow_copies=world.slow_copies - 1)  # fmt: skip
    elif isinstance(action, g.Destroy):
        ended = world.destroyed_at if not world.billing else world.t
        yield "destroy", _with(world, i, replace(me, wake=world.t), billing=False,
                               destroyed_at=ended)  # fmt: skip
        if world.destroy_failures and world.billing:
            retry = replace(me, wake=world.t + scope.clock.confirm_poll_s)
            yield "destroy failed", _with(world, i, retry, refused=world.refused + 1,
                                          destroy_failures=world.destroy_failures - 1)  # fmt: skip
    else:  # EndRace: no race runs in this world
        raise AssertionError(f"unexpected action {action!r}")


def _renewed(lease: g.Lease | None, me: Guardian, now: float, copied: bool = False) -> g.Lease | None:
    """leases.renew: only our own lease, its beats raised (a successor's renewal is seen)."""
    if lease is None or lease.holder != me.me:
        return lease
    return replace(lease, heartbeat_at=now, beats=lease.beats + 1, copied=lease.copied or copied)


def successors(scope: Scope, world: World) -> Iterator[tuple[str, World]]:
    running = [i for i, x in enumerate(world.guardians) if x.status == RUN]
    due = [i for i in running if world.guardians[i].wake <= world.t]
    for i in due:
        yield from steps(scope, world, i)
    if world.kills:
        for i in running:
            dead = replace(world.guardians[i], status=DEAD)
            yield "kill", _with(world, i, dead, kills=world.kills - 1, killed=True)
    if world.stalls:
        for i in running:
            x = world.guardians[i]
            late = replace(x, wake=max(x.wake, world.t) + scope.clock.lease_ttl_s + scope.clock.poll_s)
            yield "stall", _with(world, i, late, stalls=world.stalls - 1, stalled=True)
    if world.by_hand and world.billing:
        yield "destroy by hand", replace(world, billing=False, destroyed_at=world.t,
                                         by_hand=0, ended_by_hand=True)  # fmt: skip
    if world.cron_at <= world.t and world.billing:  # a sweep with nothing billing: a no-op
        yield from sweeps(scope, world)
    if world.starts and world.t <= scope.last_start:
        n = len(world.guardians)
        for host, skew in scope.hosts:
            new = _new_guardian(scope, n, host, skew, world.t)
            yield "start", replace(world, guardians=(*world.guardians, new),
                                   starts=world.starts - 1)  # fmt: skip
    if not due and (world.cron_at > world.t or not world.billing):  # on to the next wake
        wakes = [world.guardians[i].wake for i in running]
        if world.cron_at <= scope.horizon and world.billing:
            wakes.append(world.cron_at)
        if wakes:
            yield "time", replace(world, t=min(wakes))


def sweeps(scope: Scope, world: World) -> Iterator[tuple[str, World]]:
    """Cron's `gpuops sweep` on alice's cron host, judged by ``rentals.due_records`` on a box
    record of hers and of bob's (whose sweep must never end hers, M3), then the next run."""
    host, skew = scope.cron
    deadline = ledger.utc_iso(scope.deadline)
    record = ledger.Record(NAME, "alice", ledger.BoxState.LIVE, "i-1", "vast", 2, deadline,
                           instance_id="7", deadline_at=deadline)  # fmt: skip
    rental = Rental(NAME, "alice", "live", 1, box=NAME, instance_id="7", started_at=T0,
                    deadline_at=scope.deadline, deadline_host=RENTER)  # fmt: skip
    later = replace(world, cron_at=world.cron_at + CRON_S)
    for me in ("bob", "alice"):
        due = rentals.due_records([record], {NAME: rental}, me, world.t + skew, host)
        if me == "bob" and due and world.billing:  # never: the verdict "wrong destroy" says so
            yield "bob's sweep", replace(later, billing=False, destroyed_at=world.t, wrong=True)
            return
        if due and world.billing:
            yield "sweep", replace(later, billing=False, destroyed_at=world.t)
            if world.destroy_failures:
                yield "sweep refused", replace(later, refused=world.refused + 1,
                                               destroy_failures=world.destroy_failures - 1)  # fmt: skip
            return
    yield "sweep (nothing due)", later


def judge(scope: Scope, world: World, how: str, report: Report) -> None:
    """The verdicts on one state, from the provider's record (billing, destroyed_at)."""
    where = f"t={world.t:g} after {how}"
    if world.wrong:
        report.violations["wrong destroy"].append(where)
    if world.destroyed_at is not None and world.destroyed_at < scope.copy_at:
        if not world.ended_by_hand:
            report.violations["early"].append(where)
    if world.billing and world.t > scope.bound + world.refused * CRON_S:
        report.violations["leaked"].append(where)
    here = all(x.host == RENTER for x in world.guardians)  # else one may win the lease first
    clean = here and not (world.killed or world.stalled or world.refused)
    if clean and world.billing and world.t > scope.deadline + scope.clock.heartbeat_s:
        report.violations["late"].append(where)
    if how.startswith("leave") and world.billing:
        left = next(x for x in world.guardians if x.status == LEFT and x.code is not None)
        if how == f"leave {g.GONE}":
            report.violations["exit 0 while billing"].append(where)
        holder = world.lease.holder if world.lease else None
        runs = {x.me for x in world.guardians if x.status == RUN}
        if not world.killed and how == f"leave {g.SUPERSEDED}" and holder not in runs:
            report.violations["abandoned"].append(f"{where} ({left.me})")


def terminal(scope: Scope, world: World, report: Report) -> None:
    report.terminals += 1
    running = any(x.status == RUN for x in world.guardians)
    where = f"t={world.t:g}, the end"
    if running and world.billing:
        report.violations["leaked"].append(where)
    elif running:
        report.violations["stuck"].append(where)
    elif world.billing and not world.killed:
        report.violations["abandoned"].append(where)


def explore(scope: Scope, limit: int = 5_000_000) -> Report:
    """Breadth first over every state the scope reaches; each judged once."""
    budget = g.schedule(T0, scope.deadline)[1]
    if scope.slow_copies and budget >= scope.clock.lease_ttl_s:
        raise ValueError(f"a {budget:g} s copy budget outlasts the lease's TTL: see slow_copies")
    report = Report()
    start = initial(scope)
    seen = {start.key()}
    queue = collections.deque([start])
    while queue:
        world = queue.popleft()
        report.states += 1
        if report.states > limit:
            raise RuntimeError(f"more than {limit} states: narrow the scope")
        moved = False
        for how, after in successors(scope, world):
            report.transitions += 1
            report.reached[how] += 1
            moved = True
            if after.t > scope.horizon:
                terminal(scope, after, report)
                continue
            key = after.key()
            if key in seen:
                continue
            seen.add(key)
            judge(scope, after, how, report)
            queue.append(after)
        if not moved:
            terminal(scope, world, report)
    return report
