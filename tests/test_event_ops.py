"""The operational events (gpuops/event_ops.py): each kind round-trips through the log and the
one decoder, and a payload with a field of the wrong type, or one missing, is refused with a
typed error naming the kind and the field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuops import event_ops as ops
from gpuops import event_types as ev
from gpuops.errors import UsageError
from gpuops.event_base import write
from gpuops.events import EventLog, read_events
from gpuops.model import Verdict
from gpuops.secrets import scrub

WHO = {"name": "r", "instance_id": "900", "guardian": "g@host:1"}
RID = {"rental_id": "aaaaaaaaaaaa"}
# One payload per operational kind, every field given (none at its default), in field order.
VALID: dict[str, dict[str, object]] = {
    "guard.start": {**WHO, "deadline": "2026-07-18T00:00:00+00:00", "pid": 42, "time_scale": 1.0, **RID},
    "guard.exit": {**WHO, "code": 0, "reason": "every box confirmed gone", **RID},
    "guard.error": {**WHO, "error": "StoreUnavailable: down", **RID},
    "guard.role": {**WHO, "role": "standby", "holder": "h@host:2", **RID},
    "guard.lease.taken": {**WHO, "previous": "h@host:2", **RID},
    "guard.sync": {**WHO, "ok": True, "final": True, "detail": "2 file(s)", "files": 2, "bytes": 10,
                   "held": 2, "deferred": ["a"], "left_out": ["b"], "none_made": True,
                   "seconds": 0.5, "ended": [7], **RID},
    "guard.copy": {**WHO, "ok": False, "detail": "cut", "seconds": 1.5, "results": "missing",
                   "ended": [7, 8], **RID},
    "guard.copy.started": {**WHO, "pid": 7, "tarball": "/tmp/r.tar", **RID},
    "guard.destroy.pending": {**WHO, "detail": "r-0-0: not yet gone", **RID},
    "guard.given_up": {**WHO, "detail": "released, never confirmed gone", **RID},
    "guard.race_ended": {**WHO, "racer": "rent@host:3", "ended": ["r-0-0: destroyed"], **RID},
    "guard.drill": {"date": "2026-07-18", "target": "fake", "name": "r", "instance_id": "900",
                    "deadline_at": 1.5, "confirmed_at": 2.5, "delay_s": 1.0, "passed": True,
                    "guardian_pid": 42, "guardian_log": "/tmp/g.log", "cleanup": ["x"]},
    "guard.all.start": {"pid": 42},
    "guard.all.error": {"error": "StoreUnavailable: down"},
    "guard.all.left": {"name": "r", "rental_id": "aaaaaaaaaaaa", "code": 0, "then": "done"},
    "guard.all.unreadable": {"record": "market/rentals/r", "error": "not JSON"},
    "guard.all.exit": {"code": 143, "reason": "stopped by SIGTERM", "held": ["r"]},
    "market.candidate": {"name": "r", "slot": 1, "offer_id": 5, "what": "slow-disk",
                         "step": "probed", "outcome": "created", "verdict": "slow-disk"},
    "market.sweep": {"retried": 1, "expired": 2, "unresolved": 3, "unowned": 4},
    "ledger.never_found": {"name": "r-0-0", "intent_id": "i", "written_at": "2026-07-18T00:00:00+00:00"},
    "market.job.started": {"name": "r", "instance_id": "900", "results": "results"},
    "market.job.status": {"name": "r", "state": "dead", "detail": "exit 3", "exit_code": 3},
    "operator.identity": {"operator": "alice", "attested": True, "user_id": 7},
    "lane.board": {"lane": "gpu-lane", "state": "starting", "owner": "alice", "job": "j",
                   "attempt": 1, "revision": 3, "repaired": True},
    "lane.claim": {"lane": "gpu-lane", "job": "j", "revision": 2},
    "lane.install": {"lane": "gpu-lane", "job": "j", "chars": 900, "max_run_s": 3600.0},
    "lane.billing_alarm": {"lane": "gpu-lane", "job": "j"},
    "alarm.raised": {"cause": "c", "kind": "guardian-exit", "subject": "r exited 1"},
    "alarm.unrecorded": {"cause": "c", "error": "StoreUnavailable: down"},
    "alarm.duplicate": {"cause": "c"},
    "alarm.delivered": {"cause": "c", "endpoint": "0"},
    "alarm.undelivered": {"cause": "c", "endpoint": "0", "error": "refused"},
    "vast.call": {"op": "show", "method": "GET", "path": "/api/v0/instances/1/", "status": 200,
                  "duration_s": 0.25, "attempt": 1, "error": "ProviderUnavailable"},
    "vast.retry": {"op": "show", "attempt": 1, "wait_s": 0.5, "reason": "503"},
    "gce.error": {"call": "get vm", "error": "ProviderUnavailable: 503"},
    "gce.get": {"instance": "vm", "status": "RUNNING"},
    "gce.set_metadata": {"instance": "vm", "keys": ["gpuops-job", "startup-script"]},
    "gce.set_labels": {"instance": "vm", "labels": {"gpuops-claim": "e1-t"}},
    "gce.set_scheduling": {"instance": "vm", "max_run_s": 3600},
    "gce.start": {"instance": "vm", "operation": "op-1"},
    "gce.operation": {"operation": "op-1", "call": "start vm", "error": "CapacityExhausted"},
}  # fmt: skip
KINDS = sorted(VALID)


def test_every_operational_kind_has_a_payload_here():
    """The table below covers every type event_ops declares, and only those."""
    assert set(VALID) == {t.KIND for t in ops.TYPES}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_round_trips_through_the_log_and_the_decoder(kind, tmp_path):
    """An event decoded from its payload writes that payload back key for key, and the line
    EventLog writes for it reads back as the same event."""
    event = ev.parse(kind, VALID[kind])
    assert type(event) is ev.BY_KIND[kind] and kind == event.KIND
    assert event.to_payload() == VALID[kind]
    assert list(event.to_payload()) == list(VALID[kind])  # the writers' key order
    log = EventLog(tmp_path / "events.jsonl", "alice")
    written = write(log, event)
    (line,) = read_events(log.path, strict=True)
    assert written == line  # what the sink's append returned: the line as written
    # as the log holds it, scrubbing changing nothing: no field is named like a secret's
    assert line["kind"] == kind and ev.decode(kind, line["payload"]) == event
    assert scrub(VALID[kind]) == VALID[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_of_the_wrong_type_is_refused_with_a_usage_error_naming_it(kind):
    """Every field is checked by its annotation: a JSON object where it holds a string, a
    number, a bool, a list or a dict of strings is refused, naming the kind and the field;
    decode says None for the same payload."""
    for field in VALID[kind]:
        bad = {**VALID[kind], field: {"x": 1}}
        with pytest.raises(UsageError) as refused:
            ev.parse(kind, bad)
        assert str(refused.value).startswith(f"not a {kind} event: ")
        assert f"$.{field}" in str(refused.value)
        assert ev.decode(kind, bad) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_required_field_left_out_is_refused(kind):
    """A field without a default is what some reader needs: a payload without it is no event."""
    cls = ev.BY_KIND[kind]
    required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING]  # fmt: skip
    assert required
    for field in required:
        payload = {k: v for k, v in VALID[kind].items() if k != field}
        with pytest.raises(UsageError, match=f"missing required field `{field}`"):
            ev.parse(kind, payload)


def test_a_candidate_step_and_verdict_are_their_enums_and_nothing_else():
    """market.candidate's step is a Step and its verdict a probe Verdict: the M1 check reads
    them, so a word outside either set is refused."""
    event = ev.parse("market.candidate", VALID["market.candidate"])
    assert isinstance(event, ops.Candidate)
    assert event.step is ops.Step.PROBED and event.verdict is Verdict.SLOW_DISK
    for field, word in (("step", "slow-disk"), ("verdict", "probed"), ("step", "PROBED")):
        with pytest.raises(UsageError, match=r"\$\." + field):
            ev.parse("market.candidate", {**VALID["market.candidate"], field: word})


def test_what_a_writer_left_out_is_left_out_while_it_holds_its_default():
    """A guardian's rental_id before it has read one, a sync's figures when it was cut, a
    copy's ``ended`` unless cut and a board write's ``repaired`` unless repaired are left out,
    as their writers always left them out; every other default is written."""
    who = ops.Who(name="r", instance_id=None, guardian="g", rental_id=None)
    cut = ops.GuardSync(**who, ok=False, final=False, detail="the sync was cut: x", ended=(7,))
    assert cut.to_payload() == {
        "name": "r", "instance_id": None, "guardian": "g", "ok": False, "final": False,
        "detail": "the sync was cut: x", "deferred": [], "left_out": [], "none_made": False,
        "ended": [7],
    }  # fmt: skip
    copy = ops.GuardCopy(**who, ok=False, detail="none")
    assert copy.to_payload() == {
        "name": "r", "instance_id": None, "guardian": "g", "ok": False, "detail": "none",
    }  # fmt: skip
    board = ops.LaneBoard(lane="l", state="free", attempt=0, revision=1)
    assert board.to_payload() == {
        "lane": "l", "state": "free", "owner": None, "job": None, "attempt": 0, "revision": 1,
    }  # fmt: skip
    for event in (cut, copy, board):
        assert ev.decode(event.KIND, event.to_payload()) == event


def test_an_unknown_kind_is_refused_by_name():
    """parse names a kind no type declares; decode says None."""
    with pytest.raises(UsageError, match=r"^'guard\.nonesuch' is not an event kind$"):
        ev.parse("guard.nonesuch", {})
    assert ev.decode("guard.nonesuch", {}) is None


def test_a_payload_on_disk_is_plain_json():
    """to_payload holds JSON values only: an enum by its value, a tuple as a list."""
    event = ev.parse("market.candidate", VALID["market.candidate"])
    assert json.loads(json.dumps(event.to_payload())) == VALID["market.candidate"]


def test_the_demo_judges_m1_from_the_candidates_typed_fields_never_from_their_words():
    """The faults the demo's M1 check needs (a create taken, a key refused, a slow disk) come
    from ``step``, ``outcome`` and ``verdict``; a ``what`` that says otherwise changes nothing."""
    from gpuops.demo.market import _faults

    def step(step: ops.Step, what: str, **typed: object) -> ops.Candidate:
        return ops.Candidate(name="r", slot=0, offer_id=1, what=what, step=step, **typed)  # type: ignore[arg-type]

    steps = [
        step(ops.Step.CREATE_FAILED, "pass", outcome="taken"),
        step(ops.Step.PROBED, "kept", verdict=Verdict.SSH_AUTH),
        step(ops.Step.PROBED, "pass", verdict=Verdict.SLOW_DISK),
        step(ops.Step.PROBED, "slow-disk", verdict=Verdict.PASS),
        step(ops.Step.BOOT_FAILED, "taken", outcome="boot timeout"),
        step(ops.Step.KEPT, "ssh-auth"),
    ]
    assert _faults(steps) == {"taken", Verdict.SSH_AUTH, Verdict.SLOW_DISK}
    assert _faults(steps[3:]) == set()


def test_every_typed_kind_is_in_the_one_registry_once():
    """The registry holds every type of both modules, each kind once: the analysis kinds are
    KINDS (what the folds read), and ALL_KINDS adds the operational ones."""
    analysis = {t.KIND for t in ev._TYPES}
    operational = [t.KIND for t in ops.TYPES]
    assert len(set(operational)) == len(operational) == 41
    assert analysis == ev.KINDS and len(analysis) == 12
    assert analysis | set(operational) == ev.ALL_KINDS and not analysis & set(operational)
    assert all(ev.BY_KIND[t.KIND] is t for t in (*ev._TYPES, *ops.TYPES))
