"""The race: rent several offers at once, keep the first that probes healthy (M1, M2, M12).

Pure: ``decide(race, now)`` looks at every candidate and returns the actions to take next;
the shell (market/rent.py) performs them and feeds the results back. Nothing here sleeps,
calls a provider or reads the clock.

A candidate moves  picked -> creating -> booting -> passed | failed -> destroyed (it is probed
while booting ends: the shell probes the boxes that are up together), or picked ->
create-failed when the create was refused and nothing exists. ``creating`` with no instance
id is an unclear create, looked up by its label until found (M12).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from gpuops import timing
from gpuops.errors import (
    AuthFailed,
    OfferTaken,
    ProviderUnavailable,
    RateLimited,
    UnexpectedResponse,
)
from gpuops.model import Instance, Verdict, is_host_fault


class Phase(Enum):
    PICKED = "picked"
    CREATING = "creating"  # the create call is in flight or its answer was lost
    CREATE_FAILED = "create-failed"  # refused: nothing exists
    BOOTING = "booting"  # created; its box comes up, then is probed
    PASSED = "passed"
    FAILED = "failed"
    KEPT = "kept"
    DESTROYED = "destroyed"


# Our key is blamed only when every probe failed on auth, and at least this many did: at the
# seed's rate (29% of probes fail on SSH, half of those pass later) one or two auth failures
# are ordinary bad luck (a one-probe rule stopped 31% of serial rents in the benchmark), three
# in a row with nothing else is 2.4% by chance, and an unregistered key fails every one.
KEY_BLAME_MIN_PROBES = 3

# An unclear create is looked up by its label this many times (backing off from
# timing.RECONCILE_BACKOFF_S) before rent gives up with exit 5; its guardian and sweep go on.
RECONCILE_ATTEMPTS = 4

HAS_BOX = frozenset({Phase.CREATING, Phase.BOOTING, Phase.PASSED, Phase.FAILED})


@dataclass(frozen=True)
class Candidate:
    slot: int
    offer_id: int
    machine_id: int
    phase: Phase = Phase.PICKED
    instance_id: str | None = None
    created_at: float | None = None
    cause: str | None = None  # why it failed: a probe cause, "taken", "boot-timeout", ...
    reconciles: int = 0  # look-ups by label made for an unclear create (M12)
    reconcile_at: float | None = None  # when the next look-up is due


@dataclass(frozen=True)
class Race:
    candidates: tuple[Candidate, ...]
    last_create_at: float | None = None
    spare_offers: tuple[tuple[int, int], ...] = ()  # (offer_id, machine_id) not yet tried
    max_creates: int = 0  # 0: no replacements beyond the first picks
    # No create after this (epoch s): the rental's guardian starts ending it then (M13).
    stop_creating_at: float | None = None
    # The least time between two creates (M12): the provider's documented create interval,
    # on the provider's clock (a loopback fake's scaled one shortens it).
    create_pacing_s: float = timing.CREATE_PACING_S


# --- actions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Create:
    slot: int


@dataclass(frozen=True)
class Destroy:
    slot: int
    quarantine: str | None = None  # the host-fault cause to quarantine the machine for


@dataclass(frozen=True)
class Keep:
    slot: int


@dataclass(frozen=True)
class Reconcile:
    """Look for an unclear create's box by its label again (M12)."""

    slot: int


@dataclass(frozen=True)
class Replace:
    """Add a candidate for the next spare offer (after a failure, while creates remain)."""


@dataclass(frozen=True)
class Stop:
    """The race is over without a winner; ``reason`` says why, ``rule`` cites the rule."""

    reason: str
    rule: str | None = None
    unresolved: bool = False  # a create could not be settled: unknown (exit 5), not a refusal


@dataclass(frozen=True)
class Wait:
    seconds: float


Action = Create | Destroy | Keep | Reconcile | Replace | Stop | Wait


def decide(race: Race, now: float) -> list[Action]:
    """The next actions for ``race`` at time ``now``; an empty list means it is finished."""
    cands = race.candidates
    kept = [c for c in cands if c.phase is Phase.KEPT]
    passed = [c for c in cands if c.phase is Phase.PASSED]
    if kept or passed:
        winner = kept[0] if kept else min(passed, key=lambda c: c.slot)
        plan: list[Action] = [] if kept else [Keep(winner.slot)]
        plan += [
            _destroy(c)
            for c in cands
            if c.slot != winner.slot and c.phase in HAS_BOX and not _unclear(c)
        ]
        # an unclear create is no box to destroy until a look-up finds it (then it is a loser)
        looking = [c for c in cands if _unclear(c) and c.reconciles < RECONCILE_ATTEMPTS]
        if plan or not looking:
            return plan
        due = looking[0].reconcile_at if looking[0].reconcile_at is not None else now
        return [Reconcile(looking[0].slot)] if now >= due else [Wait(due - now)]

    plan = []
    for c in cands:
        if c.phase is Phase.FAILED:
            plan.append(_destroy(c))
        elif c.phase is Phase.BOOTING and c.created_at is not None:
            if now - c.created_at >= timing.BOOT_TIMEOUT_S:
                plan.append(Destroy(c.slot))  # never came up: not judged a host fault
    if plan:
        return plan

    probed = [c for c in cands if c.phase is Phase.DESTROYED and c.cause]
    auth = [c for c in probed if c.cause == "ssh-auth"]
    if len(auth) == len(probed) >= KEY_BLAME_MIN_PROBES and not _open(cands):
        return [
            Stop(
                "every probe failed on SSH authentication: our key is the problem, "
                "not the hosts (check that it is registered and offered)",
                "M2",
            )
        ]

    unclear = [c for c in cands if _unclear(c)]
    if unclear:  # M12: nothing else is created while any create is unsettled
        return _settle(cands, unclear[0], now)

    picked = [c for c in cands if c.phase is Phase.PICKED]
    if picked and race.stop_creating_at is not None and now >= race.stop_creating_at:
        return [Stop("the rental's deadline is near: no more creates; its guardian ends it")]
    if picked:
        wait = _pacing(race, now)
        return [Wait(wait)] if wait > 0 else [Create(picked[0].slot)]

    if not _open(cands):
        creates = sum(1 for c in cands if c.phase is not Phase.PICKED)
        if race.spare_offers and creates < race.max_creates:
            return [Replace()]
        return [Stop("no candidate passed its probe and no offers are left to try")]
    return []  # something is booting or probing: wait for its news


def _unclear(c: Candidate) -> bool:
    """A create whose answer was lost and whose box no look-up has found yet."""
    return c.phase is Phase.CREATING and c.instance_id is None


def _settle(cands: tuple[Candidate, ...], c: Candidate, now: float) -> list[Action]:
    """Look again by label while attempts remain; then end every other box and stop unknown."""
    if c.reconciles >= RECONCILE_ATTEMPTS:
        plan: list[Action] = [
            Destroy(o.slot) for o in cands if o.phase in HAS_BOX and not _unclear(o)
        ]
        return plan + [
            Stop(
                f"the create on offer {c.offer_id} (slot {c.slot}) is unresolved after "
                f"{c.reconciles} look-ups by label; its guardian and sweep keep looking",
                "M12",
                unresolved=True,
            )
        ]
    due = c.reconcile_at if c.reconcile_at is not None else now
    if now >= due:
        return [Reconcile(c.slot)]
    if any(o.phase is Phase.BOOTING for o in cands):
        return []  # poll the boxes that are coming up meanwhile
    return [Wait(due - now)]


def _destroy(c: Candidate) -> Destroy:
    """Destroy a candidate; a failed one whose cause is a host fault is also quarantined (M2)."""
    fault = c.phase is Phase.FAILED and c.cause is not None and is_host_fault(c.cause)
    return Destroy(c.slot, c.cause if fault else None)


def _open(cands: tuple[Candidate, ...]) -> bool:
    """Whether any candidate may still pass."""
    return any(c.phase in (Phase.PICKED, Phase.CREATING, Phase.BOOTING) for c in cands)


def _pacing(race: Race, now: float) -> float:
    """Seconds to wait before the next create: never back-to-back (M12)."""
    if race.last_create_at is None:
        return 0.0
    return max(0.0, race.last_create_at + race.create_pacing_s - now)


# --- applying outcomes (pure state updates the shell calls) -------------------------------
def update(race: Race, slot: int, **changes: object) -> Race:
    """A copy of ``race`` with candidate ``slot`` changed."""
    cands = tuple(replace(c, **changes) if c.slot == slot else c for c in race.candidates)  # type: ignore[arg-type]
    return replace(race, candidates=cands)


# --- what a create's answer means (M12) ---------------------------------------------------
class Answer(Enum):
    """A create call's answer, by its type (never its message)."""

    CREATED = "created"
    TAKEN = "taken"  # refused: the offer is gone, nothing was created
    RATE_LIMITED = "rate-limited"  # most likely nothing, but only a look-up by label proves it
    AUTH = "auth"  # refused: the key; nothing was created, and no other create will do better
    UNCLEAR = "unclear"  # 5xx, a lost answer, an unexpected 2xx: a box may exist


# The errors a create may raise that the race answers for; any other is a bug, and propagates.
CREATE_ERRORS = (OfferTaken, RateLimited, AuthFailed, ProviderUnavailable, UnexpectedResponse)


def answer_of(error: Exception | None) -> Answer:
    """The answer a create's outcome stands for: None is a created box."""
    if error is None:
        return Answer.CREATED
    if isinstance(error, OfferTaken):
        return Answer.TAKEN
    if isinstance(error, RateLimited):
        return Answer.RATE_LIMITED
    if isinstance(error, AuthFailed):
        return Answer.AUTH
    if isinstance(error, ProviderUnavailable | UnexpectedResponse):
        return Answer.UNCLEAR
    raise TypeError(f"not a create's answer: {type(error).__name__}")


def looks_first(answer: Answer) -> bool:
    """Whether the box must be looked for by its label before the answer is believed (M12)."""
    return answer in (Answer.RATE_LIMITED, Answer.UNCLEAR)


@dataclass(frozen=True)
class Created:
    """What the race does with a create's answer (and, after a look-up, whether it found the
    box): the candidate's next phase, the cause the create log records, whether nothing was
    made (the intent is confirmed gone and released), and whether to back off or stop."""

    phase: Phase  # BOOTING, CREATE_FAILED, or CREATING (unclear, still looked for)
    logged: str
    nothing_made: bool = False
    backoff: bool = False
    stop: bool = False  # the error is raised on: no other create will do better


def created(answer: Answer, found: bool) -> Created:
    """The mapping: a box made or found boots; a refusal made nothing (a 429 only when the
    look-up did not find it); an unclear create nobody found stays creating, looked up again."""
    if answer is Answer.CREATED:
        return Created(Phase.BOOTING, "created")
    if looks_first(answer) and found:
        return Created(Phase.BOOTING, "reconciled")  # it was made after all (M12)
    if answer is Answer.UNCLEAR:
        return Created(Phase.CREATING, "unclear")
    if answer is Answer.AUTH:
        return Created(Phase.CREATE_FAILED, "auth", nothing_made=True, stop=True)
    limited = answer is Answer.RATE_LIMITED
    return Created(Phase.CREATE_FAILED, answer.value, nothing_made=True, backoff=limited)


def shown(race: Race, slot: int, instance: Instance | None) -> tuple[Race, bool]:
    """What the provider's answer about a booting candidate's box means (M1): no box (it
    vanished) or a boot that failed for good ends the slot; a running box is up, to be probed
    (True); any other state is still booting, left as it is."""
    if instance is None:
        return update(race, slot, phase=Phase.FAILED, cause="vanished"), False
    if instance.actual_status.is_terminal_failure:
        cause = f"boot-failed ({instance.actual_status_raw})"
        return update(race, slot, phase=Phase.FAILED, cause=cause), False
    return race, instance.actual_status.is_running


def probed(race: Race, slot: int, verdict: Verdict) -> Race:
    """A probe's verdict on candidate ``slot``: PASSED only on a pass, else FAILED with it."""
    phase = Phase.PASSED if verdict is Verdict.PASS else Phase.FAILED
    return update(race, slot, phase=phase, cause=verdict.value)


def looked(race: Race, slot: int, now: float) -> Race:
    """One more look-up by label found nothing: the next waits twice as long (M12)."""
    made = race.candidates[slot].reconciles
    due = now + timing.RECONCILE_BACKOFF_S * 2**made
    return update(race, slot, reconciles=made + 1, reconcile_at=due)


def add_spare(race: Race) -> Race:
    """Move the next spare offer into the race as a new picked candidate, skipping any whose
    offer or machine the race already holds: never two creates on one offer or one machine
    (Vast accepts both and the later fails unseen, skypilot-org/skypilot#9117)."""
    offers = {c.offer_id for c in race.candidates}
    machines = {c.machine_id for c in race.candidates}
    fresh = [s for s in race.spare_offers if s[0] not in offers and s[1] not in machines]
    if not fresh:
        return replace(race, spare_offers=())
    (offer_id, machine_id), rest = fresh[0], tuple(fresh[1:])
    slot = max((c.slot for c in race.candidates), default=-1) + 1
    return replace(
        race,
        candidates=race.candidates + (Candidate(slot, offer_id, machine_id),),
        spare_offers=rest,
    )
