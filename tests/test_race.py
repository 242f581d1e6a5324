"""The race's decisions, on plain values (M1, M2, M12)."""

from __future__ import annotations

import pytest

from gpuops import timing
from gpuops.model import Instance, InstanceStatus, Verdict
from gpuops.market.race import (
    KEY_BLAME_MIN_PROBES,
    RECONCILE_ATTEMPTS,
    Candidate,
    Create,
    Destroy,
    Keep,
    Phase,
    Race,
    Reconcile,
    Replace,
    Stop,
    Wait,
    add_spare,
    decide,
    looked,
    probed,
    shown,
    update,
)

T = 1000.0


def race(*phases: Phase, **kw: object) -> Race:
    cands = tuple(
        Candidate(i, offer_id=100 + i, machine_id=200 + i, phase=p, instance_id=f"i{i}")
        for i, p in enumerate(phases)
    )
    return Race(cands, **kw)  # type: ignore[arg-type]


def test_the_first_create_goes_at_once_and_the_next_waits_for_pacing():
    """M12: creates are never back-to-back; the wait is what remains of CREATE_PACING_S."""
    fresh = race(Phase.PICKED, Phase.PICKED)

    assert decide(fresh, T) == [Create(0)]
    paced = update(fresh, 0, phase=Phase.BOOTING, created_at=T)
    paced = Race(paced.candidates, last_create_at=T)
    assert decide(paced, T + 0.5) == [Wait(timing.CREATE_PACING_S - 0.5)]
    assert decide(paced, T + timing.CREATE_PACING_S) == [Create(1)]


def test_any_pacing_left_is_waited_out_even_under_a_second():
    """M12: a create is paced by whatever remains, however small, never rounded away."""
    paced = Race(update(race(Phase.BOOTING, Phase.PICKED), 0, created_at=T).candidates, T)

    assert decide(paced, T + timing.CREATE_PACING_S - 0.25) == [Wait(0.25)]
    assert decide(paced, T + timing.CREATE_PACING_S + 0.25) == [Create(1)]


def test_the_first_pass_is_kept_and_every_other_box_destroyed():
    """M1: one winner; the losers, booting or probing or passed later, are destroyed."""
    state = race(Phase.BOOTING, Phase.PASSED, Phase.BOOTING, Phase.PASSED, Phase.CREATE_FAILED)

    assert decide(state, T) == [Keep(1), Destroy(0), Destroy(2), Destroy(3)]


def test_after_keeping_only_leftover_boxes_are_destroyed():
    """M1: once kept, nothing more is kept; remaining losers still go."""
    state = race(Phase.KEPT, Phase.PASSED, Phase.DESTROYED, Phase.FAILED, Phase.PICKED)

    assert decide(state, T) == [Destroy(1), Destroy(3)]
    assert decide(race(Phase.KEPT, Phase.DESTROYED), T) == []


def test_a_failed_host_fault_is_destroyed_and_quarantined():
    """M2: a slow disk is the host's fault: destroy and quarantine the machine."""
    state = update(race(Phase.FAILED, Phase.BOOTING), 0, cause="slow-disk")

    assert decide(state, T) == [Destroy(0, "slow-disk")]


def test_an_auth_failure_is_destroyed_but_never_quarantined():
    """M2: an SSH auth failure is our key's fault, not the host's."""
    state = update(race(Phase.FAILED, Phase.BOOTING), 0, cause="ssh-auth")

    assert decide(state, T) == [Destroy(0, None)]


def test_a_box_that_never_boots_is_destroyed_at_the_boot_timeout():
    """A box stuck before running is given BOOT_TIMEOUT_S, then destroyed."""
    state = update(race(Phase.BOOTING), 0, created_at=T)

    assert decide(state, T + timing.BOOT_TIMEOUT_S - 0.1) == []
    assert decide(state, T + timing.BOOT_TIMEOUT_S) == [Destroy(0)]


def test_when_every_probe_fails_on_auth_the_race_stops_and_blames_our_key():
    """M2: the 20 September lesson: stop burning offers, say the key is the problem."""
    state = race(Phase.DESTROYED, Phase.DESTROYED, Phase.DESTROYED, Phase.CREATE_FAILED)
    state = update(update(state, 0, cause="ssh-auth"), 1, cause="ssh-auth")
    state = update(update(state, 2, cause="ssh-auth"), 3, cause="taken")
    state = Race(state.candidates, spare_offers=((9, 9),), max_creates=10)

    assert KEY_BLAME_MIN_PROBES == 3
    assert decide(state, T) == [
        Stop(
            "every probe failed on SSH authentication: our key is the problem, "
            "not the hosts (check that it is registered and offered)",
            "M2",
        )
    ]


def test_two_auth_failures_are_bad_luck_and_the_race_goes_on():
    """M2: one or two auth failures are ordinary (29% of probes fail on SSH): try a spare."""
    state = race(Phase.DESTROYED, Phase.DESTROYED)
    state = update(update(state, 0, cause="ssh-auth"), 1, cause="ssh-auth")
    spare = Race(state.candidates, spare_offers=((9, 90),), max_creates=5)
    dry = Race(state.candidates, spare_offers=(), max_creates=5)

    assert decide(spare, T) == [Replace()]
    assert decide(dry, T) == [Stop("no candidate passed its probe and no offers are left to try")]


def test_auth_failures_mixed_with_a_host_fault_do_not_blame_our_key():
    """M2: a probe that got past auth proves the key works."""
    state = race(Phase.DESTROYED, Phase.DESTROYED, Phase.DESTROYED, Phase.DESTROYED)
    for slot, cause in enumerate(["ssh-auth", "ssh-auth", "ssh-auth", "slow-disk"]):
        state = update(state, slot, cause=cause)

    assert decide(Race(state.candidates), T) == [
        Stop("no candidate passed its probe and no offers are left to try")
    ]


def test_a_mix_of_failures_tries_a_spare_offer_while_creates_remain():
    """With offers left and creates to spare, a failed race takes the next offer."""
    state = race(Phase.DESTROYED, Phase.CREATE_FAILED)
    state = update(update(state, 0, cause="slow-disk"), 1, cause="taken")
    state = Race(state.candidates, spare_offers=((7, 70), (8, 80)), max_creates=3)

    assert decide(state, T) == [Replace()]
    grown = add_spare(state)
    assert grown.candidates[-1] == Candidate(2, 7, 70)
    assert grown.spare_offers == ((8, 80),)
    assert decide(grown, T) == [Create(2)]


def test_a_spare_added_to_an_empty_race_takes_slot_zero():
    """Slots count from 0 even when the race has no candidate yet."""
    grown = add_spare(Race((), spare_offers=((7, 70),), max_creates=1))

    assert grown.candidates == (Candidate(0, 7, 70),)
    assert grown.spare_offers == ()


def test_a_spare_on_an_offer_or_machine_the_race_holds_is_never_added():
    """skypilot#9117: never two creates on one offer or one machine; a spare whose offer or
    machine a candidate already has is skipped, and none left leaves no spares."""
    state = update(race(Phase.DESTROYED), 0, cause="no-gpu")  # offer 100 on machine 200
    spares = ((100, 71), (9, 200), (8, 80), (7, 70))
    grown = add_spare(Race(state.candidates, spare_offers=spares, max_creates=4))

    assert grown.candidates[-1] == Candidate(1, 8, 80)
    assert grown.spare_offers == ((7, 70),)
    used = Race(state.candidates, spare_offers=((100, 71), (9, 200)), max_creates=4)
    spent = add_spare(used)
    assert spent.candidates == state.candidates and spent.spare_offers == ()
    [stop] = decide(spent, T)
    assert stop == Stop("no candidate passed its probe and no offers are left to try")


def test_a_race_out_of_creates_or_offers_stops_without_a_winner():
    """No winner and nothing left to try is a stop with a reason, never a silent end."""
    state = update(race(Phase.DESTROYED), 0, cause="no-gpu")
    capped = Race(state.candidates, spare_offers=((7, 70),), max_creates=1)
    dry = Race(state.candidates, spare_offers=(), max_creates=5)

    for finished in (capped, dry):
        [stop] = decide(finished, T)
        assert stop == Stop("no candidate passed its probe and no offers are left to try")


def test_a_race_with_boxes_in_flight_waits_for_news():
    """Booting or probing candidates mean: nothing to do yet."""
    assert decide(update(race(Phase.BOOTING, Phase.BOOTING), 1, created_at=T), T) == []
    assert decide(race(Phase.CREATING), T) == []


@pytest.mark.parametrize("phase", list(Phase))
def test_every_phase_is_handled_without_error(phase):
    """A race of any single phase yields a list of actions."""
    assert isinstance(decide(race(phase), T), list)


def test_a_host_fault_found_in_the_same_round_as_a_winner_is_still_quarantined():
    """M2: a slow disk is quarantined even when another box passed in the same poll."""
    state = update(race(Phase.FAILED, Phase.PASSED, Phase.FAILED), 0, cause="slow-disk")
    state = update(state, 2, cause="ssh-auth")

    assert decide(state, T) == [Keep(1), Destroy(0, "slow-disk"), Destroy(2, None)]


def unclear(*others: Phase, reconciles: int = 1, at: float | None = T + 5) -> Race:
    """Slot 0 is a create whose answer was lost and whose box no look-up has found."""
    lost = Candidate(0, 100, 200, Phase.CREATING, None, T, None, reconciles, at)
    rest = tuple(
        Candidate(i + 1, 101 + i, 201 + i, phase=p, instance_id=f"i{i + 1}")
        for i, p in enumerate(others)
    )
    return Race((lost, *rest), last_create_at=T)


def test_no_other_create_is_sent_while_a_create_is_unresolved_m12():
    """M12: with an unclear create open, a picked candidate waits for its next look-up."""
    assert decide(unclear(Phase.PICKED), T + 4) == [Wait(1.0)]
    assert decide(unclear(Phase.PICKED), T + 5) == [Reconcile(0)]
    assert decide(unclear(Phase.PICKED, at=None), T + 1) == [Reconcile(0)]


def test_boxes_coming_up_are_polled_while_an_unclear_create_waits_for_its_look_up_m12():
    """M12: a booting box is watched meanwhile (no action: the shell polls and probes it)."""
    assert decide(unclear(Phase.BOOTING), T + 1) == []
    assert decide(unclear(Phase.BOOTING), T + 5) == [Reconcile(0)]
    assert decide(unclear(Phase.PASSED), T + 1)[0] == Keep(1)


def test_an_unclear_create_past_its_look_ups_ends_every_other_box_and_stops_unknown_m12():
    """M12/M13: after RECONCILE_ATTEMPTS look-ups the race destroys what it has and stops
    with `unresolved` (exit 5), naming the offer and slot."""
    tried = RECONCILE_ATTEMPTS
    state = unclear(Phase.BOOTING, Phase.PICKED, Phase.BOOTING, reconciles=tried)

    actions = decide(state, T + 1)

    assert actions[:2] == [Destroy(1), Destroy(3)]
    (stop,) = actions[2:]
    assert stop == Stop(
        f"the create on offer 100 (slot 0) is unresolved after {tried} look-ups by label; "
        "its guardian and sweep keep looking",
        "M12",
        unresolved=True,
    )
    assert decide(unclear(reconciles=tried - 1), T + 5) == [Reconcile(0)]


def test_each_look_up_that_finds_nothing_doubles_the_wait_for_the_next_m12():
    """M12: the look-ups back off from RECONCILE_BACKOFF_S, doubling."""
    state = unclear(reconciles=0, at=None)
    waits = []
    for n in range(3):
        state = looked(state, 0, T + 100 * n)
        lost = state.candidates[0]
        waits.append(lost.reconcile_at - (T + 100 * n))
        assert lost.reconciles == n + 1
    base = timing.RECONCILE_BACKOFF_S
    assert waits == [base, 2 * base, 4 * base]


def test_a_created_box_is_not_unclear_whatever_its_phase_m12():
    """M12: a create with an instance id is settled; only an id-less CREATING one holds."""
    known = Race((Candidate(0, 100, 200, Phase.CREATING, "i0", T), Candidate(1, 101, 201)), T)
    assert decide(known, T + timing.CREATE_PACING_S) == [Create(1)]


def test_no_create_is_sent_once_the_rentals_owner_starts_ending_it_m13():
    """M13: at stop_creating_at (the guardian's copy time) the race stops instead of creating."""
    state = Race((Candidate(0, 100, 200),), stop_creating_at=T)

    assert decide(state, T - 0.001) == [Create(0)]
    assert decide(state, T) == [
        Stop("the rental's deadline is near: no more creates; its guardian ends it")
    ]
    assert decide(Race((Candidate(0, 100, 200),)), T + 10**9) == [Create(0)]


def test_a_kept_box_never_destroys_an_unclear_create_but_looks_for_it_first_m12():
    """M12: with a winner, an unclear create is no box to destroy: it is looked up by label
    (then it is a loser like any other); once its look-ups are spent, the race is done and the
    rental's owner ends it by the deadline."""
    won = unclear(Phase.PASSED, Phase.FAILED)

    assert decide(won, T + 5) == [Keep(1), Destroy(2)]
    kept = update(update(won, 1, phase=Phase.KEPT), 2, phase=Phase.DESTROYED)
    assert decide(kept, T + 4) == [Wait(1.0)]
    assert decide(kept, T + 5) == [Reconcile(0)]
    assert decide(update(kept, 0, reconciles=RECONCILE_ATTEMPTS), T + 5) == []
    assert decide(update(kept, 0, reconcile_at=None), T + 1) == [Reconcile(0)]



def box(status: InstanceStatus, raw: str | None) -> Instance:
    return Instance("i0", "gpuops:x", status, raw, None, None, None, None, None, None, None, None)


@pytest.mark.parametrize(
    ("instance", "phase", "cause", "up"),
    [
        (None, Phase.FAILED, "vanished", False),
        (box(InstanceStatus.EXITED, "exited"), Phase.FAILED, "boot-failed (exited)", False),
        (box(InstanceStatus.OFFLINE, "offline"), Phase.FAILED, "boot-failed (offline)", False),
        (box(InstanceStatus.RUNNING, "running"), Phase.BOOTING, None, True),
        (box(InstanceStatus.LOADING, "loading"), Phase.BOOTING, None, False),
        (box(InstanceStatus.UNKNOWN, "weird"), Phase.BOOTING, None, False),
    ],
)
def test_what_the_providers_answer_about_a_booting_box_means_m1(instance, phase, cause, up):
    """M1: gone or failed for good ends the slot with its cause; running is up, to be probed;
    anything else (an unseen status included: dead is a fact, M10) is still booting."""
    before = race(Phase.BOOTING, Phase.BOOTING)

    after, is_up = shown(before, 0, instance)

    assert (after.candidates[0].phase, after.candidates[0].cause, is_up) == (phase, cause, up)
    assert after.candidates[1] == before.candidates[1]
    if phase is Phase.BOOTING:
        assert after == before


@pytest.mark.parametrize("verdict", list(Verdict))
def test_a_probe_passes_only_on_a_pass_and_keeps_its_verdict_as_the_cause_m1(verdict):
    """M1: PASSED on a pass, FAILED on any other verdict; the verdict is the cause."""
    after = probed(race(Phase.BOOTING, Phase.BOOTING), 1, verdict)

    expected = Phase.PASSED if verdict is Verdict.PASS else Phase.FAILED
    assert (after.candidates[1].phase, after.candidates[1].cause) == (expected, verdict.value)
    assert after.candidates[0].phase is Phase.BOOTING


# --- what a create's answer means (M12) ------------------------------------------------------
from gpuops.errors import (  # noqa: E402
    AuthFailed,
    OfferTaken,
    ProviderUnavailable,
    RateLimited,
    SearchQuotaExceeded,
    UnexpectedResponse,
)
from gpuops.market.race import (  # noqa: E402
    CREATE_ERRORS,
    Answer,
    Created,
    answer_of,
    created,
    looks_first,
)


@pytest.mark.parametrize(
    ("error", "answer"),
    [
        (None, Answer.CREATED),
        (OfferTaken("vast", 7), Answer.TAKEN),
        (RateLimited("vast", "slow down"), Answer.RATE_LIMITED),
        (SearchQuotaExceeded("vast", "daily quota"), Answer.RATE_LIMITED),
        (AuthFailed("vast", "bad key", 401), Answer.AUTH),
        (ProviderUnavailable("vast", "503"), Answer.UNCLEAR),
        (UnexpectedResponse("vast", "no new_contract"), Answer.UNCLEAR),
    ],
)
def test_a_create_s_answer_is_read_from_its_type_m12(error, answer):
    assert answer_of(error) is answer
    assert error is None or isinstance(error, CREATE_ERRORS)


def test_an_error_no_create_raises_is_not_an_answer():
    with pytest.raises(TypeError, match="ValueError"):
        answer_of(ValueError("x"))


def test_only_a_429_and_an_unclear_answer_are_looked_for_by_label_first_m12():
    assert {a for a in Answer if looks_first(a)} == {Answer.RATE_LIMITED, Answer.UNCLEAR}


@pytest.mark.parametrize(
    ("answer", "found", "then"),
    [
        (Answer.CREATED, False, Created(Phase.BOOTING, "created")),
        (Answer.CREATED, True, Created(Phase.BOOTING, "created")),
        (Answer.UNCLEAR, True, Created(Phase.BOOTING, "reconciled")),
        (Answer.RATE_LIMITED, True, Created(Phase.BOOTING, "reconciled")),
        (Answer.UNCLEAR, False, Created(Phase.CREATING, "unclear")),
        (Answer.TAKEN, False, Created(Phase.CREATE_FAILED, "taken", nothing_made=True)),
        (Answer.TAKEN, True, Created(Phase.CREATE_FAILED, "taken", nothing_made=True)),
        (
            Answer.RATE_LIMITED,
            False,
            Created(Phase.CREATE_FAILED, "rate-limited", nothing_made=True, backoff=True),
        ),
        (Answer.AUTH, False, Created(Phase.CREATE_FAILED, "auth", nothing_made=True, stop=True)),
        (Answer.AUTH, True, Created(Phase.CREATE_FAILED, "auth", nothing_made=True, stop=True)),
    ],
)
def test_what_the_race_does_with_each_answer_m12(answer, found, then):
    """A box made or found boots; a refusal made nothing; an unclear create nobody has found
    yet is looked for again, never taken for nothing (M12)."""
    assert created(answer, found) == then
