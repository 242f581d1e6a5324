"""One stamp form on disk and one parser (gpuops/timestamps.py): what every reader and writer of
a stored instant goes through."""

from __future__ import annotations

import time

import pytest
from store_fakes import WallOf
from hypothesis import given
from hypothesis import strategies as st

from gpuops import timestamps as ts
from gpuops.ledger import Ledger
from gpuops.store.memory import MemoryStore

def test_the_one_form_is_utc_with_microseconds_and_z():
    assert ts.utc_iso(0) == "1970-01-01T00:00:00.000000Z"
    assert ts.utc_iso(1796029925.25) == "2026-11-30T09:12:05.250000Z"
    assert ts.FORMAT == "%Y-%m-%dT%H:%M:%S.%fZ"


@given(st.floats(min_value=0, max_value=4102444800, allow_nan=False))
def test_every_written_stamp_reads_back_to_the_microsecond_and_sorts_as_text(epoch):
    text = ts.utc_iso(epoch)
    assert len(text) == 27 and text.endswith("Z")
    assert abs(ts.epoch_of(text) - epoch) < 1e-6
    later = ts.utc_iso(epoch + 1.5)
    assert text < later


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-11-30T09:12:05Z", 1796029925.0),  # the lane board before the one form
        ("2026-11-30T09:12:05+00:00", 1796029925.0),  # isoformat(): box records before it
        ("2026-11-30T09:12:05.500000+00:00", 1796029925.5),
        ("2026-11-30T11:12:05+02:00", 1796029925.0),  # another offset: the same instant
    ],
)
def test_the_forms_earlier_versions_wrote_read_as_the_same_instant(text, epoch):
    assert ts.epoch_of(text) == epoch
    assert ts.moment(text).timestamp() == epoch


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("2026-11-30T09:12:05", "names no UTC offset"),  # naive: read in each host's own zone
        ("2026-11-30", "names no UTC offset"),
        ("yesterday", "Invalid isoformat"),
        ("2026-02-30T09:12:05Z", "day is out of range"),
        ("", "Invalid isoformat"),
    ],
)
def test_a_stamp_that_names_no_instant_is_a_value_error_naming_it(text, said):
    with pytest.raises(ValueError, match=said):
        ts.epoch_of(text)


@pytest.mark.parametrize(
    ("value", "named"), [(None, "NoneType"), (1796029925.0, "float"), (b"2026-11-30Z", "bytes")]
)
def test_a_stamp_that_is_not_text_is_a_value_error_never_a_type_error(value, named):
    with pytest.raises(ValueError, match=f"^a timestamp is text, not {named}$"):
        ts.epoch_of(value)  # type: ignore[arg-type]


def test_a_stamp_is_written_in_utc_whatever_the_writers_own_zone(monkeypatch):
    """Two hosts in different zones write one instant as one stamp."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert ts.utc_iso(0) == "1970-01-01T00:00:00.000000Z"
        assert ts.utc_iso(1796029925.25) == "2026-11-30T09:12:05.250000Z"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_naive_stamp_is_never_read_in_the_readers_own_zone(monkeypatch):
    """A record edited by hand to a time with no offset was read by datetime's .timestamp() in
    the reading host's zone: a deadline five hours later on a host in New York. It is refused."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        with pytest.raises(ValueError):
            ts.epoch_of("2026-11-30T09:12:05")
        assert ts.epoch_of("2026-11-30T09:12:05Z") == 1796029925.0
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_a_box_record_with_a_naive_deadline_is_corrupt_not_shifted_by_the_readers_zone():
    """The ledger's field check is the one parser: a hand's edit that drops the offset makes the
    record corrupt (named, skipped by readers that skip), never a deadline read in local time."""
    store = MemoryStore()
    ledger = Ledger(store, _Events(), "alice", clock=WallOf(lambda: 1796029925.0))
    ledger.record_intent("box-1", "vast", deadline_at=ts.utc_iso(1796033525.0), rental_id="r1")
    (key,) = store.list("ledger/")
    found = store.get(key)
    assert found is not None and b"2026-11-30T10:12:05.000000Z" in found.data
    store.put(key, found.data.replace(b"2026-11-30T10:12:05.000000Z", b"2026-11-30T10:12:05"),
              found.version)  # fmt: skip
    assert ledger.records(skip_corrupt=True) == []


class _Events:
    def append(self, kind: str, /, **payload: object) -> None:
        pass
