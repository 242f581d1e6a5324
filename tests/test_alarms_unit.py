"""Alarms a person hears (O1), pinned without a network: what each alarm says and the cause it
is heard once for (the dedup key: one per incarnation, per claim, per job end, per set), and
the Alarms machinery (once per cause, retried, claims, faults told and never raised) with an
in-memory endpoint and a MemoryStore. tests/test_alarms.py does the same end to end."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from store_fakes import Events
from gpuops.store.memory import MemoryStore

from gpuops import alarms as a
from gpuops import timing
from gpuops.errors import StoreUnavailable, UsageError
from gpuops.settings import Settings
from gpuops.store.memory import MemoryStore
from gpuops.store.records import Records


@dataclasses.dataclass
class Rental:
    name: str = "job"
    instance_id: str | None = "4242"
    deadline_at: float = 1796148000.0


class Endpoint:
    """An endpoint that records what it is sent and fails while ``down`` says so."""

    def __init__(self, id: str = "json-aaaa", down: int = 0) -> None:
        self.id, self.down = id, down
        self.sent: list[a.Alarm] = []

    def send(self, alarm: a.Alarm, /) -> str | None:
        if self.down:
            self.down -= 1
            return "not delivered (FAILURE)"
        self.sent.append(alarm)
        return None


class Clock:
    def __init__(self, now: float = 1796148000.0) -> None:
        self.now = now

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def alarms(store: Any, *endpoints: Endpoint, who: str = "alice/h/1/aa", **kw: Any) -> a.Alarms:
    kw.setdefault("clock", Clock())
    return a.Alarms(store, kw.pop("events", Events()), list(endpoints), who=who, **kw)


def raised(alarms_: a.Alarms, alarm: a.Alarm) -> None:
    alarms_.raise_alarm(alarm)
    assert alarms_.flush(5.0)


def pending(store: Any) -> list[a.PendingAlarm]:
    return Records(store, a.PENDING, a.PENDING_CODEC, check_name=a.check_cause).all()


def causes(store: Any) -> list[str]:
    return [name for name, _, _ in Records(store, a.CAUSES, a.CAUSE_CODEC).entries()]


ALARM = a.Alarm(a.AlarmKind.JOB_DEAD, "job.dead.x@1.5", "gpuops: the job on x ended", "body")


# --- what each alarm says, and its cause ------------------------------------------------------
def test_a_guardian_s_alarms_are_heard_once_per_incarnation_and_say_what_to_run_o1():
    """O1: exit, pending destroy and failed copy name the rental, its box and deadline; the
    cause is per incarnation (name@box, or name@d<deadline> before a box is kept)."""
    kept, early = Rental(), Rental(instance_id=None)

    exit_ = a.guardian_exit(kept, 6, "the copy failed")
    pending_ = a.destroy_pending(kept, "4242 still running")
    copy = a.copy_failed(kept, "rsync exited 23")

    assert a.incarnation(kept) == "job@4242" and a.incarnation(early) == "job@d1796148000"
    assert exit_.cause == "guardian.exit.job@4242.6" and exit_.kind is a.AlarmKind.GUARDIAN_EXIT
    assert exit_.subject == "gpuops: the guardian of job exited 6"
    assert exit_.body == (
        "the copy failed. Instance 4242, deadline 2026-12-01T18:00:00.000000Z. Until another "
        "guardian runs, `gpuops sweep` is its only ceiling: run `gpuops boxes`, then `gpuops "
        "guard job` or `gpuops destroy job`."
    )
    assert "no reason given. Instance none kept" in a.guardian_exit(early, 1, "").body
    assert pending_.cause == "guardian.destroy_pending.job@4242"
    assert pending_.subject == "gpuops: job's destroy is still not confirmed"
    assert pending_.body == (
        "After 3 rounds the provider has not confirmed every box of job gone: 4242 still "
        "running. The guardian keeps trying; the box may still bill."
    )
    assert copy.cause == "guardian.copy_failed.job@4242"
    assert copy.subject == "gpuops: job's results were not copied off"
    assert copy.body == (
        "rsync exited 23. The box is destroyed at its deadline all the same "
        "(2026-12-01T18:00:00.000000Z); what the job made there is lost with it."
    )


def test_a_failed_sync_is_heard_once_per_run_of_failures_and_says_the_destroy_still_comes_m5():
    """M5/O1: a sync that failed names the rental and what failed; its cause is the
    incarnation and when the run of failures began, so a later run is heard again."""
    kept = Rental()

    sync = a.sync_failed(kept, "listing the results failed: exit 255: closed", 1796140000.7)

    assert sync.kind is a.AlarmKind.SYNC_FAILED
    assert sync.cause == "guardian.sync_failed.job@4242.1796140000"
    assert a.sync_failed(kept, "other words", 1796140000.2).cause == sync.cause
    assert a.sync_failed(kept, "x", 1796149000.0).cause != sync.cause
    assert sync.subject == "gpuops: job's results could not be synced"
    assert sync.body == (
        "listing the results failed: exit 255: closed. What earlier syncs delivered is kept; "
        "the guardian tries again at the next sync, and the box is destroyed at its deadline "
        "(2026-12-01T18:00:00.000000Z) whether or not a sync works."
    )


def test_watch_s_judgment_is_an_alarm_only_when_stalled_or_dead_once_per_job_start_m10():
    """M10: stalled (alert only, left running) and dead are alarms, heard once per job
    start; running or unknown are none."""
    stalled = a.job_judged("job", "4242", 1796148000.9, "stalled", "no output for 2 h")
    dead = a.job_judged("job", "4242", 1796148000.9, "dead", "tmux session gone")

    assert a.job_judged("job", "4242", 1.0, "running", "") is None
    assert a.job_judged("job", "4242", 1.0, "unknown", "") is None
    assert stalled is not None and dead is not None
    assert (stalled.kind, dead.kind) == (a.AlarmKind.JOB_STALLED, a.AlarmKind.JOB_DEAD)
    assert stalled.cause == "job.stalled.job@4242.1796148000"
    assert dead.cause == "job.dead.job@4242.1796148000"
    assert stalled.subject == "gpuops: the job on job looks stalled (it is left running)"
    assert dead.subject == "gpuops: the job on job ended"
    assert dead.body == (
        "tmux session gone. Instance 4242; the box bills until its deadline or `gpuops "
        "destroy job`."
    )


def test_sweep_s_findings_are_heard_once_per_distinct_set_whatever_their_order_o1():
    """O1: one alarm per set of findings (the same set in another order is the same cause; a
    changed set is a new one); nothing found is no alarm; the body lists at most 50."""
    found = a.sweep_found(a.AlarmKind.SWEEP_UNOWNED, ["b", "a"])
    again = a.sweep_found(a.AlarmKind.SWEEP_UNOWNED, ["a", "b"])
    changed = a.sweep_found(a.AlarmKind.SWEEP_UNOWNED, ["a", "b", "c"])
    many = a.sweep_found(a.AlarmKind.SWEEP_UNREADABLE, [f"r{i:03}" for i in range(60)])

    assert a.sweep_found(a.AlarmKind.SWEEP_UNOWNED, []) is None
    assert found is not None and again is not None and changed is not None and many is not None
    assert found.cause == again.cause != changed.cause
    # the digest every host and version must agree on: the sorted items, one per line
    digest = __import__("hashlib").sha256(b"a\nb").hexdigest()[:24]
    assert found.cause == f"sweep.unowned.{digest}"
    assert found.subject == "gpuops sweep: 2 instance(s) on the account no ledger owns"
    assert found.body == (
        "2 instance(s) on the account no ledger owns; gpuops never touches them: find whose "
        "they are:\n- a\n- b"
    )
    assert many.body.count("\n- ") == 50 and "- r049" in many.body and "r050" not in many.body
    unresolved = a.sweep_found(a.AlarmKind.SWEEP_UNRESOLVED, ["i1"])
    assert unresolved is not None and "create(s) still unresolved" in unresolved.subject


def test_the_lane_s_alarms_are_heard_once_per_claim_and_once_per_job_end_l8_l12():
    """L8: a stale claim, once per claim (its time); L12: a VM still billing after its job,
    once per job end (no end time is 0)."""
    stale = a.lane_stale_claim("gpu-lane", "bob", "portraits", 1796148000.7, "TERMINATED")
    billing = a.lane_billing("gpu-lane", "portraits", 1796150000.2, "still RUNNING")
    unknown_end = a.lane_billing("gpu-lane", "portraits", None, "still RUNNING")

    assert stale.kind is a.AlarmKind.LANE_STALE_CLAIM
    assert stale.cause == "lane.stale_claim.gpu-lane.portraits.1796148000"
    assert stale.subject == "gpuops lane: bob's claim on gpu-lane for portraits is STALE"
    assert stale.body == (
        "Claimed 2026-12-01T18:00:00.700000Z and never started (L8): TERMINATED."
    )
    assert billing.cause == "lane.billing.gpu-lane.portraits.1796150000"
    assert billing.subject == "gpuops lane: gpu-lane still bills after portraits ended"
    assert billing.body == "still RUNNING" and billing.kind is a.AlarmKind.LANE_BILLING
    assert unknown_end.cause == "lane.billing.gpu-lane.portraits.0"


@pytest.mark.parametrize(
    "parts, cause",
    [
        (("x@1", 2), "job.dead.x@1.2"),
        (("a/b",), "job.dead." + __import__("hashlib").sha256(b"job.dead.a/b").hexdigest()[:32]),
        (("x" * 200,), None),
    ],
)
def test_a_cause_is_one_key_segment_or_a_digest_of_it(parts, cause):
    """The dedup key is a store key segment: as written when it is one, else a stable digest
    (a slash or an over-long name never escapes into another key)."""
    got = a.cause_of(a.AlarmKind.JOB_DEAD, *parts)

    if cause is not None:
        assert got == cause
    assert "/" not in got and a.check_cause(got) == got and len(got) <= 128


@pytest.mark.parametrize("cause", ["a/b", "", "x" * 129, "sp ace"])
def test_an_alarm_whose_cause_is_no_key_segment_is_a_usage_error(cause):
    """A bad cause is refused when the alarm is made, naming it."""
    with pytest.raises(UsageError, match="must be one key segment"):
        a.Alarm(a.AlarmKind.JOB_DEAD, cause, "s", "b")


def test_an_endpoint_is_named_by_its_scheme_and_a_hash_never_its_url_h3():
    """H3: the id keeps the scheme (lower-cased) and 12 hex of the URL's hash; the repr is
    the id."""
    url = "JSON://host:8080/alarms?token=s3cret"
    id_ = a.endpoint_id(url)

    assert id_ == "json-" + __import__("hashlib").sha256(url.encode()).hexdigest()[:12]
    assert "s3cret" not in repr(a.AppriseEndpoint(url)) and id_ in repr(a.AppriseEndpoint(url))


@pytest.mark.parametrize(
    "url, expected",
    [
        ("json://h/p", "json://h/p?cto=4&rto=4"),
        ("json://h/p?x=1", "json://h/p?x=1&cto=4&rto=4"),
        ("json://h/p?cto=9", "json://h/p?cto=9&rto=4"),
        ("json://h/p?rto=9&cto=9", "json://h/p?rto=9&cto=9"),
        ("json://h/p?cto=1=2", "json://h/p?cto=1=2&rto=4"),  # a name ends at its first '='
        ("json://h/p?cto=1?x", "json://h/p?cto=1?x&rto=4"),  # the query starts at the first '?'
    ],
)
def test_each_send_is_bounded_by_apprise_s_timeouts_unless_the_url_sets_its_own(url, expected):
    """O1: connect and read timeouts (cto, rto) on every URL, never overriding its own."""
    assert a.with_timeouts(url, 4.0) == expected


def test_an_unknown_scheme_is_named_as_such_and_a_send_never_raises_o1():
    """O1: a URL apprise does not know is said so (check reads it as a configuration fault)."""
    assert a.AppriseEndpoint("nosuchscheme://x").send(ALARM) == (
        "apprise does not know this URL (its scheme, or its form)"
    )


# --- the machinery ------------------------------------------------------------------------------
def test_an_alarm_is_logged_at_once_sent_once_and_its_cause_remembered_o1():
    """O1: raised twice by one process and once by another sharing the store: one send, the
    cause recorded with who raised it, no pending work left; each raise logged."""
    store, endpoint, events = MemoryStore(), Endpoint(), Events()
    first = alarms(store, endpoint, events=events)
    other = alarms(store, endpoint, who="bob/h2/9/bb", events=events)

    raised(first, ALARM)
    raised(first, ALARM)
    raised(other, ALARM)

    assert endpoint.sent == [ALARM]
    assert causes(store) == ["job.dead.x@1.5"] and pending(store) == []
    cause = Records(store, a.CAUSES, a.CAUSE_CODEC).get("job.dead.x@1.5")
    assert cause == a.RaisedCause("job.dead", ALARM.subject, "2026-12-01T18:00:00.000000Z", "alice/h/1/aa")
    assert [p["cause"] for p in events.kinds("alarm.raised")] == ["job.dead.x@1.5"] * 3
    assert events.kinds("alarm.raised")[0] == {
        "cause": "job.dead.x@1.5", "kind": "job.dead", "subject": ALARM.subject
    }  # fmt: skip
    assert events.kinds("alarm.delivered") == [{"cause": "job.dead.x@1.5", "endpoint": "json-aaaa"}]
    assert len(events.kinds("alarm.duplicate")) == 2


def test_an_endpoint_that_fails_keeps_the_alarm_pending_and_the_next_raise_retries_it_o1():
    """O1: a failed send leaves the pending record (its claim let go, the error and attempt
    kept); the next raise of another cause retries it and then deletes it."""
    store, down, events = MemoryStore(), Endpoint(down=1), Events()
    sender = alarms(store, down, events=events)

    raised(sender, ALARM)
    (left,) = pending(store)
    other = dataclasses.replace(ALARM, cause="job.dead.a@0.5")  # listed before the pending one
    raised(sender, other)

    assert left.pending == "json-aaaa" and left.attempts == 1 and left.raised_at == "2026-12-01T18:00:00.000000Z"
    assert (left.sending_by, left.sending_at) == (None, None)
    assert left.last_error == "json-aaaa: not delivered (FAILURE)"
    assert (left.kind, left.subject, left.body) == ("job.dead", ALARM.subject, "body")
    assert [x.cause for x in down.sent] == ["job.dead.a@0.5", "job.dead.x@1.5"]
    assert down.sent[1] == ALARM
    assert pending(store) == []
    assert events.kinds("alarm.undelivered") == [
        {"cause": "job.dead.x@1.5", "endpoint": "json-aaaa", "error": "not delivered (FAILURE)"}
    ]


def test_only_the_endpoints_not_reached_stay_pending_and_another_host_s_are_left_to_it_o1():
    """O1: of two endpoints, the one reached is dropped from the record; a retrier that has
    only the other host's endpoint neither claims nor sends it."""
    store, up, down = MemoryStore(), Endpoint("json-up"), Endpoint("json-down", down=5)
    raised(alarms(store, up, down), ALARM)
    (left,) = pending(store)
    elsewhere = alarms(store, Endpoint("json-other"))
    elsewhere.retry()
    assert elsewhere.flush(5.0)

    assert left.pending == "json-down" and [x.cause for x in up.sent] == [ALARM.cause]
    assert pending(store) == [left]


def test_every_endpoint_s_error_is_kept_with_the_pending_alarm_o1():
    """O1: two endpoints down: both stay pending, and the record keeps each one's error."""
    store = MemoryStore()
    raised(alarms(store, Endpoint("json-a", down=1), Endpoint("json-b", down=1)), ALARM)

    (left,) = pending(store)
    assert left.pending == "json-a json-b"
    assert left.last_error == "json-a: not delivered (FAILURE); json-b: not delivered (FAILURE)"


def test_a_failed_send_prints_nothing_and_logs_nothing_outside_apprise_h3(capfd, caplog):
    """H3: apprise's own warnings (which may name the URL, and a URL may hold a token) go
    neither to stderr nor to any handler outside apprise's logger, from the first send on."""
    import logging

    from alarm_receiver import Receiver

    logger = logging.getLogger("apprise")
    saved = (list(logger.handlers), logger.propagate)
    logger.handlers, logger.propagate = [], True  # as a fresh process has it
    receiver = Receiver(answers=[500])
    try:
        with caplog.at_level(logging.DEBUG):
            error = a.AppriseEndpoint(receiver.url + "?token=s3cret").send(ALARM)
    finally:
        receiver.close()
        logger.handlers, logger.propagate = saved

    assert error == "not delivered (FAILURE)"
    assert [r for r in caplog.records if r.name.startswith("apprise")] == []
    assert capfd.readouterr().err == ""


def test_sweep_s_retry_takes_over_a_claim_only_once_it_is_stale_o1():
    """O1/M17: a pending alarm claimed by a sender that died is retried only once
    ALARM_CLAIM_STALE_S + CLOCK_SKEW_S have passed since its claim (another host's clock),
    then sent once, its attempt counted."""
    store, clock = MemoryStore(), Clock()
    died = a.PendingAlarm("job.dead", "s", "b", "then", "json-aaaa", 1, "dead/h/1/x", clock.now)
    Records(store, a.PENDING, a.PENDING_CODEC).update(ALARM.cause, lambda cur: died)
    endpoint = Endpoint()
    retrier = alarms(store, endpoint, clock=clock)

    clock.now += timing.ALARM_CLAIM_STALE_S + timing.CLOCK_SKEW_S - 1
    retrier.retry()
    assert retrier.flush(5.0) and endpoint.sent == []
    clock.now += 1
    retrier.retry()
    assert retrier.flush(5.0)

    assert [(x.cause, x.subject, x.body) for x in endpoint.sent] == [(ALARM.cause, "s", "b")]
    assert pending(store) == [] and causes(store) == [ALARM.cause]


def test_a_released_claim_is_retried_at_once_and_counts_its_attempt_o1():
    """O1: a pending alarm nobody is sending is claimed by the next retrier at once (its
    attempt counted, its claim ours); a failing endpoint leaves it with 2 attempts."""
    store = MemoryStore()
    free = a.PendingAlarm("job.dead", "s", "b", "then", "json-aaaa", 1)
    Records(store, a.PENDING, a.PENDING_CODEC).update(ALARM.cause, lambda cur: free)
    retrier = alarms(store, Endpoint(down=1))
    retrier.retry()
    assert retrier.flush(5.0)

    (left,) = pending(store)
    assert left.attempts == 2 and left.sending_by is None


def test_an_alarm_the_store_cannot_record_is_sent_anyway_and_the_fault_logged_o1():
    """O1: with the store refusing, the alarm is still sent (heard twice rather than never),
    and `alarm.unrecorded` says why."""

    class Broken(MemoryStore):
        def get(self, key: str) -> Any:
            raise StoreUnavailable("no route")

    endpoint, events = Endpoint(), Events()
    raised(alarms(Broken(), endpoint, events=events), ALARM)

    assert endpoint.sent == [ALARM]
    assert events.kinds("alarm.unrecorded") == [
        {"cause": ALARM.cause, "error": "StoreUnavailable: no route"}
    ]


def test_a_fault_of_the_alarms_themselves_is_told_and_never_raised_into_the_caller_o1():
    """O1: a sink that cannot log, a store that breaks in the background: told through `say`,
    never raised; no endpoint: an event only, nothing stored."""

    class NoLog:
        def append(self, kind: str, /, **payload: Any) -> None:
            raise OSError("disk full")

    class Broken(MemoryStore):
        def get(self, key: str) -> Any:
            raise StoreUnavailable("no route")

        def list(self, prefix: str) -> Any:
            raise StoreUnavailable("no route")

    said: list[str] = []
    quiet = a.Alarms(MemoryStore(), NoLog(), [], who="w", say=said.append)
    quiet.raise_alarm(ALARM)
    store, events = MemoryStore(), Events()
    a.Alarms(store, events, [], who="w").raise_alarm(ALARM)
    broken = a.Alarms(Broken(), Events(), [Endpoint()], who="w", say=said.append)
    broken.retry()
    assert broken.flush(5.0)

    assert said[0] == "gpuops: could not log alarm.raised: OSError: disk full"
    assert said[1] == "gpuops: alarm delivery failed: StoreUnavailable: no route"
    assert store.list("") == [] and len(events.kinds("alarm.raised")) == 1


def test_a_fault_whose_telling_fails_too_is_still_never_raised_o1():
    """O1: the event log and stderr both gone (a full disk, a closed pipe): raising an alarm
    still returns quietly to the guardian about to destroy."""

    class NoLog:
        def append(self, kind: str, /, **payload: Any) -> None:
            raise OSError("disk full")

    def say(line: str) -> None:
        raise BrokenPipeError("stderr closed")

    a.Alarms(MemoryStore(), NoLog(), [], who="w", say=say).raise_alarm(ALARM)


def test_a_raise_that_fails_to_start_is_told_not_raised_o1(monkeypatch):
    """O1: even a thread that cannot start is told through `say`, never raised."""
    said: list[str] = []
    broken = alarms(MemoryStore(), Endpoint(), say=said.append)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(broken, "_start", refuse)
    broken.raise_alarm(ALARM)

    assert said == [f"gpuops: could not raise alarm {ALARM.cause}: RuntimeError: can't start new thread"]


def test_a_destroy_pending_alarm_is_raised_on_exactly_the_nth_round_o1():
    """O1/M4: raise_after counts rounds per cause: the alarm goes on round n, never before,
    never again after."""
    endpoint = Endpoint()
    sender = alarms(MemoryStore(), endpoint)
    other = dataclasses.replace(ALARM, cause="job.dead.y@2.5")

    heard = []
    for round_ in range(4):
        sender.raise_after(3, ALARM)
        if round_ < 2:
            sender.raise_after(3, other)  # two rounds only: never heard
        assert sender.flush(5.0)
        heard.append([x.cause for x in endpoint.sent])

    assert heard == [[], [], [ALARM.cause], [ALARM.cause]]


def test_flush_reports_alarms_still_in_flight_and_the_exit_hook_is_registered_once(monkeypatch):
    """O1: flush says False while a send is still going past its time, True once it is done;
    the process's exit waits for alarms through one atexit hook, however many are raised."""
    import threading

    gate = threading.Event()
    registered: list[Any] = []
    monkeypatch.setattr(a.atexit, "register", lambda *args: registered.append(args))

    class Slow(Endpoint):
        def send(self, alarm: a.Alarm, /) -> str | None:
            gate.wait(10.0)
            return super().send(alarm)

    import time

    sender = alarms(MemoryStore(), Slow())
    sender.raise_alarm(ALARM)
    sender.raise_alarm(dataclasses.replace(ALARM, cause="job.dead.y@2.5"))
    in_flight = len(sender._threads)
    began = time.monotonic()
    busy = sender.flush(0.0)
    waited_s = time.monotonic() - began
    gate.set()

    assert in_flight == 2  # a second raise keeps the first, still sending, to wait for
    assert busy is False and waited_s < 0.5  # a limit of 0 does not wait
    assert sender.flush(5.0) is True
    assert registered == [(sender.flush, timing.ALARM_FLUSH_S)]


def test_open_alarms_names_this_process_and_takes_gpuops_notify_s_endpoints(tmp_path):
    """O1: the command's alarms: one endpoint per GPUOPS_NOTIFY URL, named by id; `who` is
    operator/host/pid/nonce; `silent` logs only."""
    import os
    import socket

    settings = Settings.from_environ(
        {"GPUOPS_NOTIFY": "json://127.0.0.1:9/a ntfy://topic", "HOME": str(tmp_path)}, home=tmp_path
    )
    clock, said, events = Clock(), [], Events()
    opened = a.open_alarms(
        settings, MemoryStore(), Events(), operator="alice", clock=clock, say=said.append
    )
    quiet = a.silent(events)

    assert sorted(opened.endpoints) == sorted(
        [a.endpoint_id("json://127.0.0.1:9/a"), a.endpoint_id("ntfy://topic")]
    )
    operator, host, pid, nonce = opened.who.split("/")
    assert (operator, host, pid) == ("alice", socket.gethostname(), str(os.getpid()))
    assert len(nonce) == 6
    assert a.open_alarms(settings, None, Events()).who.startswith("gpuops/")
    assert quiet.endpoints == {} and quiet.causes is None and quiet.pending is None
    assert quiet.who == "silent" and quiet.events is events
    assert opened.clock is clock and opened.say == said.append


def test_a_cause_whose_work_another_process_has_begun_is_left_to_it_o1():
    """O1: a pending record already there (another process raised it and is sending) and
    no cause yet: this raise sends nothing and says it is a duplicate; the record is theirs."""
    store, endpoint, events = MemoryStore(), Endpoint(), Events()
    theirs = a.PendingAlarm("job.dead", "s", "b", "then", "json-aaaa", 1, "bob/h2/9/bb", 1796148000.0)
    Records(store, a.PENDING, a.PENDING_CODEC).update(ALARM.cause, lambda cur: theirs)

    raised(alarms(store, endpoint, events=events), ALARM)

    assert endpoint.sent == [] and pending(store) == [theirs]
    assert events.kinds("alarm.duplicate") == [{"cause": ALARM.cause}]


def test_a_cause_remembered_by_another_between_our_look_and_our_claim_is_not_sent_again_o1():
    """O1: raised, sent and finished elsewhere between our look at the cause and our claim:
    our claim is withdrawn (our pending record removed) and nothing is sent."""
    from store_fakes import Interleaved

    store, endpoint = Interleaved(), Endpoint()
    done = a.RaisedCause("job.dead", "s", "then", "bob/h2/9/bb")
    causes_ = Records(store, a.CAUSES, a.CAUSE_CODEC)
    store.before["create"].append(lambda: causes_.update(ALARM.cause, lambda cur: done))

    raised(alarms(store, endpoint), ALARM)

    assert endpoint.sent == [] and pending(store) == []
    assert causes_.get(ALARM.cause) == done


class TakenOver(Endpoint):
    """An endpoint during whose send another retrier takes the pending record over."""

    def __init__(self, store: Any, down: int) -> None:
        super().__init__(down=down)
        self.store = store

    def send(self, alarm: a.Alarm, /) -> str | None:
        records = Records(self.store, a.PENDING, a.PENDING_CODEC)
        records.update(alarm.cause, lambda cur: dataclasses.replace(cur, sending_by="carol/h3/7/cc"))
        return super().send(alarm)


@pytest.mark.parametrize("down", [0, 1], ids=["delivered", "failed"])
def test_a_claim_taken_over_mid_send_is_left_to_its_new_sender_o1(down):
    """O1: whether our send worked or not, a record another retrier has claimed meanwhile is
    theirs: we neither delete it nor release their claim nor write our error into it."""
    store = MemoryStore()
    endpoint = TakenOver(store, down)

    raised(alarms(store, endpoint), ALARM)

    (left,) = pending(store)
    assert left.sending_by == "carol/h3/7/cc" and left.last_error is None


def test_alarms_run_on_daemon_threads_and_flush_with_no_limit_waits_for_all_o1():
    """O1: a hung endpoint never holds a process's exit beyond the exit hook's limit (its
    thread is a daemon); flush() with no limit waits until every alarm is done."""
    sender = alarms(MemoryStore(), Endpoint())
    sender.raise_alarm(ALARM)
    threads = list(sender._threads)

    assert threads and all(t.daemon and t.name == "gpuops-alarm" for t in threads)
    assert sender.flush() is True and sender._threads == []


def test_retry_with_no_endpoint_or_no_store_starts_nothing_o1():
    """O1: nothing to send to, or nowhere pending work could be: retry does nothing."""
    no_endpoint = alarms(MemoryStore())
    no_store = a.Alarms(None, Events(), [Endpoint()], who="w")
    no_endpoint.retry()
    no_store.retry()

    assert no_endpoint._threads == [] and no_store._threads == []


@pytest.mark.fault(
    "an alarm's first send runs while its process's interpreter is exiting (a guardian's last alarm)",
    handled="delivered: the module apprise needs at a send is imported when the endpoint is made (O1)",
)
def test_an_alarm_still_in_flight_when_its_process_exits_is_delivered_on_the_way_out_o1(
    tmp_path,
):
    """O1: a guardian's last alarm goes out while its interpreter is exiting (the exit hook
    waits for it), when pools of worker threads already refuse work: the send runs in the
    alarm's own thread. A child Python raises it and returns at once; its send is held until
    the exit has begun; the loopback receiver gets it."""
    import subprocess
    import sys
    from pathlib import Path

    from alarm_receiver import Receiver

    child = f"""
import atexit, sys, threading
from gpuops import alarms as a
from store_fakes import Events
from gpuops.store.memory import MemoryStore

gate = threading.Event()
real = a.AppriseEndpoint({{url!r}})

class Held:
    id = real.id
    def send(self, alarm):
        gate.wait(30)
        return real.send(alarm)

sender = a.Alarms(MemoryStore(), Events(), [Held()], who="w")
sender.raise_alarm(a.Alarm(a.AlarmKind.GUARDIAN_EXIT, "guardian.exit.j@1.6", "last words", "b"))
atexit.register(gate.set)  # runs before the alarms' own exit hook (last in, first out)
"""
    tests = Path(__file__).resolve().parent
    receiver = Receiver()
    try:
        done = subprocess.run(
            [sys.executable, "-c", child.format(url=receiver.url)],
            env={**__import__("os").environ, "PYTHONPATH": str(tests)},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        titles = receiver.titles()
    finally:
        receiver.close()

    assert done.returncode == 0, done.stderr
    assert titles == ["last words"]


def test_a_retrier_s_claim_holds_off_every_other_retrier_while_it_sends_o1():
    """O1: a pending alarm taken up by one retrier (its claim: who, and when by its clock) is
    not taken by a second retrier that looks while the first is still sending: heard once."""
    store, clock = MemoryStore(), Clock()
    free = a.PendingAlarm("job.dead", "s", "b", "then", "json-aaaa", 1)
    Records(store, a.PENDING, a.PENDING_CODEC).update(ALARM.cause, lambda cur: free)
    second_endpoint = Endpoint()
    second = alarms(store, second_endpoint, who="bob/h2/9/bb", clock=clock)

    class Meanwhile(Endpoint):
        def send(self, alarm: a.Alarm, /) -> str | None:
            (claimed,) = pending(store)
            assert claimed.sending_by == "alice/h/1/aa" and claimed.sending_at == clock.now
            second._retry_pending()  # the second retrier looks now, in the middle of our send
            return super().send(alarm)

    first_endpoint = Meanwhile()
    first = alarms(store, first_endpoint, clock=clock)
    first.retry()
    assert first.flush(5.0)

    assert [x.cause for x in first_endpoint.sent] == [ALARM.cause]
    assert second_endpoint.sent == [] and pending(store) == []


def test_a_pending_record_whose_name_is_no_cause_is_never_claimed_or_sent_o1():
    """O1: a record under alarms/pending/ whose name is not one key segment (written by
    hand, or by another tool) is refused by name: not claimed, not sent, the fault told."""
    store, endpoint, said = MemoryStore(), Endpoint(), []
    planted = a.PendingAlarm("job.dead", "s", "b", "then", "json-aaaa", 1)
    store.create(a.PENDING + "x/y", a.PENDING_CODEC.encode(planted))
    retrier = alarms(store, endpoint, say=said.append)
    retrier.retry()
    assert retrier.flush(5.0)

    found = store.get(a.PENDING + "x/y")
    assert found is not None and a.PENDING_CODEC.decode(found.key, found.data) == planted
    assert endpoint.sent == [] and len(said) == 1 and "must be one key segment" in said[0]


def test_a_budget_threshold_is_heard_once_per_threshold_per_period_m15():
    """M15/O1: the team's or an operator's spend reaching a fraction of a limit: once per
    (who, period, period start, percent); the subject names the share and the limit."""
    day = a.budget_threshold("team", "day", 1796083200.9, 0.8, 50.0, "spent $30.00, committed $10.00")
    full = a.budget_threshold("team", "day", 1796083200.0, 1.0, 50.0, "spent $50.00")

    assert day.kind is a.AlarmKind.BUDGET and day.kind.value == "budget.threshold"
    assert day.cause == "budget.threshold.team.day.1796083200.80"
    assert full.cause == "budget.threshold.team.day.1796083200.100"
    assert day.subject == "gpuops budget: team at 80% of $50.00 per day"
    assert day.body == (
        "spent $30.00, committed $10.00. `gpuops budget` shows every limit with what is spent "
        "and committed; `rent` refuses a rental that would cross one (M15)."
    )


def test_an_endpoint_s_name_takes_its_scheme_before_the_first_separator_and_a_crash_is_named_h3(
    monkeypatch,
):
    """H3: a URL holding another URL is still named by its own scheme; apprise itself
    failing is told by the exception's type, never raised and never with the URL."""
    import apprise

    class Broken:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("json://h/p?token=s3cret")

    assert a.endpoint_id("json://h/p?next=http://x").startswith("json-")
    monkeypatch.setattr(apprise, "Apprise", Broken)
    assert a.AppriseEndpoint("json://h/p?token=s3cret").send(ALARM) == "apprise failed: RuntimeError"


def test_the_retry_after_a_raise_goes_past_the_cause_just_raised_o1():
    """O1: an endpoint down for the raise of a (listed first) and up again: the retry that
    follows skips a, just tried, and still retries x, pending before it."""
    store = MemoryStore()
    endpoint = Endpoint(down=2)
    sender = alarms(store, endpoint)
    raised(sender, ALARM)  # x: fails, pending
    raised(sender, dataclasses.replace(ALARM, cause="job.dead.a@0.5"))  # a: fails; then x retried

    assert [x.cause for x in endpoint.sent] == [ALARM.cause]
    assert [p.attempts for p in pending(store)] == [1]
