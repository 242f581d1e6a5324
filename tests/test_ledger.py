"""The ownership ledger: the pure transition decision and the compare-and-swap shell (M3, M4)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from store_fakes import WallOf

from gpuops.errors import (
    CorruptState,
    IllegalTransition,
    NameTaken,
    NotOwned,
    Refused,
    UsageError,
    VersionConflict,
)
from gpuops.ledger import (
    ALLOWED,
    CAS_ATTEMPTS,
    CREATE_REFUSED,
    EVIDENCE_FOR,
    GONE_BY_SHOW,
    INSTANCES,
    NEVER_FOUND,
    BoxState,
    Ledger,
    Record,
    advance,
    decode,
    encode,
    utc_iso,
)
from gpuops.store.local import LocalStore
from gpuops.store.memory import MemoryStore

KNOWN = [s for s in BoxState if s is not BoxState.UNKNOWN]
T0 = 1_790_000_000.0


class ListEvents:
    """A fake event sink that keeps what was appended."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def append(self, kind: str, /, **payload: Any) -> None:
        self.events.append((kind, payload))


def record(state: BoxState = BoxState.LIVE, **changes: Any) -> Record:
    base = Record(
        name="box",
        owner="alice",
        state=state,
        intent_id="i1",
        provider="vast",
        revision=4,
        updated_at="2026-11-30T00:00:00+00:00",
        instance_id="123" if state is not BoxState.INTENT else None,
    )
    return Record(**{**base.__dict__, **changes})


@pytest.fixture
def clock() -> Any:
    ticks = itertools.count()
    return WallOf(lambda: T0 + next(ticks))


@pytest.fixture
def events() -> ListEvents:
    return ListEvents()


@pytest.fixture
def alice(events: ListEvents, clock: Any) -> Ledger:
    return Ledger(MemoryStore(), events, "alice", clock=clock)


def other(ledger: Ledger, operator: str) -> Ledger:
    return Ledger(ledger.store, ledger.events, operator, clock=ledger.clock)


# --- the pure decision -------------------------------------------------------------------


@pytest.mark.parametrize(("source", "target"), list(itertools.product(BoxState, KNOWN)))
def test_every_transition_is_allowed_exactly_when_the_table_says(source, target):
    """M4: the transition table is the whole truth; nothing outside it ever happens."""
    extra: dict[str, str] = {"error": "boom"} if source is target is BoxState.DESTROYING else {}
    if target is BoxState.GONE_CONFIRMED and source in EVIDENCE_FOR:
        extra["evidence"] = min(EVIDENCE_FOR[source])
    allowed = {
        BoxState.INTENT: {BoxState.LIVE, BoxState.DESTROYING, BoxState.GONE_CONFIRMED},
        BoxState.LIVE: {BoxState.DESTROYING},
        BoxState.DESTROYING: {BoxState.DESTROYING, BoxState.GONE_CONFIRMED},
        BoxState.GONE_CONFIRMED: {BoxState.RELEASED},
        BoxState.RELEASED: {BoxState.INTENT},
        BoxState.UNKNOWN: set(),
    }[source]

    if target in allowed:
        moved = advance(
            record(source), target, operator="alice", now_iso="now", instance_id="9", **extra
        )
        assert moved.state is target
        assert moved.revision == 5
        assert moved.updated_at == "now"
    else:
        with pytest.raises(IllegalTransition) as caught:
            advance(record(source), target, operator="alice", now_iso="now", instance_id="9")
        assert caught.value.rule == "M4"
        assert (caught.value.current, caught.value.requested) == (source.value, target.value)
    assert ALLOWED[source] == allowed


def test_release_before_gone_confirmed_is_refused_with_rule_m4():
    """M4: a live box's record cannot be released."""
    with pytest.raises(IllegalTransition, match=r"refused \(M4\): 'box' is live"):
        advance(record(BoxState.LIVE), BoxState.RELEASED, operator="alice", now_iso="now")


def test_another_operator_cannot_move_a_record():
    """M3: only the owner acts on a record; the refusal names both."""
    with pytest.raises(NotOwned) as caught:
        advance(record(BoxState.LIVE), BoxState.DESTROYING, operator="bob", now_iso="now")

    assert (caught.value.rule, caught.value.owner, caught.value.operator) == ("M3", "alice", "bob")
    assert caught.value.name == "box"
    assert caught.value.exit_code == 3


def test_going_live_records_the_instance_id_and_requires_one():
    """M3: a live record always says which provider instance is ours."""
    moved = advance(
        record(BoxState.INTENT), BoxState.LIVE, operator="alice", now_iso="n", instance_id="77"
    )

    assert moved.instance_id == "77"
    with pytest.raises(UsageError, match="instance id"):
        advance(record(BoxState.INTENT), BoxState.LIVE, operator="alice", now_iso="n")


def test_a_failed_destroy_counts_attempts_and_keeps_the_error():
    """M4: each failed destroy is recorded on the record that stays on the retry list."""
    once = advance(
        record(BoxState.DESTROYING), BoxState.DESTROYING, operator="alice", now_iso="n", error="e1"
    )
    twice = advance(once, BoxState.DESTROYING, operator="alice", now_iso="n", error="e2")

    assert (once.destroy_attempts, once.last_error) == (1, "e1")
    assert (twice.destroy_attempts, twice.last_error, twice.revision) == (2, "e2", 6)


def test_a_repeated_destroy_without_an_error_is_a_usage_error():
    """A destroying record only stays destroying because something failed."""
    with pytest.raises(UsageError, match="must say what failed"):
        advance(record(BoxState.DESTROYING), BoxState.DESTROYING, operator="alice", now_iso="n")


def test_an_error_on_anything_but_a_destroy_is_a_usage_error():
    """Errors belong to destroys; a confirm-gone with an error is a bug in the caller."""
    with pytest.raises(UsageError, match="only a destroy"):
        advance(
            record(BoxState.DESTROYING),
            BoxState.GONE_CONFIRMED,
            operator="alice",
            now_iso="n",
            error="x",
            evidence=GONE_BY_SHOW,
        )


def test_first_failed_destroy_from_live_is_counted():
    """A destroy that fails on its first call already counts as attempt 1."""
    moved = advance(
        record(BoxState.LIVE), BoxState.DESTROYING, operator="alice", now_iso="n", error="503"
    )

    assert (moved.destroy_attempts, moved.last_error) == (1, "503")


def test_active_is_false_only_for_released_records():
    """Only a released record no longer stands for a possible box."""
    assert [s for s in BoxState if not record(s).active] == [BoxState.RELEASED]


# --- encoding ----------------------------------------------------------------------------


def test_records_round_trip_through_their_stored_form():
    """What is written is exactly what is read back."""
    original = record(
        BoxState.DESTROYING,
        destroy_attempts=2,
        last_error="x",
        deadline_at="2026-12-01T00:00:00+00:00",
    )

    assert decode("k", encode(original)) == original
    assert json.loads(encode(original))["state"] == "destroying"


def test_an_unknown_stored_state_is_kept_raw_and_allows_nothing():
    """A record written by a newer gpuops is UNKNOWN: kept verbatim, never moved."""
    raw = json.loads(encode(record()))
    raw["state"] = "hibernating"

    parsed = decode("k", json.dumps(raw).encode())

    assert (parsed.state, parsed.raw_state) == (BoxState.UNKNOWN, "hibernating")
    assert json.loads(encode(parsed))["state"] == "hibernating"
    assert "raw_state" not in json.loads(encode(parsed))
    with pytest.raises(IllegalTransition):
        advance(parsed, BoxState.RELEASED, operator="alice", now_iso="n")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", "not a ledger record: not JSON"),
        (b"[]", "not a ledger record: not a JSON object"),
        (b'{"name": "x"}', "not a ledger record: missing field 'owner'"),
        (
            json.dumps({**json.loads(encode(record())), "surprise": 1}).encode(),
            "not a ledger record: unknown field 'surprise'",
        ),
        (
            json.dumps({**json.loads(encode(record())), "raw_state": "live"}).encode(),
            "not a ledger record: unknown field 'raw_state'",
        ),
        (
            json.dumps({**json.loads(encode(record())), "revision": "4"}).encode(),
            "not a ledger record: field 'revision' must be an integer, not '4'",
        ),
        (
            json.dumps({**json.loads(encode(record())), "state": 3}).encode(),
            "not a ledger record: field 'state' must be a string, not 3",
        ),
        (
            json.dumps({**json.loads(encode(record())), "deadline_at": "soon"}).encode(),
            "not a ledger record: field 'deadline_at' must be an ISO 8601 timestamp",
        ),
    ],
)
def test_a_malformed_record_is_reported_as_corrupt_naming_the_key(data, reason):
    """Bad stored data is a clear error naming where it is, never a guess."""
    with pytest.raises(CorruptState, match=reason) as caught:
        decode("ledger/boxes/x", data)

    assert caught.value.where == "ledger/boxes/x"
    assert caught.value.reason.startswith(reason)


def test_utc_iso_is_explicit_utc():
    """Timestamps carry their zone."""
    assert utc_iso(0.0) == "1970-01-01T00:00:00.000000Z"


# --- the shell ---------------------------------------------------------------------------


def test_an_operator_id_is_required():
    """M3: a record always names its owner, so a ledger without an operator is refused."""
    with pytest.raises(UsageError) as caught:
        Ledger(MemoryStore(), ListEvents(), "")

    assert str(caught.value) == "an operator id is required: every record names its owner"


def test_an_intent_is_recorded_and_logged_before_anything_else(alice, events):
    """M3: the intent names its owner and is in the store and the log."""
    rec, created = alice.record_intent("box", "vast", deadline_at="2026-12-01T00:00:00+00:00")

    assert created is True
    assert (rec.owner, rec.state, rec.revision, rec.provider) == (
        "alice",
        BoxState.INTENT,
        1,
        "vast",
    )
    assert rec.deadline_at == "2026-12-01T00:00:00+00:00"
    assert rec.updated_at == utc_iso(T0)
    assert len(rec.intent_id) == 16
    assert alice.get("box") == rec
    assert alice.store.list() == ["ledger/boxes/box"]
    assert events.events == [
        (
            "ledger.transition",
            {
                "name": "box",
                "owner": "alice",
                "intent_id": rec.intent_id,
                "instance_id": None,
                "before": None,
                "after": "intent",
                "revision": 1,
                "error": None,
                "rental_id": None,
            },
        )
    ]


def test_recording_the_same_name_twice_returns_the_existing_record(alice, events):
    """M8: asking again never creates a second intent for one name."""
    first, _ = alice.record_intent("box", "vast")
    alice.mark_live("box", "555")

    again, created = alice.record_intent("box", "vast")

    assert created is False
    assert (again.intent_id, again.state, again.instance_id) == (
        first.intent_id,
        BoxState.LIVE,
        "555",
    )
    assert len(events.events) == 2


def test_another_operator_cannot_take_an_active_name(alice):
    """M3: a name held by alice is refused to bob, whatever its state short of released."""
    alice.record_intent("box", "vast")

    with pytest.raises(NameTaken) as caught:
        other(alice, "bob").record_intent("box", "vast")

    assert (caught.value.owner, caught.value.rule, caught.value.exit_code) == ("alice", "M3", 3)
    assert caught.value.name == "box"
    assert alice.get("box").owner == "alice"


def test_a_released_name_starts_a_fresh_intent_for_anyone(alice, events):
    """After release the name is free; the new intent has a new id and a later revision."""
    first, _ = alice.record_intent("box", "vast")
    alice.confirm_gone("box", CREATE_REFUSED)
    alice.release("box")

    second, created = other(alice, "bob").record_intent("box", "vast")

    assert created is True
    assert (second.owner, second.state, second.revision) == ("bob", BoxState.INTENT, 4)
    assert second.intent_id != first.intent_id
    assert events.events[-1][1]["before"] == "released"
    assert events.events[-1][1]["after"] == "intent"


def test_the_full_lifecycle_logs_every_transition(alice, events):
    """M4: intent -> live -> destroying -> gone-confirmed -> released, each one logged."""
    alice.record_intent("box", "vast")
    alice.mark_live("box", "42")
    alice.begin_destroy("box")
    alice.confirm_gone("box", GONE_BY_SHOW)
    final = alice.release("box")

    assert final.state is BoxState.RELEASED
    assert final.revision == 5
    assert [(p["before"], p["after"]) for _, p in events.events] == [
        (None, "intent"),
        ("intent", "live"),
        ("live", "destroying"),
        ("destroying", "gone-confirmed"),
        ("gone-confirmed", "released"),
    ]
    assert {p["instance_id"] for _, p in events.events[1:]} == {"42"}


def test_release_of_a_live_box_is_refused_and_changes_nothing(alice, events):
    """M4: release only from gone-confirmed; the refused attempt leaves the record alone."""
    alice.record_intent("box", "vast")
    live = alice.mark_live("box", "42")

    with pytest.raises(IllegalTransition, match="M4"):
        alice.release("box")

    assert alice.get("box") == live
    assert len(events.events) == 2


def test_another_operator_cannot_destroy_or_release(alice):
    """M3: bob can neither start a destroy of alice's box nor release it."""
    alice.record_intent("box", "vast")
    alice.mark_live("box", "42")
    bob = other(alice, "bob")

    with pytest.raises(NotOwned):
        bob.begin_destroy("box")
    with pytest.raises(NotOwned):
        bob.release("box")
    with pytest.raises(NotOwned):
        bob.confirm_gone("box", GONE_BY_SHOW)
    assert alice.get("box").state is BoxState.LIVE


def test_a_failed_destroy_stays_on_the_retry_list_for_every_process(tmp_path, events, clock):
    """M4: a destroy that failed is visible to other operators and after a restart."""
    alice = Ledger(LocalStore(tmp_path), events, "alice", clock=clock)
    alice.record_intent("box", "vast")
    alice.record_intent("other", "vast")
    alice.mark_live("box", "42")
    alice.begin_destroy("box")
    alice.destroy_failed("box", "HTTP 503")

    restarted = Ledger(LocalStore(tmp_path), ListEvents(), "bob", clock=clock)
    pending = restarted.retry_list()

    assert [(r.name, r.owner, r.destroy_attempts, r.last_error) for r in pending] == [
        ("box", "alice", 1, "HTTP 503")
    ]
    assert [r.name for r in restarted.records()] == ["box", "other"]


def test_steps_already_taken_are_harmless_to_repeat(alice, events):
    """A retry after a crash repeats begin-destroy, confirm-gone or release without harm."""
    alice.record_intent("box", "vast")
    first = alice.begin_destroy("box")
    assert alice.begin_destroy("box") == first
    gone = alice.confirm_gone("box", GONE_BY_SHOW)
    assert alice.confirm_gone("box", GONE_BY_SHOW) == gone
    released = alice.release("box")
    assert alice.release("box") == released
    assert len(events.events) == 4


def test_a_repeat_by_another_operator_is_still_refused(alice):
    """Idempotence is for the owner only: bob repeating alice's release is refused."""
    alice.record_intent("box", "vast")
    alice.confirm_gone("box", CREATE_REFUSED)
    alice.release("box")

    with pytest.raises(NotOwned):
        other(alice, "bob").release("box")


def test_acting_on_a_missing_record_is_refused_naming_it(alice):
    """M3: with no record gpuops cannot prove it owns the box: a refusal (exit 3)."""
    with pytest.raises(Refused, match="'nope'") as caught:
        alice.begin_destroy("nope")

    assert (caught.value.rule, caught.value.exit_code) == ("M3", 3)


class Interleaving(MemoryStore):
    """A store in which another writer slips in once between our read and our write."""

    def __init__(self, intrude: Any) -> None:
        super().__init__()
        self.intrude = intrude
        self.puts = 0

    def put(self, key: str, data: bytes, version: str) -> str:
        self.puts += 1
        if self.intrude is not None:
            intrude, self.intrude = self.intrude, None
            intrude(self)
        return super().put(key, data, version)


def test_a_lost_compare_and_swap_is_retried_on_the_fresh_record(events, clock):
    """A concurrent write between read and write is never overwritten: the ledger re-reads."""

    def bob_records_a_failure(store: Any) -> None:
        Ledger(store, ListEvents(), "alice", clock=clock).destroy_failed("box", "first failure")

    store = Interleaving(None)
    ledger = Ledger(store, events, "alice", clock=clock)
    ledger.record_intent("box", "vast")
    ledger.begin_destroy("box")
    store.intrude = bob_records_a_failure

    final = ledger.destroy_failed("box", "second failure")

    assert (final.destroy_attempts, final.last_error) == (2, "second failure")
    assert final.revision == 4


def test_a_lost_intent_race_returns_the_winners_record(events, clock):
    """Two processes recording one name at once end with one record, not two."""
    store = MemoryStore()
    racer = Ledger(store, ListEvents(), "alice", clock=clock)

    original_create = store.create
    raced: list[Any] = []

    def create(key: str, data: bytes) -> str:
        if not raced:
            raced.append(None)
            raced[0] = racer.record_intent("box", "vast")[0]
        return original_create(key, data)

    store.create = create  # type: ignore[method-assign]
    ledger = Ledger(store, events, "alice", clock=clock)

    rec, created = ledger.record_intent("box", "vast")

    assert created is False
    assert rec.intent_id == raced[0].intent_id
    assert events.events == []


class AlwaysConflicting(MemoryStore):
    """A store where every compare-and-swap loses."""

    def __init__(self) -> None:
        super().__init__()
        self.puts = 0
        self.creates = 0

    def put(self, key: str, data: bytes, version: str) -> str:
        self.puts += 1
        raise VersionConflict(key, version)


def test_endless_contention_is_loud_after_a_bounded_number_of_tries(events, clock):
    """A compare-and-swap that never wins raises instead of spinning forever."""
    store = AlwaysConflicting()
    ledger = Ledger(store, events, "alice", clock=clock)
    ledger.record_intent("box", "vast")

    with pytest.raises(VersionConflict) as caught:
        ledger.begin_destroy("box")

    assert store.puts == CAS_ATTEMPTS == 8
    assert caught.value.key == "ledger/boxes/box"


def test_endless_contention_on_reuse_of_a_released_name_is_loud(events, clock):
    """Reusing a released name under endless contention raises after bounded tries."""
    plain = MemoryStore()
    Ledger(plain, ListEvents(), "alice", clock=clock).record_intent("box", "vast")
    alice = Ledger(plain, ListEvents(), "alice", clock=clock)
    alice.confirm_gone("box", CREATE_REFUSED)
    alice.release("box")
    store = AlwaysConflicting()
    store._values = plain._values  # the same released record, behind a store that always loses

    with pytest.raises(VersionConflict) as caught:
        Ledger(store, events, "bob", clock=clock).record_intent("box", "vast")

    assert store.puts == CAS_ATTEMPTS
    assert caught.value.key == "ledger/boxes/box"


def test_names_that_are_not_valid_keys_are_refused(alice):
    """A name that could escape the ledger's folder is a usage error."""
    with pytest.raises(UsageError):
        alice.record_intent("../etc", "vast")


def test_records_are_stored_with_sorted_keys():
    """One state, one byte string: S3 versions compare values, so encoding is canonical."""
    encoded = json.loads(encode(record()))

    assert list(encoded) == sorted(encoded)
    assert encode(record()).startswith(b'{"deadline_at": null, "destroy_attempts": 0')


def test_a_failed_destroy_is_logged_with_its_error(alice, events):
    """M4: the event log says why a destroy failed."""
    alice.record_intent("box", "vast")
    alice.begin_destroy("box")

    alice.destroy_failed("box", "HTTP 503")

    assert events.events[-1][1]["error"] == "HTTP 503"
    assert events.events[-1][1]["after"] == "destroying"


def test_every_transition_stamps_the_injected_clock(alice):
    """Each move records when it happened, from the ledger's clock."""
    alice.record_intent("box", "vast")  # tick 0

    moved = alice.mark_live("box", "7")  # tick 1

    assert moved.updated_at == utc_iso(T0 + 1)


def test_a_missing_name_reads_as_none(alice):
    """get() of a name with no record is None, not an error."""
    assert alice.get("nope") is None


@pytest.mark.parametrize(
    "action",
    [
        lambda ledger: ledger.get("box"),
        lambda ledger: ledger.records(),
        lambda ledger: ledger.record_intent("box", "vast"),
        lambda ledger: ledger.begin_destroy("box"),
    ],
    ids=["get", "records", "record_intent", "begin_destroy"],
)
def test_a_corrupt_stored_record_is_reported_with_its_key(alice, action):
    """A record that cannot be read stops every operation and names where it is."""
    alice.store.create("ledger/boxes/box", b"{broken")

    with pytest.raises(CorruptState) as caught:
        action(alice)

    assert caught.value.where == "ledger/boxes/box"
    assert alice.store.get("ledger/boxes/box").data == b"{broken"


def test_the_read_only_listing_skips_a_corrupt_record_and_keeps_it_named(alice):
    """skip_corrupt: the other records are listed, the bad one kept by key in `corrupt`;
    without it, the first bad record by key stops the listing (it may be a billing box)."""
    alice.record_intent("a", "vast")
    alice.store.create("ledger/boxes/c", b"{broken")
    alice.store.create("ledger/boxes/b", b"[]")
    alice.record_intent("d", "vast")

    listed = alice.records(skip_corrupt=True)
    with pytest.raises(CorruptState) as caught:
        alice.records()

    assert [r.name for r in listed] == ["a", "d"]
    assert sorted(alice.corrupt) == ["ledger/boxes/b", "ledger/boxes/c"]
    assert caught.value.where == "ledger/boxes/b"


@pytest.mark.parametrize(
    ("source", "evidence"),
    [
        (BoxState.DESTROYING, None),
        (BoxState.DESTROYING, CREATE_REFUSED),
        (BoxState.DESTROYING, "the list was empty"),
        (BoxState.DESTROYING, NEVER_FOUND),
        (BoxState.INTENT, None),
        (BoxState.INTENT, GONE_BY_SHOW),
        (BoxState.INTENT, "create answer lost"),
    ],
)
def test_gone_confirmed_needs_the_right_evidence(source, evidence):
    """M4: a box is gone only on the provider's answer about it; an intent only when its
    create was refused. An empty list or a lost answer proves nothing."""
    with pytest.raises(IllegalTransition, match="needs") as caught:
        advance(
            record(source),
            BoxState.GONE_CONFIRMED,
            operator="alice",
            now_iso="n",
            evidence=evidence,
        )

    assert caught.value.rule == "M4"
    assert EVIDENCE_FOR == {
        BoxState.DESTROYING: {"provider-show-says-gone"},
        BoxState.INTENT: {"create-refused", "not-found-by-label-in-time"},
    }


def test_one_instance_cannot_be_claimed_by_two_records(alice):
    """M3: bob cannot mark his record live on alice's instance, so he can never destroy it."""
    alice.record_intent("a", "vast")
    alice.mark_live("a", "42")
    bob = other(alice, "bob")
    bob.record_intent("b", "vast")

    with pytest.raises(Refused, match="instance 42 is already claimed by 'a'") as caught:
        bob.mark_live("b", "42")

    assert caught.value.rule == "M3"
    assert (bob.get("b").state, bob.get("b").instance_id) == (BoxState.INTENT, None)
    assert alice.get("a").instance_id == "42"


def test_a_released_records_instance_can_be_claimed_again(alice):
    """Release frees the instance index; a stale index entry does not block a new claim."""
    alice.record_intent("a", "vast")
    alice.mark_live("a", "42")
    alice.begin_destroy("a")
    alice.confirm_gone("a", GONE_BY_SHOW)
    alice.release("a")
    assert alice.store.get(INSTANCES + "42") is None

    alice.record_intent("b", "vast")
    alice.store.create(INSTANCES + "42", b'{"intent_id": "old", "name": "a"}')  # crash debris

    assert alice.mark_live("b", "42").instance_id == "42"


def test_marking_live_again_with_the_same_instance_is_harmless(alice, events):
    """A retry after a lost reply to a successful write repeats nothing."""
    alice.record_intent("a", "vast")
    first = alice.mark_live("a", "42")

    assert alice.mark_live("a", "42") == first
    assert len(events.events) == 2


def test_a_destroy_error_is_scrubbed_before_it_is_stored(alice, monkeypatch):
    """H3: the ledger record (synced to S3) never holds a secret from an error text."""
    key = "k" * 40
    monkeypatch.setenv("VAST_API_KEY", key)
    alice.record_intent("a", "vast")
    alice.begin_destroy("a")

    rec = alice.destroy_failed("a", f"GET https://console.vast.ai/x?api_key={key} failed")

    assert key not in rec.last_error
    assert key.encode() not in alice.store.get("ledger/boxes/a").data


def test_gone_confirmed_without_evidence_names_the_record_and_its_state():
    """M4: the refusal says which record and from which state."""
    with pytest.raises(IllegalTransition) as caught:
        advance(record(BoxState.DESTROYING), BoxState.GONE_CONFIRMED, operator="alice", now_iso="n")

    assert (caught.value.name, caught.value.current) == ("box", "destroying")


def test_marking_a_missing_record_live_is_an_m3_refusal(alice):
    """M3: an instance cannot be claimed for a record that does not exist."""
    with pytest.raises(Refused) as caught:
        alice.mark_live("ghost", "42")

    assert caught.value.rule == "M3"
    assert str(caught.value) == (
        "refused (M3): no ledger record named 'ghost': gpuops cannot prove it owns it"
    )
    assert alice.store.get(INSTANCES + "42") is None


def test_the_instance_index_names_its_record_canonically(alice):
    """M3: the index entry is sorted JSON of the claiming record's name and intent."""
    rec, _ = alice.record_intent("a", "vast")
    alice.mark_live("a", "42")

    assert alice.store.get(INSTANCES + "42").data == (
        f'{{"intent_id": "{rec.intent_id}", "name": "a"}}'.encode()
    )


def test_an_index_left_by_a_released_record_of_the_same_intent_is_stale(alice):
    """A crash between release and unclaiming leaves the index; it does not block a claim."""
    a, _ = alice.record_intent("a", "vast")
    alice.mark_live("a", "42")
    alice.begin_destroy("a")
    alice.confirm_gone("a", GONE_BY_SHOW)
    alice.release("a")
    alice.store.create(INSTANCES + "42", f'{{"intent_id": "{a.intent_id}", "name": "a"}}'.encode())
    alice.record_intent("b", "vast")

    assert alice.mark_live("b", "42").instance_id == "42"


def test_an_index_naming_a_record_that_no_longer_exists_is_stale(alice):
    """An index entry whose record is gone entirely does not block a claim."""
    alice.store.create(INSTANCES + "42", b'{"intent_id": "x", "name": "vanished"}')
    alice.record_intent("b", "vast")

    assert alice.mark_live("b", "42").instance_id == "42"


def test_a_concurrent_identical_claim_is_not_an_error(events, clock):
    """Two processes claiming the same instance for the same record: both succeed."""
    store = MemoryStore()
    ledger = Ledger(store, events, "alice", clock=clock)
    ledger.record_intent("a", "vast")
    original = store.create

    def racing_create(key: str, data: bytes) -> str:
        if key.startswith(INSTANCES):
            original(key, data)  # the other process got there first
        return original(key, data)

    store.create = racing_create  # type: ignore[method-assign]

    assert ledger.mark_live("a", "42").instance_id == "42"


def test_endless_contention_on_the_instance_index_is_loud(events, clock):
    """A claim that keeps losing its compare-and-swap raises, naming the index key."""
    store = AlwaysConflicting()
    ledger = Ledger(store, events, "alice", clock=clock)
    ledger.record_intent("a", "vast")
    store._values[INSTANCES + "42"] = (b'{"intent_id": "x", "name": "vanished"}', "v")

    with pytest.raises(VersionConflict) as caught:
        ledger.mark_live("a", "42")

    assert caught.value.key == INSTANCES + "42"


def test_release_without_an_index_entry_is_harmless(alice):
    """Releasing a record whose index entry is already gone does not fail."""
    alice.record_intent("a", "vast")
    alice.mark_live("a", "42")
    alice.begin_destroy("a")
    alice.confirm_gone("a", GONE_BY_SHOW)
    index = alice.store.get(INSTANCES + "42")
    alice.store.delete(INSTANCES + "42", index.version)

    assert alice.release("a").state is BoxState.RELEASED


def test_a_live_record_cannot_be_moved_to_another_instance(alice):
    """M3: a live record keeps its instance; a second mark_live with another id is refused."""
    alice.record_intent("a", "vast")
    alice.mark_live("a", "42")

    with pytest.raises(IllegalTransition):
        alice.mark_live("a", "43")
    with pytest.raises(NotOwned):
        other(alice, "bob").mark_live("a", "42")
    assert alice.get("a").instance_id == "42"


def test_the_refusal_names_every_evidence_that_would_do(alice):
    """M4/M13: an intent gone-confirmed on an empty list is refused, naming both kinds of
    evidence it takes: a refused create, or no box found by label in time."""
    with pytest.raises(IllegalTransition) as caught:
        advance(
            record(BoxState.INTENT), BoxState.GONE_CONFIRMED, operator="alice", now_iso="n",
            evidence="the list was empty",
        )  # fmt: skip

    assert str(caught.value).endswith(
        "cannot become gone-confirmed on evidence 'the list was empty' (needs "
        "'create-refused' or 'not-found-by-label-in-time')"
    )


@pytest.mark.parametrize("evidence", [CREATE_REFUSED, NEVER_FOUND])
def test_an_intent_is_gone_confirmed_on_a_refused_create_or_on_none_found_in_time_m13(
    alice, evidence
):
    """M13: either evidence confirms an intent gone, and its release follows."""
    alice.record_intent("a", "vast")
    assert alice.confirm_gone("a", evidence).state is BoxState.GONE_CONFIRMED
    assert alice.release("a").state is BoxState.RELEASED


def test_records_under_a_rental_prefix_lists_only_that_rentals_records(alice):
    """M17: `records(under="NAME+")` lists one rental's records only, whoever's the rest are;
    an unreadable record of another rental neither stops nor shows in it."""
    alice.record_intent("job+1-0", "vast")
    alice.record_intent("jobs+1-0", "vast")
    other(alice, "bob").record_intent("job+2-0", "vast")
    alice.store.create("ledger/boxes/else+1-0", b"{")

    mine = alice.records(under="job+")

    assert [r.name for r in mine] == ["job+1-0", "job+2-0"] and alice.corrupt == {}
    assert [r.name for r in alice.records(skip_corrupt=True)] == ["job+1-0", "job+2-0", "jobs+1-0"]
    assert list(alice.corrupt) == ["ledger/boxes/else+1-0"]


def test_an_intent_carries_its_rental_s_incarnation_and_a_reused_name_the_new_one_m16(alice):
    """M16: a box record names the incarnation it is a box of; a released record reused for a
    later one carries the later one's id."""
    rec, _ = alice.record_intent("box", "vast", rental_id="aaaaaaaaaaaa")
    assert rec.rental_id == "aaaaaaaaaaaa" and alice.get("box").rental_id == "aaaaaaaaaaaa"
    assert alice.events.events[-1][1]["rental_id"] == "aaaaaaaaaaaa"  # the transition names it
    assert alice.record_intent("plain", "vast")[0].rental_id is None
    alice.confirm_gone("box", CREATE_REFUSED)
    alice.release("box")
    again, created = alice.record_intent("box", "vast", rental_id="bbbbbbbbbbbb")
    assert created and again.rental_id == "bbbbbbbbbbbb"
