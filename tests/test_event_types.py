"""The typed events (gpuops/event_types.py): strict decoding, the writers' JSON unchanged, and no
event line that can crash a reader (stats, shrink, the pass-rate index, ope)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuops import event_types as ev
from gpuops.analysis.index import machine_counts
from gpuops.analysis.ope import Candidate, Decision, Decisions, evaluate, greedy
from gpuops.analysis.report import Report
from gpuops.analysis.shrink import KINDS, MachineCounts
from gpuops.analysis.stats import Stats
from gpuops.errors import UsageError
from gpuops.events import EventLog, read_events
from gpuops.model import Verdict
from gpuops.store.memory import MemoryStore

TS = "2026-07-18T00:00:00.000000Z"
OFFERED = {"id": 1, "machine_id": 11, "dph_total": 0.3, "reliability": 0.99, "disk_bw": 900.0,
           "gpu_ram": 24564}  # fmt: skip
PICKED = {"id": 1, "rank": 0, "propensity": 0.9, "explored": False}
# One payload per typed kind, every field given, in the order its writer writes them.
VALID: dict[str, dict[str, object]] = {
    "market.selection": {
        "name": "r",
        "gpu_name": "RTX 4090",
        "k": 1,
        "candidates": [OFFERED],
        "removed": [{"id": 2, "reasons": ["quarantined"]}],
        "quarantined": 1,
        "picks": [PICKED],
    },  # fmt: skip
    "market.create": {
        "name": "r",
        "offer_id": 1,
        "machine_id": 11,
        "outcome": "created",
        "instance_id": "900",
        "rental_id": "aaaaaaaaaaaa",
    },  # fmt: skip
    "market.probe": {
        "name": "r",
        "offer_id": 1,
        "machine_id": 11,
        "instance_id": "900",
        "verdict": "pass",
        "rental_id": "aaaaaaaaaaaa",
    },  # fmt: skip
    "market.rent.done": {"name": "r", "instance_id": "900", "offer_id": 1, "rental_id": "aaaaaaaaaaaa"},
    "market.rent.stopped": {"name": "r", "reason": "out of offers", "rental_id": "aaaaaaaaaaaa"},
    "market.quarantine": {"machine_id": 11, "cause": "slow-disk", "until": 1.5},
    "ledger.transition": {
        "name": "r-0-0",
        "owner": "alice",
        "intent_id": "i",
        "instance_id": "900",
        "before": "destroying",
        "after": "gone-confirmed",
        "revision": 3,
        "error": None,
        "rental_id": "aaaaaaaaaaaa",
    },  # fmt: skip
    "guard.confirmed_gone": {
        "name": "r",
        "instance_id": "900",
        "guardian": "g",
        "deadline": "d",
        "delay_s": 1.5,
        "rental_id": "aaaaaaaaaaaa",
    },  # fmt: skip
    "guard.destroy": {
        "name": "r",
        "instance_id": "900",
        "guardian": "g",
        "deadline": "d",
        "rental_id": "aaaaaaaaaaaa",
    },  # fmt: skip
    "market.sweep.ended": {
        "name": "r+1-0",
        "instance_id": "900",
        "ending": "gone",
        "retried": False,
        "rental_id": "aaaaaaaaaaaa",
    },  # fmt: skip
    "lane.start": {"lane": "g2", "job": "j", "attempt": 1, "outcome": "started"},
    "lane.job_end": {
        "lane": "g2",
        "job": "j",
        "attempts": 1,
        "stockouts": 0,
        "waiting_s": 1.0,
        "running_s": 2.0,
        "cost_usd": 0.5,
        "outcome": "succeeded",
    },  # fmt: skip
}
# The line the issue found: a probe whose verdict is a list.
BAD_PROBE = {**VALID["market.probe"], "verdict": ["pass"]}


@pytest.fixture(autouse=True)
def fresh_decoders():
    """Each test builds the line decoders it uses: they are kept per process after their first
    use, so one built before a test (by another test, or before a mutant was switched on) would
    hide how this one is built."""
    ev._LINE_DECODERS.clear()


def line(kind: str, payload: object) -> str:
    return json.dumps({"ts": TS, "operator": "x", "kind": kind, "payload": payload}) + "\n"


# --- decoding ------------------------------------------------------------------------------------
def test_every_typed_kind_decodes_and_writes_back_the_same_json():
    """Each kind's full payload decodes to its type, and to_payload() is the same JSON, key for
    key and in order, so old logs read the same and writers' lines are unchanged."""
    assert set(VALID) == ev.KINDS
    for kind, payload in VALID.items():
        event = ev.decode(kind, payload)
        assert kind == type(event).KIND
        assert event.to_payload() == payload  # plain lists, never tuples
        assert json.dumps(event.to_payload()) == json.dumps(payload)


@pytest.mark.parametrize(
    "kind",
    ["market.create", "market.probe", "market.rent.done", "market.rent.stopped",
     "ledger.transition", "guard.confirmed_gone", "guard.destroy", "market.sweep.ended"],
)  # fmt: skip
def test_a_line_from_before_rental_ids_reads_as_naming_no_incarnation_m16(kind):
    """M16: these kinds name the incarnation; a line written before they did still decodes,
    naming none (None, never an empty id), and writes back without one it never had."""
    old = {k: v for k, v in VALID[kind].items() if k != "rental_id"}
    event = ev.decode(kind, old)
    assert event.rental_id is None  # type: ignore[attr-defined]
    assert ev.decode(kind, VALID[kind]).rental_id == "aaaaaaaaaaaa"  # type: ignore[attr-defined]


def built(kind: str, payload: dict[str, object]) -> object:
    """The event as its writer builds it: the type's own constructor, parts built likewise."""
    cls = ev.BY_KIND[kind]
    parts = {"candidates": ev.Offered, "removed": ev.Removed, "picks": ev.Picked}
    fields = {
        name: tuple(parts[name](**item) for item in value) if name in parts else value
        for name, value in payload.items()
    }
    if kind == "market.probe":
        fields["verdict"] = Verdict(fields["verdict"])
    for part in fields.get("removed", ()):
        object.__setattr__(part, "reasons", tuple(part.reasons))
    return cls(**fields)


@pytest.mark.parametrize("kind", sorted(VALID))
def test_a_decoded_event_is_the_one_its_constructor_builds_down_to_its_attributes(kind):
    """decode builds exactly the frozen event the dataclass's __init__ builds: every field,
    defaults included, from a dict or any other mapping; so does decode_line from the line."""
    from types import MappingProxyType

    for payload in (VALID[kind], {k: v for k, v in VALID[kind].items() if k in REQUIRED[kind]}):
        expected = built(kind, payload)
        for mapping in (payload, MappingProxyType(payload)):
            decoded = ev.decode(kind, mapping)
            assert decoded == expected and dataclasses.astuple(decoded) == dataclasses.astuple(
                expected
            )
        assert ev.decode_line(kind, line(kind, payload).encode()) == (TS, expected)


def test_each_kind_s_line_decoder_is_built_once_at_its_first_use():
    """No line decoder is built before a kind is read; then the same one serves every line."""
    raw = line("market.probe", VALID["market.probe"]).encode()
    assert "market.probe" not in ev._LINE_DECODERS

    first = ev.decode_line("market.probe", raw)
    built_first = ev._LINE_DECODERS["market.probe"]
    again = ev.decode_line("market.probe", raw)

    assert first == again and ev._LINE_DECODERS["market.probe"] is built_first
    assert list(ev._LINE_DECODERS) == ["market.probe"]


def test_a_line_decodes_as_its_own_kind_only_and_anything_else_is_left_to_the_slow_reading():
    """decode_line answers only for a whole event line of the kind asked; for every other line
    it says None, and the scanner's line-by-line reading (events.py) judges it."""
    raw = line("market.probe", VALID["market.probe"]).encode()
    assert ev.decode_line("market.create", raw) is None  # another kind's line
    assert ev.decode_line("market.nonesuch", raw) is None  # no typed kind
    assert "market.nonesuch" not in ev._LINE_DECODERS
    probe, selection = VALID["market.probe"], VALID["market.selection"]
    event = {"ts": TS, "operator": "x", "kind": "market.probe", "payload": probe}
    bad = [
        raw[:-5],  # torn
        raw.replace(b'"r"', b'"\xff"'),  # not UTF-8
        line("market.probe", {**probe, "verdict": "PASS"}).encode(),  # a payload that is none
        json.dumps({**event, "operator": 1}).encode(),  # not an event line
        json.dumps({k: v for k, v in event.items() if k != "ts"}).encode(),
        json.dumps(probe).encode(),  # a payload alone
        json.dumps({**event, "kind": "market.create"}).encode(),  # its kind is another
        line("market.selection", {**selection, "picks": [{**PICKED, "id": 2}]}).encode(),
    ]
    for raw_line in bad:
        kind = "market.selection" if b"market.selection" in raw_line else "market.probe"
        assert ev.decode_line(kind, raw_line) is None, raw_line
    assert ev.decode_line("market.probe", json.dumps(event).encode()) is not None


def test_a_whole_number_stays_whole_and_is_never_a_bool():
    """A whole number in a number field stays whole, however large (a line written back is the
    line read); true is never 1."""
    create = VALID["market.create"]
    assert ev.decode("market.create", {**create, "offer_id": True}) is None
    gone = VALID["guard.confirmed_gone"]
    whole = ev.decode("guard.confirmed_gone", {**gone, "delay_s": 3})
    assert type(whole.delay_s) is int and whole.to_payload()["delay_s"] == 3
    assert ev.decode("guard.confirmed_gone", {**gone, "delay_s": 10**30}).delay_s == 10**30
    assert ev.decode("guard.confirmed_gone", {**gone, "delay_s": True}) is None


REQUIRED = {
    kind: {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
    for kind, cls in ev.BY_KIND.items()
}


def test_a_probe_verdict_is_a_probe_verdict_member():
    """The verdict decodes to model.Verdict; every member's value is accepted, and nothing else."""
    for verdict in Verdict:
        event = ev.decode("market.probe", {**VALID["market.probe"], "verdict": verdict.value})
        assert event.verdict is verdict and event.to_payload()["verdict"] == verdict.value
    for bad in (["pass"], "PASS", "passed", "", None, 1, True, {"v": "pass"}):
        assert ev.decode("market.probe", {**VALID["market.probe"], "verdict": bad}) is None


@pytest.mark.parametrize("kind", sorted(VALID))
def test_a_missing_required_field_or_a_payload_that_is_no_object_does_not_decode(kind):
    """A field without a default is required; a payload that is not an object is no event."""
    cls = ev.BY_KIND[kind]
    import dataclasses

    for f in dataclasses.fields(cls):
        short = {k: v for k, v in VALID[kind].items() if k != f.name}
        decoded = ev.decode(kind, short)
        if f.default is dataclasses.MISSING:
            assert decoded is None, f.name
        else:
            assert getattr(decoded, f.name) == f.default, f.name
    for not_an_object in ([VALID[kind]], "x", None, 3):
        assert ev.decode(kind, not_an_object) is None


def test_an_unknown_kind_decodes_to_nothing_and_extra_keys_are_ignored():
    """Only the typed kinds decode; a writer may add context keys without breaking readers."""
    assert ev.decode("market.nonesuch", {"name": "r"}) is None
    assert ev.decode("market.probe", {**VALID["market.probe"], "extra": [1]}) == ev.decode(
        "market.probe", VALID["market.probe"]
    )


@pytest.mark.parametrize(
    ("field", "good", "bad"),
    [
        ("name", ["", "r"], [None, 1, ["r"], True]),
        ("offer_id", [0, -1, 10**12], [1.0, "1", True, False, None, [1]]),
        ("instance_id", ["900", None], [900, True, ["900"]]),
    ],
)
def test_each_field_is_checked_by_its_type(field, good, bad):
    """A string is a string, an id a whole number (never a bool or a float), None only where
    the type allows it."""
    for value in good:
        decoded = ev.decode("market.probe", {**VALID["market.probe"], field: value})
        assert getattr(decoded, field) == value and type(getattr(decoded, field)) is type(value)
    for value in bad:
        assert ev.decode("market.probe", {**VALID["market.probe"], field: value}) is None, value


def test_a_number_is_finite_and_never_a_bool():
    """Prices, delays and costs are finite JSON numbers; true is not 1."""
    gone = VALID["guard.confirmed_gone"]
    for good in (0, -10, 1.5, 10**6):
        assert ev.decode("guard.confirmed_gone", {**gone, "delay_s": good}).delay_s == good
    for bad in (True, False, math.nan, math.inf, -math.inf, "1.5", None, [1.5]):
        assert ev.decode("guard.confirmed_gone", {**gone, "delay_s": bad}) is None, bad
    assert ev.decode("market.quarantine", {**VALID["market.quarantine"], "until": None}) is None


def test_optional_context_may_be_null_but_never_the_wrong_type():
    """reliability/disk_bw/gpu_ram may be null or left out; a string there is no offer."""
    for name in ("reliability", "disk_bw", "gpu_ram"):
        sel = dict(VALID["market.selection"])
        sel["candidates"] = [{**OFFERED, name: None}]
        assert getattr(ev.decode("market.selection", sel).candidates[0], name) is None
        sel["candidates"] = [{**OFFERED, name: "0.9"}]
        assert ev.decode("market.selection", sel) is None
    sel = {**VALID["market.selection"], "candidates": [{"id": 1, "machine_id": 11, "dph_total": 1}]}
    assert ev.decode("market.selection", sel).candidates[0] == ev.Offered(
        id=1, machine_id=11, dph_total=1
    )


@pytest.mark.parametrize("propensity", [0, 0.0, -0.1, 1.0000001, 2, True, "0.5", math.nan])
def test_a_pick_s_propensity_outside_zero_to_one_does_not_decode(propensity):
    """A logged propensity is a probability in (0, 1]: 0 would divide an importance weight."""
    sel = {**VALID["market.selection"], "picks": [{**PICKED, "propensity": propensity}]}
    assert ev.decode("market.selection", sel) is None


def test_a_pick_s_propensity_may_be_one_or_left_out():
    """1 is a certain pick; a pick logged without one decodes with None (nothing to reweight)."""
    sel = {**VALID["market.selection"], "picks": [{**PICKED, "propensity": 1}]}
    assert ev.decode("market.selection", sel).picks[0].propensity == 1
    sel = {**VALID["market.selection"], "picks": [{"id": 1}]}
    assert ev.decode("market.selection", sel).picks[0] == ev.Picked(id=1)
    assert ev.Picked(id=1).propensity is None and ev.Picked(id=1).explored is False


def test_a_pick_that_is_not_a_candidate_and_lists_that_are_not_lists_do_not_decode():
    """Every pick names a candidate; candidates, picks and reasons are lists of their type."""
    sel = VALID["market.selection"]
    assert ev.decode("market.selection", {**sel, "picks": [{**PICKED, "id": 2}]}) is None
    assert ev.decode("market.selection", {**sel, "candidates": [], "picks": []}).picks == ()
    wrong = [("candidates", {"id": 1}), ("candidates", [1]), ("picks", "x"),
             ("removed", [{"id": 2, "reasons": "quarantined"}]),
             ("removed", [{"id": 2, "reasons": [1]}]),
             ("picks", [{**PICKED, "explored": 1}])]  # fmt: skip
    for name, bad in wrong:
        assert ev.decode("market.selection", {**sel, name: bad}) is None, (name, bad)
    as_tuple = ev.decode("market.selection", {**sel, "candidates": (OFFERED,)})
    assert as_tuple.candidates == (ev.Offered(**OFFERED),)
    assert as_tuple.offered(1) == ev.Offered(**OFFERED) and as_tuple.offered(2) is None


# --- every reader skips what does not decode ------------------------------------------------------
@pytest.mark.fault(
    "a market.probe line whose verdict is a list crashed `offers` and `rent` in the pass-rate "
    "ranker, leaving the rental racing",
    handled="the line does not decode: the ranker counts it and skips it",
)
def test_the_bad_probe_line_is_skipped_and_counted_by_shrink_and_the_index(tmp_path: Path):
    """The line from the issue: MachineCounts and the store index skip it and count it."""
    counts = MachineCounts()
    counts.add("market.probe", BAD_PROBE)
    counts.add("market.probe", VALID["market.probe"])
    assert counts.skipped == 1 and counts.trials == {11: 1} and counts.passes == {11: 1}

    log = tmp_path / "events.jsonl"
    log.write_text(line("market.probe", BAD_PROBE) + line("market.probe", VALID["market.probe"]))
    folded = machine_counts(log, MemoryStore())
    assert folded.skipped == 1 and folded.trials == {11: 1}


def test_a_race_ranked_from_a_log_with_the_bad_line_still_rents(tmp_path: Path):
    """Market.rent ranks with the pass-rate index over a log holding the bad line: the rental
    goes live (it stayed racing when the ranker crashed)."""
    from market_world import KEY, build_market, fake_vast, offer, request

    from gpuops.analysis.learned import ranker

    doc = {"vast": {"api_key": "k", "ssh_keys": [KEY], "offers": [offer(0, price=0.3)]}}
    events = EventLog(tmp_path / "events.jsonl", "alice")
    events.append("market.probe", **BAD_PROBE)
    with fake_vast(doc) as fake:
        market = build_market(
            fake, MemoryStore(), events, api_key="k", seed=1,
            pass_rates=ranker(events.path, MemoryStore()),
        )  # fmt: skip
        rental = market.rent(request(k=1, hours=1.0))

    assert rental.state == "live" and rental.offer_id == 1000
    typed = [e for e in read_events(events.path) if e["kind"] in ev.KINDS]
    assert len(typed) > 3
    for event in typed[1:]:  # what the writers wrote decodes, and writes back byte for byte
        decoded = ev.decode(event["kind"], event["payload"])
        assert json.dumps(decoded.to_payload()) == json.dumps(event["payload"])


def test_stats_counts_the_bad_line_as_skipped():
    """`stats` skips the line and says how many it skipped."""
    stats = Stats()
    stats.add(TS, "market.probe", BAD_PROBE)
    stats.add(TS, "market.probe", VALID["market.probe"])
    report = stats.report()
    assert report["skipped_events"] == 1 and report["malformed_events"] == {"market.probe": 1}
    assert report["market"]["verdicts"] == {"pass": 1}


def test_stats_counts_an_event_whose_stamp_is_not_a_time_as_skipped():
    """A box's bill needs its stamps: a stamp that is no ISO-8601 time is counted, not fatal."""
    stats = Stats()
    stats.add(TS, "market.selection", VALID["market.selection"])
    stats.add(TS, "market.create", VALID["market.create"])
    stats.add(TS, "ledger.transition", {"after": 1})
    stats.add("not a time", "ledger.transition", VALID["ledger.transition"])
    assert stats.report()["malformed_events"] == {"ledger.transition": 2}


def race(name: str, propensity: object) -> list[tuple[str, dict[str, object]]]:
    pick = {**PICKED, "propensity": propensity}
    return [
        ("market.selection", {**VALID["market.selection"], "name": name, "picks": [pick]}),
        ("market.create", {**VALID["market.create"], "name": name}),
        ("market.probe", {**VALID["market.probe"], "name": name}),
    ]


@pytest.mark.fault(
    "a logged propensity of 0 made `policy eval` divide by zero",
    handled="the selection does not decode: the race is skipped and counted",
)
def test_ope_skips_a_race_logged_with_a_zero_or_missing_propensity():
    """A race whose lead pick has propensity 0 or none is counted as skipped, never a row."""
    folded = Decisions()
    for name, propensity in (("zero", 0), ("none", None), ("ok", 0.5)):
        for kind, payload in race(name, propensity):
            if propensity is None and kind == "market.selection":
                payload = {**payload, "picks": [{"id": 1}]}
            folded.add(TS, kind, payload)
    assert [d.propensity for d in folded.rows] == [0.5]
    assert folded.skipped == 2 and folded.open == {}


def test_ope_skips_a_bad_probe_and_a_bad_stamp():
    """The bad probe line and an unreadable stamp are skipped and counted."""
    folded = Decisions()
    selection, create, _ = race("r", 0.5)
    folded.add(TS, *selection)
    folded.add(TS, "market.probe", BAD_PROBE)
    folded.add("not a time", "market.probe", VALID["market.probe"])
    assert folded.skipped == 2 and folded.rows == []
    folded.add(TS, *selection)
    folded.add(TS, *create)
    folded.add("not a time", "market.probe", VALID["market.probe"])
    assert folded.skipped == 3


def test_evaluate_refuses_a_decision_whose_propensity_is_not_positive():
    """A row built by hand with propensity 0 is a clear ValueError, never ZeroDivisionError."""
    cands = (Candidate(1, 11, 0.3, None, None),)
    good = Decision("g", cands, 0, 1.0, True, 1.0, 0.1)
    zero = Decision("g", cands, 0, 0.0, True, 1.0, 0.1)
    assert evaluate([good], greedy).decisions == 1
    with pytest.raises(ValueError) as refused:
        evaluate([good, zero, good], greedy)
    assert str(refused.value) == (
        "1 logged decisions have a propensity that is not positive; "
        "off-policy evaluation cannot reweight them"
    )
    with pytest.raises(ValueError, match="^2 logged"):
        evaluate([zero, Decision("g", cands, 0, -1.0, True, 1.0, 0.1)], greedy)


def write(path: Path, events: list[tuple[str, object]]) -> Path:
    path.write_text("".join(line(kind, payload) for kind, payload in events))
    return path


def test_policy_eval_with_a_zero_propensity_and_the_bad_line_evaluates_the_rest(tmp_path):
    """`gpuops policy eval` over a log with a zero propensity and the bad probe line: exit 0,
    the good race evaluated, the skipped events reported."""
    from tests.test_cli import gpuops

    log = write(tmp_path / "e.jsonl", [*race("zero", 0), ("market.probe", BAD_PROBE),
                                       *race("ok", 0.5)])  # fmt: skip
    done = gpuops("--json", "policy", "eval", "--log", str(log), "--policy", "greedy")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["decisions"] == 1
    assert doc["skipped_events"] == {"decisions": 2, "pass_rates": 2}
    only_zero = write(tmp_path / "z.jsonl", race("zero", 0.0))
    done = gpuops("policy", "eval", "--log", str(only_zero), "--policy", "greedy")
    assert done.returncode == 2 and "no logged decisions" in done.stderr
    assert "Traceback" not in done.stderr


def test_gpuops_stats_reports_the_skipped_line(tmp_path):
    """`gpuops stats` with the bad line: exit 0, skipped_events 1, and the table says so."""
    from tests.test_cli import gpuops

    log = write(tmp_path / "e.jsonl", [("market.probe", BAD_PROBE), *race("ok", 0.5)])
    done = gpuops("--json", "stats", "--log", str(log))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["skipped_events"] == 1
    text = gpuops("stats", "--log", str(log))
    assert "1 event skipped (did not decode): {'market.probe': 1}" in text.stdout


# --- fuzz: valid JSON, wrong content, through every reader ---------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def wrong_payloads(draw) -> tuple[str, object]:
    """A typed kind's valid payload with one field (top level or inside a list) replaced by any
    JSON value, or dropped, or the whole payload replaced."""
    kind = draw(st.sampled_from(sorted(VALID)))
    payload = json.loads(json.dumps(VALID[kind]))
    how = draw(st.sampled_from(("replace", "drop", "nested", "whole")))
    key = draw(st.sampled_from(sorted(payload)))
    if how == "whole":
        return kind, draw(JSON)
    if how == "drop":
        del payload[key]
    elif how == "nested" and isinstance(payload[key], list) and payload[key]:
        item = payload[key][0]
        inner = draw(st.sampled_from(sorted(item)))
        item[inner] = draw(JSON)
    else:
        payload[key] = draw(JSON)
    return kind, payload


def fold_all(events: list[tuple[str, object]]) -> tuple[int, int, int]:
    stats, counts, decisions, renter = Stats(), MachineCounts(), Decisions(), Report()
    for kind, payload in events:
        stats.add(TS, kind, payload)  # type: ignore[arg-type]
        counts.add(kind, payload)  # type: ignore[arg-type]
        decisions.add(TS, kind, payload)  # type: ignore[arg-type]
        renter.add_event(TS, kind, ev.decode(kind, payload))
    stats.report()
    # the HTML report reads every typed kind: it skips exactly what stats skips
    assert renter.figures(now=0.0)["skipped_events"] == stats.report()["skipped_events"]
    return stats.report()["skipped_events"], counts.skipped, decisions.skipped  # type: ignore[return-value]


@settings(max_examples=300)
@given(st.lists(wrong_payloads(), min_size=1, max_size=6))
def test_no_wrong_payload_of_any_typed_kind_crashes_a_reader(events):
    """Stats, MachineCounts and Decisions fold any valid-JSON payload of every typed kind:
    what does not decode is counted as skipped by each, nothing raises."""
    bad = sum(1 for kind, payload in events if ev.decode(kind, payload) is None)
    skipped_stats, skipped_counts, skipped_decisions = fold_all(
        [(k, VALID[k]) for k in sorted(VALID)] + events
    )
    assert skipped_stats == bad and skipped_counts == bad
    assert skipped_decisions >= bad


@settings(max_examples=40)
@given(st.lists(wrong_payloads(), min_size=1, max_size=4))
def test_no_wrong_payload_crashes_the_pass_rate_index(tmp_path_factory, events):
    """The store index folds the same lines from a file: skipped, never fatal (a payload that
    is not an object makes no event line at all: the scan counts it as a bad line)."""
    log = tmp_path_factory.mktemp("index") / "events.jsonl"
    log.write_text("".join(line(kind, payload) for kind, payload in events))
    bad = sum(
        1
        for kind, payload in events
        if kind in KINDS and isinstance(payload, dict) and ev.decode(kind, payload) is None
    )
    assert machine_counts(log, MemoryStore()).skipped == bad


# --- the commands, as a user runs them against `gpuops fakes serve` ---------------------------
@pytest.mark.slow
@pytest.mark.process
def test_offers_and_rent_succeed_with_the_bad_line_in_the_log(tmp_path):
    """The issue's line in the log before `gpuops offers` and `gpuops rent` (real processes, the
    loopback fakes): both exit 0, the rental is live, and `stats` counts the line as skipped."""
    from tests.test_guard_process import Fakes

    fakes = Fakes(tmp_path)
    try:
        fakes.state.mkdir(mode=0o700, parents=True, exist_ok=True)
        (fakes.state / "events.jsonl").write_text(line("market.probe", BAD_PROBE))
        said = "gpuops: 1 line of the event log did not decode and was left out"
        done = fakes.gpuops("--json", "offers")
        offers = json.loads(done.stdout)
        assert [o["id"] for o in offers["offers"]] == [900, 901, 902]
        assert offers["skipped_events"] == 1 and said in done.stderr
        done = fakes.gpuops("--json", "rent", "b", "--gpu", "RTX 4090", "--hours", "3",
                            "--race", "1", "--no-guard")  # fmt: skip
        rented = json.loads(done.stdout)
        assert rented["state"] == "live" and rented["offer_id"] in (900, 901, 902)
        assert said in done.stderr
        assert fakes.json("stats")["skipped_events"] == 1
        fakes.gpuops("destroy", "b")
        assert fakes.live_instances() == []
    finally:
        fakes.proc.terminate()
        fakes.proc.wait()


def test_a_lone_surrogate_where_a_verdict_belongs_is_no_event_not_a_crash():
    """Bad input: JSON's "\\ud800" reads as a lone surrogate; converting it to a Verdict
    raised UnicodeEncodeError out of decode (the event-log fuzz found it)."""
    probe = {"name": "a", "offer_id": 1, "machine_id": 1, "verdict": "\ud800"}

    assert ev.decode("market.probe", probe) is None
    assert ev.decode("market.probe", {**probe, "verdict": "pass"}) is not None


def test_parse_says_why_a_payload_is_refused_and_decode_says_none():
    """parse raises a UsageError naming the kind and what is wrong (a field, or a pick that
    is not one of its race's candidates); decode answers None for the same payload."""
    stray = {**VALID["market.selection"], "picks": [{**PICKED, "id": 9}]}
    with pytest.raises(UsageError) as refused:
        ev.parse("market.selection", stray)
    assert str(refused.value) == "not a market.selection event: a pick is not one of its candidates"
    with pytest.raises(UsageError, match=r"^not a market\.probe event: .*\$\.verdict"):
        ev.parse("market.probe", {**VALID["market.probe"], "verdict": "fine"})
    assert ev.decode("market.selection", stray) is None
    assert ev.parse("market.probe", VALID["market.probe"]) == ev.decode(
        "market.probe", VALID["market.probe"]
    )
