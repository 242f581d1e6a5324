"""Records[T]: the one compare-and-swap loop and the strict codec every record type shares."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops import cli
from gpuops.errors import AlreadyExists, CorruptState, VersionConflict
from gpuops.lane import board as b
from gpuops.lane.runner import BoardCodec, BoardFile
from gpuops.ledger import Claim, Ledger, Record
from gpuops.ledger import _Codec as LedgerCodec
from gpuops.market import guardian as g
from gpuops.market import jobs, leases, quarantine, rentals
from gpuops.register import Incident, Observation, _codec
from gpuops.store.local import LocalStore
from gpuops.store.memory import MemoryStore
from gpuops.store.records import (
    CAS_ATTEMPTS,
    ISO_TIMESTAMP,
    NO_CHANGE,
    JsonCodec,
    Records,
    parses,
)
from tests.store_fakes import Events, Interleaved


@dataclass(frozen=True)
class Counter:
    count: int
    label: str | None = None
    ratio: float = 0.0
    on: bool = False


COUNTERS = JsonCodec(Counter, "counter")


def counters(store: Any) -> Records[Counter]:
    return Records(store, "c/", COUNTERS)


def bump(current: Counter | None) -> Counter:
    return Counter(1) if current is None else Counter(current.count + 1)


# --- the compare-and-swap loop -----------------------------------------------------------


def test_update_creates_an_absent_record_and_says_what_it_read_and_wrote():
    """The change sees None for an absent record; what it returns is created."""
    records = counters(MemoryStore())

    done = records.update("a", bump)

    assert (done.before, done.after, done.written) == (None, Counter(1), True)
    assert records.get("a") == Counter(1)


def test_update_changes_an_existing_record_at_the_version_it_read():
    """The change sees the current value; the new one is put at that value's version."""
    store = Interleaved()
    records = counters(store)
    records.update("a", bump)
    store.calls.clear()

    done = records.update("a", bump)

    assert (done.before, done.after) == (Counter(1), Counter(2))
    assert store.calls == ["get", "put"]


def test_no_change_writes_nothing_and_returns_the_current_record():
    """NO_CHANGE leaves the record alone: no write, and `after` is what was read."""
    store = Interleaved()
    records = counters(store)
    records.update("a", bump)
    store.calls.clear()

    done = records.update("a", lambda current: NO_CHANGE)

    assert (done.before, done.after, done.written) == (Counter(1), Counter(1), False)
    assert store.calls == ["get"]


def test_two_writers_interleaved_lose_no_update():
    """A writer whose put loses re-reads and decides again: both increments land."""
    store = Interleaved()
    mine, theirs = counters(store), counters(store)
    mine.update("a", bump)
    store.before["put"].append(lambda: theirs.update("a", bump))
    store.calls.clear()

    done = mine.update("a", bump)

    assert store.calls == ["get", "put", "get", "put", "get", "put"]  # theirs in between
    assert done.after == Counter(3)
    assert mine.get("a") == Counter(3)


def test_a_create_that_loses_to_another_create_reads_and_decides_again():
    """Create-if-absent losing is a lost race too, never an error or an overwrite."""
    store = Interleaved()
    mine, theirs = counters(store), counters(store)
    store.before["create"].append(lambda: theirs.update("a", bump))

    done = mine.update("a", bump)

    assert (done.before, done.after) == (Counter(1), Counter(2))


def _rival(store: Interleaved) -> None:
    """Another writer landing between our read of c/a and our put: a new version, same bytes."""
    found = MemoryStore.get(store, "c/a")
    MemoryStore.put(store, "c/a", found.data, found.version)


def test_an_update_that_keeps_losing_is_a_version_conflict_naming_the_key():
    """CAS_ATTEMPTS lost races are an error naming the key, not a spin."""
    store = Interleaved()
    records = counters(store)
    records.update("a", bump)
    store.before["put"] = [lambda: _rival(store)] * CAS_ATTEMPTS
    store.calls.clear()

    with pytest.raises(VersionConflict) as caught:
        records.update("a", bump)

    assert (caught.value.key, caught.value.expected) == ("c/a", None)
    assert store.calls == ["get", "put"] * CAS_ATTEMPTS


def test_update_never_writes_over_a_record_it_cannot_read():
    """A corrupt record is reported by the update, and left exactly as it is."""
    store = MemoryStore()
    store.create("c/a", b'{"count": "x"}')

    with pytest.raises(CorruptState, match="field 'count' must be an integer") as caught:
        counters(store).update("a", bump)

    assert caught.value.where == "c/a"

    assert store.get("c/a").data == b'{"count": "x"}'


def test_remove_deletes_only_what_the_predicate_wants():
    """remove: absent or unwanted is False and deletes nothing; wanted is deleted."""
    records = counters(MemoryStore())
    records.update("a", bump)

    assert records.remove("b", lambda c: True) is False
    assert records.remove("a", lambda c: c.count > 1) is False
    assert records.get("a") == Counter(1)
    assert records.remove("a", lambda c: c.count == 1) is True
    assert records.get("a") is None


def test_remove_never_deletes_a_record_it_cannot_read():
    """A corrupt record is reported by key, never judged by the predicate nor deleted."""
    store = MemoryStore()
    store.create("c/a", b"{")

    with pytest.raises(CorruptState) as caught:
        counters(store).remove("a", lambda c: True)

    assert caught.value.where == "c/a"
    assert store.get("c/a").data == b"{"


def test_remove_leaves_a_record_that_changed_since_it_was_read():
    """A delete at a stale version loses: the record is someone else's now, and stays."""
    store = Interleaved()
    records = counters(store)
    records.update("a", bump)

    def changed(current: Counter) -> bool:
        counters(store).update("a", bump)  # another writer, between our read and delete
        return True

    assert records.remove("a", changed) is False
    assert records.get("a") == Counter(2)


def test_a_corrupt_record_blocks_only_itself_in_the_listing():
    """entries/all skip an unreadable record and keep it, by key, in `corrupt`."""
    store = MemoryStore()
    records = counters(store)
    records.update("a", bump)
    store.create("c/b", b"{")
    records.update("c", bump)

    listed = records.entries()

    assert [(name, value) for name, value, _ in listed] == [("a", Counter(1)), ("c", Counter(1))]
    assert [version for _, _, version in listed] == [store.get("c/a").version, "3"]
    assert list(records.corrupt) == ["c/b"]
    assert records.all() == [Counter(1), Counter(1)]


@pytest.mark.parametrize("store", [MemoryStore, "local"])
def test_a_listing_under_a_name_prefix_reads_only_the_records_it_names(store, tmp_path):
    """M17: `entries(under)`/`all(under)` list only the names beginning with ``under`` (one
    rental's records, not every rental's), and `corrupt` names only what that listing met."""
    store = LocalStore(str(tmp_path)) if store == "local" else store()
    records = counters(store)
    for name in ["job+1-0", "job+1-1", "jobs+1-0", "other+1-0"]:
        records.update(name, bump)
    store.create("c/job+2-0", b"{")
    store.create("c/other+2-0", b"{")

    listed = records.entries("job+")

    assert [name for name, _, _ in listed] == ["job+1-0", "job+1-1"]
    assert list(records.corrupt) == ["c/job+2-0"]
    assert records.all("other+") == [Counter(1)] and list(records.corrupt) == ["c/other+2-0"]
    assert len(records.all()) == 4 and sorted(records.corrupt) == ["c/job+2-0", "c/other+2-0"]


def test_a_record_repaired_since_the_last_listing_is_no_longer_named_corrupt():
    """M17: `corrupt` names what the latest listing could not read; a repaired record (or one
    moved aside) stops blocking anything at the next listing."""
    store = MemoryStore()
    records = counters(store)
    store.create("c/b", b"{")
    records.entries()
    assert list(records.corrupt) == ["c/b"]

    store.put("c/b", COUNTERS.encode(Counter(1)), store.get("c/b").version)

    assert records.all() == [Counter(1)]
    assert records.corrupt == {}
    assert counters(store).corrupt == {}  # asked before any listing: nothing is named


def test_a_local_listing_reads_every_record_under_one_lock_and_names_each_corrupt_one(
    tmp_path, monkeypatch
):
    """A LocalStore listing is one locked read of the kind (not a lock per record), and a
    record whose file fails its checksum, or whose checksummed bytes are no record, blocks
    only itself and is named by key."""
    store = LocalStore(tmp_path / "state")
    records = counters(store)
    for name in ("a", "b", "c", "d"):
        records.update(name, bump)
    (store.root / "c" / "b~").write_bytes(b"garbage")  # fails the header and checksum
    store.put("c/d", b'{"count": "x"}', store.get("c/d").version)  # checksummed, no counter
    locks = []
    locked = LocalStore._locked

    def counting(self):  # type: ignore[no-untyped-def]
        locks.append(self.root)
        return locked(self)

    monkeypatch.setattr(LocalStore, "_locked", counting)

    listed = records.entries()

    assert locks == [store.root]
    assert [(name, value) for name, value, _ in listed] == [("a", Counter(1)), ("c", Counter(1))]
    assert [version for _, _, version in listed] == [store.get(k).version for k in ("c/a", "c/c")]
    assert sorted(records.corrupt) == ["c/b", "c/d"]
    assert records.corrupt["c/b"].where == str(store.root / "c" / "b~")
    assert "no header line" in records.corrupt["c/b"].reason
    assert records.corrupt["c/d"].where == "c/d"
    assert "field 'count' must be an integer" in records.corrupt["c/d"].reason


class _Unreadable(MemoryStore):
    """A store without a listing read (S3's shape) whose get refuses one key's bytes, as S3
    does for a checksum that does not match."""

    def get(self, key: str) -> Any:
        if key == "c/b":
            raise CorruptState(key, "checksum mismatch")
        return super().get(key)


def test_a_listing_over_a_store_without_one_reads_key_by_key_and_names_what_get_refuses():
    """Where the store has no listing read (S3, memory), each listed key is a get: one its
    get refuses blocks only itself and is named, and one deleted since the list is left out."""
    store = _Unreadable()
    records = counters(store)
    for name in ("a", "b", "c"):
        store.create(f"c/{name}", COUNTERS.encode(Counter(1)))
    interleaved = Interleaved()
    others = counters(interleaved)
    for name in ("a", "b"):
        others.update(name, bump)
    interleaved.before["get"].append(
        lambda: interleaved.delete("c/a", interleaved.get("c/a").version)
    )

    assert records.all() == [Counter(1), Counter(1)]
    assert list(records.corrupt) == ["c/b"] and records.corrupt["c/b"].reason == "checksum mismatch"
    assert others.entries() == [("b", Counter(1), interleaved.get("c/b").version)]
    assert others.corrupt == {}


def test_the_read_gives_the_record_and_its_version_or_nothing():
    """read: (record, version) for a stored one, (None, None) for an absent one."""
    store = MemoryStore()
    records = counters(store)
    records.update("a", bump)

    assert records.read("a") == (Counter(1), store.get("c/a").version)
    assert records.read("b") == (None, None)


def test_keys_are_checked_after_the_record_types_own_name_check():
    """The name check runs first (a rental's own rule), then the store's key rule."""
    records = Records(
        MemoryStore(), "market/rentals/", rentals.CODEC, check_name=rentals.check_name
    )

    with pytest.raises(Exception, match="rental name"):
        records.key("bad name")
    assert Records(MemoryStore(), "p/", COUNTERS).key("x") == "p/x"
    with pytest.raises(Exception, match="segment"):
        Records(MemoryStore(), "p/", COUNTERS).key(".hidden")


def test_no_change_says_what_it_is():
    """The sentinel reads as its name in a traceback or a failed assertion."""
    assert repr(NO_CHANGE) == "NO_CHANGE"


# --- the strict codec --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not a counter: not JSON"),
        (b"\xff", "not a counter: not JSON"),
        (b"[" * 100_000, "not a counter: not JSON"),
        (b"[]", "not a counter: not a JSON object"),
        (b"{}", "not a counter: missing field 'count'"),
        (b'{"count": 1, "extra": 2}', "not a counter: unknown field 'extra'"),
        (b'{"zz": 1, "count": 1, "extra": 2}', "not a counter: unknown field 'extra'"),
        (b'{"count": "1"}', "not a counter: field 'count' must be an integer, not '1'"),
        (b'{"count": true}', "not a counter: field 'count' must be an integer, not True"),
        (b'{"count": 1.5}', "not a counter: field 'count' must be an integer, not 1.5"),
        (b'{"count": null}', "not a counter: field 'count' must be an integer, not None"),
        (b'{"count": 1, "label": 2}', "field 'label' must be a string or null, not 2"),
        (b'{"count": 1, "ratio": "x"}', "field 'ratio' must be a number, not 'x'"),
        (b'{"count": 1, "on": 1}', "field 'on' must be a boolean, not 1"),
        (b'{"count": 1, "ratio": [1]}', "field 'ratio' must be a number, not [1]"),
    ],
)
def test_a_wrong_type_missing_or_unknown_field_is_corrupt_naming_key_and_field(body, reason):
    """The codec checks every field against the dataclass's hints; the error names both."""
    with pytest.raises(CorruptState) as caught:
        COUNTERS.decode("c/a", body)

    assert caught.value.where == "c/a"
    assert reason in caught.value.reason


def test_an_integer_where_a_number_is_wanted_is_read_as_a_float():
    """JSON does not tell 1 from 1.0: a float field reads either as a float."""
    decoded = COUNTERS.decode("c/a", b'{"count": 1, "ratio": 2}')

    assert decoded == Counter(1, ratio=2.0) and isinstance(decoded.ratio, float)
    assert (
        rentals.CODEC.decode("k", rentals.CODEC.encode(_rental(deadline_at=None))).deadline_at
        is None
    )
    assert isinstance(
        rentals.CODEC.decode(
            "k", b'{"name": "n", "owner": "o", "state": "live", "race": 1, "deadline_at": 5}'
        ).deadline_at,
        float,
    )


def test_a_field_check_refuses_a_well_typed_but_wrong_value():
    """A check (an ISO timestamp) applies to a typed, non-null value and names the field."""
    codec = JsonCodec(Counter, "counter", checks={"label": (str.isupper, "upper case")})

    assert codec.decode("k", b'{"count": 1, "label": null}').label is None
    assert codec.decode("k", b'{"count": 1, "label": "OK"}').label == "OK"
    with pytest.raises(CorruptState, match="field 'label' must be upper case, not 'no'") as caught:
        codec.decode("k", b'{"count": 1, "label": "no"}')
    assert caught.value.where == "k"


@dataclass(frozen=True)
class Nested:
    items: list[int]


@dataclass(frozen=True)
class Either:
    value: int | float


@dataclass(frozen=True)
class Mixed:
    value: str | list[int]


@dataclass(frozen=True)
class Maybe:
    value: list[int] | None


@dataclass(frozen=True)
class Numbers:
    value: tuple[int, ...]


@dataclass(frozen=True)
class MaybeTexts:
    value: tuple[str, ...] | None


@pytest.mark.parametrize(
    "kind", [Nested, Either, Mixed, Maybe, Numbers, MaybeTexts], ids=lambda k: k.__name__
)
def test_a_record_type_the_codec_cannot_check_is_refused_when_the_codec_is_built(kind):
    """Only one scalar, or one scalar or null: anything else is a programming error, at once."""
    with pytest.raises(TypeError, match=f"{kind.__name__}.(items|value): no codec"):
        JsonCodec(kind, "odd")


def test_a_codec_built_at_run_time_names_its_record_kind_and_keeps_its_options():
    """What the codec is told when built (its name, required fields, fields kept as text)
    is what it decodes by; the kind's name leads every reason."""
    codec = JsonCodec(Counter, "tally", as_str=frozenset({"count"}))

    assert codec.decode("k", b'{"count": "seven"}') == Counter("seven")  # type: ignore[arg-type]
    with pytest.raises(CorruptState) as caught:
        codec.decode("k", b'{"label": "x"}')
    assert caught.value.reason == "not a tally: missing field 'count'"


def test_a_codec_built_at_run_time_takes_an_integer_only_where_a_number_is_wanted():
    """The types each field takes are worked out when the codec is built: a number field
    takes JSON's 1 (as 1.0), a text, integer or boolean field takes no other type."""
    codec = JsonCodec(Counter, "tally")

    decoded = codec.decode("k", b'{"count": 1, "ratio": 2}')
    assert decoded == Counter(1, ratio=2.0) and isinstance(decoded.ratio, float)
    for body, field in [
        (b'{"count": 1, "label": 2}', "label"),
        (b'{"count": 1.5}', "count"),
        (b'{"count": 1, "on": 1}', "on"),
    ]:
        with pytest.raises(CorruptState) as caught:
            codec.decode("k", body)
        assert f"field {field!r} must be" in caught.value.reason


def test_a_record_is_stored_as_sorted_key_json():
    """Every writer stores the same bytes for the same record: sorted keys, JSON's spacing."""
    assert COUNTERS.encode(Counter(1, "x")) == (
        b'{"count": 1, "label": "x", "on": false, "ratio": 0.0}'
    )


def test_a_parse_check_accepts_what_parses_and_refuses_what_does_not():
    """parses(f): text f accepts passes; text f raises ValueError on fails; it says what."""
    check, what = parses(int, "a whole number")

    assert (check("12"), check("twelve"), what) == (True, False, "a whole number")
    assert ISO_TIMESTAMP[0]("2026-11-30T22:00:00+00:00") and not ISO_TIMESTAMP[0]("soon")


# --- every record type: round trips and fuzzing -------------------------------------------

_text = st.text(max_size=20)
_name = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)
_num = st.floats(allow_nan=False, allow_infinity=False)
_opt_num = st.none() | _num
_iso = st.datetimes(timezones=st.just(__import__("datetime").UTC)).map(lambda d: d.isoformat())
_int = st.integers(-(2**53), 2**53)


def _rental(**changes: Any) -> rentals.Rental:
    return rentals.Rental(**{"name": "n", "owner": "o", "state": "live", "race": 1, **changes})


RECORDS: dict[str, tuple[Any, Any]] = {
    "ledger record": (
        LedgerCodec(),
        st.builds(
            Record,
            name=_name,
            owner=_text,
            state=st.sampled_from(
                [s for s in __import__("gpuops.ledger").ledger.BoxState if s.value != "unknown"]
            ),
            intent_id=_text,
            provider=_text,
            revision=_int,
            updated_at=_iso,
            instance_id=st.none() | _text,
            deadline_at=st.none() | _iso,
            destroy_attempts=_int,
            last_error=st.none() | _text,
        ),
    ),
    "instance claim": (JsonCodec(Claim, "instance claim"), st.builds(Claim, _name, _text)),
    "rental": (
        rentals.CODEC,
        st.builds(
            rentals.Rental,
            name=_name,
            owner=_text,
            state=_text,
            race=_int,
            box=st.none() | _text,
            instance_id=st.none() | _text,
            offer_id=st.none() | _int,
            machine_id=st.none() | _int,
            gpu_name=st.none() | _text,
            dph_total=_opt_num,
            started_at=_opt_num,
            deadline_at=_opt_num,
            ended_at=_opt_num,
            revision=_int,
            racer=st.none() | _text,
            beat=_int,
        ),
    ),
    "lease": (leases.CODEC, st.builds(g.Lease, _text, _num, _int, st.booleans())),
    "job": (jobs.CODEC, st.builds(jobs.Job, _name, _text, _text, _text, _text, _num)),
    "quarantine entry": (quarantine.CODEC, st.builds(quarantine.Entry, _int, _text, _num, _text)),
    "incident": (
        _codec(Incident, "register entry"),
        st.builds(
            Incident,
            id=st.from_regex(r"\d{4}-\d{2}-\d{2}-\d{1,3}", fullmatch=True),
            date=st.dates().map(lambda d: d.isoformat()),
            what=_text,
            cost_usd=_opt_num,
            cause=st.none() | _text,
            rule=st.none() | _text,
            recorded_by=_text,
            revision=_int,
        ),
    ),
    "observation": (
        _codec(Observation, "register entry"),
        st.builds(
            Observation,
            id=st.from_regex(r"\d{4}-\d{2}-\d{2}-\d{1,3}", fullmatch=True),
            rule=_text,
            date=st.dates().map(lambda d: d.isoformat()),
            kind=_text,
            what=_text,
            recorded_by=_text,
        ),
    ),
}


@pytest.mark.parametrize("kind", sorted(RECORDS))
@given(data=st.data())
def test_every_record_type_round_trips_through_its_stored_form(kind, data):
    """What is written is exactly what is read back, for every record type."""
    codec, values = RECORDS[kind]
    value = data.draw(values)

    assert codec.decode("k", codec.encode(value)) == value


_json_scalar = st.none() | st.booleans() | _int | _num | _text
_json = st.recursive(
    _json_scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)


@pytest.mark.parametrize("kind", sorted(RECORDS))
@given(data=st.data())
def test_a_valid_record_with_one_field_wrong_reads_or_is_corrupt_never_a_crash(kind, data):
    """Wrong content inside well-formed JSON (a wrong type, a dropped or extra field) reads
    as a record or is CorruptState naming the key: no TypeError, KeyError or ValueError."""
    codec, values = RECORDS[kind]
    body = json.loads(codec.encode(data.draw(values)))
    field = data.draw(st.sampled_from(sorted(body)))
    action = data.draw(st.sampled_from(["retype", "drop", "add"]))
    if action == "retype":
        body[field] = data.draw(_json)
    elif action == "drop":
        del body[field]
    else:
        body[data.draw(_text)] = data.draw(_json)

    try:
        codec.decode("k", json.dumps(body).encode())
    except CorruptState as exc:
        assert exc.where == "k"


@pytest.mark.parametrize("kind", sorted(RECORDS))
@given(raw=st.binary(max_size=64) | _json.map(lambda v: json.dumps(v).encode()))
def test_any_bytes_read_as_a_record_or_are_corrupt_never_a_crash(kind, raw):
    """Whatever bytes sit under a key, the codec's only error is CorruptState."""
    codec, _ = RECORDS[kind]
    try:
        codec.decode("k", raw)
    except CorruptState as exc:
        assert exc.where == "k"


@given(
    st.sampled_from(["free", "claimed"]),
    st.lists(st.from_regex(r"[a-z0-9:][a-z0-9: ]{0,29}", fullmatch=True), max_size=5),
)
def test_the_lane_board_round_trips_as_a_record(state, history):
    """The board file (state line and history) reads back as written."""
    board = b.Board("lane", "inst", 1_000.0)
    if state == "claimed":
        board = b.claim(board, "alice", "job", 1_005.0)
    value = BoardFile(board, tuple(history))

    assert BoardCodec().decode("k", BoardCodec().encode(value)) == value


def test_a_board_that_is_not_utf8_is_corrupt_naming_the_key():
    """Bytes that are not text are corrupt, not a UnicodeDecodeError."""
    with pytest.raises(CorruptState, match="not UTF-8") as caught:
        BoardCodec().decode("lane/x/board", b"\xff\xfe")

    assert caught.value.where == "lane/x/board"


# --- through the command line: a valid checksum, wrong content -----------------------------


@pytest.mark.fault(
    "a record with a valid checksum but a wrong type inside (a lease whose heartbeat is text)",
    handled="`boxes` lists every other record and names the bad one with a repair hint; exit 1",
)
def test_boxes_names_a_lease_with_a_wrong_type_and_lists_the_rest(tmp_path, capsys, monkeypatch):
    """A lease with "heartbeat_at": "x" is CorruptState naming it, never a TypeError."""
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    store = LocalStore(str(tmp_path / "state"))
    for name in ("aaa", "bad"):
        store.create(
            f"market/rentals/{name}",
            rentals.CODEC.encode(
                _rental(name=name, owner="alice", instance_id="1", started_at=time.time())
            ),
        )
    store.create(
        "market/leases/bad", b'{"holder": "g", "heartbeat_at": "x", "beats": 0, "copied": false}'
    )
    store.create("ledger/boxes/zzz", b'{"name": "zzz"}')

    code = cli.main(["--state", str(tmp_path / "state"), "--operator", "alice", "boxes"])

    out, err = capsys.readouterr()
    assert code == 1
    assert "aaa" in out and "bad" in out
    assert "skipped the unreadable lease 'bad'" in err
    assert "field 'heartbeat_at' must be a number, not 'x'" in err
    assert "skipped the unreadable box record 'zzz'" in err
    assert "Repair:" in err


def test_boxes_reads_no_lease_of_a_released_rental_and_one_listing_per_kind(
    tmp_path, capsys, monkeypatch
):
    """A released rental needs no guard: `boxes` reads no lease for it (an unreadable lease
    left behind is not even opened), and each kind is one locked listing, not a lock per
    record; a live rental's lease is still read and judged."""
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    store = LocalStore(str(tmp_path / "state"))
    ended = time.time() - 3600
    for i in range(5):
        store.create(
            f"market/rentals/old{i}",
            rentals.CODEC.encode(
                _rental(name=f"old{i}", owner="alice", state="released", ended_at=ended)
            ),
        )
        store.create(f"market/leases/old{i}", b"garbage")
    store.create(
        "market/rentals/now",
        rentals.CODEC.encode(_rental(name="now", owner="alice", instance_id="1")),
    )
    store.create("market/leases/now", leases.CODEC.encode(g.Lease("alice/elsewhere/1/ab", 1.0)))
    locks = []
    locked = LocalStore._locked

    def counting(self):  # type: ignore[no-untyped-def]
        locks.append(self.root)
        return locked(self)

    monkeypatch.setattr(LocalStore, "_locked", counting)

    code = cli.main(["--state", str(tmp_path / "state"), "--operator", "alice", "--json", "boxes"])

    out, err = capsys.readouterr()
    rows = {row["name"]: row for row in json.loads(out)["rentals"]}
    assert code == 0 and "unreadable" not in err
    assert {rows[f"old{i}"]["guard"] for i in range(5)} == {"none needed (released)"}
    assert {rows[f"old{i}"]["guardian"] for i in range(5)} == {None}
    assert rows["now"]["guardian"] == "alice/elsewhere/1/ab"
    assert rows["now"]["guard"].endswith(": alice/elsewhere/1/ab")  # judged, not skipped
    assert len(locks) == 4  # the rentals, the box records, the live rental's lease, the spend (M15)


def test_a_corrupt_box_record_still_stops_the_strict_listing():
    """Live work (sweep, destroy) never acts past a box record it cannot read."""
    store = MemoryStore()
    ledger = Ledger(store, Events(), "alice")
    ledger.record_intent("a", "vast")
    store.create("ledger/boxes/b", b"{}")

    with pytest.raises(CorruptState) as caught:
        ledger.records()

    assert caught.value.where == "ledger/boxes/b"
    assert [r.name for r in ledger.records(skip_corrupt=True)] == ["a"]
    assert list(ledger.corrupt) == ["ledger/boxes/b"]


def test_two_job_writers_interleaved_keep_the_latest_job():
    """jobs.put is a real compare-and-swap: a slower writer of an older job, whose put loses
    to a newer job's, re-reads and leaves the newer record (no lost update)."""
    store = Interleaved()
    older = jobs.Job("box", "alice", "1", "old", "out", 100.0)
    newer = jobs.Job("box", "alice", "1", "new", "out", 200.0)
    jobs.Jobs(store).put(jobs.Job("box", "alice", "1", "first", "out", 50.0))
    store.before["put"].append(lambda: jobs.Jobs(store).put(newer))
    store.calls.clear()

    stored = jobs.Jobs(store).put(older)

    assert store.calls == ["get", "put", "get", "put", "get"]  # newer's put in between
    assert stored == newer
    assert jobs.Jobs(store).get("box") == newer


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("1e400", "inf"),
        ("-1e400", "-inf"),
        ("NaN", "nan"),
        ("Infinity", "inf"),
        ("1" + "0" * 400, "1" + "0" * 39 + "... (401 chars)"),
    ],
)
def test_a_number_field_past_float_range_is_corrupt_naming_the_field(text, shown):
    """Bad input: 10**400 in a number field raised OverflowError out of the codec, and
    1e400, NaN or Infinity read as a float nothing downstream can use; each is corrupt,
    naming the field, the long number cut short."""
    body = json.loads(rentals.CODEC.encode(_rental()))
    raw = json.dumps({**body, "dph_total": "X"}).replace('"X"', text).encode()

    with pytest.raises(CorruptState) as caught:
        rentals.CODEC.decode("market/rentals/n", raw)

    assert caught.value.where == "market/rentals/n"
    assert caught.value.reason == (
        f"not a rental record: field 'dph_total' must be a finite number, not {shown}"
    )


def test_a_refused_value_is_shown_whole_up_to_forty_characters():
    """The message shows 40 characters of a refused value whole, and cuts a longer one."""
    from gpuops.store.records import _short

    assert _short("x" * 38) == repr("x" * 38)  # 40 characters with its quotes
    assert _short("x" * 39) == repr("x" * 39)[:40] + "... (41 chars)"


def test_the_largest_finite_numbers_and_whole_numbers_in_range_still_read():
    """The bound is float range itself: max float, its negative and a whole 10**300 read."""
    big = 10**300
    for value in (1.7976931348623157e308, -1.7976931348623157e308, big):
        body = json.loads(rentals.CODEC.encode(_rental()))
        raw = json.dumps({**body, "dph_total": value}).encode()

        assert rentals.CODEC.decode("k", raw).dph_total == float(value)


@dataclass(frozen=True)
class Log:
    name: str
    lines: tuple[str, ...] = ()


def log_codec() -> JsonCodec[Log]:
    """Built at run time, as the mutation gate needs (a codec built at import escapes it)."""
    return JsonCodec(Log, "log record")


def test_a_tuple_of_strings_is_stored_as_a_json_list_and_read_back_as_a_tuple():
    codec = log_codec()
    data = codec.encode(Log("d", ("a: gone", "b: 503")))
    assert json.loads(data) == {"lines": ["a: gone", "b: 503"], "name": "d"}
    assert codec.decode("k", data) == Log("d", ("a: gone", "b: 503"))
    assert codec.decode("k", b'{"name": "d", "lines": []}') == Log("d", ())
    assert codec.decode("k", b'{"name": "d"}') == Log("d", ())


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        ('"a: gone"', "field 'lines' must be a list of strings, not 'a: gone'"),
        ("null", "field 'lines' must be a list of strings, not None"),
        ('["a", 7]', "field 'lines' must be a list of strings, not one holding 7"),
        ('["a", ["b"]]', "field 'lines' must be a list of strings, not one holding ['b']"),
        ('[true]', "field 'lines' must be a list of strings, not one holding True"),
    ],
)
def test_a_list_field_that_is_no_list_of_strings_is_corrupt_naming_the_field(lines, said):
    with pytest.raises(CorruptState) as caught:
        log_codec().decode("drills/x", f'{{"name": "d", "lines": {lines}}}'.encode())
    assert caught.value.where == "drills/x"
    assert caught.value.reason == f"not a log record: {said}"


# --- replace: repair's write ------------------------------------------------------------------
def _aside(key: str) -> str:
    return key + ".corrupt-1"


def test_replace_writes_over_a_record_it_cannot_read_and_keeps_its_bytes_aside():
    """L12's repair: the unreadable record is what change sees as None; its exact bytes are
    kept under the aside key before the new record is written over them."""
    store = MemoryStore()
    store.create("c/a", b'{"count": "x"}')
    seen: list[Counter | None] = []

    done = counters(store).replace("a", lambda c: seen.append(c) or Counter(7), aside=_aside)

    assert seen == [None] and (done.before, done.after, done.written) == (None, Counter(7), True)
    assert store.get("c/a.corrupt-1").data == b'{"count": "x"}'
    assert counters(store).get("a") == Counter(7)


def test_replace_hands_a_readable_record_to_change_and_without_aside_keeps_no_copy():
    store = MemoryStore()
    counters(store).update("a", bump)

    done = counters(store).replace("a", bump)

    assert (done.before, done.after, done.written) == (Counter(1), Counter(2), True)
    assert store.list("c/") == ["c/a"]


def test_replace_creates_an_absent_record_and_keeps_nothing_aside():
    store = MemoryStore()

    done = counters(store).replace("a", bump, aside=_aside)

    assert (done.before, done.after, done.written) == (None, Counter(1), True)
    assert store.list("c/") == ["c/a"]


def test_replace_with_no_change_writes_nothing_and_copies_nothing():
    store = MemoryStore()
    store.create("c/a", b"garbage")

    done = counters(store).replace("a", lambda c: NO_CHANGE, aside=_aside)

    assert (done.before, done.after, done.written) == (None, None, False)
    assert store.list("c/") == ["c/a"] and store.get("c/a").data == b"garbage"


def test_replace_that_loses_a_race_reads_again_and_decides_on_what_won():
    """Another writer lands between the salvage and the put: the replace reads again."""
    store = Interleaved()
    counters(store).update("a", bump)
    store.before["put"].append(lambda: counters(store).update("a", bump))  # theirs lands first
    seen: list[Counter | None] = []

    done = counters(store).replace("a", lambda c: seen.append(c) or Counter(c.count + 10))

    assert seen == [Counter(1), Counter(2)] and done.after == Counter(12)
    assert counters(store).get("a") == Counter(12)


def test_replace_of_an_absent_record_that_another_creates_first_reads_it_again():
    store = Interleaved()
    store.before["create"].append(lambda: counters(store).update("a", bump))
    seen: list[Counter | None] = []

    done = counters(store).replace("a", lambda c: seen.append(c) or Counter(5))

    assert seen == [None, Counter(1)] and counters(store).get("a") == Counter(5)
    assert done.before == Counter(1)


def test_replace_that_keeps_losing_is_a_version_conflict_naming_the_key():
    store = Interleaved()
    counters(store).update("a", bump)
    store.before["put"] = [lambda: _rival(store)] * CAS_ATTEMPTS
    store.calls.clear()

    with pytest.raises(VersionConflict) as caught:
        counters(store).replace("a", bump)

    assert (caught.value.key, caught.value.expected) == ("c/a", None)
    assert store.calls == ["get", "put"] * CAS_ATTEMPTS


def test_replace_never_writes_over_a_copy_already_kept_aside():
    """A second repair in the same second names the same aside key: loud, and nothing moves."""
    store = MemoryStore()
    store.create("c/a", b"first garbage")
    store.create("c/a.corrupt-1", b"an earlier copy")

    with pytest.raises(AlreadyExists):
        counters(store).replace("a", bump, aside=_aside)

    assert store.get("c/a.corrupt-1").data == b"an earlier copy"
    assert store.get("c/a").data == b"first garbage"


def test_a_string_with_a_lone_surrogate_that_json_writes_reads_back_as_it_was():
    """The reason the records' codec is not msgspec: json.dumps writes a lone surrogate as the
    escape "\\ud800", which msgspec cannot read back; a record gpuops wrote would be lost."""
    value = Counter(1, label="x\ud800y")
    data = COUNTERS.encode(value)
    assert b"\\ud800" in data
    assert COUNTERS.decode("c/a", data) == value


def _hand_edited(tmp_path: Any) -> LocalStore:
    """A local store whose record c/a a hand has edited: its body still a counter, but the
    file's checksum no longer matches (the store's `get` refuses it, `salvage` reads it)."""
    store = LocalStore(str(tmp_path))
    counters(store).update("a", bump)
    path = store.root / "c" / "a~"
    path.write_bytes(path.read_bytes().replace(b'"count": 1', b'"count": 5'))
    with pytest.raises(CorruptState, match="checksum mismatch"):
        store.get("c/a")
    return store


def test_update_refuses_a_record_whose_file_the_store_cannot_read_and_leaves_it(tmp_path):
    """update reads through the store's checked `get`: a file whose checksum fails is
    CorruptState, never read past its envelope and written over."""
    store = _hand_edited(tmp_path)
    before = (store.root / "c" / "a~").read_bytes()

    with pytest.raises(CorruptState, match="checksum mismatch"):
        counters(store).update("a", bump)

    assert (store.root / "c" / "a~").read_bytes() == before


def test_replace_reads_past_a_corrupt_envelope_and_keeps_the_file_aside(tmp_path):
    """replace reads through `salvage`, never refused by the envelope: the file's raw bytes
    (its header too) are no counter, so change sees None; the file as it was is kept aside,
    byte for byte, before the repaired record lands."""
    store = _hand_edited(tmp_path)
    raw = (store.root / "c" / "a~").read_bytes()

    done = counters(store).replace("a", bump, aside=_aside)

    assert (done.before, done.after, done.written) == (None, Counter(1), True)
    assert store.get("c/a.corrupt-1").data == raw
    assert counters(store).get("a") == Counter(1)


def test_create_writes_only_an_absent_name_and_says_whether_it_did():
    """Create-if-absent: a taken name, readable or not, is never written over."""
    store = MemoryStore()
    records = counters(store)

    assert records.create("a", Counter(1)) is True
    assert records.create("a", Counter(2)) is False
    store.create("c/b", b"garbage")
    assert records.create("b", Counter(3)) is False

    assert records.get("a") == Counter(1) and store.get("c/b").data == b"garbage"
    assert json.loads(store.get("c/a").data) == {"count": 1, "label": None, "on": False, "ratio": 0.0}
