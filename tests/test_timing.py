"""M6: every duration lives in gpuops/timing.py, every value is pinned, every relation holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuops import timing

PACKAGE = Path(__file__).resolve().parent.parent / "gpuops"

PINNED = {
    # an alarm's send is short, a process's exit waits for a few, a dead sender's claim expires
    "ALARM_SEND_TIMEOUT_S": 5.0,
    "ALARM_FLUSH_S": 15.0,
    "ALARM_APPRISE_SERVICE_LIMIT_S": 0.0,
    "ALARM_CLAIM_STALE_S": 120.0,
    # check flags a clock a minute off the provider's: far inside the skew gpuops tolerates
    "CHECK_CLOCK_TOLERANCE_S": 60.0,
    # a week of released history stays live (boxes shows this week's spend); older is archived
    "ARCHIVE_AFTER_S": 604800.0,
    "RECONCILE_BACKOFF_S": 5.0,
    "OWNER_GRACE_S": 900.0,
    "BOX_CEILING_GRACE_S": 1800.0,
    "BOX_CEILING_POLL_S": 60.0,
    "BUDGET_PROJECTION_S": 86400.0,
    "CLOCK_SKEW_S": 900.0,
    "UNCLEAR_CREATE_WINDOW_S": 1800.0,
    "S3_CONFLICT_BACKOFF_S": 0.05,
    "RACER_HEARTBEAT_S": 5.0,
    "RACER_TTL_S": 90.0,
    "LANE_POLL_S": 5.0,
    "GCE_OPERATION_TIMEOUT_S": 300.0,
    "GUARDIAN_HEARTBEAT_S": 15.0,
    "LEASE_TTL_S": 60.0,
    "LEASE_POLL_S": 5.0,
    "SUPERSESSION_VERIFY_S": 30.0,
    "DEADLINE_MARGIN_S": 600.0,
    "RESULTS_COPY_BUDGET_S": 420.0,
    "RESULTS_SYNC_EVERY_S": 1800.0,
    "DESTROY_CONFIRM_TIMEOUT_S": 120.0,
    "DESTROY_CONFIRM_POLL_S": 5.0,
    "VAST_CALL_INTERVAL_S": 0.01,
    "STALL_THRESHOLD_S": 1800.0,
    "WATCH_POLL_S": 10.0,
    "LOGS_FOLLOW_POLL_S": 1.0,
    "WATCH_TIMEOUT_S": 3600.0,
    "GUARD_SPAWN_WAIT_S": 30.0,
    "GUARD_SPAWN_POLL_S": 0.1,
    "GUARD_STOP_WAIT_S": 10.0,
    "DRILL_RENTAL_S": 120.0,
    "DRILL_POLL_S": 1.0,
    "LOG_SYNC_S": 30.0,
    "BOOT_MARKER_WINDOW_S": 300.0,
    "STALE_CLAIM_S": 7200.0,
    "LANE_WATCH_TIMEOUT_S": 3600.0,
    "STOCKOUT_RETRY_S": 120.0,
    "POWEROFF_GRACE_S": 180.0,
    "DEFAULT_MAX_RUN_S": 21600.0,
    "GCE_MIN_RUN_S": 30.0,
    "GCE_MAX_RUN_S": 10368000.0,
    "QUARANTINE_TTL_S": 86400.0,
    "PROBE_TIMEOUT_S": 180.0,
    "SSH_CONNECT_TIMEOUT_S": 10.0,
    "SSH_COMMAND_TIMEOUT_S": 60.0,
    "BOOT_TIMEOUT_S": 600.0,
    "RACE_POLL_S": 5.0,
    "CREATE_PACING_S": 4.5,
    "CONTRACT_END_MARGIN_S": 3600.0,
    "BACKOFF_BASE_S": 1.0,
    "BACKOFF_MAX_S": 60.0,
    "HTTP_TIMEOUT_S": 20.0,
    "STORE_LOCK_TIMEOUT_S": 10.0,
    "DEMO_RENTAL_S": 26.0,
    "DEMO_STEP_WAIT_S": 45.0,
    "DEMO_POLL_S": 0.05,
    "DEMO_SETTLE_STEP_S": 60.0,
    "PROGRESS_EVERY_S": 10.0,
    "RECORD_HOLD_S": 900.0,
    "RECORD_GCE_RUN_S": 240.0,
    "STORE_LOCK_POLL_S": 0.01,
    "MAX_RENTAL_S": 604800.0,
}


def durations() -> dict[str, float]:
    return {name: getattr(timing, name) for name in dir(timing) if name.endswith("_S")}


def test_every_duration_is_pinned_to_its_value():
    """M6: changing any constant, or adding one without pinning it, fails here."""
    assert durations() == PINNED
    assert all(type(value) is float for value in durations().values())


def test_every_duration_has_a_reason_beside_it():
    """M6: each constant is preceded by a comment saying why it has its value."""
    lines = (PACKAGE / "timing.py").read_text().splitlines()
    for index, line in enumerate(lines):
        name = line.split(" = ")[0]
        if name in PINNED:
            assert lines[index - 1].startswith("#"), f"{name} has no reason above it"


def test_the_lease_survives_at_least_three_missed_heartbeats():
    """M6/M7: one slow write must never make a live guardian look dead."""
    assert timing.LEASE_TTL_S >= 3 * timing.GUARDIAN_HEARTBEAT_S


def test_the_lease_outlasts_a_heartbeat_plus_one_slow_store_write():
    """M6/M7: a heartbeat whose S3 write takes the full HTTP timeout still lands in time."""
    # a single attempt (no client retries) of connect + read, each bounded by HTTP_TIMEOUT_S
    assert timing.LEASE_TTL_S >= timing.GUARDIAN_HEARTBEAT_S + 2 * timing.HTTP_TIMEOUT_S
    assert timing.LEASE_TTL_S > timing.GUARDIAN_HEARTBEAT_S + timing.STORE_LOCK_TIMEOUT_S


def test_supersession_is_verified_over_at_least_two_heartbeats_and_within_one_lease():
    """M7: a guardian leaves as superseded only after seeing its successor renew."""
    assert timing.SUPERSESSION_VERIFY_S >= 2 * timing.GUARDIAN_HEARTBEAT_S
    assert timing.SUPERSESSION_VERIFY_S < timing.LEASE_TTL_S


def test_a_standby_guardian_polls_faster_than_the_heartbeat():
    """M6: a standby sees a stale lease within one heartbeat of it going stale."""
    assert timing.LEASE_POLL_S < timing.GUARDIAN_HEARTBEAT_S


def test_the_copy_budget_leaves_room_to_destroy_before_the_deadline():
    """M5: copying results can never push the destroy past the deadline."""
    assert timing.RESULTS_COPY_BUDGET_S < timing.DEADLINE_MARGIN_S
    assert (
        timing.RESULTS_COPY_BUDGET_S + timing.DESTROY_CONFIRM_TIMEOUT_S <= timing.DEADLINE_MARGIN_S
    )
    assert timing.DESTROY_CONFIRM_POLL_S < timing.DESTROY_CONFIRM_TIMEOUT_S


def test_results_are_synced_several_times_within_the_longest_rental_and_never_each_heartbeat():
    """M5: a periodic results sync is rarer than the lease's heartbeat (a sync is ssh and a
    copy, not a renewal) and comes many times within the longest rental."""
    assert timing.RESULTS_SYNC_EVERY_S > timing.LEASE_TTL_S
    assert timing.RESULTS_SYNC_EVERY_S * 10 < timing.MAX_RENTAL_S


def test_a_short_rental_keeps_most_of_its_time_and_the_same_copy_share():
    """M5: the scaled margin is a fixed, pinned share of a short rental's length."""
    assert timing.DEADLINE_MARGIN_FRACTION == 0.25
    assert 0 < timing.DEADLINE_MARGIN_FRACTION < 0.5


def test_a_guardian_renews_its_lease_between_two_destroy_confirmations():
    """M7: waiting for a destroy to confirm never lets the guardian's own lease go stale."""
    assert timing.DESTROY_CONFIRM_POLL_S < timing.GUARDIAN_HEARTBEAT_S
    assert timing.LEASE_POLL_S + timing.GUARDIAN_HEARTBEAT_S < timing.LEASE_TTL_S


def test_a_watch_outlasts_a_stall_judgment():
    """M10: a watch lives long enough to call a job stalled before it gives up with exit 5."""
    assert timing.WATCH_TIMEOUT_S >= timing.STALL_THRESHOLD_S
    assert timing.WATCH_POLL_S < timing.WATCH_TIMEOUT_S


def test_stall_judgment_spans_many_polls_and_log_syncs():
    """M10: 'stalled' is only said after many chances to see progress."""
    assert timing.STALL_THRESHOLD_S >= 10 * timing.WATCH_POLL_S
    assert timing.STALL_THRESHOLD_S >= 10 * timing.LOG_SYNC_S


def test_the_lane_windows_fit_the_startup_script_contract():
    """L5/L2/L8: log sync is the seed's 30 s; the boot marker window spans several syncs;
    a stale claim is hours, many stockout retries long."""
    assert timing.LOG_SYNC_S == 30.0
    assert timing.BOOT_MARKER_WINDOW_S >= 5 * timing.LOG_SYNC_S
    assert timing.STALE_CLAIM_S >= 3600.0
    assert timing.STALE_CLAIM_S >= 10 * timing.STOCKOUT_RETRY_S
    assert timing.LANE_WATCH_TIMEOUT_S > timing.BOOT_MARKER_WINDOW_S
    assert timing.LANE_POLL_S < timing.LOG_SYNC_S
    assert timing.GCE_OPERATION_TIMEOUT_S >= 10 * timing.LANE_POLL_S


def test_probe_timeouts_nest():
    """M1: one ssh connect fits in one command, one command in the whole probe."""
    assert timing.SSH_CONNECT_TIMEOUT_S < timing.SSH_COMMAND_TIMEOUT_S < timing.PROBE_TIMEOUT_S
    assert timing.PROBE_TIMEOUT_S < timing.BOOT_TIMEOUT_S
    assert timing.CREATE_PACING_S <= timing.RACE_POLL_S < timing.BOOT_TIMEOUT_S / 10


def test_a_recording_s_priced_hold_covers_a_whole_rental():
    """record's spend cap prices boot, probe and a confirmed destroy."""
    whole = timing.BOOT_TIMEOUT_S + timing.PROBE_TIMEOUT_S + timing.DESTROY_CONFIRM_TIMEOUT_S
    assert timing.RECORD_HOLD_S >= whole


def test_backoff_and_pacing_are_bounded():
    """M12: creates are spaced; backoff starts small and is capped."""
    assert timing.CREATE_PACING_S > 0
    assert 0 < timing.BACKOFF_BASE_S < timing.BACKOFF_MAX_S
    assert timing.QUARANTINE_TTL_S >= 3600.0
    assert 0 < timing.STORE_LOCK_POLL_S < timing.STORE_LOCK_TIMEOUT_S


# --- no duration literal anywhere else ---------------------------------------------------

_CALLS = {"sleep", "wait", "join", "timedelta", "settimeout", "alarm", "Timer"}
# Words that make a number a duration whatever the suffix: POLL_INTERVAL = 10 is one.
_DURATION_WORDS = ("interval", "timeout", "delay", "ttl", "period", "backoff", "heartbeat")
_TIME_KEYWORDS = {
    "timeout",
    "seconds",
    "minutes",
    "hours",
    "milliseconds",
    "connect_timeout",
    "read_timeout",
}


def _number(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):
        return _number(node.operand)
    if isinstance(node, ast.BinOp):
        return _number(node.left) and _number(node.right)
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_duration_name(name: str) -> bool:
    """``*_s`` is seconds (``*_per_s`` is a rate, disk_mb_per_s); so is any name built on a
    duration word (``poll_interval``)."""
    lowered = name.lower()
    if lowered.endswith("_per_s"):
        return False
    return lowered.endswith("_s") or any(word in lowered for word in _DURATION_WORDS)


def duration_literals(source: str) -> list[str]:
    """Every place in ``source`` where a number is used as a duration."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in _CALLS and any(_number(arg) for arg in node.args):
                found.append(f"line {node.lineno}: {name}(<number>)")
            for keyword in node.keywords:
                named = keyword.arg in _TIME_KEYWORDS or _is_duration_name(keyword.arg or "")
                if named and _number(keyword.value):
                    found.append(f"line {node.lineno}: {keyword.arg}=<number>")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
            if _is_duration_name(name) and _number(value):
                found.append(f"line {node.lineno}: {name} = <number>")
            elif name.endswith("_S") and not name.endswith("_PER_S"):
                # a *_S constant outside timing.py is a second home, whatever its value:
                # LEASE_TTL_S = 2 * timing.GUARDIAN_HEARTBEAT_S redefines a relation
                found.append(f"line {node.lineno}: {name} defined outside timing.py")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            positional = node.args.posonlyargs + node.args.args
            pairs = list(zip(positional[::-1], node.args.defaults[::-1], strict=False))
            pairs += [
                (arg, default)
                for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True)
                if default is not None
            ]
            for arg, default in pairs:
                if _is_duration_name(arg.arg) and _number(default):
                    found.append(f"line {node.lineno}: default {arg.arg}=<number>")
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "time.sleep(5)",
        "sleep(0.5)",
        "event.wait(2 * 60)",
        "requests.get(url, timeout=30)",
        "timedelta(seconds=10)",
        "timedelta(3)",
        "POLL_S = 10",
        "poll_s = 1.5",
        "self.retry_s = 4",
        "x: float = 0\nwait_s: float = 9",
        "def f(heartbeat_s=15): pass",
        "def f(*, lease_ttl_s=60.0): pass",
        "proc.join(-1)",
        "POLL_INTERVAL = 10",
        "retry(delay_s=5)",
        "async def f(poll_s=5): pass",
        "threading.Timer(30, f)",
        "g = lambda wait_s=3: wait_s",
        "LEASE_TTL_S = 2 * timing.GUARDIAN_HEARTBEAT_S",
        "self.lease_ttl = 60",
        "def f(a, b, /, c, timeout_s=9): pass",
    ],
)
def test_the_scanner_catches_each_kind_of_duration_literal(snippet):
    """M6: the scan itself is tested, so a clean result means something."""
    assert duration_literals(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        "time.sleep(timing.LEASE_POLL_S)",
        "requests.get(url, timeout=timing.HTTP_TIMEOUT_S)",
        "attempts = 8",
        "x = [1, 2][0]",
        "def f(limit=3): pass",
        "MIN_DISK_MB_PER_S = 500.0",
        "def f(disk_mb_per_s=500): pass",
    ],
)
def test_the_scanner_accepts_durations_read_from_timing(snippet):
    """M6: reading timing's constants, and non-duration numbers, are fine."""
    assert duration_literals(snippet) == []


@pytest.mark.fault(
    "timing constants in three modules disagreed",
    handled="every duration lives in gpuops/timing.py; a literal elsewhere fails the suite (M6)",
)
def test_no_module_but_timing_holds_a_duration_literal():
    """M6: the September leak came from constants redefined in three modules."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "timing.py" and path.parent == PACKAGE:
            continue
        hits = duration_literals(path.read_text())
        if hits:
            offenders[str(path.relative_to(PACKAGE.parent))] = hits
    assert offenders == {}
    assert len(list(PACKAGE.rglob("*.py"))) >= 5


def test_the_owners_grace_covers_a_whole_destroy_and_the_look_ups_of_an_unclear_create_m13():
    """M13: within OWNER_GRACE_S of the deadline the owner can confirm a destroy and finish the
    look-ups by label that rent gives an unclear create; the grace outlasts a dead guardian's
    lease, so a standby takes over inside it."""
    from gpuops.market.race import RECONCILE_ATTEMPTS

    look_ups = sum(timing.RECONCILE_BACKOFF_S * 2**n for n in range(RECONCILE_ATTEMPTS))
    assert timing.OWNER_GRACE_S >= timing.DESTROY_CONFIRM_TIMEOUT_S + look_ups
    assert timing.OWNER_GRACE_S > timing.LEASE_TTL_S + timing.DESTROY_CONFIRM_TIMEOUT_S


def test_an_unclear_create_is_given_up_on_only_a_whole_grace_after_it_whatever_the_skew_m13():
    """M13: the window judged on a clock up to CLOCK_SKEW_S ahead of the writer's still lasts
    OWNER_GRACE_S, many times any look-up's backoff."""
    assert timing.UNCLEAR_CREATE_WINDOW_S - timing.CLOCK_SKEW_S >= timing.OWNER_GRACE_S
    assert timing.UNCLEAR_CREATE_WINDOW_S > 10 * timing.RECONCILE_BACKOFF_S


def test_the_grace_holds_the_clock_skew_allowance_m17():
    """M17: a deadline another host wrote is enforced CLOCK_SKEW_S late; a sweep on a host
    whose clock runs behind the renter's by the real skew then ends the box within
    OWNER_GRACE_S + that skew, as M13 promises, only while the allowance fits in the grace."""
    assert timing.CLOCK_SKEW_S <= timing.OWNER_GRACE_S
    assert timing.CLOCK_SKEW_S >= 15 * 60.0  # the skew the team's hosts are held to
    assert timing.RECONCILE_BACKOFF_S >= timing.RACE_POLL_S


def test_a_waiting_rent_takes_over_only_after_several_missed_racer_heartbeats_m8():
    """M8: a racer is presumed dead only after many heartbeats went missing and longer than one
    ssh step could have blocked it, so two rents never race for one name at once."""
    assert timing.RACER_TTL_S >= 6 * timing.RACER_HEARTBEAT_S
    assert timing.RACER_TTL_S > timing.SSH_COMMAND_TIMEOUT_S + timing.STORE_LOCK_TIMEOUT_S



def test_the_archive_never_takes_history_younger_than_the_longest_rental():
    """Released records stay live at least as long as a rental may last."""
    assert timing.ARCHIVE_AFTER_S >= timing.MAX_RENTAL_S


def test_the_power_off_grace_outlasts_the_final_log_retries_and_a_watch_poll_l12():
    """L12: a script still uploading its final log (5+10+15 s of retry pauses) is not yet a
    billing alarm, and a watcher polls several times inside the grace."""
    assert timing.POWEROFF_GRACE_S >= 5 + 10 + 15 + timing.LOG_SYNC_S
    assert timing.POWEROFF_GRACE_S >= 3 * timing.LANE_POLL_S


def test_the_default_run_ceiling_is_longer_than_a_stale_claim_and_shorter_than_a_day():
    """The provider-native ceiling must not cut a normal job short, nor bill for a day."""
    assert timing.STALE_CLAIM_S < timing.DEFAULT_MAX_RUN_S < 86400.0


def test_the_default_run_ceiling_lies_inside_gces_bounds_for_max_run_duration():
    """GCE refuses a maxRunDuration outside 30 s to 120 days: the default must be inside."""
    assert timing.GCE_MIN_RUN_S <= timing.DEFAULT_MAX_RUN_S <= timing.GCE_MAX_RUN_S
    assert timing.GCE_MAX_RUN_S == 120 * 86400.0


def test_an_exit_waits_for_one_whole_send_and_a_dead_sender_s_claim_outlives_the_exit_wait_o1():
    """O1: a process's exit waits out a send's connect and read; a claim is stale only after it."""
    assert timing.ALARM_FLUSH_S >= 2 * timing.ALARM_SEND_TIMEOUT_S
    assert timing.ALARM_CLAIM_STALE_S > timing.ALARM_FLUSH_S
    assert timing.ALARM_SEND_TIMEOUT_S < timing.GUARDIAN_HEARTBEAT_S


def test_check_flags_a_clock_long_before_it_nears_the_skew_gpuops_tolerates_m17():
    """M17: a host `gpuops check` passes is at most a minute off; hosts may be 15 apart."""
    assert timing.CHECK_CLOCK_TOLERANCE_S * 10 <= timing.CLOCK_SKEW_S


def test_the_box_s_own_ceiling_fires_after_its_owner_s_bound_even_on_a_fast_box_clock_m14():
    """M14: the box ends itself only once its owner (guardian or sweep) has had its whole grace,
    even if the box's clock runs CLOCK_SKEW_S ahead; and it asks again many times an hour."""
    assert timing.BOX_CEILING_GRACE_S - timing.CLOCK_SKEW_S >= timing.OWNER_GRACE_S
    assert timing.BOX_CEILING_POLL_S <= timing.OWNER_GRACE_S / 10


def test_an_offer_s_contract_outlasts_the_box_s_own_ceiling_and_a_skewed_clock_h6():
    """H6: Vast stops a box at its contract's end; an offer is raced only when that end comes
    after the deadline plus the box's own ceiling grace, on a clock CLOCK_SKEW_S off."""
    assert timing.CONTRACT_END_MARGIN_S >= timing.BOX_CEILING_GRACE_S + timing.CLOCK_SKEW_S
