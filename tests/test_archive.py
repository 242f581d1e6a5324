"""`gpuops compact`: released history moves to the archive, crash-safe, compare-and-swap."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import time

import pytest
from store_fakes import Events

from fakes.vast.clock import FakeClock
from gpuops import cli, timing
from gpuops.archive import Compaction, archived, compact, due
from gpuops.ledger import GONE_BY_SHOW, Ledger
from gpuops.market.rentals import PREFIX as RENTALS
from gpuops.market.rentals import Rental, Rentals
from gpuops.store.local import LocalStore
from gpuops.store.memory import MemoryStore

NOW = 1_800_000_000.0
OLD = NOW - timing.ARCHIVE_AFTER_S - 60.0
RECENT = NOW - timing.ARCHIVE_AFTER_S + 60.0


def box(store, name: str, at: float, *, release: bool = True, operator: str = "alice") -> None:
    """A ledger record taken through its life at ``at``; released unless told otherwise."""
    ledger = Ledger(store, Events(), operator, clock=FakeClock(at))
    ledger.record_intent(name, "vast")
    ledger.mark_live(name, f"i-{name}")
    if release:
        ledger.begin_destroy(name)
        ledger.confirm_gone(name, GONE_BY_SHOW)
        ledger.release(name)


def rental(store, name: str, state: str, ended_at: float | None, owner: str = "alice") -> None:
    record = Rental(name=name, owner=owner, state=state, race=1, ended_at=ended_at)
    store.create(RENTALS + name, json.dumps(dataclasses.asdict(record)).encode())


def history(store) -> None:
    """Old and recent ended work, live work, and a rental whose box is still recent."""
    box(store, "old+1-0", OLD)
    rental(store, "old", "released", OLD)
    box(store, "gone+1-0", OLD)
    rental(store, "gone", "failed", None)
    box(store, "fresh+1-0", RECENT)
    rental(store, "fresh", "released", OLD)  # its box ended recently: it waits for it
    box(store, "running+1-0", OLD, release=False)
    rental(store, "running", "live", None)
    rental(store, "racing", "racing", None)


def names(store) -> tuple[list[str], list[str]]:
    return (
        sorted(r.name for r in Ledger(store, Events(), "alice").records()),
        sorted(r.name for r in Rentals(store, "alice").all()),
    )


def contents(store) -> set[bytes]:
    return {store.get(k).data for k in store.list("ledger/boxes/") + store.list(RENTALS)} | {
        data for kind in ("boxes", "rentals") for _, data in archived(store, kind)
    }


def test_ended_history_past_the_window_is_archived_and_live_listings_skip_it():
    """Only released/failed records older than the window move; live work is never touched."""
    store = MemoryStore()
    history(store)
    before = contents(store)

    done = compact(store, NOW)

    assert (done.boxes, done.rentals, done.changed) == (2, 2, 0)
    assert names(store) == (["fresh+1-0", "running+1-0"], ["fresh", "racing", "running"])
    assert contents(store) == before  # nothing lost: every record is live or archived
    assert {k.split("/")[2] for k in store.list("ledger/archive/")} == {"2027-01"}


def test_a_second_compaction_finds_nothing_to_move():
    """Idempotent: what was moved is not moved again, nor copied twice."""
    store = MemoryStore()
    history(store)
    compact(store, NOW)
    keys = store.list("")

    again = compact(store, NOW)

    assert (again.boxes, again.rentals, again.changed) == (0, 0, 0) and store.list("") == keys


def archive_places(store) -> list[str]:
    """Each archived record's place, less its digest (intent ids differ run to run)."""
    keys = store.list("ledger/archive/") + store.list("market/archive/")
    return sorted(key.rpartition("/")[0] for key in keys)


class Crash(Exception):
    """The process died here."""


class CrashingStore(MemoryStore):
    """Dies before its ``budget``-th write (create, put or delete) once armed."""

    def __init__(self) -> None:
        super().__init__()
        self.budget: int | None = None
        self.writes = 0

    def _write(self) -> None:
        if self.budget is not None:
            if self.writes == self.budget:
                raise Crash
            self.writes += 1

    def create(self, key: str, data: bytes) -> str:
        self._write()
        return super().create(key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        self._write()
        return super().put(key, data, version)

    def delete(self, key: str, version: str) -> None:
        self._write()
        super().delete(key, version)


def test_a_crash_at_every_write_loses_nothing_and_the_next_compaction_finishes():
    """Killed before each of compaction's writes in turn: no record is lost or archived early,
    and a compaction after the crash ends where an uninterrupted one does."""
    clean = MemoryStore()
    history(clean)
    compact(clean, NOW)
    expected = (names(clean), archive_places(clean))
    writes = 0
    while True:
        store = CrashingStore()
        history(store)
        before = contents(store)
        store.budget = writes
        try:
            compact(store, NOW)
            crashed = False
        except Crash:
            crashed = True
        store.budget = None
        assert contents(store) == before
        assert "running+1-0" in names(store)[0] and "racing" in names(store)[1]

        compact(store, NOW)

        assert (names(store), archive_places(store)) == expected, writes
        if not crashed:
            break
        writes += 1
    assert writes == 8  # a copy and a delete for each of the four records moved


def test_a_record_reused_while_it_is_archived_stays_live():
    """Compare-and-swap: a released name that starts a new intent mid-move is not deleted."""

    class Reuse(MemoryStore):
        def create(self, key: str, data: bytes) -> str:
            version = super().create(key, data)
            if key.startswith("ledger/archive/"):
                Ledger(self, Events(), "alice", clock=FakeClock(NOW)).record_intent("old+1-0", "vast")
            return version

    store = Reuse()
    box(store, "old+1-0", OLD)

    done = compact(store, NOW)

    assert (done.boxes, done.changed) == (0, 1)
    live = Ledger(store, Events(), "alice").get("old+1-0")
    assert live is not None and live.state.value == "intent"
    assert len(archived(store, "boxes")) == 1  # the released self it was, kept for the audit


def test_an_unreadable_record_is_named_and_left_where_it_is():
    """Bad input: a rental that is not JSON is reported, not archived, not fatal."""
    store = MemoryStore()
    store.create(RENTALS + "broken", b"{not json")
    box(store, "old+1-0", OLD)

    done = compact(store, NOW)

    assert done.unreadable == (RENTALS + "broken",) and done.boxes == 1
    assert store.get(RENTALS + "broken") is not None


def test_gpuops_compact_then_boxes_lists_live_work_and_boxes_all_shows_the_archive_too(
    tmp_path, capsys, monkeypatch
):
    """The command line: compact archives old history; `boxes` skips it, `boxes --all` not."""
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("VAST_API_KEY", "k-test")  # boxes builds the adapter; it calls nothing
    state = tmp_path / "state"
    store = LocalStore(str(state))
    ended = time.time() - timing.ARCHIVE_AFTER_S - 3600.0  # compact reads the real clock
    box(store, "old+1-0", ended)
    rental(store, "old", "released", ended)
    rental(store, "racing", "racing", None)
    base = ["--state", str(state), "--operator", "alice", "--json"]

    code = cli.main([*base, "compact"])
    out = capsys.readouterr()
    assert code == 0, out.err
    compacted = json.loads(out.out)
    cli.main([*base, "boxes"])
    live = json.loads(capsys.readouterr().out)
    cli.main([*base, "boxes", "--all"])
    everything = json.loads(capsys.readouterr().out)

    assert code == 0 and (compacted["archived_boxes"], compacted["archived_rentals"]) == (1, 1)
    assert [r["name"] for r in live["rentals"]] == ["racing"]
    assert sorted(r["name"] for r in everything["rentals"]) == ["old", "racing"]


@pytest.mark.parametrize("at", [OLD])
def test_the_archive_is_by_the_month_the_record_ended(at):
    """Keys name the month (UTC) the record was released in."""
    store = MemoryStore()
    box(store, "b+1-0", at)

    compact(store, NOW)

    (key,) = store.list("ledger/archive/")
    assert key.startswith("ledger/archive/2027-01/boxes/b+1-0/")


def live_view(store):
    """What a listing has read: every live box record and rental, any owner."""
    return Ledger(store, Events(), "alice").records(), Rentals(store, "alice").all()


def test_due_says_whether_compact_would_move_anything_of_what_a_listing_read():
    """archive.due is compact's own judgment, decided from records already read."""
    store = MemoryStore()
    history(store)

    assert due(*live_view(store), NOW)
    compact(store, NOW)
    assert not due(*live_view(store), NOW)
    assert compact(store, NOW) == Compaction()


@pytest.mark.parametrize(
    "make",
    [
        lambda s: box(s, "fresh+1-0", RECENT),  # released within the window
        lambda s: box(s, "running+1-0", OLD, release=False),  # may still bill
        lambda s: (box(s, "fresh+1-0", RECENT), rental(s, "fresh", "released", OLD)),
        lambda s: (box(s, "run+1-0", OLD, release=False), rental(s, "run", "failed", None)),
        lambda s: rental(s, "racing", "racing", None),
        lambda s: rental(s, "recent", "released", RECENT),
    ],
)
def test_due_is_false_for_whatever_compact_leaves_live(make):
    """Live work, recent history and a rental whose box is still live are never due."""
    store = MemoryStore()
    make(store)

    assert not due(*live_view(store), NOW)
    assert compact(store, NOW) == Compaction()


@pytest.mark.parametrize(
    "make",
    [
        lambda s: box(s, "old+1-0", OLD),
        lambda s: rental(s, "old", "released", OLD),
        lambda s: rental(s, "never", "failed", None),  # failed before any box
        lambda s: (box(s, "old+1-0", OLD), rental(s, "old", "failed", None)),
    ],
)
def test_due_is_true_for_each_thing_compact_moves(make):
    """A released box record or an ended rental past the window is due, alone."""
    store = MemoryStore()
    make(store)

    assert due(*live_view(store), NOW)
    assert compact(store, NOW) != Compaction()


def boxes_cli(state, capsys, *extra: str) -> tuple[int, dict, str]:
    code = cli.main(["--state", str(state), "--operator", "alice", "--json", "boxes", *extra])
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def old_history(state) -> None:
    store = LocalStore(str(state))
    ended = time.time() - timing.ARCHIVE_AFTER_S - 3600.0  # boxes reads the real clock
    box(store, "old+1-0", ended)
    rental(store, "old", "released", ended)
    rental(store, "racing", "racing", None)


def compaction_lock(state):
    """The lock a background compaction holds while it runs (in the state directory)."""
    return os.open(state / "compact.lock", os.O_RDWR | os.O_CREAT, 0o600)


def test_boxes_archives_old_history_in_the_background_once(tmp_path, capsys, monkeypatch):
    """`boxes` over history nobody compacted lists it and starts `gpuops compact` detached;
    once that ends, the list is short and `boxes --all` still shows everything."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    state = tmp_path / "state"
    old_history(state)

    code, first, err = boxes_cli(state, capsys)
    lock = compaction_lock(state)
    fcntl.flock(lock, fcntl.LOCK_EX)  # the child holds it until it exits: wait for that
    os.close(lock)
    second = boxes_cli(state, capsys)
    everything = boxes_cli(state, capsys, "--all")

    assert code == 0 and sorted(r["name"] for r in first["rentals"]) == ["old", "racing"]
    assert "archived in the background (pid " in err
    assert "archived 1 box record(s) and 1 rental(s)" in (state / "compact.log").read_text()
    assert second[0] == 0 and [r["name"] for r in second[1]["rentals"]] == ["racing"]
    assert second[2] == ""  # nothing left to archive: no second compaction
    assert sorted(r["name"] for r in everything[1]["rentals"]) == ["old", "racing"]


def test_boxes_starts_no_second_compaction_while_one_runs(tmp_path, capsys, monkeypatch):
    """A compaction already running (its lock held) moves this history too: none is started."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    state = tmp_path / "state"
    old_history(state)
    lock = compaction_lock(state)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        code, listed, err = boxes_cli(state, capsys)
    finally:
        os.close(lock)

    assert code == 0 and len(listed["rentals"]) == 2
    assert err == "" and not (state / "compact.log").exists()


def test_boxes_moves_nothing_while_a_record_is_unreadable(tmp_path, capsys, monkeypatch):
    """A corrupt record is a person's decision: boxes names it and starts no compaction."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    state = tmp_path / "state"
    old_history(state)
    LocalStore(str(state)).create(RENTALS + "broken", b"{not json")

    code, listed, err = boxes_cli(state, capsys)

    assert code == 1 and "broken" in err and "background" not in err
    assert not (state / "compact.log").exists()


def test_a_rental_that_failed_before_any_box_is_kept_until_its_deadline_ages_past_the_window():
    """A usage error's rental has no end time; it was archived at once and `boxes` called it
    history "that ended over a week ago". Its deadline stands for its end: kept until that is
    past the window; one with no time at all still goes."""
    store, now = MemoryStore(), time.time()
    fresh = Rental(name="fresh", owner="alice", state="failed", race=1, deadline_at=now + 360)
    old = Rental(name="old", owner="alice", state="failed", race=1,
                 deadline_at=now - timing.ARCHIVE_AFTER_S - 60)  # fmt: skip
    timeless = Rental(name="timeless", owner="alice", state="failed", race=1)

    assert not due([], [fresh], now)
    assert due([], [old], now) and due([], [timeless], now)
    for record in (fresh, old, timeless):
        Rentals(store, "alice").records.update(record.name, lambda _, r=record: r)
    moved = compact(store, now)

    assert moved.rentals == 2
    assert [k.rpartition("/")[2] for k in store.list(RENTALS)] == ["fresh"]
