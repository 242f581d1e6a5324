"""`gpuops lane board` without --live reads the store alone (lane/stored.py's StoredLane, no
runner): it says what `lane board --live` says of the board, and a missing board is still
decided by the instance's evidence (L12), through the full Lane.

In-process `gpuops` against FakeGCE (tests/lane_world.py), over a local state store (the CLI's
clock is the real one: nothing here waits on a fake operation).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuops import cli
from gpuops.alarms import silent
from gpuops.errors import StoreForbidden
from gpuops.events import EventLog
from gpuops.lane import board as b
from gpuops.lane import script
from gpuops.lane.stored import LaneConfig, StoredLane
from gpuops.store.local import LocalStore
from gpuops.store.memory import MemoryStore
from tests.lane_world import BASE, World, lane_world

# what only --live reads, and what the two reads' clocks make differ by a hair
LIVE_ONLY = {"status", "last_log_line", "job_outcome", "held_s", "cost_usd"}


@pytest.fixture
def world(tmp_path, monkeypatch):
    with lane_world(tmp_path, monkeypatch) as world:
        for name in [n for n in os.environ if n.startswith("GPUOPS_")]:
            monkeypatch.delenv(name)
        s = world.fake.scenario
        env = {
            "GPUOPS_CONFIG": os.devnull,
            "GPUOPS_STATE": str(tmp_path / "state"),
            "GPUOPS_GCE_ENDPOINT": BASE,
            "GPUOPS_LANE_PROJECT": s.project,
            "GPUOPS_LANE_ZONE": s.zone,
            "GPUOPS_LANE_INSTANCE": s.instance,
            "GPUOPS_LANE_BUCKET": s.bucket,
            "XDG_STATE_HOME": str(tmp_path),
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield world


def gpuops(capsys, operator: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["--operator", operator, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_stored_board_reads_as_live_reads_it_but_for_what_only_live_asks(world: World, capsys):
    """The state line, owner, job, counts, STALE and the board's lines are the store's: the
    same with and without --live; without it the instance is not asked (status None)."""
    held = b.Board("gpu-lane", "gpu-lane", 1.8e9, state=b.CLAIMED, owner="alice", job="portraits",
                   claimed=1.8e9, epoch=1)  # fmt: skip
    LocalStore(os.environ["GPUOPS_STATE"]).create(
        "lane/gpu-lane/board", b.render(held, ["alice: claimed"]).encode()
    )

    code, out, err = gpuops(capsys, "bob", "--json", "lane", "board")
    live_code, live_out, _ = gpuops(capsys, "bob", "--json", "lane", "board", "--live")

    stored, live = json.loads(out), json.loads(live_out)
    assert (code, live_code, err) == (0, 0, "")
    assert (stored["state"], stored["owner"], stored["job"]) == (b.CLAIMED, "alice", "portraits")
    assert stored["status"] is None and live["status"] == "TERMINATED"
    assert {k: v for k, v in stored.items() if k not in LIVE_ONLY} == {
        k: v for k, v in live.items() if k not in LIVE_ONLY
    }


def test_a_missing_board_is_refused_on_the_instance_s_evidence_with_and_without_live_l12(
    world: World, capsys
):
    """L12: no board, but the instance's metadata names a job: `lane board` asks the instance
    (the full Lane's evidence) and refuses, exit 3, as `lane board --live` does."""
    world.fake.metadata = {script.JOB_KEY: "their-job"}

    code, _, err = gpuops(capsys, "bob", "lane", "board")
    live_code, _, live_err = gpuops(capsys, "bob", "lane", "board", "--live")

    assert code == live_code == 3
    assert "refused (L12)" in err and "their-job" in err
    assert err == live_err
    assert LocalStore(os.environ["GPUOPS_STATE"]).get("lane/gpu-lane/board") is None


def test_a_missing_board_with_no_sign_of_a_claim_reads_as_a_free_lane_l12(world: World, capsys):
    """L12: no board and nothing says the lane is held: a free board, as --live shows it."""
    code, out, err = gpuops(capsys, "bob", "--json", "lane", "board")

    view = json.loads(out)
    assert (code, err) == (0, "")
    assert (view["state"], view["owner"], view["status"]) == (b.FREE, None, None)


def test_a_missing_board_proved_free_is_written_so_every_later_look_is_the_store_s_alone_l12(
    world: World, capsys
):
    """L12, and speed: the first look at a lane with no board asks the instance; the free board
    it proves is written (create-if-absent), with a line saying how it was decided, so the next
    look, by another operator from another store client, asks the provider nothing."""
    code, out, err = gpuops(capsys, "bob", "--json", "lane", "board")
    asked = list(world.fake.calls)

    stored = LocalStore(os.environ["GPUOPS_STATE"]).get("lane/gpu-lane/board")
    assert (code, err) == (0, "") and json.loads(out)["state"] == b.FREE
    assert asked and stored is not None
    board, lines = b.parse(stored.data.decode(), "board")
    assert (board.state, board.owner, board.revision) == (b.FREE, None, 0)
    assert len(lines) == 1 and lines[0].endswith(
        " bob: no board was stored, and neither the instance nor the claim journal showed a "
        "claim (L12): the lane is free"
    )

    again, out, err = gpuops(capsys, "alice", "--json", "lane", "board")

    assert (again, err) == (0, "") and world.fake.calls == asked  # no provider call at all
    view = json.loads(out)
    assert (view["state"], view["history"], view["history_lines"]) == (b.FREE, lines, 1)


def test_history_with_live_is_refused_before_anything_is_read(world: World, capsys):
    """`--history` reads the store alone: with --live it is a usage error (exit 2), as before."""
    code, out, err = gpuops(capsys, "bob", "lane", "board", "--history", "--live")

    assert (code, out) == (2, "")
    assert "--history reads the store alone: leave out --live" in err


class ReadOnlyStore(MemoryStore):
    """A store whose key may read and not write (an operator given a read-only key)."""

    def create(self, key: str, data: bytes) -> str:
        raise StoreForbidden(f"s3 create {key}: AccessDenied (read-only key)")


def _stored_lane(store: MemoryStore, fresh: Callable[[], b.Board]) -> StoredLane:
    events = EventLog(Path(os.devnull), "bob")
    return StoredLane(
        store,
        LaneConfig("gpu-lane", "bucket"),
        alarms=silent(events),
        fresh=fresh,
        operator="bob",
    )


def test_a_claim_landing_while_the_free_board_is_proved_is_read_never_written_over_l12():
    """L12/L13: alice's claim writes its board between bob's evidence read and bob's write;
    bob's create-if-absent loses, and what he reads and what the store keeps is her claim."""
    store = MemoryStore()
    held = b.Board("gpu-lane", "gpu-lane", 1.8e9, state=b.CLAIMED, owner="alice", job="portraits",
                   claimed=1.8e9, epoch=1)  # fmt: skip

    def fresh_while_alice_claims() -> b.Board:
        store.create("lane/gpu-lane/board", b.render(held, ["alice: claimed"]).encode())
        return b.Board("gpu-lane", "gpu-lane", 1.8e9)

    board, history, _ = _stored_lane(store, fresh_while_alice_claims).read()

    assert (board, history) == (held, ["alice: claimed"])
    kept = store.get("lane/gpu-lane/board")
    assert kept is not None and b.parse(kept.data.decode(), "board")[0] == held


def test_a_read_only_key_still_reads_a_proved_free_lane_and_writes_nothing_l12():
    """A store that refuses the write leaves the answer as the evidence gave it: free."""
    store = ReadOnlyStore()
    free = b.Board("gpu-lane", "gpu-lane", 1.8e9)

    assert _stored_lane(store, lambda: free).read() == (free, [], None)
    assert store.get("lane/gpu-lane/board") is None
