"""The guardian's pure decisions: one responsible guardian, verified supersession, the ceiling
(M5, M7), on plain values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops import timing
from gpuops.market import guardian as g
from gpuops.market.guardian import (
    GONE,
    NORMAL,
    SUPERSEDED,
    Box,
    Clockwork,
    Copy,
    Destroy,
    Lease,
    Leave,
    Mind,
    Renew,
    Role,
    Take,
    Wait,
)

T0 = 1_800_000_000.0
HOUR = 3600.0
BOX = Box(gone=False, started_at=T0, deadline_at=T0 + 10 * HOUR)
ME, OTHER = "alice/pi/1/aa", "alice/laptop/2/bb"
# a clockwork other than NORMAL, every duration a tenth of its: the decisions must use it
FAST = Clockwork(1.5, 6.0, 0.5, 3.0, 0.5)


def mine(at: float, beats: int = 0, copied: bool = False) -> Lease:
    return Lease(ME, at, beats, copied)


def theirs(at: float, beats: int = 0, holder: str = OTHER) -> Lease:
    return Lease(holder, at, beats)


def test_the_exit_codes_are_distinct_and_only_gone_is_zero():
    """M7: 0 is a confirmed-gone box; supersession has its own documented code."""
    assert GONE == 0
    assert SUPERSEDED == 7


def test_a_gone_box_ends_the_guardian_with_exit_0_whatever_the_lease_says():
    """M7: the one clean exit is the provider confirming the box gone."""
    gone = Box(True, T0, T0 + HOUR)
    for lease in (None, mine(T0), theirs(T0)):
        mind, action = g.decide(Mind(ME), lease, gone, T0 + 1)
        assert action == Leave(GONE, "every box of the rental is confirmed gone")
        assert mind == Mind(ME)


def test_a_free_lease_is_taken():
    """M7: with no lease, the first guardian takes responsibility."""
    assert g.decide(Mind(ME), None, BOX, T0) == (Mind(ME), Take())


def test_a_newcomer_waits_as_standby_while_the_holder_is_fresh():
    """M7: a second guardian never takes over a fresh lease (the 20 September fix)."""
    lease = theirs(T0, beats=3)
    now = T0 + timing.LEASE_TTL_S - 0.001
    mind, action = g.decide(Mind(ME), lease, BOX, now)
    assert action == Wait(timing.LEASE_POLL_S)
    assert mind == Mind(ME, role=Role.STANDBY)


def test_a_stale_lease_is_taken_over_exactly_a_ttl_after_it_was_seen_standing_still():
    """M7: a lease seen with the same holder and beats for a whole TTL, on our own clock, means
    its holder is presumed dead; the first sight starts the watch."""
    lease = theirs(T0)
    mind, first = g.decide(Mind(ME), lease, BOX, T0)
    assert first == Wait(timing.LEASE_POLL_S)
    assert (mind.seen, mind.seen_since) == ((OTHER, 0), T0)
    almost = g.decide(mind, lease, BOX, T0 + timing.LEASE_TTL_S - 0.001)
    assert almost[1] == Wait(timing.LEASE_POLL_S)
    assert g.decide(mind, lease, BOX, T0 + timing.LEASE_TTL_S)[1] == Take()
    assert g.is_stale(mind, T0 + timing.LEASE_TTL_S)
    assert not g.is_stale(mind, T0 + timing.LEASE_TTL_S - 0.001)
    assert not g.is_stale(Mind(ME), T0 + 10**9)  # nothing seen: nothing stale


def test_a_heartbeat_or_a_new_holder_restarts_the_watch_m7():
    """M7: a beat, or another holder, is a new sight; the TTL counts from there."""
    mind, _ = g.decide(Mind(ME), theirs(T0), BOX, T0)
    beat, _ = g.decide(mind, theirs(T0 + 50, beats=1), BOX, T0 + 50)
    assert (beat.seen, beat.seen_since) == ((OTHER, 1), T0 + 50)
    assert g.decide(beat, theirs(T0 + 50, beats=1), BOX, T0 + timing.LEASE_TTL_S)[1] == Wait(
        timing.LEASE_POLL_S
    )
    third, _ = g.decide(beat, theirs(T0, beats=1, holder="alice/ci/3/cc"), BOX, T0 + 70)
    assert (third.seen, third.seen_since) == (("alice/ci/3/cc", 1), T0 + 70)
    gone, _ = g.decide(third, None, BOX, T0 + 80)
    assert (gone.seen, gone.seen_since) == (None, T0 + 80)


def test_the_holders_clock_is_never_compared_with_ours_m7():
    """M7 across hosts: a holder whose clock runs five minutes behind (its heartbeat looks
    ancient) is not taken over while it beats; one five minutes ahead is taken over once it
    stops, a TTL later by our clock, never sooner or never."""
    behind, ahead = -300.0, 300.0
    mind = Mind(ME)
    for n in range(10):  # it beats every heartbeat, stamped by its slow clock
        now = T0 + n * timing.GUARDIAN_HEARTBEAT_S
        mind, action = g.decide(mind, theirs(now + behind, beats=n), BOX, now)
        assert action == Wait(timing.LEASE_POLL_S)
    stopped = theirs(T0 + ahead, beats=99)
    mind, _ = g.decide(Mind(ME), stopped, BOX, T0)
    assert g.decide(mind, stopped, BOX, T0 + timing.LEASE_TTL_S - 1)[1] == Wait(timing.LEASE_POLL_S)
    assert g.decide(mind, stopped, BOX, T0 + timing.LEASE_TTL_S)[1] == Take()


def test_the_monotonic_clock_alone_judges_staleness_when_given():
    """M7: with a monotonic clock passed, the wall clock's jumps do not age a lease."""
    lease = theirs(T0)
    mind, _ = g.decide(Mind(ME), lease, BOX, T0, NORMAL, mono=5.0)
    assert mind.seen_since == 5.0
    jumped = g.decide(mind, lease, BOX, T0 + 10 * timing.LEASE_TTL_S, NORMAL, mono=6.0)
    assert jumped[1] == Wait(timing.LEASE_POLL_S)
    assert g.decide(mind, lease, BOX, T0, NORMAL, mono=5.0 + timing.LEASE_TTL_S)[1] == Take()


def test_looks_stale_compares_the_holders_heartbeat_with_our_clock_for_display_only():
    """`boxes` shows a lease whose last heartbeat is a TTL old as STALE (advisory)."""
    assert g.looks_stale(theirs(T0), T0 + timing.LEASE_TTL_S)
    assert not g.looks_stale(theirs(T0), T0 + timing.LEASE_TTL_S - 0.001)
    assert g.looks_stale(theirs(T0), T0 + 6, FAST)


def test_the_holder_renews_once_a_heartbeat_is_due_and_not_before():
    """M7: the heartbeat is what 'alive' means; it is renewed every GUARDIAN_HEARTBEAT_S."""
    due = g.decide(Mind(ME), mine(T0), BOX, T0 + timing.GUARDIAN_HEARTBEAT_S)
    assert due == (Mind(ME, role=Role.RESPONSIBLE, held=True), Renew())
    mind, action = g.decide(Mind(ME), mine(T0), BOX, T0 + timing.GUARDIAN_HEARTBEAT_S - 1)
    assert mind == Mind(ME, role=Role.RESPONSIBLE, held=True)
    assert action == Wait(1.0)


def test_the_holder_renews_even_its_own_stale_lease_rather_than_taking_it():
    """M7: a guardian that was paused past its TTL and still holds the lease keeps it."""
    mind, action = g.decide(Mind(ME), mine(T0), BOX, T0 + 10 * timing.LEASE_TTL_S)
    assert action == Renew()
    assert mind.role is Role.RESPONSIBLE


def test_holding_the_lease_clears_a_verification_in_progress():
    """M7: a guardian that got its lease back stops watching the one it lost it to."""
    watching = Mind(ME, Role.VERIFYING, True, OTHER, 2, T0)
    mind, _ = g.decide(watching, mine(T0), BOX, T0 + 1)
    assert mind == Mind(ME, Role.RESPONSIBLE, True, None, 2, T0)


def test_a_guardian_that_lost_its_lease_starts_watching_its_successor():
    """M7: losing the lease is not yet supersession: the successor must prove it is alive."""
    held = Mind(ME, Role.RESPONSIBLE, held=True)
    mind, action = g.decide(held, theirs(T0, beats=4), BOX, T0 + 2)
    assert action == Wait(timing.LEASE_POLL_S)
    assert mind == Mind(ME, Role.VERIFYING, True, OTHER, 4, T0 + 2)


def test_supersession_needs_a_renewal_seen_over_the_whole_verification_window():
    """M7: leave as superseded only after watching the successor renew for SUPERSESSION_VERIFY_S."""
    watching = Mind(ME, Role.VERIFYING, True, OTHER, 4, T0)
    end = T0 + timing.SUPERSESSION_VERIFY_S
    renewed = theirs(end - 1, beats=5)
    assert g.decide(watching, renewed, BOX, end - 0.001) == (watching, Wait(timing.LEASE_POLL_S))
    mind, action = g.decide(watching, renewed, BOX, end)
    assert mind == watching
    assert action == Leave(SUPERSEDED, f"superseded by {OTHER}, seen renewing the lease")
    silent = theirs(T0, beats=4)  # never renewed: not verified, keep watching
    assert g.decide(watching, silent, BOX, end + 1) == (watching, Wait(timing.LEASE_POLL_S))


def test_a_successor_that_never_renews_is_taken_over_once_stale():
    """M7: a successor that took the lease and died is replaced, not trusted."""
    watching = Mind(ME, Role.VERIFYING, True, OTHER, 0, T0, seen=(OTHER, 0), seen_since=T0)
    mind, action = g.decide(watching, theirs(T0, beats=0), BOX, T0 + timing.LEASE_TTL_S)
    assert action == Take()
    assert mind == watching and mind.seen_since == T0


def test_a_third_guardian_taking_the_lease_restarts_the_verification():
    """M7: the renewals counted are those of the guardian now holding the lease."""
    watching = Mind(ME, Role.VERIFYING, True, OTHER, 9, T0)
    third = theirs(T0 + 40, beats=1, holder="alice/ci/3/cc")
    mind, action = g.decide(watching, third, BOX, T0 + 41)
    assert action == Wait(timing.LEASE_POLL_S)
    assert mind == Mind(ME, Role.VERIFYING, True, "alice/ci/3/cc", 1, T0 + 41)


def test_the_holder_waits_until_the_copy_starts_or_the_next_heartbeat():
    """M5: before the margin the holder only keeps its heartbeat going."""
    copy_at, _ = g.schedule(BOX.started_at, BOX.deadline_at)
    _, action = g.decide(Mind(ME), mine(copy_at - 3), BOX, copy_at - 2)
    assert action == Wait(2.0)
    _, early = g.decide(Mind(ME), mine(T0), BOX, T0 + 5)
    assert early == Wait(timing.GUARDIAN_HEARTBEAT_S - 5)


def test_copying_starts_at_the_margin_with_its_budget():
    """M5: results are copied off from DEADLINE_MARGIN_S before the deadline."""
    copy_at = BOX.deadline_at - timing.DEADLINE_MARGIN_S
    _, action = g.decide(Mind(ME), mine(copy_at), BOX, copy_at)
    assert action == Copy(timing.RESULTS_COPY_BUDGET_S)


def test_a_copy_started_late_may_run_only_until_the_deadline():
    """M5: the ceiling wins: the copy budget never reaches past the deadline."""
    now = BOX.deadline_at - 30
    _, action = g.decide(Mind(ME), mine(now), BOX, now)
    assert action == Copy(30.0)


def test_after_the_copy_attempt_the_holder_destroys():
    """M5: a copy that finished, failed or overran is followed by the destroy."""
    now = BOX.deadline_at - 100
    assert g.decide(Mind(ME, copied=True), mine(now), BOX, now)[1] == Destroy()
    assert g.decide(Mind(ME), mine(now, copied=True), BOX, now)[1] == Destroy()


def test_at_the_deadline_the_holder_destroys_without_copying():
    """M5: the ceiling wins over the copy."""
    _, action = g.decide(Mind(ME), mine(BOX.deadline_at), BOX, BOX.deadline_at)
    assert action == Destroy()


def test_a_heartbeat_due_comes_before_the_destroy():
    """M7: even while destroying, the lease is renewed first, so nobody takes over mid-destroy."""
    late = BOX.deadline_at + 5
    _, action = g.decide(Mind(ME), mine(late - timing.GUARDIAN_HEARTBEAT_S), BOX, late)
    assert action == Renew()


def test_the_schedule_uses_the_full_margin_for_long_rentals():
    """M5: a ten-hour box copies from ten minutes before its deadline, for seven minutes."""
    assert g.schedule(T0, T0 + 10 * HOUR) == (
        T0 + 10 * HOUR - timing.DEADLINE_MARGIN_S,
        timing.RESULTS_COPY_BUDGET_S,
    )


def test_the_schedule_scales_down_for_a_short_rental():
    """M5: a 72 s rental (--hours 0.02) keeps 54 s, copies for up to 12.6 s, then destroys."""
    copy_at, budget = g.schedule(T0, T0 + 72)
    assert copy_at == T0 + 54
    assert budget == pytest.approx(12.6)


def test_the_schedule_of_a_rental_past_its_start_has_no_margin():
    """M5: a deadline before the start (a clock jump) means copy nothing and destroy now."""
    assert g.schedule(T0, T0 - 5) == (T0 - 5, 0.0)


@given(
    start=st.floats(0, 1e9),
    length=st.floats(0, 1e6),
)
def test_the_copy_always_ends_before_the_deadline_with_room_to_destroy(start, length):
    """M5: for any rental, copy start + budget lies before the deadline."""
    copy_at, budget = g.schedule(start, start + length)
    assert copy_at >= start - 1e-6
    assert copy_at + budget <= start + length + 1e-6
    assert budget <= timing.RESULTS_COPY_BUDGET_S


def test_the_clockwork_reads_every_duration_from_timing():
    """M6: the guardian's lease durations are the timing module's, not copies of them."""
    assert (
        Clockwork(
            timing.GUARDIAN_HEARTBEAT_S,
            timing.LEASE_TTL_S,
            timing.LEASE_POLL_S,
            timing.SUPERSESSION_VERIFY_S,
            timing.DESTROY_CONFIRM_POLL_S,
        )
        == NORMAL
    )


def test_another_clockwork_drives_every_lease_decision():
    """M6: the decisions use the clockwork they are given, never a constant of their own."""
    fast = FAST
    assert fast != NORMAL
    seen = Mind(ME, seen=(OTHER, 0), seen_since=T0)
    assert g.decide(seen, theirs(T0), BOX, T0 + 6, fast) == (Mind(ME), Take())
    assert g.decide(seen, theirs(T0), BOX, T0 + 5.9, fast)[1] == Wait(0.5)
    assert g.decide(Mind(ME), mine(T0), BOX, T0 + 1.5, fast)[1] == Renew()
    assert g.decide(Mind(ME), mine(T0), BOX, T0 + 1, fast)[1] == Wait(0.5)
    watching = Mind(ME, Role.VERIFYING, True, OTHER, 0, T0)
    assert g.decide(watching, theirs(T0 + 2, 1), BOX, T0 + 3, fast)[1] == Leave(
        SUPERSEDED, f"superseded by {OTHER}, seen renewing the lease"
    )
    assert g.decide(watching, theirs(T0 + 2, 1), BOX, T0 + 2.9, fast)[1] == Wait(0.5)
    assert g.is_stale(seen, T0 + 6, fast)
    assert not g.is_stale(seen, T0 + 5.9, fast)


@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["me", "other", "none"]), st.floats(0, 200), st.integers(0, 9)),
        max_size=30,
    )
)
@pytest.mark.fault(
    "a guardian exits 0 while its box still bills",
    handled="no sequence of leases lets a guardian exit 0 for a live box (M7)",
)
def test_no_sequence_of_leases_makes_a_live_box_exit_0(steps):
    """M7: whatever the lease does, a guardian whose box is not gone never leaves with 0."""
    mind, now = Mind(ME), T0
    for who, dt, beats in steps:
        now += dt
        lease = {"me": mine(now - dt, beats), "other": theirs(now - dt, beats), "none": None}[who]
        mind, action = g.decide(mind, lease, BOX, now)
        if isinstance(action, Leave):
            assert action.code == SUPERSEDED
            assert mind.held and mind.watching == OTHER


def test_an_ended_rental_is_ended_at_once_not_at_its_deadline_m13():
    """M13: a rental that failed or was released has nothing to wait for: its leftover boxes
    are destroyed now."""
    ended = Box(False, T0, T0 + 10 * HOUR, ended=True)
    assert g.decide(Mind(ME), mine(T0), ended, T0 + 1)[1] == Destroy()
    assert g.decide(Mind(ME), mine(T0), BOX, T0 + 1)[1] != Destroy()


def test_an_unresolved_intent_outliving_the_grace_is_a_loud_exit_5_never_0_m13():
    """M13: only unresolved intents left, past deadline + OWNER_GRACE_S: exit UNKNOWN (5),
    loud; sweep goes on looking. Before that, and with any box left, the guardian works on."""
    stuck = Box(False, T0, T0 + HOUR, ended=True, unresolved=True)
    limit = T0 + HOUR + timing.OWNER_GRACE_S

    assert g.UNKNOWN == 5
    assert g.decide(Mind(ME), mine(limit), stuck, limit)[1] == Leave(
        g.UNKNOWN, "an unresolved create outlived the grace; sweep goes on"
    )
    assert g.decide(Mind(ME), mine(limit), stuck, limit - 0.001)[1] == Destroy()
    boxes_left = Box(False, T0, T0 + HOUR, ended=True)
    assert g.decide(Mind(ME), mine(limit + HOUR), boxes_left, limit + HOUR)[1] == Destroy()


# --- whether a rental is guarded, as a one-shot command judges it (M17) ------------------------
HERE = "hostA"


def held(host: str, pid: int, at: float) -> Lease:
    return Lease(f"alice/{host}/{pid}/ab", at, 3)


def test_no_lease_means_no_guardian():
    """M5: nothing holds the lease: a guardian must start."""
    assert g.judge_lease(None, T0, HERE, lambda pid: True) is g.Guarded.DEAD


def test_a_holder_on_this_host_is_judged_by_its_process_and_our_one_clock_m17():
    """M17: on this host the holder's pid is asked, and its heartbeat read on the clock that
    wrote it: alive and fresh is LIVE; a dead process or a TTL-old beat is DEAD at once."""
    asked: list[int] = []

    def alive(pid: int) -> bool:
        asked.append(pid)
        return pid == 41

    fresh = T0 + timing.LEASE_TTL_S - 0.001
    assert g.judge_lease(held(HERE, 41, T0), fresh, HERE, alive) is g.Guarded.LIVE
    assert g.judge_lease(held(HERE, 42, T0), T0, HERE, alive) is g.Guarded.DEAD
    assert g.judge_lease(held(HERE, 41, T0), T0 + timing.LEASE_TTL_S, HERE, alive) is (
        g.Guarded.DEAD
    )
    assert asked == [41, 42, 41]
    scaled = FAST
    assert g.judge_lease(held(HERE, 41, T0), T0 + 6, HERE, alive, scaled) is g.Guarded.DEAD
    assert g.judge_lease(held(HERE, 41, T0), T0 + 5.9, HERE, alive, scaled) is g.Guarded.LIVE


@pytest.mark.parametrize("skew_s", [-600.0, 600.0, 0.0])
def test_a_holder_on_another_host_is_never_called_stale_by_this_hosts_clock_m17(skew_s):
    """M17: another host's lease, its clock ten minutes ahead or behind ours: ELSEWHERE (only
    a watching guardian can tell), never DEAD, and its pid is never asked of this host; it
    is certainly stopped only a TTL plus the whole skew allowance after its last beat."""

    def alive(pid: int) -> bool:
        raise AssertionError("another host's pid was asked of this one")

    lease = held("hostB", 41, T0 + skew_s)
    assert g.judge_lease(lease, T0, HERE, alive) is g.Guarded.ELSEWHERE
    limit = T0 + skew_s + timing.LEASE_TTL_S + timing.CLOCK_SKEW_S
    assert g.judge_lease(lease, limit - 0.001, HERE, alive) is g.Guarded.ELSEWHERE
    assert g.judge_lease(lease, limit, HERE, alive) is g.Guarded.DEAD
    scaled = FAST
    assert g.judge_lease(lease, limit - 54, HERE, alive, scaled) is g.Guarded.DEAD
    assert g.judge_lease(lease, limit - 54.1, HERE, alive, scaled) is g.Guarded.ELSEWHERE


@pytest.mark.parametrize(
    ("holder", "where"),
    [
        ("alice/hostA/41/ab", ("hostA", 41)),
        ("a/b/7/c", ("b", 7)),
        ("alice//41/ab", None),
        ("alice/hostA/x1/ab", None),
        ("alice/hostA/41", None),
        ("alice/hostA/41/ab/cd", None),
        ("g", None),
    ],
)
def test_a_guardian_id_names_its_host_and_pid_or_nothing(holder, where):
    """M17: operator/host/pid/nonce; any other shape names no host (so never this one)."""
    assert g.holder_host(holder) == where
    if where is None:
        lease = Lease(holder, T0, 0)
        assert g.judge_lease(lease, T0, "hostA", lambda pid: True) is g.Guarded.ELSEWHERE


# --- a racer that died mid-race (M13) --------------------------------------------------------
def racing(racer: str = "alice/h/9/r", beat: int = 4) -> Box:
    return Box(gone=False, started_at=T0, deadline_at=T0 + 10 * HOUR, racer=(racer, beat))


def test_a_racer_whose_beat_stood_still_a_whole_ttl_has_its_race_ended_m13():
    """M13: the responsible guardian ends the race once the racer's (id, beat) was seen
    unchanged for RACER_TTL_S on its own clock; a beat meanwhile restarts the watch."""
    mind = g.Mind(ME, role=g.Role.RESPONSIBLE, held=True)
    lease = mine(T0)
    mind, action = g.decide(mind, lease, racing(), T0, NORMAL, T0)
    assert not isinstance(action, g.EndRace)
    mind, action = g.decide(mind, lease, racing(), T0, NORMAL, T0 + timing.RACER_TTL_S - 0.001)
    assert not isinstance(action, g.EndRace)
    _, action = g.decide(mind, lease, racing(beat=5), T0, NORMAL, T0 + timing.RACER_TTL_S)
    assert not isinstance(action, g.EndRace)  # it beat: watched afresh
    mind, _ = g.decide(mind, lease, racing(beat=5), T0, NORMAL, T0 + 1)
    _, action = g.decide(mind, lease, racing(beat=5), T0, NORMAL, T0 + 1 + timing.RACER_TTL_S)
    assert action == g.EndRace("alice/h/9/r", 5)


def test_a_race_is_never_ended_by_a_standby_nor_once_the_rental_stopped_racing_m13():
    """M13/M7: only the lease holder acts; a rental no longer racing names no racer."""
    standby = g.Mind(ME)
    lease = theirs(T0)
    standby, _ = g.decide(standby, lease, racing(), T0, NORMAL, T0)
    _, action = g.decide(standby, lease, racing(), T0, NORMAL, T0 + timing.RACER_TTL_S)
    assert not isinstance(action, g.EndRace)
    held = g.Mind(ME, role=g.Role.RESPONSIBLE, held=True)
    held, _ = g.decide(held, mine(T0), racing(), T0, NORMAL, T0)
    _, action = g.decide(held, mine(T0), BOX, T0, NORMAL, T0 + 2 * timing.RACER_TTL_S)
    assert not isinstance(action, g.EndRace)
    assert g.observe_racer(held, None, T0).racer_seen is None
    assert not g.racer_dead(g.Mind(ME), T0 + 10 * timing.RACER_TTL_S)
