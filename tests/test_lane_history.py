"""The lane's history and each job's cost: every board transition (and every install) is an
entry of its own in the shared store, which every host reads alike (L13: the evidence lives
in the shared state); `lane release` and `lane watch` say what the job cost and how. Judged
from FakeGCE's clock and the store's own objects, after real boots of the template."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import pytest

from gpuops.cli import lane as cli_lane
from gpuops.clock import WithSleep
from gpuops.errors import JobFailed, UsageError
from gpuops.events import EventLog
from gpuops.lane import board as b
from gpuops.lane import history as h
from gpuops.lane import script
from gpuops.lane.runner import Lane, LaneConfig
from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter
from gpuops.store.memory import MemoryStore
from tests.lane_world import BASE, World, lane_world

BUCKET = "gpuops-lane-jobs"
JOB = "portraits"
JOB_COMMAND = 'python3 "$WORK/job.py"'  # the fake VM image's workload (fakes/gce/boot.py)
USD_PER_HOUR, DISK_USD_PER_DAY = 2.5, 1.2  # configured, not the defaults: they must flow through
HISTORY = "lane-history/gpu-lane/"


def _on_host(
    world: World, operator: str, host: str, progress: Callable[[str], None] | None = None
) -> Lane:
    """``operator``'s Lane on its own host: the same store and provider, its own event log,
    the lane's configured prices."""
    events = EventLog(
        world.events_path.with_name(f"events-{host}.jsonl"),
        operator,
        clock=world.clock,
    )
    s = world.fake.scenario
    clock = WithSleep(world.clock, world.advance)
    boots = iter(range(1, 100))
    return Lane(
        world.store,
        events,
        operator,
        GceAdapter(s.project, s.zone, events=events, endpoint=BASE, clock=clock),
        GcsAdapter(s.bucket, s.project, endpoint=BASE),
        LaneConfig(s.instance, s.bucket, USD_PER_HOUR, DISK_USD_PER_DAY),
        clock=clock,
        new_boot_id=lambda: f"{host}boot{next(boots)}",
        progress=world.lines.append if progress is None else progress,
    )


def _job(lane: Lane, job: str = JOB) -> float:
    """Claim, install, start (riding out the scenario's stockouts); the claim's time."""
    claimed = lane.claim(job).claimed
    lane.install(job, script.render(job, BUCKET, JOB_COMMAND))
    lane.start(job)
    assert claimed is not None
    return claimed


def _expected(running_s: float, held_s: float) -> float:
    return round(running_s / 3600 * USD_PER_HOUR + held_s / 86400 * DISK_USD_PER_DAY, 4)


def _args(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"history": True, "limit": None, "live": False, **given})


def test_release_says_what_the_job_cost_from_the_clock_and_the_configured_price(
    tmp_path, monkeypatch, capsys
):
    """Release's cost: running from the first boot to the status file's last write (60 s of
    fake time), the disk from the claim to the release, at the configured prices; the same
    figure in its output, its --json, the history entry and the lane.job_end event."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, starts=["stockout"]) as world:
        alice = _on_host(world, "alice", "a")
        claimed = _job(alice)
        started = alice.read()[0].started
        alice.watch(JOB)
        held_s = world.clock.wall() - claimed  # until the release is asked
        released = alice.release_job(JOB)

        cost = released.cost
        assert started is not None and cost.running_s == 60.0 and cost.held_s == held_s
        assert (cost.usd_per_hour, cost.disk_usd_per_day) == (USD_PER_HOUR, DISK_USD_PER_DAY)
        assert cost.cost_usd == _expected(60.0, held_s) > 0
        assert (released.outcome, released.attempts, released.stockouts) == ("succeeded", 2, 1)
        assert released.waiting_s == started - claimed
        (end,) = [e for e in _events(world, "a") if e["kind"] == "lane.job_end"]
        assert end["payload"]["cost_usd"] == cost.cost_usd
        assert end["payload"]["running_s"] == 60.0
        last = alice.history(1).entries[-1][1]
        assert (last.kind, last.job, last.owner, last.outcome) == (
            "released",
            JOB,
            "alice",
            "succeeded",
        )
        assert last.cost == cost

        cli_lane._released_out(False, released)
        out = capsys.readouterr().out.splitlines()
        cli_lane._released_out(True, released)
        doc = json.loads(capsys.readouterr().out)

        assert out[0] == "lane gpu-lane released; it is free"
        assert out[1].startswith(
            f"job {JOB}: succeeded after 2 attempt(s), 1 stockout(s); cost ${cost.cost_usd:.4f} "
            f"= running 0.017 h x $2.50/h + disk held {held_s / 86400:.3f} d x $1.20/d"
        )
        assert "configured prices" in out[1] and "GCE's API returns no price" in out[1]
        assert doc["state"] == "free"
        assert doc["job_end"] == {
            "job": JOB,
            "outcome": "succeeded",
            "attempts": 2,
            "stockouts": 1,
            "waiting_s": started - claimed,
            "cost_usd": cost.cost_usd,
            "running_s": 60.0,
            "held_s": held_s,
            "usd_per_hour": USD_PER_HOUR,
            "disk_usd_per_day": DISK_USD_PER_DAY,
            "price": "configured",
        }


def _events(world: World, host: str) -> list[dict[str, object]]:
    path = world.events_path.with_name(f"events-{host}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_watch_shows_the_cost_so_far_while_the_job_runs_and_the_final_figure_once_it_ended(
    tmp_path, monkeypatch, capsys
):
    """Watch's lines carry the cost so far (running since the board's `started`, held since
    `claimed`); once the job ended, its final figure: running stops at the job's end."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=120.0) as world:
        said: list[tuple[str, float]] = []
        alice = _on_host(world, "alice", "a", lambda line: said.append((line, world.clock.wall())))
        claimed = _job(alice)
        started = alice.read()[0].started
        assert started is not None
        said.clear()

        watched = alice.watch_job(JOB)
        now = world.clock.wall()

        so_far = [(line, at) for line, at in said if "cost so far" in line]
        assert len(so_far) >= 2, said
        # each line's figure is the fake clock's elapsed time at the configured prices
        for line, at in so_far:
            figure = line.split("cost so far $")[1].split(" ")[0]
            assert figure == f"{_expected(at - started, at - claimed):.4f}", line
        assert watched.verdict.value == "succeeded" and watched.cost is not None
        assert watched.cost.running_s == 120.0
        assert watched.cost.held_s == now - claimed
        assert watched.cost.cost_usd == _expected(120.0, now - claimed)
        final = said[-1][0]
        assert final.startswith(f"{JOB}: succeeded; cost ${watched.cost.cost_usd:.4f} = running")
        assert "GCE's API returns no price" in final

        cli_lane._watched_out(False, JOB, watched)
        line = capsys.readouterr().out.strip()
        cli_lane._watched_out(True, JOB, watched)
        doc = json.loads(capsys.readouterr().out)

        assert line == f"{JOB}: succeeded; cost so far {watched.cost.explained()}"
        assert doc["outcome"] == "succeeded" and doc["cost"]["price"] == "configured"
        assert (
            doc["cost"]["running_s"] == 120.0 and doc["cost"]["cost_usd"] == watched.cost.cost_usd
        )


def test_a_failed_job_s_watch_says_its_final_cost_before_it_exits_6(tmp_path, monkeypatch):
    """A failed job (a broken import at preflight): watch says the final cost, then exit 6."""
    with lane_world(tmp_path, monkeypatch, broken_imports=["torch"]) as world:
        alice = _on_host(world, "alice", "a")
        _job(alice)

        with pytest.raises(JobFailed):
            alice.watch_job(JOB)

        assert world.lines[-1].startswith(f"{JOB}: failed; cost $")


def test_two_operators_on_two_hosts_read_the_same_history_with_each_job_s_outcome_and_cost(
    tmp_path, monkeypatch, capsys
):
    """L13's shared evidence: alice's job on host a (a stockout, a boot, a release) and bob's
    claim on host b are one history, oldest first, that both hosts read alike; the release
    entry carries alice's job's outcome and cost."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, starts=["stockout"]) as world:
        alice, bob = _on_host(world, "alice", "a"), _on_host(world, "bob", "b")
        _job(alice)
        alice.watch(JOB)
        released = alice.release_job(JOB)
        bob.claim("vids")

        seen_by_alice, seen_by_bob = alice.history(50), bob.history(50)
        cli_lane._history(bob, _args(), False)
        out = capsys.readouterr().out.splitlines()

        assert seen_by_alice == seen_by_bob
        page = seen_by_bob
        rows = [(e.kind, e.writer, e.job, e.attempt, e.stockouts, e.state) for _, e in page.entries]
        assert rows == [
            ("claimed", "alice", JOB, 0, 0, b.CLAIMED),
            ("installed", "alice", JOB, 0, 0, b.CLAIMED),
            ("attempt", "alice", JOB, 1, 0, b.STARTING),
            ("stockout", "alice", JOB, 1, 1, b.CLAIMED),
            ("attempt", "alice", JOB, 2, 1, b.STARTING),
            ("started", "alice", JOB, 2, 1, b.RUNNING),
            ("released", "alice", JOB, 2, 1, b.FREE),
            ("claimed", "bob", "vids", 0, 0, b.CLAIMED),
        ]
        keys = [key.removeprefix(HISTORY) for key, _ in page.entries]
        assert keys[:3] == ["000000000001", "000000000001.001", "000000000002"]
        assert [e.revision for _, e in page.entries] == [1, 1, 2, 3, 4, 5, 6, 7]
        assert (page.total, page.window, page.corrupt, page.missing) == (8, 8, (), ())
        assert page.entries[6][1].cost == released.cost
        assert out[0] == (
            "lane gpu-lane: the last 8 of 8 history entries, oldest first (times UTC, each "
            "writer's clock)"
        )
        first = page.entries[0][1]
        assert out[1].startswith(f"  r1 {b.stamp(first.at)} alice claimed -> claimed: {JOB} ")
        assert f"job succeeded, cost ${released.cost.cost_usd:.4f}" in out[7]
        assert out[-1].startswith("costs are at the lane's configured prices")


def test_limit_shows_the_newest_entries_and_json_carries_every_field(tmp_path, monkeypatch, capsys):
    """--limit N: the newest N, oldest first, and how many there are in all; --json gives each
    entry's fields with its key."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _on_host(world, "alice", "a")
        _job(alice)

        cli_lane._history(alice, _args(limit=2), True)
        doc = json.loads(capsys.readouterr().out)

        assert doc["total"] == 4 and doc["lane"] == "gpu-lane"
        assert [e["kind"] for e in doc["entries"]] == ["attempt", "started"]
        assert doc["entries"][0]["key"] == HISTORY + "000000000002"
        assert doc["entries"][1]["attempt"] == 1 and doc["entries"][1]["cost_usd"] is None
        assert doc["corrupt"] == [] and doc["missing_revisions"] == []


@pytest.mark.fault(
    "a lane history entry is corrupt (bytes edited by hand, a misnamed object)",
    handled="named on stderr and skipped; every other entry is shown and the command exits 0",
)
def test_a_corrupt_history_entry_blocks_only_itself(tmp_path, monkeypatch, capsys):
    """One entry's bytes are garbage, another's revision is not its name's, and a stray key
    sits under the prefix: each is named and skipped, the rest shown."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _on_host(world, "alice", "a")
        _job(alice)
        store = world.store
        found = store.get(HISTORY + "000000000002")
        assert found is not None
        store.put(HISTORY + "000000000002", b"{not json", found.version)
        moved = store.get(HISTORY + "000000000003")
        assert moved is not None
        store.put(
            HISTORY + "000000000003",
            moved.data.replace(b'"revision": 3', b'"revision": 9'),
            moved.version,
        )
        store.create(HISTORY + "notes.txt", b"hello")

        code = cli_lane._history(alice, _args(), False)
        captured = capsys.readouterr()

        assert code == 0
        err = captured.err.splitlines()
        assert len(err) == 3
        assert err[0].startswith(f"history entry {HISTORY}notes.txt is unreadable, skipped: ")
        assert err[1].startswith(f"history entry {HISTORY}000000000002 is unreadable, skipped: ")
        assert "not JSON" in err[1]
        assert err[2].endswith("skipped: its revision is 9, its name 3")
        shown = [line.strip().split(" ")[0] for line in captured.out.splitlines()[1:]]
        assert shown == ["r1", "r1.001"]
        assert captured.out.splitlines()[0].startswith("lane gpu-lane: the last 4 of 4 ")


def test_a_lost_board_s_history_stays_readable_and_its_repair_goes_on_past_it_l12(
    tmp_path, monkeypatch
):
    """L12/L13: alice's board is deleted; bob on another host still reads every entry, and his
    repair is recorded under the next revision, never over one of hers."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _on_host(world, "alice", "a")
        _job(alice)
        got = world.store.get("lane/gpu-lane/board")
        assert got is not None
        world.store.delete("lane/gpu-lane/board", got.version)
        journal = world.store.get("lane/gpu-lane/journal")
        assert journal is not None
        world.store.delete("lane/gpu-lane/journal", journal.version)  # the journal lost too
        bob = _on_host(world, "bob", "b")

        before = bob.history(50)
        board, _ = bob.repair()
        after = bob.history(50)

        assert [e.kind for _, e in before.entries] == ["claimed", "installed", "attempt", "started"]
        assert board.revision == 4 and board.owner == "unknown"
        assert after.entries[:4] == before.entries
        key, repair = after.entries[-1]
        assert key == HISTORY + "000000000004" and repair.kind == "repaired"
        assert repair.writer == "bob" and "repaired the state line from" in repair.what


def test_a_board_lost_with_its_journal_goes_on_from_the_history_s_revision(tmp_path, monkeypatch):
    """A released lane whose board and journal are both gone: the fresh board goes on from the
    history's last revision, so the next claim's entry is a revision of its own (and the
    journal records it: it never goes back a revision)."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _on_host(world, "alice", "a")
        _job(alice)
        alice.watch(JOB)
        alice.release(JOB)
        for key in ("lane/gpu-lane/board", "lane/gpu-lane/journal"):
            found = world.store.get(key)
            assert found is not None
            world.store.delete(key, found.version)

        claimed = _on_host(world, "bob", "b").claim("vids")

        assert claimed.revision == 5
        key, entry = alice.history(1).entries[-1]
        assert key == HISTORY + "000000000005" and (entry.kind, entry.writer) == ("claimed", "bob")
        journal = world.store.get("lane/gpu-lane/journal")
        assert journal is not None and json.loads(journal.data)["revision"] == 5


def _entry(revision: int, kind: str = "claimed") -> h.Entry:
    return h.Entry("L", revision, kind, "claimed", "a", "j", 0, 0, 1, 0.0, "a", "x")


def test_an_entry_never_overwrites_another_of_the_same_revision():
    """Create-if-absent: a second entry under a taken revision (an install, a reused number)
    takes the next name, and both read back, in order."""
    store = MemoryStore()

    first = h.append(store, "I", _entry(3))
    second = h.append(store, "I", _entry(3, "repaired"))
    install = h.append(store, "I", _entry(3, "installed"), first=1)
    h.append(store, "I", _entry(12))
    page = h.read(store, "I", 10)

    assert (first, second, install) == (
        "lane-history/I/000000000003",
        "lane-history/I/000000000003.001",
        "lane-history/I/000000000003.002",
    )
    assert [e.kind for _, e in page.entries] == ["claimed", "repaired", "installed", "claimed"]
    assert page.missing == tuple(range(4, 12)) and h.last_revision(store, "I") == 12


def test_names_order_by_revision_then_number_not_as_text():
    """r3.010 comes after r3.002, and neither before r3; other names are not entries."""
    assert h.order("000000000003") == (3, 0)
    assert h.order("000000000003.010") == (3, 10)
    assert h.order("3") is None and h.order("000000000003.1") is None
    assert h.name(3, 0) == "000000000003" and h.name(3, 10) == "000000000003.010"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"limit": 0}, "--limit must be at least 1"),
        ({"live": True}, "leave out --live"),
        ({"history": False, "limit": 5}, "--limit goes with --history"),
    ],
)
def test_history_flags_that_make_no_sense_are_usage_errors(given, message):
    """Exit 2 naming the flag, before the store is read."""
    with pytest.raises(UsageError, match=message):
        cli_lane._history(None, _args(**given), False)
