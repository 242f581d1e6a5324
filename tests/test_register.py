"""The incident register and `gpuops rules`' earned `verified` (seed 000's register)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops.errors import UsageError
from gpuops.register import Observation, Register, shown_status
from gpuops.rules import Rule
from oracles import rule as by_id
from gpuops.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parent.parent


def test_an_incident_is_written_the_day_it_happens_and_its_cause_added_once_known():
    """add, then update with the cause and the rule it led to; list shows both, in date order."""
    register = Register(MemoryStore(), "alice")

    later = register.add(
        on="2026-09-21", what="guardian exited 0", cost_usd=None, cause=None, rule=None
    )
    first = register.add(
        on="2026-09-20", what="ten RTX 4090s leaked for hours", cost_usd=4.4, cause=None, rule=None
    )
    second = register.add(
        on="2026-09-20",
        what="probes failed on auth",
        cost_usd=0.1,
        cause="the Pi's key was not registered",
        rule="M9",
    )
    updated = register.update(
        first.id, cause="three timing constants disagreed", rule="M6", cost_usd=None
    )

    assert (first.id, second.id, later.id) == ("2026-09-20-1", "2026-09-20-2", "2026-09-21-1")
    assert (updated.cause, updated.rule, updated.cost_usd, updated.revision) == (
        "three timing constants disagreed",
        "M6",
        4.4,
        2,
    )
    assert [i.id for i in register.incidents()] == ["2026-09-20-1", "2026-09-20-2", "2026-09-21-1"]
    assert register.incidents()[0].recorded_by == "alice"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"on": "20 Sept"}, "date '20 Sept' is not a date"),
        ({"rule": "R10"}, "no rule 'R10'"),
        ({"cost_usd": -1.0}, "cost -1.0 must be a non-negative"),
        ({"cost_usd": float("nan")}, "must be a non-negative"),
        ({"what": "  "}, "what must not be empty"),
    ],
)
def test_bad_register_input_is_refused_naming_what_was_wrong(kwargs, message):
    """Bad input: a clear error, nothing written."""
    store = MemoryStore()
    entry = {"on": "2026-09-20", "what": "x", "cost_usd": None, "cause": None, "rule": None}

    with pytest.raises(UsageError, match=message):
        Register(store, "alice").add(**{**entry, **kwargs})

    assert store.list("") == []


def test_updating_nothing_or_an_unknown_incident_is_refused():
    """update needs a field and an existing id."""
    register = Register(MemoryStore(), "alice")

    with pytest.raises(UsageError, match="nothing to update"):
        register.update("2026-09-20-1", cause=None, rule=None, cost_usd=None)
    with pytest.raises(UsageError, match="no incident '2026-09-20-1'"):
        register.update("2026-09-20-1", cause="c", rule=None, cost_usd=None)
    with pytest.raises(UsageError, match="not like 2026-09-20-1"):
        register.update("../x", cause="c", rule=None, cost_usd=None)


def test_two_operators_adding_the_same_day_get_distinct_ids():
    """create-if-absent: a taken id moves on to the next, nothing is overwritten."""
    store = MemoryStore()
    alice, bob = Register(store, "alice"), Register(store, "bob")
    store.create("register/incidents/2026-09-20-2", b"{}")  # a racer took the next id

    a = alice.add(on="2026-09-20", what="a", cost_usd=None, cause=None, rule=None)
    b = bob.add(on="2026-09-20", what="b", cost_usd=None, cause=None, rule=None)

    assert (a.id, b.id) == ("2026-09-20-3", "2026-09-20-4")  # ids may skip; none is reused
    assert store.get("register/incidents/2026-09-20-2").data == b"{}"
    assert [i.id for i in alice.incidents()] == ["2026-09-20-3", "2026-09-20-4"]
    # the racer's stray entry blocks only itself: named, never silently dropped
    assert alice.corrupt["register/incidents/2026-09-20-2"].reason == (
        "not a register entry: missing field 'id'"
    )


def test_verified_needs_a_dated_observation_and_written_rules_stay_not_enforced():
    """A rule is shown verified only from a recorded real observation or drill, with its date;
    an observation never makes a written rule look enforced."""
    register = Register(MemoryStore(), "alice")
    register.observe(rule="M4", on="2026-09-22", kind="drill", what="guard --drill destroyed a box")
    register.observe(rule="L8", on="2026-09-22", kind="real", what="flagged a stale claim")
    seen = register.observations()
    on_paper = Rule("L8", "a rule written but not enforced")  # every shipped rule is enforced

    assert shown_status(by_id("M4"), seen) == (
        "verified",
        "2026-09-22: guard --drill destroyed a box (drill, recorded by alice)",
    )
    assert shown_status(by_id("M3"), seen) == ("implemented", None)
    assert shown_status(on_paper, seen) == ("written (not enforced)", None)
    with pytest.raises(UsageError, match="kind 'rumour' must be one of real, drill"):
        register.observe(rule="M4", on="2026-09-22", kind="rumour", what="x")
    assert [o.rule for o in seen] == ["M4", "L8"] and isinstance(seen[0], Observation)


def gpuops(state: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUOPS_STATE": str(state), "GPUOPS_OPERATOR": "alice@test"}
    return subprocess.run(
        [sys.executable, "-m", "gpuops", *argv], capture_output=True, text=True, cwd=ROOT, env=env
    )


def test_gpuops_incident_and_rules_through_the_cli(tmp_path):
    """incident add/update/list/observe in a state dir; rules then shows M4 verified, dated."""
    state = tmp_path / "state"

    before = gpuops(state, "rules")
    added = gpuops(
        state,
        "incident",
        "add",
        "--date",
        "2026-09-20",
        "--what",
        "ten boxes leaked",
        "--cost-usd",
        "4.40",
    )
    gpuops(
        state,
        "incident",
        "update",
        "2026-09-20-1",
        "--cause",
        "constants disagreed",
        "--rule",
        "M6",
    )
    listed = gpuops(state, "incident", "list")
    gpuops(
        state,
        "incident",
        "observe",
        "--rule",
        "M4",
        "--date",
        "2026-09-22",
        "--kind",
        "drill",
        "--what",
        "guard drill destroyed the box",
    )
    rules = gpuops(state, "rules")
    as_json = json.loads(gpuops(state, "rules", "--json").stdout)
    bad = gpuops(state, "incident", "add", "--date", "2026-09-20", "--what", "x", "--rule", "Z1")

    assert not state.exists() or before.returncode == 0  # rules never creates the state
    assert added.returncode == 0 and added.stdout.strip() == "add: 2026-09-20-1"
    assert "2026-09-20-1   $4.40" in listed.stdout
    assert "cause: constants disagreed; rule: M6" in listed.stdout
    m4 = next(line for line in rules.stdout.splitlines() if line.startswith("M4 "))
    assert m4.startswith("M4   verified")
    assert (
        "observed: 2026-09-22: guard drill destroyed the box (drill, recorded by alice@test)"
        in rules.stdout
    )
    assert "L1   implemented" in rules.stdout  # enforced, never observed: not verified
    assert {r["id"]: r["status"] for r in as_json}["M4"] == "verified"
    assert {r["id"]: r["status"] for r in as_json}["L1"] == "implemented"
    assert bad.returncode == 2 and "no rule 'Z1'" in bad.stderr
