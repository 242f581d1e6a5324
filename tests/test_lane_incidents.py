"""Every incident of the lane seed (docs/rules.md), replayed against FakeGCE through the real
google SDK clients: each ends as the seed's prevention rule says (refused, loud, recovered).

    the stop that stopped the wrong job (2 Nov)   ..._refused_and_nothing_is_stopped_l2,
                                                  ..._loud_noop_and_the_claim_is_kept_l2,
                                                  test_lane_safety.py (no stop anywhere, L1)
    the board showing an older attempt (10 Nov)   ..._never_shows_an_older_attempt_..._l3
    "back to free" read as state (12 Nov)         test_back_to_free_in_prose_never_frees_the_lane_l3
                                                  and test_lane_board.py's property tests
    the job-name typo, 93 s, reports misfiled     ..._misspelt_job_name_is_refused_..._l4
                                                  (and test_fake_gce.py: where the reports went)
    the shared environment broken twice          ..._broken_import_ends_the_job_at_preflight_..._l6,
                                                  ..._too_little_disk_ends_the_job_at_preflight_l6
    the reused script and its unstaged inputs     ..._reused_script_is_refused_until_..._l10
    thirteen attempts; five more stockouts       ..._thirteen_attempts_keep_the_claim_..._l7
    the retry that died after eight stockouts     ..._died_after_eight_stockouts_..._l11 (and L8)
    the watcher that timed out at two of six      ..._watcher_timeout_is_not_a_failure_..._l9
    the initial upload failure (no reports)       test_lane_script.py: final log with the
                                                  gsutil-to-REST fallback is required (L5)
"""

from __future__ import annotations

import pytest

from gpuops import timing
from gpuops.errors import JobFailed, Refused, StateError, StillRunning, Unavailable
from gpuops.lane import board as b
from gpuops.lane import script
from tests.lane_world import World, lane_world

BUCKET = "gpuops-lane-jobs"
JOB_COMMAND = 'python3 "$WORK/job.py"'  # the fake VM image's workload (fakes/gce/boot.py)


def _ready(world: World, operator: str, job: str, **kwargs: object):
    """Claim, and install a contract-keeping script for ``job``; the operator's Lane."""
    lane = world.lane(operator)
    lane.claim(job)
    lane.install(job, script.render(job, BUCKET, JOB_COMMAND, **kwargs))  # type: ignore[arg-type]
    return lane


@pytest.mark.fault(
    "a start while another job runs",
    handled="refused before the start call: the VM must be TERMINATED; nothing is stopped (L2)",
)
def test_a_start_over_a_running_job_is_refused_and_nothing_is_stopped_l2(tmp_path, monkeypatch):
    """L1/L2/L12 (the stop that stopped the wrong job): the instance runs someone else's batch
    and there is no board yet: the lane is unknown, not free, so claim, install and start are
    all refused before any start or metadata call, and nothing ever stops that boot."""
    with lane_world(tmp_path, monkeypatch, running_job="portrait-batch") as world:
        world.advance(30.0)
        lane = world.lane("alice")

        with pytest.raises(Refused) as claim:
            lane.claim("validation")
        with pytest.raises(Refused) as install:
            lane.install("validation", script.render("validation", BUCKET, "true"))
        with pytest.raises(Refused) as start:
            lane.start("validation")

        assert (claim.value.rule, install.value.rule, start.value.rule) == ("L12",) * 3
        assert "not free" in str(claim.value) and "RUNNING" in str(claim.value)
        assert not any("start" in call or "setMetadata" in call for call in world.fake.calls)
        world.advance(700.0)
        assert world.fake.objects["jobs/portrait-batch/status"].startswith(b"succeeded")


@pytest.mark.fault(
    "a start on a running VM is a silent no-op at the provider",
    handled="no boot marker of this attempt: reported loudly as not your job; the claim is kept (L2)",
)
def test_a_start_that_lands_on_another_boot_is_a_loud_noop_and_the_claim_is_kept_l2(
    tmp_path, monkeypatch
):
    """L2: the instance was TERMINATED when checked, another operator's boot began before our
    start landed; start answered DONE with no error, our boot marker never came: loud refusal,
    outcome noop, claim kept, the other job untouched and finished."""
    with lane_world(tmp_path, monkeypatch) as world:
        lane = _ready(world, "alice", "validation")
        real_start = lane.gce.start

        def raced_start(instance: str) -> None:
            world.fake.foreign_start("portrait-batch")
            real_start(instance)

        lane.gce.start = raced_start  # type: ignore[method-assign]

        with pytest.raises(Refused) as refused:
            lane.start("validation", max_attempts=1)

        assert refused.value.rule == "L2" and "silent no-op" in str(refused.value)
        assert [e["outcome"] for e in world.events("lane.start")] == ["noop"]
        board, _, _ = lane.read()
        assert (board.state, board.owner, board.job) == (b.CLAIMED, "alice", "validation")
        world.advance(700.0)
        assert world.fake.objects["jobs/portrait-batch/status"].startswith(b"succeeded")


def test_the_board_never_shows_an_older_attempt_than_the_one_running_l3(tmp_path, monkeypatch):
    """L3 (10 November): the attempt on the board moves in the same write as the start."""
    with lane_world(tmp_path, monkeypatch, starts=("stockout",) * 3) as world:
        lane = _ready(world, "alice", "validation")

        done = lane.start("validation")

        attempts = [e["attempt"] for e in world.events("lane.start")]
        assert attempts == [1, 2, 3, 4]
        assert (done.state, done.attempt, done.stockouts) == (b.RUNNING, 4, 3)
        assert world.fake.metadata[script.ATTEMPT_KEY] == done.boot


@pytest.mark.fault(
    '"back to free" in the board\'s prose was read as the lane\'s state',
    handled='only the machine-readable state line is parsed; prose never changes the state (L3)',
)
def test_back_to_free_in_prose_never_frees_the_lane_l3(tmp_path, monkeypatch):
    """L3 (12 November): the history says "back to free"; the state line says claimed, and
    the second session can neither claim nor overwrite the claimant's script."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _ready(world, "alice", "portraits")
        alice.start("portraits")
        world.advance(200.0)
        alice.release("portraits")
        alice = _ready(world, "alice", "validation")
        installed = dict(world.fake.metadata)
        bob = world.lane("bob")
        _, history, _ = bob.read()
        assert any("back to free" in line for line in history)

        with pytest.raises(Refused) as claim:
            bob.claim("bobs-job")
        with pytest.raises(Refused) as install:
            bob.install("validation", script.render("validation", BUCKET, "rm -rf /work"))

        assert claim.value.rule == "L3" and install.value.rule == "L4"
        assert world.fake.metadata == installed


@pytest.mark.fault(
    "a typo'd job name in the startup script filed every report under the typo",
    handled="install refused before anything boots (exit 3, L4)",
)
def test_a_misspelt_job_name_is_refused_before_anything_boots_l4(tmp_path, monkeypatch):
    """L4 (the ninety-three seconds): JOB="valiidation" against the claim "validation" is
    refused at install; no metadata is written and no boot happens."""
    with lane_world(tmp_path, monkeypatch) as world:
        lane = world.lane("alice")
        lane.claim("validation")
        typo = script.render("validation", BUCKET, "true").replace(
            'JOB="validation"', 'JOB="valiidation"'
        )

        with pytest.raises(Refused) as refused:
            lane.install("validation", typo)

        assert refused.value.rule == "L4" and "'valiidation'" in str(refused.value)
        assert world.fake.metadata == {} and world.fake.boots == 0


@pytest.mark.fault(
    "broken imports in a shared environment wasted whole boots",
    handled="the preflight gate ends the job at once, with the reason in its status file (L6)",
)
def test_a_broken_import_ends_the_job_at_preflight_with_its_reason_l6(tmp_path, monkeypatch):
    """L6 (the night of two environment failures): the import gate fails in seconds, the
    status file says why, watch exits 6, and the boot costs seconds, not a whole run."""
    with lane_world(tmp_path, monkeypatch, broken_imports=("torchvision",)) as world:
        lane = _ready(world, "alice", "video", imports=("torch", "torchvision"))
        started = lane.start("video")

        with pytest.raises(JobFailed) as failed:
            lane.watch("video")

        assert failed.value.exit_code == 6
        assert "preflight: import torchvision failed" in str(failed.value)
        assert world.clock.wall() - started.since < 3 * timing.LOG_SYNC_S
        assert not [n for n in world.fake.objects if n.startswith("jobs/video/results/")]


def test_too_little_disk_ends_the_job_at_preflight_l6(tmp_path, monkeypatch):
    """L6: the disk-capacity gate runs before any work and names the shortfall."""
    with lane_world(tmp_path, monkeypatch, disk_free_gb=12) as world:
        lane = _ready(world, "alice", "video", min_free_gb=40)
        lane.start("video")

        with pytest.raises(JobFailed, match="12 GB free on /work, need 40"):
            lane.watch("video")


@pytest.mark.fault(
    "a reused script fetched inputs the new job never staged",
    handled="start refused until every unconditional fetch is staged (L10)",
)
def test_a_reused_script_is_refused_until_its_inputs_are_staged_then_runs_l10(
    tmp_path, monkeypatch
):
    """L10 (the sixty-eight seconds): a reused script fetches three reference images the new
    job never staged: refused by name; staged, it installs and finishes four of four."""
    refs = ("ref-a.png", "ref-b.png", "ref-c.png")
    with lane_world(tmp_path, monkeypatch, results=4, job_runtime_s=120.0) as world:
        lane = world.lane("alice")
        lane.claim("style-2")
        reused = script.render("style-2", BUCKET, JOB_COMMAND, inputs=refs)

        with pytest.raises(Refused) as refused:
            lane.install("style-2", reused)
        world.stage("style-2", *refs)
        lane.install("style-2", reused)
        lane.start("style-2")
        verdict = lane.watch("style-2")

        assert refused.value.rule == "L10"
        assert all(name in str(refused.value) for name in refs)
        assert verdict.value == "succeeded"
        results = [n for n in world.fake.objects if n.startswith("jobs/style-2/results/")]
        assert len(results) == 4


@pytest.mark.fault(
    "GPU stockouts: thirteen start attempts before one succeeded",
    handled="retried with the claim held; when retries run out, exit 4 and the claim is still yours (L7)",
)
def test_thirteen_attempts_keep_the_claim_and_five_more_stockouts_exit_4_with_it_kept_l7(
    tmp_path, monkeypatch
):
    """L7: twelve stockouts then a start (thirteen attempts) with the claim held throughout;
    then a diagnostic boot whose five attempts all stock out ends with exit 4, claim kept."""
    starts = ("stockout",) * 12 + ("ok",) + ("stockout",) * 5
    with lane_world(tmp_path, monkeypatch, starts=starts, job_runtime_s=60.0) as world:
        lane = _ready(world, "alice", "validation")
        done = lane.start("validation")
        world.advance(200.0)
        lane.release("validation")
        lane = _ready(world, "alice", "diagnostic")

        with pytest.raises(Unavailable) as unavailable:
            lane.start("diagnostic", max_attempts=5)

        assert (done.attempt, done.stockouts) == (13, 12)
        assert unavailable.value.exit_code == 4 and "claim is kept" in str(unavailable.value)
        board, _, _ = lane.read()
        assert (board.state, board.owner, board.stockouts) == (b.CLAIMED, "alice", 5)
        with pytest.raises(Refused):
            world.lane("bob").claim("bobs-job")


@pytest.mark.fault(
    "a background retry died silently; the board said busy for ten hours",
    handled="the retry state is in the store: the board flags it STALE and any invocation resumes it (L8, L11)",
)
def test_a_retry_that_died_after_eight_stockouts_is_flagged_and_resumed_elsewhere_l11(
    tmp_path, monkeypatch
):
    """L11/L8 (the ten-hour gap): the retry dies mid-attempt after eight stockouts; hours
    later the board says STALE with the instance, retry state and last log line, and a
    fresh process resumes from the stored retry state and starts the job."""
    starts = ("stockout",) * 8 + ("ok",)
    with lane_world(tmp_path, monkeypatch, starts=starts, job_runtime_s=60.0) as world:
        first = _ready(world, "alice", "validation")
        with pytest.raises(Unavailable):
            first.start("validation", max_attempts=8)

        def crash(instance: str) -> None:
            raise KeyboardInterrupt  # the background process dies between write and start

        first.gce.start = crash  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            first.start("validation")
        world.advance(10 * 3600.0)
        view = world.lane("bob").view(live=True)
        resumed = world.lane("alice").start("validation")

        assert view["stale"] and view["state"] == b.STARTING and view["status"] == "TERMINATED"
        assert view["attempt"] == 9 and view["stockouts"] == 8
        assert (resumed.state, resumed.attempt, resumed.stockouts) == (b.RUNNING, 10, 8)
        outcomes = [e["outcome"] for e in world.events("lane.start")]
        assert outcomes == ["stockout"] * 8 + ["error", "started"]


@pytest.mark.fault(
    "a watcher timed out while the job was still running",
    handled="exit 5 (still running), never failed; the status file and results decide (L9)",
)
def test_a_watcher_timeout_is_not_a_failure_and_the_job_finishes_l9(tmp_path, monkeypatch):
    """L9 (forty polls, two of six): the watcher gives up with exit 5 and says so; the job
    finishes six of six and a later watch, judging by the status file, says succeeded."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=540.0, results=6) as world:
        lane = _ready(world, "alice", "validation")
        lane.start("validation")

        with pytest.raises(StillRunning) as timed_out:
            lane.watch("validation", timeout_s=40 * timing.LANE_POLL_S)
        midway = world.fake.objects["jobs/validation/log.txt"]
        verdict = lane.watch("validation")

        assert timed_out.value.exit_code == 5 and "not a failure" in str(timed_out.value)
        assert b"result 1/6" in midway and b"result 6/6" not in midway
        assert verdict.value == "succeeded"
        assert len([n for n in world.fake.objects if "/results/" in n]) == 6


def test_release_is_only_the_claimants_and_only_once_terminated_l1(tmp_path, monkeypatch):
    """L1/L3: another operator cannot release; the claimant cannot release a running boot;
    once the job powers off, the release frees the lane and logs lane.job_end."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        lane = _ready(world, "alice", "validation")
        lane.start("validation")

        with pytest.raises(Refused) as by_bob:
            world.lane("bob").release("validation")
        with pytest.raises(Refused) as running:
            lane.release("validation")
        lane.watch("validation")  # returns once TERMINATED: the release right after works
        held_s = world.clock.wall() - lane.read()[0].claimed  # until the release is asked
        freed = lane.release("validation")

        assert by_bob.value.rule == "L3" and running.value.rule == "L1"
        assert freed.state == b.FREE
        (end,) = world.events("lane.job_end")
        assert end["outcome"] == "succeeded" and end["attempts"] == 1 and end["stockouts"] == 0
        # claimed at 0; install's setMetadata and setScheduling and the attempt's setMetadata
        # each wait one 5 s poll for their operation, so start is sent at +15 s; the boot
        # marker at +30 s (15 s of PROVISIONING and STAGING), status "succeeded" 60 s later:
        # running is 60 s (until the job ended, not the release)
        assert (end["waiting_s"], end["running_s"]) == (30.0, 60.0)
        # the disk is billed for the time the claim was held, until the release
        assert world.fake.status == "TERMINATED" and 90.0 <= held_s <= 110.0
        assert end["cost_usd"] == round(60 / 3600 * 0.70 + held_s / 86400 * 0.83, 4)


def test_a_metadata_write_that_loses_a_fingerprint_race_rereads_and_checks_again(
    tmp_path, monkeypatch
):
    """L2/L3: a 412 means someone wrote the metadata first: re-read (TERMINATED again) and
    retry; a writer that keeps losing stops with a state error, nothing overwritten blindly."""
    with lane_world(tmp_path, monkeypatch, fingerprint_races=1) as world:
        lane = _ready(world, "alice", "validation")

        assert world.fake.metadata[script.JOB_KEY] == "validation"
        assert world.fake.calls.count("POST set_metadata") == 2
    with lane_world(tmp_path / "again", monkeypatch, fingerprint_races=9) as world:
        lane = world.lane("alice")
        lane.claim("validation")

        with pytest.raises(StateError, match="fingerprint kept changing"):
            lane.install("validation", script.render("validation", BUCKET, "true"))

        assert script.JOB_KEY not in world.fake.metadata


def test_a_start_waits_out_a_power_off_and_gives_up_loudly_if_it_never_ends_l7(
    tmp_path, monkeypatch
):
    """L7/L1: STOPPING is waited for with the claim held; stuck, exit 4, nothing forced."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        lane = _ready(world, "alice", "validation")
        world.fake.status = "STOPPING"  # the previous job powering off, never finishing

        with pytest.raises(Unavailable, match="stayed STOPPING") as stuck:
            lane.start("validation")
        world.fake.status = "TERMINATED"
        done = lane.start("validation")

        assert stuck.value.exit_code == 4
        assert (done.state, done.attempt) == (b.RUNNING, 1)


@pytest.mark.parametrize(
    "old, new, rule",
    [
        ("stage running\n", 'gsutil -q cp "$PREFIX/inputs/x.png" "$WORK/inputs/"\nstage running\n', "L10"),
        ("stage running\n", "if true; then fetch_input x.png; fi\nstage running\n", "L10"),
        ('BUCKET="', 'export JOB=validationn\nBUCKET="', "L4"),
        ("  poweroff\n", "", "L12"),
        ("  poweroff\n}", "}\npoweroff", "L12"),
    ],
)
def test_each_walk_around_of_the_linter_is_refused_at_install(tmp_path, monkeypatch, old, new, rule):
    """L4/L10/L12: a raw gsutil fetch, a fetch under `if true`, a second `export JOB=`, no
    power-off reachable from the EXIT trap: refused before any metadata is written."""
    with lane_world(tmp_path, monkeypatch) as world:
        lane = world.lane("alice")
        lane.claim("validation")
        body = script.render("validation", BUCKET, JOB_COMMAND).replace(old, new, 1)

        with pytest.raises(Refused) as refused:
            lane.install("validation", body)

        assert refused.value.rule == rule
        assert script.SCRIPT_KEY not in world.fake.metadata


def test_a_start_refused_by_http_quota_or_503_keeps_the_claim_and_the_next_start_boots_l7(
    tmp_path, monkeypatch
):
    """L7: a start call refused synchronously (HTTP 403 quota: no operation) is a quota
    attempt, retried with the claim held; an HTTP 503 on the start call ends the command
    (exit 4) with the claim kept; the next start boots the job."""
    starts = ("quota-403", "unavailable-503")
    with lane_world(tmp_path, monkeypatch, starts=starts, job_runtime_s=60.0) as world:
        lane = _ready(world, "alice", "validation")
        with pytest.raises(Unavailable) as unavailable:
            lane.start("validation")
        board, _, _ = lane.read()
        done = lane.start("validation")

        assert unavailable.value.exit_code == 4
        assert (board.state, board.owner) == (b.CLAIMED, "alice")
        assert [e["outcome"] for e in world.events("lane.start")] == [
            "quota",
            "error",
            "started",
        ]
        assert done.state == b.RUNNING and world.fake.boots == 1


@pytest.mark.fault(
    "a failure path that removes the EXIT trap (trap - EXIT, exec, kill -9 $$)",
    handled="refused at install, naming the command: that path would never power off (L12)",
)
@pytest.mark.parametrize(
    "new, rule",
    [
        ('fail() { stage failed "$1"; trap - EXIT; exit 1; }', "L12"),
        ('fail() { stage failed "$1"; exec sleep infinity; }', "L12"),
        ('fail() { stage failed "$1"; kill -9 $$; }', "L12"),
    ],
)
def test_a_failure_path_that_skips_the_power_off_is_refused_at_install_l12(
    tmp_path, monkeypatch, new, rule
):
    """L12: the issue's one-line change to `fail` (the VM stayed RUNNING after a failed
    preflight) is refused before any metadata is written; the instance stays TERMINATED."""
    with lane_world(tmp_path, monkeypatch) as world:
        lane = world.lane("alice")
        lane.claim("validation")
        old = 'fail() { stage failed "$1"; exit 1; }'
        body = script.render("validation", BUCKET, JOB_COMMAND).replace(old, new, 1)

        with pytest.raises(Refused) as refused:
            lane.install("validation", body)

        assert refused.value.rule == rule and refused.value.exit_code == 3
        assert script.SCRIPT_KEY not in world.fake.metadata
        assert world.fake.status == "TERMINATED" and world.fake.boots == 0


def test_a_top_level_fetch_or_fail_of_an_unstaged_input_is_refused_at_install_l10(
    tmp_path, monkeypatch
):
    """L10: `gsutil cp "$PREFIX/inputs/ref-1.png" ... || fail` at top level is refused until
    ref-1.png is staged, then installs."""
    line = 'gsutil -q cp "$PREFIX/inputs/ref-1.png" "$WORK/inputs/" || fail "no ref-1.png"\n'
    with lane_world(tmp_path, monkeypatch) as world:
        lane = world.lane("alice")
        lane.claim("validation")
        body = script.render("validation", BUCKET, JOB_COMMAND).replace(
            "stage running\n", line + "stage running\n", 1
        )

        with pytest.raises(Refused) as refused:
            lane.install("validation", body)
        assert script.SCRIPT_KEY not in world.fake.metadata
        world.stage("validation", "ref-1.png")
        lane.install("validation", body)

        assert refused.value.rule == "L10" and "ref-1.png" in str(refused.value)
        assert world.fake.metadata[script.SCRIPT_KEY] == body


def test_watch_returns_only_once_the_vm_is_terminated_so_release_right_after_works_l1(
    tmp_path, monkeypatch
):
    """L1/L9: the job's status says succeeded while its VM is still STOPPING: watch waits for
    TERMINATED before it exits 0, so the release that follows is not refused."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, stopping_s=40.0) as world:
        lane = _ready(world, "alice", "validation")
        lane.start("validation")

        verdict = lane.watch("validation")
        status_after_watch = world.fake.status
        freed = lane.release("validation")

        assert verdict.value == "succeeded" and status_after_watch == "TERMINATED"
        assert freed.state == b.FREE
        assert any("waiting for TERMINATED" in line for line in world.lines)


def test_watch_of_a_job_never_started_says_so_l9(tmp_path, monkeypatch):
    """L9: a claimed, installed job that was never started: watch says "not started" (exit 5,
    not a failure) instead of a status file that never ended."""
    with lane_world(tmp_path, monkeypatch) as world:
        lane = _ready(world, "alice", "validation")

        with pytest.raises(StillRunning) as never:
            lane.watch("validation")

        assert never.value.exit_code == 5
        assert "job validation was not started" in str(never.value)
        assert "never ended" not in str(never.value)


def test_a_stale_claim_reaches_a_person_once_whoever_looks_l8_o1(tmp_path, monkeypatch):
    """L8/O1: the ten-hour gap again, with an endpoint: the first view of the STALE claim
    sends one alarm to the team's receiver (a real HTTP server on loopback) naming the
    instance, retry state and last log line; views from two operators send nothing more."""
    from alarm_receiver import Receiver
    from store_fakes import Events

    from gpuops import alarms as a

    receiver = Receiver()
    starts = ("stockout",) * 8 + ("ok",)
    try:
        with lane_world(tmp_path, monkeypatch, starts=starts, job_runtime_s=60.0) as world:
            first = _ready(world, "alice", "validation")
            with pytest.raises(Unavailable):
                first.start("validation", max_attempts=8)
            world.advance(10 * 3600.0)
            for who in ("bob", "carol", "bob"):
                lane = world.lane(who)
                lane.alarms = a.Alarms(
                    lane.store, Events(), [a.AppriseEndpoint(receiver.url)], who=f"{who}/h/1/x"
                )
                assert lane.view(live=who == "carol")["stale"]
                assert lane.alarms.flush(timing.ALARM_FLUSH_S)
    finally:
        receiver.close()

    (heard,) = receiver.received
    assert "STALE" in heard["title"] and "validation" in heard["title"]
    assert "8 stockout(s)" in heard["message"] and "start attempt(s)" in heard["message"]
