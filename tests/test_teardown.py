"""Destroying a box: destroy, then confirm gone by asking for that very box (M3, M4)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest
from store_fakes import Events, Interleaved

from fakes.vast.clock import FakeClock
from gpuops import timing
from gpuops.errors import (
    AuthFailed,
    IllegalTransition,
    NotOwned,
    ProviderError,
    ProviderUnavailable,
    StillRunning,
    Unavailable,
)
from gpuops.ledger import CREATE_REFUSED, GONE_BY_SHOW, BoxState, Ledger
from gpuops.market.teardown import (
    LABEL_PREFIX,
    Ending,
    Outcome,
    confirm_and_release,
    destroy_box,
    exit_code,
    intent_of,
    label_for,
    never_found,
)
from gpuops.model import Instance, InstanceStatus
from gpuops.store.memory import MemoryStore

BOX = "job+1-0"
POLLS_IN_TIME = int(timing.DESTROY_CONFIRM_TIMEOUT_S / timing.DESTROY_CONFIRM_POLL_S) + 1


class Clock:
    """Fake time that moves only when something sleeps."""

    def __init__(self) -> None:
        self.now = 5_000.0
        self.slept: list[float] = []

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Provider:
    """A provider's boxes, with state: a destroyed box keeps answering ``show`` for
    ``lingers`` more calls, then is gone; ``destroy_errors`` and ``show_errors`` are raised
    first, one per call."""

    def __init__(self, *instance_ids: str, lingers: int = 0) -> None:
        self.alive = set(instance_ids)
        self.lingering: dict[str, int] = {}
        self.lingers = lingers
        self.destroy_errors: list[Exception] = []
        self.show_errors: list[Exception] = []
        self.calls: list[tuple[str, str]] = []
        self.clock: Clock | None = None  # when set, every show after the first needs a sleep

    def destroy(self, instance_id: str) -> None:
        self.calls.append(("destroy", instance_id))
        if self.destroy_errors:
            raise self.destroy_errors.pop(0)
        if instance_id in self.alive:
            self.alive.discard(instance_id)
            self.lingering[instance_id] = self.lingers

    def show(self, instance_id: str) -> Instance | None:
        self.calls.append(("show", instance_id))
        if len(self.calls) > 10 * POLLS_IN_TIME:
            raise AssertionError("polled long past any deadline: the clock is not the one given")
        if self.clock is not None and self.shows() > 1 + len(self.clock.slept):
            raise AssertionError("asked again without sleeping on the sleep given")
        if self.show_errors:
            raise self.show_errors.pop(0)
        if self.lingering.get(instance_id, 0) > 0:
            self.lingering[instance_id] -= 1
            return running(instance_id)
        if instance_id in self.alive:
            return running(instance_id)
        return None

    def shows(self) -> int:
        return sum(1 for call, _ in self.calls if call == "show")


def running(instance_id: str) -> Instance:
    return Instance(
        instance_id,
        label_for("x"),
        InstanceStatus.RUNNING,
        "running",
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def ledger() -> Ledger:
    return Ledger(MemoryStore(), Events(), "alice", clock=FakeClock(1_800_000_000.0))


def live(ledger: Ledger, instance_id: str = "77", name: str = BOX) -> None:
    ledger.record_intent(name, "vast")
    ledger.mark_live(name, instance_id)


def destroy(vast: Provider, ledger: Ledger, clock: Clock, name: str = BOX) -> Outcome:
    vast.clock = clock
    return destroy_box(vast, ledger, name, clock=clock)


def test_a_label_carries_the_intent_id_and_only_ours_give_one_back():
    """M3: ``gpuops:<intent>`` is ours; any other label, or none, belongs to no intent."""
    assert LABEL_PREFIX == "gpuops:"
    assert label_for("abc123") == "gpuops:abc123"
    assert intent_of("gpuops:abc123") == "abc123"
    assert intent_of("gpuops:gpuops:x") == "gpuops:x"
    for foreign in (None, "", "gpuops:", "gpuops", "someone-else-entirely", "x-gpuops:abc"):
        assert intent_of(foreign) is None


def test_a_destroyed_box_is_released_once_show_says_it_is_gone(ledger, clock):
    """M4: destroy, then ask for that instance every poll until it answers gone; release."""
    live(ledger)
    vast = Provider("77", lingers=2)

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(BOX, Ending.GONE, "instance 77 confirmed gone")
    assert vast.calls == [("destroy", "77"), ("show", "77"), ("show", "77"), ("show", "77")]
    assert clock.slept == [timing.DESTROY_CONFIRM_POLL_S] * 2
    record = ledger.get(BOX)
    assert record.state is BoxState.RELEASED
    assert record.state is not BoxState.DESTROYING
    assert [p["after"] for _, p in ledger.events.events][-3:] == [
        "destroying",
        "gone-confirmed",
        "released",
    ]


def test_a_box_already_gone_is_released_without_waiting(ledger, clock):
    """M4: the first show answering gone is enough; nothing sleeps."""
    live(ledger)

    assert destroy(Provider(), ledger, clock).released
    assert clock.slept == []


def test_an_intent_with_no_instance_is_left_an_intent_for_its_look_up_by_label(ledger, clock):
    """M4/M12: with no instance to ask about, nothing is called and the record stays an intent:
    a destroying record with no instance could never be released (the soak found one stuck)."""
    ledger.record_intent(BOX, "vast")
    vast = Provider("77")

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(
        BOX, Ending.UNRESOLVED, "no instance recorded: reconcile its intent by label first"
    )
    assert vast.calls == []
    assert ledger.get(BOX).state is BoxState.INTENT


def test_another_operators_intent_is_refused_not_reported_m3(ledger, clock):
    """M3: even an intent with no instance is only ever acted on by its owner."""
    ledger.record_intent(BOX, "vast")
    bob = Ledger(ledger.store, Events(), "bob", clock=FakeClock(1_800_000_000.0))

    with pytest.raises(NotOwned) as caught:
        destroy(Provider("77"), bob, clock)

    assert (caught.value.name, caught.value.owner, caught.value.operator) == (BOX, "alice", "bob")
    assert ledger.get(BOX).state is BoxState.INTENT


@pytest.mark.parametrize(
    "error",
    [ProviderUnavailable("vast", "503 from /instances"), AuthFailed("vast", "bad key", 403)],
)
def test_a_failed_destroy_call_stays_on_the_retry_list_with_its_error(ledger, clock, error):
    """M4: a destroy that fails is never followed by a release; the error is on the record."""
    live(ledger)
    vast = Provider("77")
    vast.destroy_errors.append(error)

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(
        BOX, Ending.PENDING, f"destroy failed, kept on the retry list: {error}"
    )
    assert vast.calls == [("destroy", "77")]
    record = ledger.get(BOX)
    assert record.state is BoxState.DESTROYING
    assert (record.destroy_attempts, record.last_error) == (1, f"{type(error).__name__}: {error}")
    assert vast.alive == {"77"}


def test_an_error_the_destroy_cannot_judge_is_raised_with_the_box_still_pending(ledger, clock):
    """Only provider answers are absorbed; anything else surfaces, the record kept pending."""
    live(ledger)
    vast = Provider("77")
    vast.destroy_errors.append(StillRunning("unexpected"))

    with pytest.raises(StillRunning):
        destroy(vast, ledger, clock)

    assert ledger.get(BOX).state is BoxState.DESTROYING


def test_a_box_that_will_not_go_is_asked_about_until_the_deadline_then_kept_pending(ledger, clock):
    """M4: DESTROY_CONFIRM_TIMEOUT_S of polls, the deadline's own poll included; no release."""
    live(ledger)
    vast = Provider("77", lingers=10**6)

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(
        BOX,
        Ending.PENDING,
        "not confirmed gone, kept on the retry list: the provider still shows it",
    )
    assert vast.shows() == POLLS_IN_TIME
    assert clock.slept == [timing.DESTROY_CONFIRM_POLL_S] * (POLLS_IN_TIME - 1)
    record = ledger.get(BOX)
    assert record.state is BoxState.DESTROYING
    assert record.last_error == "not confirmed gone in time: the provider still shows it"


def test_a_box_gone_at_the_deadlines_own_poll_is_released(ledger, clock):
    """M4: the poll at the deadline still counts; the one after it never happens."""
    live(ledger)
    vast = Provider("77", lingers=POLLS_IN_TIME - 1)

    assert destroy(vast, ledger, clock).released
    assert vast.shows() == POLLS_IN_TIME


def test_errors_while_confirming_are_retried_and_the_last_one_reported(ledger, clock):
    """M4: a failing show is no evidence either way: ask again; report the last reason."""
    live(ledger)
    vast = Provider("77", lingers=10**6)
    vast.show_errors = [ProviderUnavailable("vast", "timeout")] * (POLLS_IN_TIME - 1)
    vast.show_errors.append(Unavailable("rate limited"))

    outcome = destroy(vast, ledger, clock)

    assert outcome.detail == "not confirmed gone, kept on the retry list: Unavailable: rate limited"
    assert ledger.get(BOX).last_error == "not confirmed gone in time: Unavailable: rate limited"


def test_a_failing_show_then_gone_is_released(ledger, clock):
    """M4: an error on one poll does not stop the next from confirming."""
    live(ledger)
    vast = Provider("77")
    vast.show_errors = [ProviderError("vast", "500"), ProviderUnavailable("vast", "503")]

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(BOX, Ending.GONE, "instance 77 confirmed gone")
    assert clock.slept == [timing.DESTROY_CONFIRM_POLL_S] * 2
    assert ledger.get(BOX).state is BoxState.RELEASED


def test_only_the_owner_may_destroy(ledger, clock):
    """M3: bob's destroy of alice's box is refused before any provider call."""
    live(ledger)
    vast = Provider("77")
    bob = Ledger(ledger.store, Events(), "bob", clock=ledger.clock)

    with pytest.raises(NotOwned):
        destroy(vast, bob, clock)

    assert vast.calls == []
    assert ledger.get(BOX).state is BoxState.LIVE


def test_confirming_needs_an_instance(ledger, clock):
    """A record without an instance cannot be confirmed gone by asking about it."""
    record, _ = ledger.record_intent(BOX, "vast")

    with pytest.raises(ValueError) as caught:
        confirm_and_release(Provider(), ledger, record, clock=clock)

    assert str(caught.value) == f"{BOX!r} has no instance to confirm gone"


def test_a_confirmation_whose_release_a_crash_cut_off_is_released_without_a_new_destroy(
    ledger, clock
):
    """M4: a record left gone-confirmed by a crash is finished, not refused, and not destroyed
    again: the evidence was already recorded."""
    live(ledger)
    ledger.begin_destroy(BOX)
    ledger.confirm_gone(BOX, GONE_BY_SHOW)
    vast = Provider()

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(BOX, Ending.GONE, "instance 77 was confirmed gone; released")
    assert vast.calls == []
    assert ledger.get(BOX).state is BoxState.RELEASED


def test_a_refused_create_whose_release_a_crash_cut_off_is_released_as_never_created_m13(
    ledger, clock
):
    """M13: an intent confirmed gone on a refused create (no instance ever) and then cut off by
    a crash is released as never created, with no provider call; the soak found it looping."""
    ledger.record_intent(BOX, "vast")
    ledger.confirm_gone(BOX, CREATE_REFUSED)
    vast = Provider()

    outcome = destroy(vast, ledger, clock)

    assert outcome == Outcome(BOX, Ending.NEVER_CREATED, "its create was refused; released")
    assert outcome.released
    assert vast.calls == []
    assert ledger.get(BOX).state is BoxState.RELEASED


def test_finishing_a_cut_off_release_is_refused_to_another_operator(ledger, clock):
    """M3: only the owner releases, even a box already confirmed gone."""
    live(ledger)
    ledger.begin_destroy(BOX)
    ledger.confirm_gone(BOX, GONE_BY_SHOW)
    bob = Ledger(ledger.store, Events(), "bob", clock=FakeClock(1_800_000_000.0))

    with pytest.raises(NotOwned):
        destroy(Provider(), bob, clock)
    assert ledger.get(BOX).state is BoxState.GONE_CONFIRMED


def test_exit_codes_come_from_the_endings_alone_m13():
    """M13: 0 only when all ended; a pending destroy is 4; an unresolved intent alone is 5; an
    unreadable record whose boxes are gone alone is 1 (M17: loud, for a person)."""

    def out(*endings: Ending) -> list[Outcome]:
        return [Outcome(f"b{i}", e, "confirmed gone") for i, e in enumerate(endings)]

    assert exit_code([]) == 0
    assert exit_code(out(Ending.GONE, Ending.NEVER_CREATED)) == 0
    assert exit_code(out(Ending.GONE, Ending.PENDING)) == 4
    assert exit_code(out(Ending.UNRESOLVED, Ending.GONE)) == 5
    assert exit_code(out(Ending.UNRESOLVED, Ending.PENDING)) == 4
    assert exit_code(out(Ending.UNREADABLE, Ending.GONE)) == 1
    assert exit_code(out(Ending.UNREADABLE, Ending.UNRESOLVED)) == 5
    assert exit_code(out(Ending.UNREADABLE, Ending.PENDING)) == 4
    assert exit_code(out(Ending.GIVEN_UP, Ending.GONE)) == 0  # the name is free again
    assert exit_code(out(Ending.GIVEN_UP, Ending.UNRESOLVED)) == 5
    assert [o.released for o in out(*Ending)] == [True, True, True, False, False, False]


def test_two_destroys_of_one_box_at_once_both_end_gone_m4(clock):
    """M4: two `destroy` of one box by its owner, from two processes: the second's destroy
    call lands while the first confirms and releases; the second, finding the record released
    when it confirms, ends GONE too (never a refusal of a box that is gone)."""
    store = MemoryStore()
    first = Ledger(store, Events(), "alice", clock=FakeClock(1_800_000_000.0))
    second = Ledger(store, Events(), "alice", clock=FakeClock(1_800_000_000.0))
    live(first)
    vast = Provider("77")
    ended: list[Outcome] = []

    class Meanwhile(Provider):
        def destroy(self, instance_id: str) -> None:
            vast.destroy(instance_id)
            if not ended:  # the first process runs its whole destroy now
                ended.append(destroy_box(vast, first, BOX, clock=clock))

        def show(self, instance_id: str) -> Instance | None:
            return vast.show(instance_id)

    outcome = destroy_box(Meanwhile(), second, BOX, clock=clock)

    assert [o.ending for o in ended] == [Ending.GONE]
    assert outcome == Outcome(
        BOX, Ending.GONE, "instance 77 confirmed gone (released meanwhile by another destroy)"
    )
    assert second.get(BOX).state is BoxState.RELEASED


def test_a_destroy_that_finds_its_box_released_before_it_began_ends_gone_m4(clock):
    """M4: the other destroy finished between this one's read of the record and its move to
    destroying: GONE, with no destroy call of its own."""
    store = Interleaved()
    first = Ledger(store, Events(), "alice", clock=FakeClock(1_800_000_000.0))
    second = Ledger(store, Events(), "alice", clock=FakeClock(1_800_000_000.0))
    live(first)
    vast = Provider("77")
    store.before["put"].append(lambda: destroy_box(vast, first, BOX, clock=clock))

    outcome = destroy_box(vast, second, BOX, clock=clock)

    assert outcome == Outcome(BOX, Ending.GONE, "already confirmed gone and released by another")
    assert vast.calls.count(("destroy", "77")) == 1  # the first's only


def test_a_destroy_whose_record_became_something_else_is_still_refused_m4(clock):
    """M4: only a released record excuses a refused move: a record another operator took
    over meanwhile is still an IllegalTransition, never called gone."""
    store = Interleaved()
    mine = Ledger(store, Events(), "alice", clock=FakeClock(1_800_000_000.0))
    live(mine)
    mine.begin_destroy(BOX)
    mine.confirm_gone(BOX, GONE_BY_SHOW)
    vast = Provider()
    record = mine.get(BOX)
    mine.release(BOX)
    mine.record_intent(BOX, "vast")  # the released name starts a new intent

    with pytest.raises(IllegalTransition):
        confirm_and_release(vast, mine, record, clock=clock)
    assert mine.get(BOX).state is BoxState.INTENT



def test_an_intent_is_given_up_on_only_a_whole_window_after_it_was_written_m13(ledger):
    """M13: an intent written at T is never found at T + UNCLEAR_CREATE_WINDOW_S, not a
    moment before; a record in any other state never is."""
    ledger.record_intent(BOX, "vast")
    record = ledger.get(BOX)
    written = datetime.fromisoformat(record.updated_at).timestamp()
    window = timing.UNCLEAR_CREATE_WINDOW_S

    assert never_found(record, written + window)
    assert not never_found(record, written + window - 0.001)
    assert not never_found(record, written)
    for state in (BoxState.LIVE, BoxState.DESTROYING, BoxState.RELEASED):
        assert not never_found(replace(record, state=state), written + 10 * window)
