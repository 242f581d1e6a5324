"""H2: the mutation gate's judgement, tested on synthetic mutmut results."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GATE_PATH = ROOT / "mutation" / "gate.py"
spec = importlib.util.spec_from_file_location("mutation_gate", GATE_PATH)
gate = importlib.util.module_from_spec(spec)
sys.modules["mutation_gate"] = gate  # dataclasses look their module up here
spec.loader.exec_module(gate)

SURVIVORS_MD = """
| mutant | why it is equivalent |
|---|---|
| `gpuops.ledger.x_f__mutmut_2` | the default is never used |
| gpuops.store.local.xǁLocalStoreǁget__mutmut_7 | same bytes either way |
"""


def test_justified_survivors_are_read_from_the_table():
    """H2: each table row names a mutant and its reason; the header is not a mutant."""
    assert gate.read_justified(SURVIVORS_MD) == {
        "gpuops.ledger.x_f__mutmut_2": "the default is never used",
        "gpuops.store.local.xǁLocalStoreǁget__mutmut_7": "same bytes either way",
    }


def test_the_gate_fails_on_an_unjustified_survivor():
    """H2: one surviving mutant in an all-or-nothing module fails the gate."""
    codes = {"gpuops.ledger.x_f__mutmut_1": 1, "gpuops.ledger.x_f__mutmut_3": 0}

    score = gate.score_module("gpuops/ledger.py", codes, {})
    ok, lines = gate.judge([score], {"gpuops/ledger.py": 100.0})

    assert not ok
    assert score.survivors == ["gpuops.ledger.x_f__mutmut_3"]
    assert score.score == 50.0
    assert any("unjustified survivor: gpuops.ledger.x_f__mutmut_3" in line for line in lines)


def test_a_justified_survivor_passes_the_gate():
    """H2: a survivor listed with its reason counts as accepted."""
    codes = {"gpuops.ledger.x_f__mutmut_1": 1, "gpuops.ledger.x_f__mutmut_2": 0}
    justified = gate.read_justified(SURVIVORS_MD)

    score = gate.score_module("gpuops/ledger.py", codes, justified)
    ok, _ = gate.judge([score], {"gpuops/ledger.py": 100.0})

    assert ok
    assert (score.killed, score.justified, score.survivors) == (
        1,
        ["gpuops.ledger.x_f__mutmut_2"],
        [],
    )


@pytest.mark.parametrize(
    ("code", "bucket"),
    [
        (1, "killed"),
        (3, "killed"),
        (36, "killed"),
        (-24, "killed"),
        (37, "killed"),
        (0, "survivors"),
        (33, "survivors"),
        (5, "survivors"),
        (34, "skipped"),
        (-11, "odd"),
        (None, "odd"),
    ],
)
def test_each_mutmut_exit_code_lands_in_its_bucket(code, bucket):
    """H2: 'no tests' is a survivor, timeouts are kills, crashes are never silently passed."""
    score = gate.score_module("m.py", {"gpuops.m.x_f__mutmut_1": code}, {})

    counts = {
        "killed": score.killed,
        "survivors": len(score.survivors),
        "skipped": score.skipped,
        "odd": len(score.odd),
    }
    assert counts == {k: int(k == bucket) for k in counts}


def test_a_floor_below_100_allows_that_share_of_survivors():
    """H2: the store's 90% floor passes at 90% and fails just under it."""
    nine = {f"gpuops.s.x_f__mutmut_{i}": 1 for i in range(9)}
    at_floor = gate.score_module("s.py", {**nine, "gpuops.s.x_f__mutmut_9": 0}, {})
    under = gate.score_module(
        "s.py", {**nine, "gpuops.s.x_f__mutmut_9": 0, "gpuops.s.x_f__mutmut_10": 0}, {}
    )

    assert gate.judge([at_floor], {"s.py": 90.0})[0] is True
    assert gate.judge([under], {"s.py": 90.0})[0] is False


def test_only_a_module_mutmut_cannot_mutate_may_have_no_results(tmp_path):
    """timing.py (module-level constants) has no mutants; any other module without results
    fails the gate instead of scoring a vacuous 100%."""
    assert {"gpuops/timing.py"} == gate.NO_MUTANTS
    assert gate.read_meta(tmp_path, "gpuops/timing.py") == {}
    assert gate.score_module("gpuops/timing.py", {}, {}).score == 100.0
    with pytest.raises(SystemExit, match="no mutmut results for gpuops/ledger.py"):
        gate.read_meta(tmp_path, "gpuops/ledger.py")
    empty = tmp_path / "gpuops" / "events.py.meta"
    empty.parent.mkdir()
    empty.write_text(json.dumps({"exit_code_by_key": {}}))
    with pytest.raises(SystemExit, match="made no mutants of gpuops/events.py"):
        gate.read_meta(tmp_path, "gpuops/events.py")


def test_meta_files_are_read_per_module(tmp_path):
    """The per-mutant exit codes come from mutants/<file>.py.meta."""
    meta = tmp_path / "gpuops" / "ledger.py.meta"
    meta.parent.mkdir()
    meta.write_text(json.dumps({"exit_code_by_key": {"gpuops.ledger.x_f__mutmut_1": 1}}))

    assert gate.read_meta(tmp_path, "gpuops/ledger.py") == {"gpuops.ledger.x_f__mutmut_1": 1}


def test_every_load_bearing_module_has_a_floor_and_is_mutated():
    """H2: the gate's floors and mutmut's only_mutate list name the same files."""
    import tomllib

    config = tomllib.loads((GATE_PATH.parent.parent / "pyproject.toml").read_text())
    assert sorted(config["tool"]["mutmut"]["only_mutate"]) == sorted(gate.FLOORS)
    assert gate.FLOORS["gpuops/ledger.py"] == gate.FLOORS["gpuops/timing.py"] == 100.0
    assert gate.FLOORS["gpuops/store/local.py"] >= 90.0


def test_a_mutant_of_a_module_with_own_tests_is_limited_to_them_and_others_are_not():
    """H2: per-module selection maps each gated module's mutants to its own tests; a module
    not listed keeps every covering test."""
    assert gate.own_tests("gpuops.providers.vast.x_translate_error__mutmut_3") == (
        "tests/test_vast_adapter.py",
        "tests/test_vast_contract.py",
    )
    assert gate.own_tests("gpuops.market.probe.xǁProbeǁjudge__mutmut_1") == ("tests/test_probe.py",)
    assert gate.own_tests("gpuops.ledger.x_advance__mutmut_2") == (
        "tests/test_ledger.py",
        "tests/test_ledger_machine.py",
    )
    assert gate.own_tests("gpuops.cli.x_main__mutmut_2") is None
    assert gate.own_tests("gpuops.market.probe_extra.x_f__mutmut_1") is None
    assert gate.own_tests("gpuops.market.probe.x_f") is None  # not a mutant name
    for files in gate.OWN_TESTS.values():
        for name in files:
            assert (ROOT / name).is_file() or name.endswith("_more.py"), name


def test_the_coverage_map_is_narrowed_to_own_tests_before_any_mutant_is_scheduled():
    """H2: the gate hands mutmut, per function, only the covering tests of the module's own
    files (never adding one); a module without OWN_TESTS keeps every covering test."""
    tests = {
        "gpuops.ledger.x_advance": {
            "tests/test_ledger.py::test_a",
            "tests/test_rent.py::test_b",
            "tests/test_ledger_machine.py::TestM::runTest",
        },
        "gpuops.market.probe.xǁProbeǁjudge": {"tests/test_rent.py::test_c"},
        "gpuops.cli.x_main": {"tests/test_cli.py::test_d"},
    }

    dropped = gate.select_own_tests(tests)

    assert dropped == 2
    assert tests == {
        "gpuops.ledger.x_advance": {
            "tests/test_ledger.py::test_a",
            "tests/test_ledger_machine.py::TestM::runTest",
        },
        "gpuops.market.probe.xǁProbeǁjudge": set(),  # its mutants become "no tests": survived
        "gpuops.cli.x_main": {"tests/test_cli.py::test_d"},
    }


def test_the_gate_collects_only_files_a_gated_module_owns_and_everything_when_one_owns_none(
    monkeypatch,
):
    """H2: with OWN_TESTS for every gated module the stats run collects their union (the rest
    of the suite could never run for a mutant); one gated module without it brings back
    the whole tests/ folder, so no mutant ever loses a covering test."""
    files = gate.gate_test_files()
    assert files == sorted({f for own in gate.OWN_TESTS.values() for f in own})
    assert "tests/test_timing.py" not in files and "tests/test_ledger.py" in files

    monkeypatch.setitem(gate.FLOORS, "gpuops/market/rent.py", 100.0)
    assert gate.gate_test_files() is None


def test_under_mutmut_the_conftest_deselects_what_a_mutant_does_not_own(tmp_path):
    """H2: the conftest hook runs only the owning module's tests for its mutants."""
    env = {**os.environ, "MUTANT_UNDER_TEST": "gpuops.market.probe.x_judge__mutmut_1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", "--collect-only", "-p", "no:cacheprovider",
         "tests/test_probe.py", "tests/test_timing.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "deselected" in done.stdout
    assert "test_timing.py" not in done.stdout
    assert "test_probe.py" in done.stdout


def test_the_plugins_the_gate_names_are_installed_pytest_plugins_and_cover_the_ini_s_options():
    """With autoload off, the gate loads only gate.PLUGINS: each is an installed pytest11
    entry point, and among them are the ones whose options the ini's addopts pass (-n,
    --dist, --timeout) and Hypothesis'."""
    import importlib.metadata

    installed = {
        ep.value
        for dist in importlib.metadata.distributions()
        for ep in dist.entry_points
        if ep.group == "pytest11"
    }
    named = list(gate.PLUGINS[1::2])
    assert list(gate.PLUGINS[0::2]) == ["-p"] * len(named)
    assert set(named) <= installed
    assert {"xdist.plugin", "pytest_timeout", "_hypothesis_pytestplugin"} <= set(named)


COLLECTED_PROJECT = {
    "pytest.ini": "[pytest]\n",
    "conftest.py": """
import os, pytest

def pytest_collection_modifyitems(items):
    with open("log", "a") as log:
        log.write(f"modify {os.environ.get('MUTANT_UNDER_TEST', '-')} {len(items)}\\n")

@pytest.fixture(scope="session")
def world():
    with open("log", "a") as log:
        log.write("setup\\n")
    yield
    with open("log", "a") as log:
        log.write("teardown\\n")
""",
    "test_t.py": """
def test_pass(world):
    open("log", "a").write("ran pass\\n")

def test_fail(world):
    open("log", "a").write("ran fail\\n")
    assert False
""",
    "drive.py": """
import os, sys
sys.path.insert(0, sys.argv[1])
import gate

collected = gate.CollectedOnce()
collected.build(["-q", "-x", "-p", "no:cacheprovider", "test_t.py"])
open("log", "w").close()

for case in sys.argv[2:]:
    tests = [f"test_t.py::test_{name}" for name in case.split(",")]
    pid = os.fork()
    if pid == 0:
        os.environ["MUTANT_UNDER_TEST"] = "m__mutmut_1"
        sys.stdout = open(os.devnull, "w")
        status = collected.run(tests)
        os._exit(99 if status is None else status)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    with open("log", "a") as log:
        log.write(f"exit {status}\\n")
print(open("log").read(), end="")
""",
}


def test_a_mutant_s_child_runs_its_tests_from_the_one_collection_as_pytest_would(tmp_path):
    """H2: the gate collects once (CollectedOnce) and each forked child runs its own tests from
    that collection: pytest's exit code (0 passed, 1 failed), -x stops at the first failure, the
    conftest sees the mutant's items, each child sets its fixtures up and tears them down, and
    a test the collection lacks leaves the mutant to mutmut's own pytest run (99 here)."""
    for name, text in COLLECTED_PROJECT.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "drive.py", str(ROOT / "mutation"),
         "pass", "fail,pass", "pass,fail", "nope"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "modify m__mutmut_1 1", "setup", "ran pass", "teardown", "exit 0",
        "modify m__mutmut_1 2", "setup", "ran fail", "teardown", "exit 1",
        "modify m__mutmut_1 2", "setup", "ran pass", "ran fail", "teardown", "exit 1",
        "exit 99",
    ]  # fmt: skip
