"""Rental records: names, idempotent races, compare-and-swap updates (M3, M8)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict

import pytest

from gpuops import timing
from gpuops.errors import CorruptState, IllegalTransition, NameTaken, UsageError, VersionConflict
from gpuops.ledger import CAS_ATTEMPTS, BoxState, Record
from gpuops.market.rentals import (
    DELIVERED,
    FAILED,
    LIVE,
    MISSING,
    MOVES,
    PREFIX,
    RACING,
    RELEASED,
    Moved,
    RaceInProgress,
    Rental,
    Rentals,
    box_name,
    check_lease_key,
    check_name,
    due_at,
    due_records,
    enforce_at,
    host_of,
    lease_key,
    new_rental_id,
    past_contract,
    process_id,
    results_key,
    rental_of,
    settled,
    request_differs,
    this_host,
)
from gpuops.store.memory import MemoryStore
from tests.store_fakes import Interleaved


@pytest.fixture
def store() -> Interleaved:
    return Interleaved()


@pytest.fixture
def alice(store: Interleaved) -> Rentals:
    return Rentals(store, "alice")


@pytest.fixture
def bob(store: Interleaved) -> Rentals:
    return Rentals(store, "bob")


def stored(store: MemoryStore, name: str) -> Rental:
    found = MemoryStore.get(store, PREFIX + name)
    assert found is not None
    return Rental(**json.loads(found.data))


@pytest.mark.parametrize("name", ["a", "job", "Job_2-b", "9lives", "x" * 64])
def test_a_rental_name_of_letters_digits_underscore_and_dash_is_accepted(name):
    """M8: the names a user rents under; returned as given."""
    assert check_name(name) == name


@pytest.mark.parametrize(
    ("name", "fault"),
    [
        ("", "0 characters"),
        ("-job", "it starts with '-'"),
        ("_job", "it starts with '_'"),
        ("a b", "' ' is not allowed"),
        ("job+1-0", "'+' is not allowed"),
        ("a/b", "'/' is not allowed"),
        ("é", "it starts with 'é'"),
        ("jé", "'é' is not allowed"),
        ("x" * 65, "65 characters"),
        ("-" + "x" * 63, "it starts with '-'"),  # 64 characters: the length is not its fault
    ],
)
def test_any_other_rental_name_is_a_usage_error_that_says_why(name, fault):
    """A bad name is refused before any record is read or written, with the rule spelled out
    and what is wrong with this one."""
    with pytest.raises(UsageError) as caught:
        check_name(name)

    assert str(caught.value) == (
        f"rental name {name!r} ({fault}) must be 1-64 letters, digits, '_' or '-', "
        "starting with a letter or digit"
    )


def test_a_name_the_scrubber_hides_still_says_what_is_wrong_with_it():
    """H3 redacts a 64+ hex run (a Vast key's shape) even as a name; the reason stays."""
    from gpuops.secrets import scrub_text

    with pytest.raises(UsageError) as caught:
        check_name("a" * 70)

    shown = scrub_text(str(caught.value))
    assert shown.startswith("rental name '[REDACTED]' (70 characters) must be 1-64")


def test_a_box_record_names_its_rental_race_and_slot_and_leads_back_to_the_rental():
    """M3: ``NAME+race-slot`` per candidate; the rental is everything before the first '+'."""
    assert box_name("job", 2, 1) == "job+2-1"
    assert rental_of("job+2-1") == "job"
    assert rental_of("job+2-1+extra") == "job"
    assert rental_of("job") == "job"


def test_a_first_race_creates_a_racing_rental_owned_by_the_caller(alice, store):
    """M8: a new name starts race 1, revision 1, owned by whoever rents it."""
    rental = alice.begin_race("job")

    assert rental == Rental("job", "alice", RACING, race=1, rental_id=rental.rental_id)
    assert re.fullmatch(r"[0-9a-f]{12}", rental.rental_id or "")  # M16: its incarnation
    assert stored(store, "job") == rental
    assert alice.get("job") == rental


def test_a_rental_is_stored_as_canonical_json(alice, store):
    """Every process reads the same bytes: every field, keys sorted."""
    rental = alice.begin_race("job")
    data = MemoryStore.get(store, PREFIX + "job").data

    assert json.loads(data) == asdict(rental)
    assert data == json.dumps(json.loads(data), sort_keys=True).encode()


def test_restarting_our_own_race_counts_it_and_keeps_nothing_of_the_last(alice, store):
    """M8: a crashed race of ours is raced again under the next race number."""
    first = alice.begin_race("job")
    alice.update("job", instance_id="77", offer_id=5)

    again = alice.begin_race("job")

    # M16: a restart of our own race is the same incarnation, with the same id
    assert again == Rental("job", "alice", RACING, race=2, revision=3, rental_id=first.rental_id)
    assert stored(store, "job") == again


@pytest.mark.parametrize("state", [FAILED, RELEASED])
def test_a_finished_rental_of_anyone_may_be_raced_again_by_anyone(alice, bob, store, state):
    """M3: a failed or released name is free; the new race is the new renter's."""
    first = alice.begin_race("job")
    alice.update("job", state=state, box="job+1-0", instance_id="77", ended_at=5.0)

    rental = bob.begin_race("job")

    # M16: a new incarnation, with an id of its own
    assert rental == Rental("job", "bob", RACING, race=2, revision=3, rental_id=rental.rental_id)
    assert rental.rental_id not in (None, first.rental_id)
    assert stored(store, "job") == rental


@pytest.mark.parametrize("state", [RACING, LIVE])
def test_an_active_rental_of_another_operator_is_refused(alice, bob, store, state):
    """M3: bob cannot race a name alice is racing or holds live."""
    alice.begin_race("job")
    alice.update("job", state=state)

    with pytest.raises(NameTaken) as caught:
        bob.begin_race("job")

    assert (caught.value.name, caught.value.owner, caught.value.rule) == ("job", "alice", "M3")
    assert stored(store, "job").owner == "alice"


def test_our_live_rental_is_returned_not_raced_again(alice, store):
    """M8: a live rental of ours is never raced a second time."""
    alice.begin_race("job")
    live = alice.update("job", state=LIVE)

    with pytest.raises(UsageError) as caught:
        alice.begin_race("job")

    assert str(caught.value) == "'job' is already live; it is returned, not raced again"
    assert stored(store, "job") == live


def test_an_update_changes_the_named_fields_and_counts_a_revision(alice, store):
    """Updates are compare-and-swap writes of the whole record, one revision each."""
    alice.begin_race("job")

    first = alice.get("job")
    live = alice.update("job", state=LIVE, instance_id="77", dph_total=0.4)

    assert live == Rental(
        "job", "alice", LIVE, race=1, instance_id="77", dph_total=0.4, revision=2,
        rental_id=first.rental_id,
    )  # fmt: skip
    assert stored(store, "job") == live
    assert alice.update("job", ended_at=9.0).revision == 3


def test_a_results_copy_is_recorded_on_its_own_incarnation_and_counts_a_revision_m17(alice, store):
    """M17: how the copy ended (missing and why, then delivered and where) is written on the
    rental itself, which `boxes` reads anyway; nothing else of it changes."""
    first = alice.begin_race("job")
    live = alice.update("job", state=LIVE, instance_id="77")

    assert alice.note_results("job", first.rental_id, MISSING, "the copy was cut: SIGTERM")
    assert stored(store, "job") == Rental(
        **{**asdict(live), "results": MISSING, "results_detail": "the copy was cut: SIGTERM",
           "revision": live.revision + 1}
    )  # fmt: skip
    assert alice.note_results("job", first.rental_id, DELIVERED, "/r/job/x")
    after = stored(store, "job")
    assert (after.results, after.results_detail, after.revision) == (
        DELIVERED,
        "/r/job/x",
        live.revision + 2,
    )


def test_a_results_copy_never_marks_another_incarnation_or_another_owners_rental_m16(
    alice, bob, store
):
    """M16/M17: a guardian's copy outcome is written only on its own incarnation of the name:
    not on a later race of it, not on another operator's rental, not on a rental gone."""
    first = alice.begin_race("job")
    alice.update("job", state=FAILED)
    again = alice.begin_race("job")  # a new incarnation: starts with no results of its own
    assert (again.results, again.results_detail) == (None, None)
    store.calls.clear()

    assert not alice.note_results("job", first.rental_id, MISSING, "old news")
    assert not bob.note_results("job", again.rental_id, MISSING, "not bob's")
    assert not alice.note_results("nothing", None, MISSING, "no rental")
    assert stored(store, "job") == again
    assert "put" not in store.calls and "create" not in store.calls


def test_updating_a_rental_that_does_not_exist_is_a_usage_error(alice, store):
    """Nothing is created by an update."""
    with pytest.raises(UsageError) as caught:
        alice.update("job", state=LIVE)

    assert str(caught.value) == "no rental named 'job'"
    assert store.list() == []


def test_only_the_owner_updates_a_rental(alice, bob, store):
    """M3: bob cannot change alice's rental, not even to release it."""
    mine = alice.begin_race("job")

    with pytest.raises(NameTaken) as caught:
        bob.update("job", state=RELEASED)

    assert (caught.value.name, caught.value.owner) == ("job", "alice")
    assert stored(store, "job") == mine


def test_a_lost_race_to_create_is_read_again_and_decided_afresh(alice, bob, store):
    """M3: when bob creates the name between our read and our create, we see his rental."""
    store.before["create"].append(lambda: bob.begin_race("job"))

    with pytest.raises(NameTaken):
        alice.begin_race("job")

    assert stored(store, "job").owner == "bob"


def test_a_lost_compare_and_swap_is_retried_on_the_new_record(alice, bob, store):
    """An update that loses to another write re-reads and applies itself to the winner's."""
    alice.begin_race("job")
    store.before["put"].append(lambda: alice.update("job", instance_id="77"))

    live = alice.update("job", state=LIVE)

    assert (live.state, live.instance_id, live.revision) == (LIVE, "77", 3)
    assert stored(store, "job") == live


def test_a_compare_and_swap_that_keeps_losing_says_so(alice, store):
    """CAS_ATTEMPTS lost races are a VersionConflict naming the key, never a silent spin."""
    alice.begin_race("job")

    def rival() -> None:
        found = MemoryStore.get(store, PREFIX + "job")
        MemoryStore.put(store, PREFIX + "job", found.data, found.version)

    store.before["put"] = [rival] * CAS_ATTEMPTS
    store.calls.clear()

    with pytest.raises(VersionConflict) as caught:
        alice.update("job", state=LIVE)

    assert (caught.value.key, caught.value.expected) == (PREFIX + "job", None)
    assert store.calls == ["get", "put"] * CAS_ATTEMPTS
    assert stored(store, "job").state == RACING


def test_get_and_all_read_what_is_stored(alice, bob):
    """``get`` is None for an unknown name; ``all`` lists every rental, anyone's."""
    assert alice.get("job") is None
    assert alice.all() == []
    a = alice.begin_race("a")
    b = bob.begin_race("b")

    assert alice.get("a") == a
    assert alice.all() == [a, b]


def test_all_skips_a_rental_deleted_between_listing_and_reading(alice, store):
    """Another process may remove a record after we listed it; the rest still count."""
    alice.begin_race("a")
    b = alice.begin_race("b")
    found = MemoryStore.get(store, PREFIX + "a")
    store.before["get"].append(lambda: MemoryStore.delete(store, PREFIX + "a", found.version))

    assert alice.all() == [b]


def test_get_refuses_a_bad_name_before_reading(alice, store):
    """Names are checked on every read too."""
    with pytest.raises(UsageError):
        alice.get("../etc")

    assert store.calls == []


@pytest.mark.parametrize("data", [b"{not json", b"[1]", b'{"name": "job"}', b'{"colour": 1}'])
@pytest.mark.parametrize("read", ["get", "begin_race", "update"])
def test_a_corrupt_rental_is_reported_with_its_key_and_never_replaced(alice, store, data, read):
    """A record we cannot read is CorruptState naming the key; nothing overwrites it."""
    MemoryStore.create(store, PREFIX + "job", data)

    with pytest.raises(CorruptState) as caught:
        if read == "all":
            alice.all()
        elif read == "update":
            alice.update("job", state=LIVE)
        else:
            getattr(alice, read)("job")

    assert caught.value.where == PREFIX + "job"
    assert caught.value.reason.startswith("not a rental record: ")
    assert MemoryStore.get(store, PREFIX + "job").data == data


def test_a_race_another_rent_of_ours_is_running_is_refused_with_its_heartbeat_m8(alice, store):
    """M8: a second rent of the same name, while the first races, is told who races and the
    heartbeat it saw; nothing of the first race changes."""
    first = alice.begin_race("job", 50.0, racer="alice/a/1/x")

    with pytest.raises(RaceInProgress) as caught:
        alice.begin_race("job", 60.0, racer="alice/b/2/y")

    assert (caught.value.name, caught.value.racer, caught.value.beat) == ("job", "alice/a/1/x", 0)
    assert str(caught.value) == "rental 'job' is being raced for by alice/a/1/x"
    assert caught.value.exit_code == 5
    assert (
        stored(store, "job")
        == first
        == Rental(
            "job", "alice", RACING, race=1, deadline_at=50.0, racer="alice/a/1/x",
            deadline_host="a", rental_id=first.rental_id,
        )  # fmt: skip
    )
    assert alice.begin_race("job", 70.0, racer="alice/a/1/x").race == 2  # its own: a restart


def test_a_racer_whose_heartbeat_stood_still_is_taken_over_by_the_one_that_saw_it_m8(alice):
    """M8: only the exact (racer, beat) seen standing still is taken over; a beat since, or
    another racer, is still refused."""
    alice.begin_race("job", 50.0, racer="alice/a/1/x")
    revision = alice.get("job").revision
    assert alice.beat("job", "alice/a/1/x") is True
    assert (alice.get("job").beat, alice.get("job").revision) == (1, revision + 1)

    with pytest.raises(RaceInProgress):
        alice.begin_race("job", 60.0, racer="alice/b/2/y", takeover=("alice/a/1/x", 0))
    with pytest.raises(RaceInProgress):
        alice.begin_race("job", 60.0, racer="alice/b/2/y", takeover=("alice/c/3/z", 1))
    taken = alice.begin_race("job", 60.0, racer="alice/b/2/y", takeover=("alice/a/1/x", 1))

    assert (taken.race, taken.racer, taken.beat, taken.deadline_at) == (2, "alice/b/2/y", 0, 60.0)
    assert alice.beat("job", "alice/a/1/x") is False  # the old racer learns it lost the race
    assert alice.get("job").beat == 0


@pytest.mark.parametrize("state", [LIVE, FAILED, RELEASED])
def test_a_heartbeat_ends_once_the_race_is_over(alice, state):
    """M8: a racer's heartbeat moves only a racing rental that is still its own."""
    alice.begin_race("job", 50.0, racer="alice/a/1/x")
    alice.update("job", state=state)

    assert alice.beat("job", "alice/a/1/x") is False
    assert alice.get("job").beat == 0
    assert alice.beat("other", "alice/a/1/x") is False


def test_a_racing_rental_with_no_racer_named_is_restarted_by_anyone_of_ours_m8(alice):
    """M8: a race begun without a racer id (an older record) is not guarded by one."""
    alice.begin_race("job")
    assert alice.begin_race("job", racer="alice/b/2/y").race == 2


def test_an_expected_state_guards_a_change_against_the_guardian_ending_the_rental_m13(alice):
    """M13: a change that expects `racing` is refused once the rental moved on, naming both."""
    alice.begin_race("job")
    alice.update("job", state=RELEASED)

    with pytest.raises(Moved) as caught:
        alice.update("job", expect=RACING, state=LIVE)

    assert (caught.value.name, caught.value.expected, caught.value.found) == (
        "job",
        RACING,
        RELEASED,
    )
    assert str(caught.value) == "rental 'job' is released, no longer racing"
    assert alice.get("job").state == RELEASED
    assert alice.update("job", expect=RELEASED, box="b").box == "b"


@pytest.mark.parametrize("data", [b"{not json", b"[1]", b'{"name": "job"}', b'{"colour": 1}'])
@pytest.mark.fault(
    "a hand-edited (corrupt) rental record",
    handled="left out of listings and named with a repair hint; every other record still served",
)
def test_a_corrupt_rental_blocks_only_itself_in_the_listing(alice, store, data):
    """A record we cannot read is left out of `all` and kept, by key, in `corrupt`; the
    records before and after it are still listed, and nothing overwrites it."""
    alice.begin_race("aaa")
    MemoryStore.create(store, PREFIX + "job", data)
    alice.begin_race("zzz")

    listed = alice.all()

    assert [r.name for r in listed] == ["aaa", "zzz"]
    assert list(alice.corrupt) == [PREFIX + "job"]
    assert alice.corrupt[PREFIX + "job"].reason.startswith("not a rental record: ")
    assert alice.corrupt[PREFIX + "job"].where == PREFIX + "job"
    assert MemoryStore.get(store, PREFIX + "job").data == data


def test_a_rental_store_without_corrupt_records_reports_none(alice):
    """`corrupt` starts empty and stays empty while every record reads."""
    alice.begin_race("aaa")

    assert [r.name for r in alice.all()] == ["aaa"] and alice.corrupt == {}


def test_a_process_id_names_the_operator_host_process_and_a_short_token():
    """M8/M7: racers and guardians are told apart across hosts, processes and restarts."""
    import os
    import socket

    first, second = process_id("alice"), process_id("alice")

    assert re.fullmatch(
        rf"alice/{re.escape(socket.gethostname())}/{os.getpid()}/[0-9a-f]{{6}}", first
    )
    assert first != second


@pytest.mark.parametrize(
    ("before", "after"),
    [(LIVE, RACING), (LIVE, FAILED), ("unknown", RELEASED), ("unknown", RACING)],
)
def test_a_rental_moves_only_as_its_state_machine_allows_m13(alice, store, before, after):
    """M13: a live rental is never raced or failed again, and a state we do not know goes
    nowhere; the refusal names both states and writes nothing."""
    alice.begin_race("job")
    data = json.loads(MemoryStore.get(store, PREFIX + "job").data)
    data["state"] = before
    found = MemoryStore.get(store, PREFIX + "job")
    MemoryStore.put(store, PREFIX + "job", json.dumps(data).encode(), found.version)

    with pytest.raises(IllegalTransition) as caught:
        alice.update("job", state=after)

    assert (
        caught.value.rule,
        caught.value.name,
        caught.value.current,
        caught.value.requested,
    ) == ("M13", "job", before, after)
    assert stored(store, "job").state == before


def test_the_state_machine_allows_exactly_these_moves_m13():
    """M13: the whole table, so a change to it is a decision, never an accident."""
    assert {
        None: {RACING},
        RACING: {RACING, LIVE, FAILED, RELEASED},
        LIVE: {LIVE, RELEASED},
        FAILED: {FAILED, RACING, RELEASED},
        RELEASED: {RELEASED, RACING},
    } == MOVES


def test_every_allowed_move_is_written(alice):
    """Each move the table allows goes through update; a new race starts from None."""
    assert alice.begin_race("job").state == RACING
    assert alice.update("job", state=LIVE).state == LIVE
    assert alice.update("job", state=RELEASED).state == RELEASED
    assert alice.begin_race("job").state == RACING
    assert alice.update("job", state=FAILED).state == FAILED
    assert alice.update("job", state=RELEASED).state == RELEASED


@pytest.mark.parametrize("state", [LIVE, RACING])
def test_a_rental_whose_records_are_all_ended_is_released_m13(state):
    """M13: the rental follows its records: none active releases a live one at once, and a
    racing one once its deadline has passed (before it, the race may still create)."""
    rental = Rental("job", "alice", state, race=1, deadline_at=100.0)

    assert settled(rental, 0, 100.0) == RELEASED
    assert settled(rental, 1, 100.0) is None
    assert settled(rental, 0, 99.999) == (RELEASED if state == LIVE else None)


@pytest.mark.parametrize("state", [FAILED, RELEASED])
def test_an_ended_rental_is_left_as_it_is_m13(state):
    """M13: nothing settles a failed or released rental any further."""
    assert settled(Rental("job", "alice", state, race=1, deadline_at=1.0), 0, 10.0) is None


def test_a_racing_rental_without_a_deadline_is_never_settled_by_time():
    """A race with no deadline written (an older record) is left to its racer and `destroy`."""
    assert settled(Rental("job", "alice", RACING, race=1), 0, 10.0**12) is None
    assert settled(Rental("job", "alice", LIVE, race=1), 0, 0.0) == RELEASED


def test_a_box_record_is_due_at_its_rentals_deadline_else_its_own_else_now_m13():
    """M13: sweep ends a record at its rental's (possibly moved) deadline; a record whose
    rental is gone keeps the deadline written at its intent; one with neither is due now."""
    rental = Rental("job", "alice", RACING, race=1, deadline_at=500.0)
    written = "1970-01-01T00:10:00+00:00"

    assert due_at(rental, written) == 500.0
    assert due_at(None, written) == 600.0
    assert due_at(Rental("job", "alice", RACING, race=1), written) == 600.0
    assert due_at(None, None) == float("-inf")
    assert due_at(None, "") == float("-inf")


@pytest.mark.parametrize("read", [lambda r: r.get("no such"), lambda r: r.begin_race("-x")])
def test_a_rental_is_read_and_written_only_under_a_valid_rental_name(alice, read):
    """The rental's own name rule guards every key, before the store's rule."""
    with pytest.raises(UsageError, match="rental name"):
        read(alice)


def test_a_race_records_whose_clock_its_deadline_was_read_from_m17(alice):
    """M17: begin_race writes the racer's host beside the deadline, on a first race and on a
    restart alike; a racer id of another shape names no host."""
    assert alice.begin_race("job", 50.0, racer="alice/hostA/1/x").deadline_host == "hostA"
    assert alice.begin_race("job", 60.0, racer="alice/hostA/1/x").deadline_host == "hostA"
    alice.update("job", state="failed")
    assert alice.begin_race("job", 70.0, racer="alice/hostB/2/y").deadline_host == "hostB"
    assert alice.begin_race("solo", 70.0).deadline_host is None


@pytest.mark.parametrize(
    ("process", "host"),
    [
        ("alice/hostA/12/ab", "hostA"),
        ("a/b/c/d", "b"),
        ("alice//12/ab", None),
        ("alice/hostA/12", None),
        ("alice/hostA/12/ab/extra", None),
        ("", None),
        (None, None),
    ],
)
def test_the_host_of_a_process_id_is_its_second_part_m17(process, host):
    """M17: operator/host/pid/nonce names its host; any other shape names none."""
    assert host_of(process) == host


def test_a_deadline_another_hosts_clock_wrote_is_enforced_a_skew_allowance_later_m17():
    """M17: on the host whose clock wrote the deadline, a record is due at the deadline; on
    any other host (or when the writer is unknown) CLOCK_SKEW_S later, record deadlines too."""
    mine = Rental("r", "alice", LIVE, race=1, deadline_at=1000.0, deadline_host="hostA")
    unknown = Rental("r", "alice", LIVE, race=1, deadline_at=1000.0)
    no_deadline = Rental("r", "alice", LIVE, race=1, deadline_host="hostA")
    skew = timing.CLOCK_SKEW_S

    assert enforce_at(mine, None, "hostA") == 1000.0
    assert enforce_at(mine, None, "hostB") == 1000.0 + skew
    assert enforce_at(unknown, None, "hostA") == 1000.0 + skew
    record = "1970-01-01T00:20:00+00:00"  # 1200 s: a box record's own deadline
    assert enforce_at(None, record, "hostA") == 1200.0 + skew
    assert enforce_at(no_deadline, record, "hostA") == 1200.0 + skew
    assert enforce_at(None, None, "hostA") == float("-inf")


def test_a_process_id_names_the_host_it_was_given_or_this_one_m17():
    """M17: a market's racer id carries the host whose clock it reads."""
    assert host_of(process_id("alice", "hostB")) == "hostB"
    assert host_of(process_id("alice")) == this_host()


def test_an_incarnations_results_are_delivered_under_its_own_id_m16():
    """M16: NAME/<rental id>; a rental from before ids keeps NAME."""
    assert results_key(Rental("job", "alice", LIVE, race=1, rental_id="0a1b2c3d4e5f")) == (
        "job/0a1b2c3d4e5f"
    )
    assert results_key(Rental("job", "alice", LIVE, race=1)) == "job"
    assert new_rental_id() != new_rental_id()
    assert re.fullmatch(r"[0-9a-f]{12}", new_rental_id())


def _rec(name: str, state: BoxState, owner: str = "alice", **kw: object) -> Record:
    fields = {"intent_id": "i-" + name, "provider": "vast", "revision": 1, "updated_at": "t"}
    return Record(name=name, owner=owner, state=state, **{**fields, **kw})  # type: ignore[arg-type]


def test_a_sweep_ends_pending_destroys_and_records_past_the_deadline_in_listing_order_m13():
    """M13: every active record of ours on the retry list is retried (True), whatever the
    time; every other active one of ours is ended once its rental's deadline has passed as
    this host may judge it; released ones, another operator's, and a pending record with no
    instance are left."""
    rentals = {
        "a": Rental("a", "alice", LIVE, 1, deadline_at=100.0, deadline_host="hostA"),
        "b": Rental("b", "alice", LIVE, 1, deadline_at=500.0, deadline_host="hostA"),
    }
    records = [
        _rec("a+1-0", BoxState.LIVE, instance_id="1"),
        _rec("b+1-0", BoxState.DESTROYING, instance_id="2"),
        _rec("b+1-1", BoxState.GONE_CONFIRMED, instance_id="3"),
        _rec("b+1-2", BoxState.LIVE, instance_id="4"),
        _rec("a+1-1", BoxState.RELEASED, instance_id="5"),
        _rec("a+1-2", BoxState.LIVE, owner="bob", instance_id="6"),
        _rec("b+1-3", BoxState.DESTROYING),  # pending, but no instance to ask about
        _rec("a+1-3", BoxState.INTENT),
    ]

    due = due_records(records, rentals, "alice", 100.0, "hostA")

    assert [(r.name, retried) for r, retried in due] == [
        ("a+1-0", False),
        ("b+1-0", True),
        ("b+1-1", True),
        ("a+1-3", False),
    ]
    assert due_records(records, rentals, "alice", 99.999, "hostA") == [
        (records[1], True),
        (records[2], True),
    ]


def test_a_sweep_on_another_host_ends_only_past_the_skew_allowance_m17():
    """M17: host B ends host A's rental's records CLOCK_SKEW_S after the deadline; a record
    whose rental is unknown is judged on its own deadline, the allowance added."""
    rentals = {"a": Rental("a", "alice", LIVE, 1, deadline_at=100.0, deadline_host="hostA")}
    mine = _rec("a+1-0", BoxState.LIVE, instance_id="1")
    orphan = _rec("z+1-0", BoxState.LIVE, instance_id="2", deadline_at="1970-01-01T00:01:40Z")
    late = 100.0 + timing.CLOCK_SKEW_S

    assert due_records([mine, orphan], rentals, "alice", late - 0.001, "hostB") == []
    assert due_records([mine, orphan], rentals, "alice", late, "hostB") == [
        (mine, False),
        (orphan, False),
    ]


def test_a_dead_racers_race_is_failed_only_while_it_is_still_that_racers_at_that_beat_m13(alice):
    """M13: the guardian fails the race it saw standing still; a beat since, another racer's
    takeover, or a rental no longer racing is left alone."""
    alice.begin_race("job", 50.0, racer="alice/h/1/x")
    assert alice.abandon_race("job", "alice/h/1/x", 1) is False  # it beat at 0, not 1
    assert alice.abandon_race("job", "alice/h/2/y", 0) is False  # another racer
    assert alice.get("job").state == RACING
    assert alice.abandon_race("job", "alice/h/1/x", 0) is True
    failed = alice.get("job")
    assert (failed.state, failed.revision) == (FAILED, 2)
    assert alice.abandon_race("job", "alice/h/1/x", 0) is False  # no longer racing
    assert alice.abandon_race("nothing", "alice/h/1/x", 0) is False


def test_each_incarnation_has_a_lease_of_its_own_and_a_rental_from_before_ids_keeps_its_name_m16():
    rental = Rental("job", "alice", LIVE, race=1, rental_id=new_rental_id())
    assert lease_key(rental) == f"job+{rental.rental_id}"
    assert check_lease_key(lease_key(rental)) == lease_key(rental)
    assert lease_key(Rental("job", "alice", LIVE, race=1)) == "job"
    assert check_lease_key("job") == "job"


@pytest.mark.parametrize("key", ["job+", "job+ABCDEF012345", "job+0123456789a", "job+0123456789abc", "+0123456789ab", "j b+0123456789ab"])
def test_a_lease_key_is_a_name_and_a_rental_id_or_a_usage_error_m16(key):
    with pytest.raises(UsageError, match="rental name|is not a rental id"):
        check_lease_key(key)
    if key.startswith("job+"):
        with pytest.raises(UsageError, match=re.escape(f"lease key {key!r}: ") + ".* is not a rental id"):
            check_lease_key(key)


def test_a_race_records_the_hours_it_asked_for_first_and_when_restarted_m8(alice, bob, store):
    """M8: the hours a race asked for are on its rental, a restart's and a new incarnation's
    own (a rerun of `rent NAME` is compared with them)."""
    assert alice.begin_race("job", hours=2.0).hours == 2.0
    assert alice.begin_race("job", hours=3.5).hours == 3.5  # our restart asks again
    alice.update("job", state=FAILED)
    assert bob.begin_race("job", hours=0.5).hours == 0.5
    assert stored(store, "job").hours == 0.5
    assert alice.begin_race("other").hours is None


@pytest.mark.parametrize(
    ("had", "gpu", "hours", "differs"),
    [
        (Rental("j", "a", LIVE, 1, gpu_name="RTX 4090", hours=2.0), "RTX 4090", 2.0, []),
        (Rental("j", "a", LIVE, 1, gpu_name="RTX 4090", hours=2.0), " rtx  4090", 2.0, []),
        (
            Rental("j", "a", LIVE, 1, gpu_name="RTX 3090", hours=0.1),
            "RTX 4090",
            5.0,
            ["--gpu 'RTX 4090', not its 'RTX 3090'", "--hours 5, not its 0.1"],
        ),
        (Rental("j", "a", LIVE, 1, gpu_name="RTX 4090", hours=2.0), "RTX 4090", 2.5,
         ["--hours 2.5, not its 2"]),
        (Rental("j", "a", LIVE, 1, gpu_name="RTX 4090"), "RTX 4090", 9.0, []),  # hours unrecorded
        (Rental("j", "a", LIVE, 1, hours=1.0), "RTX 3090", 1.0, []),  # no GPU recorded
        (Rental("j", "a", LIVE, 1, gpu_name="RTX 4090", hours=1.0), "RTX 40900", 1.0,
         ["--gpu 'RTX 40900', not its 'RTX 4090'"]),
    ],
)  # fmt: skip
def test_a_rerun_of_rent_names_each_parameter_its_live_rental_was_not_rented_with_m8(
    had, gpu, hours, differs
):
    """M8: GPU names compare case and spacing aside; hours exactly; what is not recorded is
    not compared."""
    assert request_differs(had, gpu, hours) == differs


@pytest.mark.parametrize(
    ("end", "deadline", "past"),
    [
        (None, 1e12, False),
        (100_000.0, 100_000.0 - timing.CONTRACT_END_MARGIN_S, False),
        (100_000.0, 100_000.0 - timing.CONTRACT_END_MARGIN_S + 1.0, True),
        (100_000.0, 100_000.0 - timing.CONTRACT_END_MARGIN_S - 1.0, False),
        (100_000.0, 100_000.0 + 1.0, True),
    ],
    ids=["no contract end", "exactly the margin", "a second into it", "a second short",
         "past the end"],
)  # fmt: skip
def test_a_deadline_is_past_the_contract_once_it_leaves_less_than_the_margin_before_its_end_m13(
    end, deadline, past
):
    """M13: `guard --hours` may move a deadline up to the box's contract end less
    CONTRACT_END_MARGIN_S, not a second further; a rental with no recorded end is never past."""
    rental = Rental(name="job", owner="alice", state=LIVE, race=1, contract_end_at=end)

    assert past_contract(rental, deadline) is past


# --- how the owner was established (M3) ---------------------------------------------------------
def test_a_race_records_whether_its_owner_was_attested_or_declared_m3(store):
    """M3: a race begun by an attested operator says so on the rental, a restart of it by the
    same operator declared says that instead (each race records how it began); by default an
    operator is declared."""
    attested = Rentals(store, "alice", attested=True)
    first = attested.begin_race("job")
    kept = stored(store, "job")
    again = Rentals(store, "alice").begin_race("job")

    assert first == Rental("job", "alice", RACING, race=1, rental_id=first.rental_id, attested=True)
    assert kept == first
    assert again.attested is False and stored(store, "job") == again
    assert attested.begin_race("job").attested is True  # and back, on the next restart
    assert stored(store, "job").attested is True
    assert Rentals(store, "bob").attested is False


def test_every_other_change_keeps_how_the_owner_was_established_m3():
    """Only a race's beginning records it: an update, a heartbeat and a failed race keep it."""
    store = MemoryStore()
    alice = Rentals(store, "alice", attested=True)
    alice.begin_race("job", racer="r")
    alice.beat("job", "r")
    alice.update("job", instance_id="77")

    assert Rentals(store, "alice").get("job").attested is True  # type: ignore[union-attr]
    assert Rentals(store, "alice").abandon_race("job", "r", 1)
    assert Rentals(store, "alice").get("job").attested is True  # type: ignore[union-attr]


def test_a_rental_from_before_the_field_reads_as_declared_m3(store):
    """A record written before rentals said how their owner was established still loads: its
    owner reads as declared."""
    old = asdict(Rental("job", "alice", LIVE, race=1))
    del old["attested"]
    MemoryStore.create(store, PREFIX + "job", json.dumps(old, sort_keys=True).encode())

    assert Rentals(store, "alice").get("job") == Rental("job", "alice", LIVE, race=1)
    assert Rentals(store, "alice").get("job").attested is False  # type: ignore[union-attr]


def test_an_attested_field_that_is_not_a_boolean_is_corrupt(store):
    """The field is a JSON boolean: anything else names the record and the field."""
    bad = asdict(Rental("job", "alice", LIVE, race=1)) | {"attested": "yes"}
    MemoryStore.create(store, PREFIX + "job", json.dumps(bad).encode())

    with pytest.raises(CorruptState, match="field 'attested' must be a boolean"):
        Rentals(store, "alice").get("job")


def test_a_race_records_its_sync_interval_first_and_when_restarted_m5(alice, bob, store):
    """M5/M8: the interval the guardian syncs results at is on the rental (the guardian is
    another process and reads it there), a restart's and a new incarnation's own."""
    assert alice.begin_race("job", sync_every_s=600.0).sync_every_s == 600.0
    assert alice.begin_race("job", sync_every_s=0.0).sync_every_s == 0.0  # our restart
    alice.update("job", state=FAILED)
    assert bob.begin_race("job", sync_every_s=60.0).sync_every_s == 60.0
    assert stored(store, "job").sync_every_s == 60.0
    assert alice.begin_race("other").sync_every_s is None


@pytest.mark.parametrize(
    ("had", "asked", "differs"),
    [
        (1800.0, 1800.0, []),
        (1800.0, 600.0, ["--sync-every 10, not its 30"]),
        (0.0, 1800.0, ["--sync-every 30, not its 0"]),
        (1800.0, 0.0, ["--sync-every 0, not its 30"]),
        (None, 600.0, []),  # a rental from before syncs were recorded
        (600.0, None, []),  # a request that does not say
    ],
)
def test_a_rerun_of_rent_with_another_sync_interval_is_named_m8(had, asked, differs):
    rental = Rental("j", "a", LIVE, 1, gpu_name="RTX 4090", hours=2.0, sync_every_s=had)
    assert request_differs(rental, "RTX 4090", 2.0, asked) == differs
    assert request_differs(rental, "RTX 4090", 3.0, asked) == ["--hours 3, not its 2", *differs]


def test_a_sync_is_recorded_on_its_own_incarnation_a_failure_keeping_the_last_success_m5(
    alice, bob, store
):
    """M5/M16: a sync that worked sets when; one that failed says why and keeps the last
    success; another incarnation or operator's rental is never marked."""
    first = alice.begin_race("job", sync_every_s=60.0)
    live = alice.update("job", state=LIVE, instance_id="77")

    assert alice.note_sync("job", first.rental_id, 100.0, None)
    assert stored(store, "job") == Rental(
        **{**asdict(live), "synced_at": 100.0, "sync_error": None, "revision": live.revision + 1}
    )
    assert alice.note_sync("job", first.rental_id, 160.0, "the box is gone")
    after = stored(store, "job")
    assert (after.synced_at, after.sync_error, after.revision) == (
        100.0,
        "the box is gone",
        live.revision + 2,
    )
    assert alice.note_sync("job", first.rental_id, 220.0, None)
    assert (stored(store, "job").synced_at, stored(store, "job").sync_error) == (220.0, None)
    before = stored(store, "job")
    assert not bob.note_sync("job", first.rental_id, 300.0, None)
    assert not alice.note_sync("job", "ffffffffffff", 300.0, None)
    assert not alice.note_sync("nothing", None, 300.0, None)
    assert stored(store, "job") == before
