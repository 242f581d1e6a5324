"""L12: no state line, no freedom; and a job that ended while its VM runs on is never silent.

Against FakeGCE whose boots run the installed script for real (tests/lane_world.py).
"""

from __future__ import annotations

import pytest

from gpuops import timing
from gpuops.errors import Refused, StillRunning
from gpuops.lane import board as b
from gpuops.lane import script
from tests.lane_world import World, lane_world

BUCKET = "gpuops-lane-jobs"
JOB_COMMAND = 'python3 "$WORK/job.py"'
KEY = "lane/gpu-lane/board"
FREEING_WORDS = ("move", "delete", "remove", "free it", "claim it")


def _running(world: World, operator: str, job: str):
    lane = world.lane(operator)
    lane.claim(job)
    lane.install(job, script.render(job, BUCKET, JOB_COMMAND))
    lane.start(job)
    return lane


def _move_board_away(world: World) -> None:
    got = world.store.get(KEY)
    assert got is not None
    world.store.delete(KEY, got.version)


def test_a_board_moved_away_leaves_the_lane_refused_until_repair_restores_the_claim_l12(
    tmp_path, monkeypatch
):
    """L12 (the issue's 12 November replay): the board file is moved away while alice's job
    runs; bob's claim is refused (exit 3, naming L12), and repair rebuilds alice's claim."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=600.0) as world:
        _running(world, "alice", "portraits")
        _move_board_away(world)
        bob = world.lane("bob")

        with pytest.raises(Refused) as refused:
            bob.claim("bobs-job")
        board, signs = bob.repair()
        with pytest.raises(Refused) as after:
            bob.claim("bobs-job")

        assert refused.value.rule == "L12" and refused.value.exit_code == 3
        assert "unknown, not free" in str(refused.value)
        assert (board.state, board.owner, board.job) == (b.RUNNING, "alice", "portraits")
        assert any("RUNNING" in sign for sign in signs)
        assert after.value.rule == "L3"
        assert world.fake.metadata[script.JOB_KEY] == "portraits"


def test_a_corrupt_board_is_refused_and_repair_keeps_a_copy_of_it_l12(tmp_path, monkeypatch):
    """L12: a hand-edited board is unknown, refused; repair copies it aside, never drops it."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        got = world.store.get(KEY)
        assert got is not None
        world.store.put(KEY, b"lane is back to free, promise\n", got.version)

        with pytest.raises(Refused) as refused:
            world.lane("bob").claim("bobs-job")
        board, _ = world.lane("bob").repair()

        assert refused.value.rule == "L12"
        assert not any(word in str(refused.value) for word in FREEING_WORDS)
        assert (board.state, board.owner, board.job) == (b.CLAIMED, "alice", "portraits")
        copies = [k for k in world.store.list("lane/gpu-lane/") if ".corrupt-" in k]
        assert len(copies) == 1
        kept = world.store.get(copies[0])
        assert kept is not None and kept.data == b"lane is back to free, promise\n"


def test_a_lane_nobody_ever_used_is_free_to_claim_without_a_board_l12(tmp_path, monkeypatch):
    """L12: no board and no sign of any claim (TERMINATED, no job metadata, no event)."""
    with lane_world(tmp_path, monkeypatch) as world:
        done = world.lane("alice").claim("portraits")

        assert (done.state, done.owner) == (b.CLAIMED, "alice")


def test_job_metadata_alone_is_evidence_of_a_claim_l12(tmp_path, monkeypatch):
    """L12: TERMINATED, no event, but the metadata names a job: unknown, refused."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.fake.metadata = {script.JOB_KEY: "their-job"}

        with pytest.raises(Refused) as refused:
            world.lane("bob").claim("bobs-job")
        board, _ = world.lane("bob").repair()

        assert refused.value.rule == "L12" and "their-job" in str(refused.value)
        assert (board.state, board.owner, board.job) == (b.CLAIMED, "unknown", "their-job")


def test_after_a_release_the_metadata_names_no_job_and_repair_rebuilds_a_free_lane_l12(
    tmp_path, monkeypatch
):
    """L12: release clears gpuops-job/-attempt; with the board gone, the recent release event
    is still evidence (refused), and repair rebuilds the line it recorded: free."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _running(world, "alice", "portraits")
        alice.watch("portraits")
        world.advance(30.0)
        alice.release("portraits")
        _move_board_away(world)

        with pytest.raises(Refused) as refused:
            world.lane("bob").claim("bobs-job")
        board, _ = world.lane("bob").repair()
        claimed = world.lane("bob").claim("bobs-job")

        assert script.JOB_KEY not in world.fake.metadata
        assert script.ATTEMPT_KEY not in world.fake.metadata
        assert refused.value.rule == "L12"
        assert board.state == b.FREE
        assert (claimed.state, claimed.owner) == (b.CLAIMED, "bob")


def test_a_stale_event_alone_is_no_evidence_once_the_instance_is_idle_l12(tmp_path, monkeypatch):
    """L12: an event older than STALE_CLAIM_S, a TERMINATED instance, no job metadata and no
    claim label (as a claim from before the label fence left it)."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.lane("alice").claim("portraits")
        _move_board_away(world)
        world.fake.labels.clear()
        world.advance(timing.STALE_CLAIM_S + 1.0)

        done = world.lane("bob").claim("bobs-job")

        assert done.owner == "bob"


def _never_powers_off(job: str) -> str:
    """The template with its power-off taken out, as someone might write it by hand."""
    return script.render(job, BUCKET, JOB_COMMAND).replace("  poweroff\n", "")


def test_a_script_installed_around_the_linter_keeps_the_vm_billing_and_watch_says_so_l12(
    tmp_path, monkeypatch
):
    """L12/H4/O1: a script without a power-off, installed directly with the Google client:
    the job succeeds, the fake VM keeps RUNNING, and watch raises a billing alarm (exit 5),
    which reaches the team's receiver (a real HTTP server on loopback) once, though watch and
    the live board both see it."""
    from alarm_receiver import Receiver
    from store_fakes import Events

    from gpuops import alarms as a

    receiver = Receiver()
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = world.lane("alice")
        alice.alarms = a.Alarms(
            alice.store, Events(), [a.AppriseEndpoint(receiver.url)], who="alice/h/1/x"
        )
        alice.claim("portraits")
        alice.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))
        real_start = alice.gce.start

        def swap_then_start(instance: str) -> None:
            # someone's own client replaces the script between gpuops' checks and the start
            inst = alice.gce.get(instance)
            items = {**inst.metadata, script.SCRIPT_KEY: _never_powers_off("portraits")}
            alice.gce.set_metadata(instance, items, inst.fingerprint)
            real_start(instance)

        alice.gce.start = swap_then_start  # type: ignore[method-assign]
        alice.start("portraits")

        with pytest.raises(StillRunning) as alarm:
            alice.watch("portraits")
        view = alice.view(live=True)

        assert alarm.value.exit_code == 5 and "BILLING ALARM" in str(alarm.value)
        assert "portraits" in str(alarm.value) and "RUNNING" in str(alarm.value)
        assert world.fake.status == "RUNNING"
        assert view["billing_alarm"] and view["job_outcome"] == "succeeded"
        assert world.events("lane.billing_alarm")
        assert alice.alarms.flush(timing.ALARM_FLUSH_S)
    receiver.close()
    (heard,) = receiver.received
    assert "portraits" in heard["message"] and "RUNNING" in heard["message"]


def test_a_job_that_ends_between_the_watchers_two_reads_is_judged_by_its_final_status_l9(
    tmp_path, monkeypatch
):
    """L9: the status said running, then the job ended and the VM powered off before the
    instance was read: watch re-reads the status and says succeeded, not a breach."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _running(world, "alice", "portraits")
        real_get = alice.gce.get
        raced = []

        def get_after_the_job_ended(instance: str):  # type: ignore[no-untyped-def]
            if not raced:
                raced.append(True)
                world.advance(120.0)  # the job ends and powers off in between
            return real_get(instance)

        alice.gce.get = get_after_the_job_ended  # type: ignore[method-assign]

        verdict = alice.watch("portraits")

        assert verdict.value == "succeeded" and world.fake.status == "TERMINATED"


def test_watch_says_something_at_least_every_watch_poll_and_never_a_python_repr(
    tmp_path, monkeypatch
):
    """L9: a long stage still prints progress every WATCH_POLL_S; no tuple in any line."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=300.0) as world:
        alice = _running(world, "alice", "portraits")
        times: list[float] = []
        alice.progress = lambda line: (times.append(world.clock.wall()), world.lines.append(line))

        alice.watch("portraits")

        gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
        assert len(times) >= 300 / timing.WATCH_POLL_S
        assert max(gaps) <= timing.WATCH_POLL_S
        assert not any("('" in line or "')" in line for line in world.lines)


def test_install_sets_the_provider_native_ceiling_from_the_declared_length_or_the_default(
    tmp_path, monkeypatch
):
    """L1/L12: install sets scheduling.maxRunDuration with STOP: --max-hours, else the
    script's declared length, else timing.DEFAULT_MAX_RUN_S; gpuops sends no stop."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        ceilings = []
        for text, hours in (
            (script.render("portraits", BUCKET, JOB_COMMAND), None),
            (script.render("portraits", BUCKET, JOB_COMMAND, max_hours=2.5), None),
            (script.render("portraits", BUCKET, JOB_COMMAND, max_hours=2.5), 1.0),
        ):
            alice.install("portraits", text, max_hours=hours)
            ceilings.append((world.fake.max_run_s, world.fake.termination_action))
        seen = alice.gce.get("gpu-lane").scheduling

        assert ceilings == [
            (timing.DEFAULT_MAX_RUN_S, "STOP"),
            (9000.0, "STOP"),
            (3600.0, "STOP"),
        ]
        assert seen["onHostMaintenance"] == "TERMINATE"  # the rest of the block is kept
        assert seen["maxRunDuration"] == {"seconds": "3600"}
        assert not any("stop" in call.lower() for call in world.fake.calls)


def test_the_ceiling_powers_off_a_vm_whose_script_never_does_l12(tmp_path, monkeypatch):
    """L12: GCE's own STOP at maxRunDuration ends a boot whose script has no power-off; the
    guest's SIGTERM still runs the script's traps. gpuops itself never stops it (L1)."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=7200.0) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        alice.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND), max_hours=1)
        inst = alice.gce.get("gpu-lane")
        items = {**inst.metadata, script.SCRIPT_KEY: "#!/bin/bash\nsleep 86400\n"}
        alice.gce.set_metadata("gpu-lane", items, inst.fingerprint)
        world.fake.start()  # started around gpuops, too

        world.advance(15.0 + 3599.0)  # RUNNING at +15 s; the ceiling counts from there
        before = world.fake.status
        world.advance(2.0)
        during = world.fake.status
        world.advance(10.0)

        assert (before, during, world.fake.status) == ("RUNNING", "STOPPING", "TERMINATED")
        assert not any("stop" in call.lower() for call in world.fake.calls)


def test_a_second_repair_by_another_operator_never_names_the_repairer_as_owner_l12(
    tmp_path, monkeypatch
):
    """L12: the board is deleted and repaired by bob twice while alice's job runs; the second
    repair reads bob's own repair event and still names alice (the event's owner, not its
    writer), so bob's install and start are refused and alice's boot is the only one."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=600.0) as world:
        _running(world, "alice", "portraits")
        bob = world.lane("bob")
        _move_board_away(world)
        first, _ = bob.repair()
        _move_board_away(world)
        second, _ = bob.repair()

        with pytest.raises(Refused) as install:
            bob.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))
        with pytest.raises(Refused) as start:
            bob.start("portraits")

        assert (first.owner, second.owner) == ("alice", "alice")
        assert second.state == b.RUNNING and second.job == "portraits"
        assert install.value.exit_code == 3 and start.value.exit_code == 3
        assert world.fake.boots == 1 and world.fake.metadata[script.ATTEMPT_KEY] == "boot1"


def test_a_repair_after_a_repair_that_found_no_owner_still_names_none_l12(tmp_path, monkeypatch):
    """L12: job metadata with no event: bob's repair names owner unknown; after the board is
    lost again, bob's next repair reads his own repair event and still names unknown."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.fake.metadata = {script.JOB_KEY: "their-job"}
        bob = world.lane("bob")
        first, _ = bob.repair()
        _move_board_away(world)
        second, _ = bob.repair()

        assert (first.owner, second.owner) == ("unknown", "unknown")
        assert second.job == "their-job"


def test_repair_reads_a_board_whose_file_was_edited_by_hand_and_keeps_its_raw_bytes_l12(
    tmp_path, monkeypatch
):
    """L12: one character of the local store's board file edited on disk (its checksum no
    longer matches): every command refuses, naming L12, and `lane repair` no longer fails on
    the checksum: it keeps the file's raw bytes aside and rebuilds alice's claim."""
    from gpuops.store.local import LocalStore

    with lane_world(tmp_path, monkeypatch) as world:
        world.store = LocalStore(tmp_path / "state")  # type: ignore[assignment]
        world.lane("alice").claim("portraits")
        path = tmp_path / "state" / "lane" / "gpu-lane" / "board~"
        edited = path.read_bytes().replace(b"state=claimed", b"state=claimeD", 1)
        path.write_bytes(edited)
        bob = world.lane("bob")

        with pytest.raises(Refused) as refused:
            bob.claim("bobs-job")
        board, signs = bob.repair()
        world.lane("alice").install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))

        assert refused.value.rule == "L12" and "checksum" in str(refused.value)
        assert (board.state, board.owner, board.job) == (b.CLAIMED, "alice", "portraits")
        (copy,) = [k for k in world.store.list("lane/gpu-lane/") if ".corrupt-" in k]
        assert world.store.get(copy).data == edited
        assert world.fake.metadata[script.JOB_KEY] == "portraits"


def test_repair_reads_a_garbage_board_file_and_keeps_it_l12(tmp_path, monkeypatch):
    """L12: a board file that is not even the store's format (garbage bytes) is repaired the
    same way, from the evidence, with the garbage kept aside."""
    from gpuops.store.local import LocalStore

    with lane_world(tmp_path, monkeypatch) as world:
        world.store = LocalStore(tmp_path / "state")  # type: ignore[assignment]
        world.lane("alice").claim("portraits")
        path = tmp_path / "state" / "lane" / "gpu-lane" / "board~"
        path.write_bytes(b"\xff\xfe garbage, no header\n")

        board, _ = world.lane("bob").repair()

        assert (board.state, board.owner, board.job) == (b.CLAIMED, "alice", "portraits")
        (copy,) = [k for k in world.store.list("lane/gpu-lane/") if ".corrupt-" in k]
        assert world.store.get(copy).data == b"\xff\xfe garbage, no header\n"


@pytest.mark.parametrize("hours", [0.0001, 0.008, 2880.01, 3000.0])
def test_install_refuses_a_ceiling_outside_gces_bounds_before_anything_is_sent_l12(
    tmp_path, monkeypatch, hours
):
    """L12: GCE refuses a maxRunDuration outside 30 s to 120 days; `lane install --max-hours`
    outside them is a usage error (exit 2) before any call reaches FakeGCE, and the instance
    keeps no script and no ceiling."""
    from gpuops.errors import UsageError

    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        calls = list(world.fake.calls)

        with pytest.raises(UsageError) as refused:
            alice.install(
                "portraits", script.render("portraits", BUCKET, JOB_COMMAND), max_hours=hours
            )

        assert refused.value.exit_code == 2 and "--max-hours" in str(refused.value)
        assert world.fake.calls == calls
        assert world.fake.max_run_s is None and script.SCRIPT_KEY not in world.fake.metadata


def test_install_refuses_a_declared_length_outside_gces_bounds_l12(tmp_path, monkeypatch):
    """L12: a script declaring `# gpuops: max-hours 5000` is refused the same way, naming it."""
    from gpuops.errors import UsageError

    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")

        with pytest.raises(UsageError, match="# gpuops: max-hours"):
            alice.install(
                "portraits", script.render("portraits", BUCKET, JOB_COMMAND, max_hours=5000)
            )

        assert world.fake.max_run_s is None


@pytest.mark.parametrize(
    "max_run_s, action",
    [(None, ""), (3600.0, "DELETE"), (3600.0, "")],
)
def test_start_refuses_an_instance_whose_run_ceiling_is_not_set_l12(
    tmp_path, monkeypatch, max_run_s, action
):
    """L12/L1: the ceiling removed (or set to DELETE the VM) around gpuops after install:
    `lane start` refuses (exit 3, naming L12) before any start; the claim is kept."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        alice.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))
        world.fake.max_run_s, world.fake.termination_action = max_run_s, action

        with pytest.raises(Refused) as refused:
            alice.start("portraits")
        board, _, _ = alice.read()

        assert refused.value.rule == "L12" and refused.value.exit_code == 3
        assert "run ceiling is not set" in str(refused.value)
        assert "POST start" not in world.fake.calls and world.fake.boots == 0
        assert (board.state, board.owner, board.attempt) == (b.CLAIMED, "alice", 0)


@pytest.mark.fault(
    "an old copy of the lane board put back within its claim (a backup, a sync tool)",
    handled="older than the claim journal: refused as unknown, never started again; repair "
    "rebuilds from the journal (L12)",
)
def test_an_old_copy_of_the_board_put_back_is_refused_and_repair_rebuilds_from_the_journal_l12(
    tmp_path, monkeypatch
):
    """L12/L11: the board's bytes from before the start, put back after the job ended (a
    backup restored, a sync tool's stale side), name the same claim, so the label's fence
    lets them through; but they are older than the claim journal beside them. Every command
    refuses them as unknown (a start never boots the job again), and repair rebuilds the
    state line from the journal, keeping the old copy aside (found by the two-host machine)."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = world.lane("alice")
        alice.claim("v")
        alice.install("v", script.render("v", BUCKET, JOB_COMMAND))
        kept = world.store.get(KEY)
        assert kept is not None
        alice.start("v")
        alice.watch("v")
        assert world.fake.boots == 1 and world.fake.status == "TERMINATED"
        now = world.store.get(KEY)
        assert now is not None
        world.store.put(KEY, kept.data, now.version)  # the old copy, past gpuops

        with pytest.raises(Refused) as refused:
            alice.start("v")
        board, signs = world.lane("bob").repair()

        assert refused.value.rule == "L12"
        assert "older than its claim journal's revision" in str(refused.value)
        assert world.fake.boots == 1, "the claim's job booted again from a rewound board"
        assert (board.state, board.owner, board.job, board.attempt) == (
            b.CLAIMED,
            "alice",
            "v",
            1,
        )
        assert signs
        assert alice.read()[0] == board
        aside = [k for k in world.store.list("lane/") if ".corrupt-" in k]
        assert len(aside) == 1 and world.store.get(aside[0]).data == kept.data


def test_a_board_as_new_as_its_journal_is_read_as_it_is_l12(tmp_path, monkeypatch):
    """A board at the journal's revision (every write gpuops makes) reads, and repair leaves
    it alone: only a board behind its journal is unknown."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        claimed = alice.claim("v")

        assert alice.read()[0] == claimed
        assert alice.repair() == (claimed, [])
