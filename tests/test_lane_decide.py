"""The lane runner's pure decisions: start steps (L2, L3), boot verdicts (L2), job verdicts
(L9), staleness (L8), cost, and the status-file parser."""

from __future__ import annotations

import dataclasses

import pytest

from gpuops import timing
from gpuops.errors import Refused
from gpuops.lane import board as b
from gpuops.lane import decide as d

T0 = 1796029925.0
HELD = b.claim(b.Board("gpu-lane", "gpu-lane", T0), "alice", "p", T0)


@pytest.mark.parametrize(
    "state, status, step",
    [
        (b.CLAIMED, "TERMINATED", d.Step.START),
        (b.CLAIMED, "STOPPING", d.Step.WAIT_STOPPING),
        (b.CLAIMED, "PENDING_STOP", d.Step.WAIT_STOPPING),
        (b.CLAIMED, "SUSPENDING", d.Step.WAIT_STOPPING),
        (b.CLAIMED, "SUSPENDED", d.Step.WAIT_STOPPING),
        (b.STARTING, "RUNNING", d.Step.CHECK_BOOT),
        (b.STARTING, "TERMINATED", d.Step.CHECK_BOOT),
        (b.RUNNING, "RUNNING", d.Step.ALREADY_RUNNING),
    ],
)
def test_the_start_step_follows_the_board_and_the_instance(state, status, step):
    """L2/L11: start only from TERMINATED; resume a recorded attempt; wait out a power-off."""
    board = dataclasses.replace(HELD, state=state, boot="x" if state != b.CLAIMED else None)

    assert d.start_step(board, "alice", "p", status) is step


@pytest.mark.parametrize(
    "status", ["RUNNING", "STAGING", "PROVISIONING", "REPAIRING", "UNKNOWN", "HIBERNATING"]
)
def test_a_start_over_any_boot_or_unknown_status_is_refused_l2(status):
    """L2: anything but TERMINATED (or a power-off in progress) is somebody's boot."""
    with pytest.raises(Refused) as refused:
        d.start_step(HELD, "alice", "p", status)

    assert refused.value.rule == "L2" and status in str(refused.value)


@pytest.mark.parametrize(
    "board, operator, job",
    [
        (b.Board("gpu-lane", "gpu-lane", T0), "alice", "p"),
        (HELD, "bob", "p"),
        (HELD, "alice", "q"),
    ],
)
def test_starting_a_lane_you_do_not_hold_is_refused_l3(board, operator, job):
    """L3: the board decides who may start, before the instance is even considered."""
    with pytest.raises(Refused) as refused:
        d.start_step(board, operator, job, "TERMINATED")

    assert refused.value.rule == "L3"


@pytest.mark.parametrize(
    "seen, waited, status, verdict",
    [
        (True, 0.0, "RUNNING", d.Boot.OURS),
        (True, 9999.0, "TERMINATED", d.Boot.OURS),
        (False, 0.0, "TERMINATED", d.Boot.NOT_STARTED),
        (False, 0.0, "PROVISIONING", d.Boot.WAIT),
        (False, timing.BOOT_MARKER_WINDOW_S - 0.5, "RUNNING", d.Boot.WAIT),
        (False, timing.BOOT_MARKER_WINDOW_S, "RUNNING", d.Boot.NOOP),
        (False, timing.BOOT_MARKER_WINDOW_S + 1, "STOPPING", d.Boot.NOOP),
    ],
)
def test_the_boot_verdict_trusts_only_this_attempts_marker_l2(seen, waited, status, verdict):
    """L2: ours only with the marker; a TERMINATED instance never booted for us; a running
    one without the marker past the window is somebody else's boot."""
    assert d.boot_verdict(seen, waited, status) is verdict


def test_stockout_retries_stop_at_the_limit_of_this_invocation_l7():
    """L7: retry while under the limit; the claim is kept either way (the shell's job)."""
    assert d.retry_stockout(0, 1) and d.retry_stockout(4, 5)
    assert not d.retry_stockout(5, 5)


def test_a_start_waits_for_a_stopping_instance_up_to_the_operation_timeout_and_no_longer_l7():
    """L1, L7: the wait for TERMINATED gives up exactly at GCE_OPERATION_TIMEOUT_S."""
    limit = timing.GCE_OPERATION_TIMEOUT_S
    assert not d.stop_wait_over(0.0) and not d.stop_wait_over(limit - 0.001)
    assert d.stop_wait_over(limit) and d.stop_wait_over(limit + 1.0)


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("succeeded b1\n", d.Status("succeeded", "b1", "")),
        (
            "failed b1 preflight: import x failed",
            d.Status("failed", "b1", "preflight: import x failed"),
        ),
        ("running b2   \nmore", d.Status("running", "b2", "")),
        ("failed b1  spaced reason ", d.Status("failed", "b1", "spaced reason")),
        ("", None),
        ("done b1", None),
        ("succeeded", None),
        ("succeeded  b1", None),
        ("back to free", None),
    ],
)
def test_the_status_file_is_parsed_strictly(text, parsed):
    """L9: only a line a lane script writes counts as a status."""
    assert d.parse_status(text) == parsed


@pytest.mark.parametrize(
    "status, attempt, instance, verdict",
    [
        (d.Status("succeeded", "b1", ""), "b1", "TERMINATED", d.Verdict.SUCCEEDED),
        (d.Status("failed", "b1", "x"), "b1", "STOPPING", d.Verdict.FAILED),
        (d.Status("succeeded", "b0", ""), "b1", "RUNNING", d.Verdict.RUNNING),
        (d.Status("succeeded", "b0", ""), "b1", "TERMINATED", d.Verdict.UNKNOWN),
        (d.Status("running", "b1", ""), "b1", "RUNNING", d.Verdict.RUNNING),
        (d.Status("running", "b1", ""), "b1", "TERMINATED", d.Verdict.UNKNOWN),
        (None, "b1", "STAGING", d.Verdict.RUNNING),
        (None, "b1", "PROVISIONING", d.Verdict.RUNNING),
        (None, None, "TERMINATED", d.Verdict.UNKNOWN),
        (None, "b1", "HIBERNATING", d.Verdict.UNKNOWN),
    ],
)
def test_the_job_is_judged_by_this_attempts_status_file_l9(status, attempt, instance, verdict):
    """L9: success and failure come from the status file of this attempt; a TERMINATED
    instance without an end is unknown, never failed."""
    assert d.job_verdict(status, attempt, instance, missing=()) is verdict


@pytest.mark.fault(
    "a claim busy for hours without a successful start",
    handled="flagged STALE for a human with instance state, retry state and last log line (L8)",
)
def test_a_claim_held_for_hours_without_a_start_is_stale_l8():
    """L8: claimed or starting, never started, for STALE_CLAIM_S: flagged for a human."""
    starting = dataclasses.replace(HELD, state=b.STARTING, boot="x")
    limit = T0 + timing.STALE_CLAIM_S

    assert d.is_stale(HELD, limit) and d.is_stale(starting, limit)
    assert not d.is_stale(HELD, limit - 1)
    assert not d.is_stale(dataclasses.replace(HELD, started=T0 + 1), limit + 9)
    assert not d.is_stale(dataclasses.replace(starting, state=b.RUNNING), limit + 9)
    assert not d.is_stale(b.Board("gpu-lane", "gpu-lane", T0), limit + 9)


def test_cost_is_running_hours_plus_disk_days_at_the_seeds_rates():
    """Costs default to $0.70/h running and $0.83/day disk, and are configurable."""
    assert d.cost_usd(3600.0, 86400.0) == 1.53
    assert d.cost_usd(1380.0, 0.0) == round(1380 / 3600 * 0.70, 4)
    assert d.cost_usd(7200.0, 43200.0, usd_per_hour=2.0, disk_usd_per_day=1.0) == 4.5
    assert d.cost_usd(0.0, 0.0) == 0.0


def test_refusals_say_what_to_do_l3():
    """L2/L3: the refusal names the holder, the job and what the operator should do."""
    with pytest.raises(Refused) as not_held:
        d.start_step(HELD, "bob", "p", "TERMINATED")
    with pytest.raises(Refused) as running:
        d.start_step(HELD, "alice", "p", "RUNNING")

    assert str(not_held.value) == (
        "refused (L3): lane gpu-lane is claimed (owner 'alice', job 'p'); "
        "claim it for 'p' before starting"
    )
    assert str(running.value) == (
        "refused (L2): instance gpu-lane is RUNNING, not TERMINATED: a boot you did not start "
        "is running; it is not your job and gpuops will not start over it or stop it"
    )


def test_only_the_first_line_of_a_status_file_counts():
    """L9: a later line, even a valid one, is not the status."""
    assert d.parse_status("running b2\nsucceeded b2\nfailed b2 x") == d.Status("running", "b2", "")


def test_a_hundred_days_of_disk_cost_exactly_a_hundred_days():
    """The day is 86400 s: rounding would hide an off-by-one second at small spans."""
    assert d.cost_usd(0.0, 100 * 86400.0) == 83.0


# --- L12 --------------------------------------------------------------------------------------
IDLE = d.Evidence("TERMINATED")


@pytest.mark.parametrize(
    "changes, sign",
    [
        ({"instance_status": "RUNNING"}, "the instance is RUNNING, not TERMINATED"),
        ({"instance_status": "STOPPING"}, "the instance is STOPPING, not TERMINATED"),
        ({"metadata_job": "p"}, "its metadata names job p"),
        ({"metadata_attempt": "b1"}, "its metadata holds attempt b1"),
        (
            {"event_age_s": 10.0, "event_state": "claimed", "event_job": "p", "event_owner": "a"},
            "a lane event 10 s ago left it claimed for job p by a",
        ),
        ({"event_age_s": 0.0}, "a lane event 0 s ago left it held"),
        (
            {"event_age_s": timing.STALE_CLAIM_S - 1, "event_state": "free"},
            f"a lane event {timing.STALE_CLAIM_S - 1:.0f} s ago left it free",
        ),
    ],
)
def test_each_sign_of_a_claim_is_named_exactly_l12(changes, sign):
    """L12: the instance, each metadata key and a recent lane event are each evidence."""
    assert d.claim_signs(dataclasses.replace(IDLE, **changes)) == [sign]


def test_no_sign_when_the_instance_is_idle_and_the_last_event_is_stale_l12():
    """L12: TERMINATED, no metadata, an event exactly STALE_CLAIM_S old: nothing."""
    old = dataclasses.replace(IDLE, event_age_s=timing.STALE_CLAIM_S, event_state="claimed")

    assert d.claim_signs(IDLE) == [] and d.claim_signs(old) == []
    d.check_claimable_without_board(old, "gpu-lane")  # no refusal


def test_signs_are_listed_in_order_and_a_claim_without_a_board_is_refused_l12():
    """L12: every sign, in order, in a refusal naming the rule and `lane repair`."""
    ev = d.Evidence("RUNNING", metadata_job="p", metadata_attempt="b1")

    with pytest.raises(Refused) as refused:
        d.check_claimable_without_board(ev, "gpu-lane")

    assert refused.value.rule == "L12"
    assert str(refused.value) == (
        "refused (L12): lane gpu-lane has no state line, so it is unknown, not free, while the "
        "instance is RUNNING, not TERMINATED; its metadata names job p; its metadata holds "
        "attempt b1: run `gpuops lane repair` to rebuild its state line from that evidence"
    )


def test_repair_without_any_sign_rebuilds_a_free_line_after_the_last_revision_l12():
    """L12: free only when nothing says otherwise; the revision continues the event's."""
    ev = dataclasses.replace(IDLE, event_revision=7)

    assert d.repaired("L", "I", ev, T0) == b.Board("L", "I", T0, revision=8)


def test_repair_follows_a_recent_release_event_to_a_free_line_l12():
    """L12: the last board write said free and the instance is idle: free."""
    ev = dataclasses.replace(
        IDLE, event_state="free", event_age_s=5.0, event_owner="a", event_revision=3
    )

    assert d.repaired("L", "I", ev, T0) == b.Board("L", "I", T0, revision=4)


@pytest.mark.parametrize(
    "changes",
    [{"metadata_job": "p"}, {"metadata_attempt": "b1"}, {"instance_status": "STOPPING"}],
)
def test_a_free_event_does_not_outweigh_other_evidence_l12(changes):
    """L12: a free board event with job metadata or a busy instance is not free."""
    ev = dataclasses.replace(IDLE, event_state="free", event_age_s=5.0, **changes)

    assert d.repaired("L", "I", ev, T0).state != b.FREE


def test_repair_of_a_recent_claim_keeps_owner_job_attempt_and_claim_time_l12():
    """L12: a held board event names the owner, job and attempt; the claim time is its age."""
    ev = d.Evidence(
        "TERMINATED",
        metadata_job="p",
        event_state="claimed",
        event_owner="alice",
        event_job="p",
        event_attempt=3,
        event_revision=9,
        event_age_s=60.0,
    )

    assert d.repaired("L", "I", ev, T0) == b.Board(
        "L", "I", T0, state=b.CLAIMED, owner="alice", job="p", attempt=3, claimed=T0 - 60.0,
        revision=10,
    )


def test_repair_of_a_running_instance_is_a_running_lane_with_the_metadata_attempt_l12():
    """L12: RUNNING with attempt b1 in the metadata: running, boot b1, started now."""
    ev = d.Evidence(
        "RUNNING", metadata_job="p", metadata_attempt="b1", event_state="running",
        event_owner="alice", event_job="p", event_attempt=2, event_revision=4, event_age_s=9.0,
    )

    assert d.repaired("L", "I", ev, T0) == b.Board(
        "L", "I", T0, state=b.RUNNING, owner="alice", job="p", attempt=2, claimed=T0 - 9.0,
        started=T0, boot="b1", revision=5,
    )


@pytest.mark.parametrize(
    "ev, owner, job, attempt, boot",
    [
        (d.Evidence("RUNNING"), "unknown", "unknown", 0, "unknown"),
        (d.Evidence("RUNNING", metadata_attempt="foreign-1"), "unknown", "unknown", 0, "unknown"),
        (d.Evidence("TERMINATED", metadata_job="p"), "unknown", "p", 0, None),
        (
            d.Evidence("TERMINATED", metadata_job="q", event_state="claimed", event_owner="a",
                       event_job="p", event_attempt=4, event_age_s=1.0),
            "unknown", "q", 0, None,
        ),
        (
            d.Evidence("TERMINATED", event_state="free", event_owner="a", event_job="p",
                       event_attempt=4, event_age_s=1.0, metadata_attempt="b2"),
            "unknown", "unknown", 0, None,
        ),
        (
            d.Evidence("TERMINATED", event_state="starting", event_owner="a", event_job="p",
                       event_attempt=4, event_age_s=1.0),
            "a", "p", 4, None,
        ),
    ],
)
def test_repair_never_invents_an_owner_or_job_the_evidence_does_not_name_l12(
    ev, owner, job, attempt, boot
):
    """L12: unnamed owner or job is `unknown`; a boot id that is not a board token is too."""
    got = d.repaired("L", "I", ev, T0)

    assert (got.owner, got.job, got.attempt, got.boot) == (owner, job, attempt, boot)
    assert got.state == (b.RUNNING if boot else b.CLAIMED)
    assert got.claimed == (T0 - 1.0 if owner == "a" else T0)


@pytest.mark.parametrize(
    "verdict, status, ended, now, alarm",
    [
        (d.Verdict.SUCCEEDED, "RUNNING", T0, T0 + timing.POWEROFF_GRACE_S, True),
        (d.Verdict.FAILED, "STAGING", T0, T0 + timing.POWEROFF_GRACE_S, True),
        (d.Verdict.SUCCEEDED, "RUNNING", T0, T0 + timing.POWEROFF_GRACE_S - 1, False),
        (d.Verdict.SUCCEEDED, "STOPPING", T0, T0 + 9999, False),
        (d.Verdict.SUCCEEDED, "TERMINATED", T0, T0 + 9999, False),
        (d.Verdict.RUNNING, "RUNNING", T0, T0 + 9999, False),
        (d.Verdict.UNKNOWN, "RUNNING", T0, T0 + 9999, False),
        (d.Verdict.SUCCEEDED, "RUNNING", None, T0 + 9999, False),
    ],
)
def test_a_billing_alarm_needs_an_ended_job_and_a_vm_still_up_past_the_grace_l12(
    verdict, status, ended, now, alarm
):
    """L12: ended (succeeded or failed), still booting or running, at least the grace later."""
    assert d.billing_alarm(verdict, status, ended, now) is alarm


@pytest.mark.parametrize(
    "given, declared, seconds",
    [(None, None, timing.DEFAULT_MAX_RUN_S), (None, 2.5, 9000.0), (1.0, 2.5, 3600.0),
     (0.0084, None, 30.0), (None, 2880.0, 10368000.0), (0.01, 0.0001, 36.0)],
)
def test_the_run_ceiling_is_the_flag_else_the_declared_length_else_the_default(
    given, declared, seconds
):
    """The provider-native ceiling in whole seconds: --max-hours, declared, default."""
    got = d.run_ceiling_s(given, declared)

    assert got == seconds and type(got) is float


_A = "0cc175b9c0f1b6a831c399e269772661"  # md5 of b"a"
_B = "92eb5ffee6ae2fec3ad71c777531578f"  # md5 of b"b"


@pytest.mark.parametrize(
    "manifest, stored, missing",
    [
        (f"gpuops-manifest b1 2\n{_A} 1 a.png\n{_B} 1 sub/b b.txt\n", {"a.png": (1, _A), "sub/b b.txt": (1, _B)}, []),
        (f"gpuops-manifest b1 1\n{_A} 1 a.png\n", {"a.png": (1, None)}, []),
        ("gpuops-manifest b1 0\n", {}, []),
        (None, {}, ["no results manifest in storage"]),
        ("", {}, ["the results manifest has no header line"]),
        ("gpuops-manifest b1\n", {}, ["the results manifest has no header line"]),
        ("gpuops-manifest b1 x\n", {}, ["the results manifest has no header line"]),
        ("manifest b1 0\n", {}, ["the results manifest has no header line"]),
        ("gpuops-manifest b0 0\n", {}, ["the results manifest is attempt b0's, not this attempt's"]),
        (f"gpuops-manifest b1 1\n{_A} 1 a.png\n", {}, ["results/a.png is not in storage"]),
        (f"gpuops-manifest b1 1\n{_A} 1 a.png\n", {"a.png": (0, _A)}, ["results/a.png is 0 bytes in storage, not 1"]),
        (f"gpuops-manifest b1 1\n{_A} 1 a.png\n", {"a.png": (1, _B)}, ["results/a.png in storage is not the file uploaded (md5)"]),
        (f"gpuops-manifest b1 2\n{_A} 1 a.png\n", {"a.png": (1, _A)}, ["the manifest counts 2 results but lists 1"]),
        (f"gpuops-manifest b1 1\n{_A} one a.png\n", {}, ["an unreadable manifest line " + repr(f"{_A} one a.png")]),
        (f"gpuops-manifest b1 1\n{_A[:-1]} 1 a.png\n", {}, ["an unreadable manifest line " + repr(f"{_A[:-1]} 1 a.png")]),
        (f"gpuops-manifest b1 1\n{_A} 1\n", {}, ["an unreadable manifest line " + repr(f"{_A} 1")]),
        ("gpuops-manifest  b1 0\n", {}, ["the results manifest has no header line"]),
        (f"gpuops-manifest b1 1\n{_A}  1 a.png\n", {}, ["an unreadable manifest line " + repr(f"{_A}  1 a.png")]),
        (f"gpuops-manifest b1 1\n{_A} 1 a.png\n", {"a.png": (1, _A), "b.png": (1, _A)}, []),
        (f"gpuops-manifest b1 2\nx {'y' * 90}\nz\n", {}, ["an unreadable manifest line " + repr(f"x {'y' * 78}"), "an unreadable manifest line 'z'"]),
    ],
)
def test_results_are_missing_unless_storage_holds_each_one_this_attempts_manifest_names_l9(
    manifest, stored, missing
):
    """L9: the manifest of this attempt, checked against the bucket's sizes and md5s."""
    have = {name: d.StoredResult(size, md5) for name, (size, md5) in stored.items()}
    data = None if manifest is None else manifest.encode()

    assert d.results_missing(data, "b1", have) == missing


def test_a_manifest_that_is_not_utf8_is_unreadable_not_a_crash_l9():
    """L9: bytes that are not UTF-8 (a cut or foreign file) read as a manifest with no header."""
    assert d.results_missing(b"\xffgpuops-manifest b1 0\n", "b1", {}) == [
        "the results manifest has no header line"
    ]
    assert d.results_missing(b"gpuops-manifest b1 1\n\xff 1 a\n", "b1", {}) == [
        "an unreadable manifest line '\ufffd 1 a'"
    ]


def test_a_status_that_says_succeeded_is_failed_while_a_result_is_missing_l9():
    """L9: the status file alone never makes a success: storage must agree."""
    status = d.Status("succeeded", "b1", "")

    assert d.job_verdict(status, "b1", "TERMINATED", missing=["x"]) is d.Verdict.FAILED
    assert d.job_verdict(status, "b1", "TERMINATED", missing=[]) is d.Verdict.SUCCEEDED


@pytest.mark.parametrize(
    "scheduling, ok",
    [
        ({"maxRunDuration": {"seconds": "3600"}, "instanceTerminationAction": "STOP"}, True),
        ({"maxRunDuration": {"seconds": "30"}, "instanceTerminationAction": "STOP"}, True),
        ({"maxRunDuration": {"seconds": "10368000"}, "instanceTerminationAction": "STOP"}, True),
        ({"maxRunDuration": {"seconds": "29"}, "instanceTerminationAction": "STOP"}, False),
        ({"maxRunDuration": {"seconds": "10368001"}, "instanceTerminationAction": "STOP"}, False),
        ({"maxRunDuration": {"seconds": "x"}, "instanceTerminationAction": "STOP"}, False),
        ({"maxRunDuration": {}, "instanceTerminationAction": "STOP"}, False),
        ({"maxRunDuration": "3600", "instanceTerminationAction": "STOP"}, False),
        ({"maxRunDuration": {"seconds": "3600"}, "instanceTerminationAction": "DELETE"}, False),
        ({"maxRunDuration": {"seconds": "3600"}}, False),
        ({"onHostMaintenance": "TERMINATE"}, False),
    ],
)
def test_a_start_needs_a_run_ceiling_in_gces_bounds_that_stops_the_vm_l12(scheduling, ok):
    """L12/L1: maxRunDuration within 30 s to 120 days and instanceTerminationAction STOP."""
    if ok:
        d.check_run_ceiling(scheduling)
    else:
        with pytest.raises(Refused) as refused:
            d.check_run_ceiling(scheduling)
        assert refused.value.rule == "L12" and "run ceiling is not set" in str(refused.value)
        assert str(refused.value).endswith(
            "never did; run `gpuops lane install` again, which sets it"
        )


@pytest.mark.parametrize(
    "given, declared, where",
    [(0.0001, None, "--max-hours 0.0001 is 0 s"), (3000.0, 1.0, "--max-hours 3000 is"),
     (None, 2880.001, "the script's `# gpuops: max-hours` 2880 is 10368004 s")],
)
def test_a_run_ceiling_outside_gces_bounds_is_a_usage_error_naming_its_source_l12(
    given, declared, where
):
    """L12: GCE refuses such a maxRunDuration, so gpuops does first (exit 2)."""
    from gpuops.errors import UsageError

    with pytest.raises(UsageError) as refused:
        d.run_ceiling_s(given, declared)

    assert where in str(refused.value) and "30 s to 120 days" in str(refused.value)


# --- L13: the claim fenced on the VM ------------------------------------------------------
_TOK = d.holder_token("alice", "p")


@pytest.mark.parametrize(
    "labels, claim",
    [
        ({}, d.VmClaim()),
        ({"other": "x"}, d.VmClaim()),
        ({d.CLAIM_LABEL: "0-free"}, d.VmClaim(0, False, "")),
        ({d.CLAIM_LABEL: "7-free"}, d.VmClaim(7, False, "")),
        ({d.CLAIM_LABEL: f"12-held-{_TOK}"}, d.VmClaim(12, True, _TOK)),
        ({d.CLAIM_LABEL: "07-free"}, d.VmClaim(held=True, readable=False)),
        ({d.CLAIM_LABEL: "7-held-"}, d.VmClaim(held=True, readable=False)),
        ({d.CLAIM_LABEL: "7-held-ABCDEF12"}, d.VmClaim(held=True, readable=False)),
        ({d.CLAIM_LABEL: "7-heldx-abcdef12"}, d.VmClaim(held=True, readable=False)),
        ({d.CLAIM_LABEL: "free"}, d.VmClaim(held=True, readable=False)),
        ({d.CLAIM_LABEL: "7-free "}, d.VmClaim(held=True, readable=False)),
    ],
)
def test_the_claim_label_is_read_strictly_and_an_unreadable_one_is_held_l13(labels, claim):
    """L13/L12: `<epoch>-free` or `<epoch>-held-<token>`; anything else is held by nobody
    known, never free."""
    assert d.vm_claim(labels) == claim


def test_a_holder_token_is_eight_hex_digits_of_owner_and_job_l13():
    """L13: label values allow only lower-case letters, digits, _ and -: a token, not names."""
    import hashlib

    assert _TOK == hashlib.sha256(b"alice\np").hexdigest()[:8]
    assert d.holder_token("alice", "q") != _TOK and d.holder_token("alicep", "") != _TOK
    assert d.claim_label(3, _TOK) == f"3-held-{_TOK}" and d.claim_label(3, None) == "3-free"
    assert d.vm_claim({d.CLAIM_LABEL: d.claim_label(3, _TOK)}) == d.VmClaim(3, True, _TOK)


FREE = b.Board("gpu-lane", "gpu-lane", T0, epoch=4)


@pytest.mark.parametrize(
    "vm, epoch",
    [
        (d.VmClaim(), 5),
        (d.VmClaim(4, False), 5),
        (d.VmClaim(9, False), 10),
        (d.VmClaim(9, True, _TOK), 9),  # alice's own claim whose board write was lost
    ],
)
def test_a_claim_takes_one_past_the_board_and_the_label_or_resumes_its_own_l13(vm, epoch):
    """L13: the next epoch; a label holding this very claim (same owner and job) resumes it."""
    assert d.claim_epoch(FREE, vm, "alice", "p") == epoch


@pytest.mark.parametrize(
    "vm, said",
    [
        (d.VmClaim(9, True, d.holder_token("bob", "v")), "claim epoch 9 held"),
        (d.VmClaim(4, True, _TOK), "claim epoch 4 held"),  # not past the board: not resumed
        (d.VmClaim(3, True, _TOK), "claim epoch 3 held"),
        (d.VmClaim(held=True, readable=False), "an unreadable claim"),
    ],
)
def test_a_label_holding_another_claim_refuses_a_claim_of_a_free_board_l13(vm, said):
    """L13: the board says free but the VM says held: the board is stale, rebuilt or lost."""
    with pytest.raises(Refused) as refused:
        d.claim_epoch(FREE, vm, "alice", "p")

    assert refused.value.rule == "L13"
    assert str(refused.value) == (
        f"refused (L13): lane gpu-lane: the board says free, but instance gpu-lane's label says "
        f"{said}: the board is stale, rebuilt or lost, so it cannot hand out the VM; run "
        "`gpuops lane repair`"
    )


MINE = dataclasses.replace(HELD, epoch=4)


@pytest.mark.parametrize(
    "vm, ok",
    [
        (d.VmClaim(4, True, _TOK), True),
        (d.VmClaim(5, True, _TOK), False),
        (d.VmClaim(3, True, _TOK), False),
        (d.VmClaim(4, False), False),
        (d.VmClaim(4, True, d.holder_token("bob", "p")), False),
        (d.VmClaim(4, True, _TOK, readable=False), False),
        (d.VmClaim(), False),
    ],
)
def test_install_and_start_act_only_while_the_label_holds_this_boards_claim_l13(vm, ok):
    """L13: the epoch, the holder and a held, readable label must all agree with the board."""
    if ok:
        d.check_epoch(MINE, vm)
        return
    with pytest.raises(Refused) as refused:
        d.check_epoch(MINE, vm)
    assert refused.value.rule == "L13"
    assert str(refused.value).startswith(
        "refused (L13): lane gpu-lane: this claim is epoch 4 ('alice', job 'p'), but instance "
        "gpu-lane's label says "
    )
    assert str(refused.value).endswith(
        ": a claim from a stale, repaired or lost board cannot take the VM"
    )


@pytest.mark.parametrize(
    "vm, written",
    [
        (d.VmClaim(4, True, _TOK), "4-free"),
        (d.VmClaim(4, False), None),  # already released: the board is next
    ],
)
def test_a_release_frees_this_claims_label_once_l13(vm, written):
    """L13: the label goes to `<epoch>-free`; a rerun after that writes nothing."""
    assert d.release_label(MINE, vm) == written


@pytest.mark.parametrize(
    "vm", [d.VmClaim(5, False), d.VmClaim(5, True, _TOK), d.VmClaim(held=True, readable=False)]
)
def test_a_release_never_frees_another_claims_label_l13(vm):
    """L13: a stale board's release must not free the label of the claim after it."""
    with pytest.raises(Refused) as refused:
        d.release_label(MINE, vm)

    assert refused.value.rule == "L13"


def test_a_held_label_is_a_sign_of_a_claim_and_repair_takes_its_epoch_l13():
    """L12/L13: the label is evidence on every host; a repaired board carries its epoch, and
    an owner only when the label's holder is that owner."""
    ev = d.Evidence(
        "TERMINATED", event_state="claimed", event_owner="alice", event_job="p",
        event_age_s=9.0, label=d.VmClaim(6, True, _TOK),
    )
    other = dataclasses.replace(ev, label=d.VmClaim(6, True, d.holder_token("bob", "p")))
    blind = dataclasses.replace(ev, label=d.VmClaim(held=True, readable=False))
    released = d.Evidence("TERMINATED", event_state="free", event_age_s=9.0, label=d.VmClaim(6))

    assert "its label holds claim epoch 6 held" in d.claim_signs(ev)
    assert "its label holds an unreadable claim" in d.claim_signs(blind)
    assert d.claim_signs(released) == ["a lane event 9 s ago left it free"]
    assert (d.repaired("L", "I", ev, T0).owner, d.repaired("L", "I", ev, T0).epoch) == ("alice", 6)
    assert d.repaired("L", "I", other, T0).owner == d.UNKNOWN_OWNER
    assert d.repaired("L", "I", blind, T0).owner == d.UNKNOWN_OWNER
    assert d.repaired("L", "I", released, T0) == b.Board("L", "I", T0, revision=1, epoch=6)
    held_free_event = dataclasses.replace(released, label=d.VmClaim(6, True, _TOK))
    assert d.repaired("L", "I", held_free_event, T0).state == b.CLAIMED


def test_a_refusal_says_whether_the_label_holds_or_released_its_claim_l13():
    """L13: the refusal tells a released epoch from a held one and from an unreadable label."""
    for vm, said in (
        (d.VmClaim(4, False), "label says claim epoch 4 released:"),
        (d.VmClaim(5, True, _TOK), "label says claim epoch 5 held:"),
        (d.VmClaim(held=True, readable=False), "label says an unreadable claim:"),
    ):
        with pytest.raises(Refused) as refused:
            d.check_epoch(MINE, vm)
        assert said in str(refused.value)


def test_an_unreadable_claim_journal_is_a_sign_and_repair_names_no_owner_l12():
    """L12: a journal that does not read is a sign of a claim, never freedom; repair rebuilds
    a held line whose owner and job are unknown."""
    ev = d.Evidence("TERMINATED", journal_unreadable=True)

    assert d.claim_signs(ev) == ["the lane's claim journal is unreadable"]
    board = d.repaired("L", "I", ev, T0)
    assert (board.state, board.owner, board.job) == (b.CLAIMED, "unknown", "unknown")


@pytest.mark.parametrize(
    ("board", "vm", "epoch"),
    [
        (MINE, d.VmClaim(5, False), 6),  # a held board, the label free: one past it
        (dataclasses.replace(MINE, epoch=8), d.VmClaim(5, False), 9),  # one past the board
        (dataclasses.replace(MINE, epoch=5), d.VmClaim(7, False), 8),  # one past the label
        (MINE, d.VmClaim(5, True, _TOK), None),  # the label holds a claim: its epoch stays
        (MINE, d.VmClaim(held=True, readable=False), None),  # unreadable is held by nobody known
        (b.Board("L", "I", T0, epoch=5), d.VmClaim(5, False), None),  # a free board takes none
    ],
)
def test_a_repair_fences_the_claim_it_rebuilds_on_the_label_when_the_label_holds_none_l13(
    board, vm, epoch
):
    """L13: a held board whose label holds no claim takes the label one epoch past both."""
    assert d.repair_epoch(board, vm) == epoch


def test_a_billing_alarm_exits_6_for_a_failed_job_and_5_otherwise_m10_l9():
    """`lane board --live` with the billing alarm: a failed job is exit 6, any other end 5."""
    from gpuops.errors import ExitCode

    assert d.billing_exit(d.Verdict.FAILED) is ExitCode.FAILED
    for verdict in d.Verdict:
        if verdict is not d.Verdict.FAILED:
            assert d.billing_exit(verdict) is ExitCode.UNKNOWN
