"""The mutation gate (rule H2): run mutmut, score each load-bearing module, fail loudly.

    python mutation/gate.py            run mutmut, then judge
    python mutation/gate.py --judge    judge the results already in mutants/

mutmut exits 0 even when mutants survive, so this script is the gate. It reads each
mutant's exit code from ``mutants/<file>.py.meta``, accepts a survivor only when
``mutation/survivors.md`` lists it with a reason, and compares each module's score,
(killed + justified) / tested, with the floor in FLOORS. "No tests" counts as survived:
code no test reaches is code no test pins.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# The score each load-bearing module must reach, in percent of tested mutants killed or
# justified. Everything but the store is all-or-nothing: the ledger, timing, the event log, the
# market core, the lane (its board, its decisions, the startup-script linter and the bash parse
# the linter reads), the analysis, the alarms (O1) and `gpuops check`; the store's floor is the
# foundation's 90%.
FLOORS: dict[str, float] = {
    "gpuops/timing.py": 100.0,
    "gpuops/ledger.py": 100.0,
    "gpuops/events.py": 100.0,
    "gpuops/event_types.py": 100.0,
    "gpuops/event_base.py": 100.0,
    "gpuops/secrets.py": 100.0,
    "gpuops/settings.py": 100.0,
    "gpuops/clock.py": 100.0,
    "gpuops/timestamps.py": 100.0,
    "gpuops/store/base.py": 90.0,
    "gpuops/store/opener.py": 90.0,
    "gpuops/store/local.py": 90.0,
    "gpuops/store/s3.py": 90.0,
    "gpuops/store/s3_cache.py": 90.0,
    "gpuops/store/records.py": 100.0,
    "gpuops/market/select.py": 100.0,
    "gpuops/market/gpu_names.py": 100.0,
    "gpuops/market/offer_query.py": 100.0,
    "gpuops/market/race.py": 100.0,
    "gpuops/market/quarantine.py": 100.0,
    "gpuops/market/rentals.py": 100.0,
    "gpuops/market/teardown.py": 100.0,
    "gpuops/providers/vast.py": 100.0,
    "gpuops/providers/vast_client.py": 100.0,
    "gpuops/providers/google_errors.py": 100.0,
    "gpuops/market/probe.py": 100.0,
    "gpuops/market/probing.py": 100.0,
    "gpuops/model.py": 100.0,
    "gpuops/market/guardian.py": 100.0,
    "gpuops/market/watchdog.py": 100.0,
    "gpuops/market/sync_plan.py": 100.0,
    "gpuops/market/budget.py": 100.0,
    "gpuops/market/ceiling.py": 100.0,
    "gpuops/lane/board.py": 100.0,
    "gpuops/lane/decide.py": 100.0,
    "gpuops/lane/script.py": 100.0,
    "gpuops/lane/shell.py": 100.0,
    "gpuops/analysis/stats.py": 100.0,
    "gpuops/analysis/shrink.py": 100.0,
    "gpuops/analysis/ope.py": 100.0,
    # 97, not 100: AppriseEndpoint.send's setup of apprise (its asset: async_mode, storage_mode,
    # service_timeout; the logger kept quiet) survives under mutmut. With one URL per Apprise
    # object and no service deadline apprise sends alike in either mode, and the logger test
    # (tests/test_alarms_unit.py) kills the logger mutants when run by hand but not in mutmut's
    # forked runner; see mutation/survivors.md's note.
    "gpuops/alarms.py": 97.0,
    "gpuops/check.py": 100.0,
    "gpuops/identity.py": 100.0,
}

# Per-module test selection: a mutant of a module listed here runs only that module's own tests
# (run_mutmut narrows mutmut's coverage map before scheduling; tests/conftest.py deselects the
# rest when mutmut is run by hand), instead of every test that happens to call it. The adapter
# and the probe are called by nearly every market test; their own tests pin them on recordings
# and cost a fraction of the time. A mutant no own test reaches is "no tests", which counts as
# survived: the selection can only make the gate stricter, never quietly pass a mutant.
# When every gated module is listed here, the gate's stats run collects only these files: the
# rest of the suite (about two thirds of its time) could never be chosen for a mutant.
_LANE = tuple(
    f"tests/test_{name}.py"
    for name in (
        "lane_board", "lane_board_view", "lane_decide", "lane_incidents", "lane_machine",
        "lane_safety", "lane_script", "gce_adapter", "fake_gce",
    )
)  # fmt: skip
OWN_TESTS: dict[str, tuple[str, ...]] = {
    "gpuops.settings": (
        "tests/test_settings.py",
        "tests/test_config.py",
        "tests/test_store_s3_listing.py",
    ),
    "gpuops.clock": ("tests/test_clock.py",),
    # the one stamp form and its parser: pinned by their own tests
    "gpuops.timestamps": ("tests/test_timestamps.py",),
    "gpuops.ledger": ("tests/test_ledger.py", "tests/test_ledger_machine.py"),
    "gpuops.events": ("tests/test_events.py",),
    # every reader and writer goes through it: its own tests pin each field's check
    "gpuops.event_types": (
        "tests/test_event_types.py",
        "tests/test_event_ops.py",
    ),
    "gpuops.event_base": ("tests/test_event_types.py", "tests/test_event_ops.py"),
    # what a secret looks like: pinned directly and through the event log's leak tests
    "gpuops.secrets": ("tests/test_secrets.py", "tests/test_events.py", "tests/test_config.py"),
    "gpuops.store.base": (
        "tests/test_store_contract.py",
        "tests/test_store_local.py",
        "tests/test_store_s3.py",
    ),
    "gpuops.store.local": ("tests/test_store_local.py", "tests/test_store_contract.py"),
    "gpuops.store.opener": (
        "tests/test_store_local.py",
        "tests/test_store_s3.py",
        "tests/test_store_s3_listing.py",
    ),
    "gpuops.store.s3": (
        "tests/test_store_s3.py",
        "tests/test_store_contract.py",
        "tests/test_store_s3_listing.py",
    ),
    # the S3 listing cache: pinned through the listings that use it, two hosts on one bucket
    "gpuops.store.s3_cache": ("tests/test_store_s3_listing.py",),
    # every record type goes through it: its own tests pin the loop and the codec
    "gpuops.store.records": ("tests/test_records.py",),
    "gpuops.market.select": ("tests/test_select.py",),
    "gpuops.market.gpu_names": ("tests/test_select.py",),
    "gpuops.market.offer_query": ("tests/test_offer_query.py",),
    "gpuops.market.race": ("tests/test_race.py",),
    "gpuops.market.quarantine": ("tests/test_quarantine.py",),
    "gpuops.market.rentals": ("tests/test_rentals.py",),
    "gpuops.market.teardown": ("tests/test_teardown.py",),
    "gpuops.providers.vast": ("tests/test_vast_adapter.py", "tests/test_vast_contract.py"),
    # the Vast transport: the wire format pinned alone, and through the adapter's tests
    "gpuops.providers.vast_client": ("tests/test_vast_client.py", "tests/test_vast_adapter.py"),
    # the one Google error translator (GCE and GCS), pinned by its own pure tests
    "gpuops.providers.google_errors": ("tests/test_google_errors.py",),
    "gpuops.market.probe": ("tests/test_probe.py",),
    # the probe loop over a recorded box on a FakeClock (no process)
    "gpuops.market.probing": ("tests/test_probing.py",),
    # the market's values and the probe's verdicts, pinned by their own tests
    "gpuops.model": ("tests/test_model.py",),
    "gpuops.market.guardian": ("tests/test_guardian.py", "tests/test_guardian_more.py"),
    "gpuops.market.watchdog": ("tests/test_watchdog.py",),
    # the results sync's decisions, pinned by their own pure tests (M5)
    "gpuops.market.sync_plan": ("tests/test_sync_plan.py",),
    # M15's arithmetic, pinned by its own pure tests
    "gpuops.market.budget": ("tests/test_budget.py",),
    "gpuops.market.ceiling": ("tests/test_ceiling.py",),
    "gpuops.lane.board": _LANE,
    # The lane's decisions, its script linter and the linter's parse of the script are pinned
    # by their own pure tests: the incident replays boot real processes in FakeGCE, far too
    # slow to run per mutant.
    "gpuops.lane.decide": ("tests/test_lane_decide.py", "tests/test_lane_board.py"),
    "gpuops.lane.script": ("tests/test_lane_script.py",),
    "gpuops.lane.shell": ("tests/test_lane_shell.py",),
    # exactly the files whose tests reach these modules (mutmut's own coverage, measured)
    # the readers' own tests, and the typed events' tests that feed each reader bad events
    "gpuops.analysis.stats": (
        "tests/test_stats.py",
        "tests/test_index.py",
        "tests/test_ope.py",
        "tests/test_event_types.py",
    ),
    "gpuops.analysis.shrink": (
        "tests/test_shrink.py",
        "tests/test_index.py",
        "tests/test_ope.py",
        "tests/test_event_types.py",
    ),
    "gpuops.analysis.ope": ("tests/test_ope.py", "tests/test_event_types.py"),
    # once per cause, retried, never in the way: the pure tests first (an in-memory endpoint),
    # then the loopback receiver's end-to-end ones (their guardian worlds are the slow part)
    "gpuops.alarms": ("tests/test_alarms_unit.py", "tests/test_alarms.py"),
    # every line against fakes made to break it, and the command in-process (its process test
    # runs a real `gpuops check`, which mutmut cannot see)
    "gpuops.check": ("tests/test_check.py", "tests/test_check_lane.py", "tests/test_config.py"),
    # whose key this is (M3): the pure decision and the one call, pinned by their own tests
    "gpuops.identity": ("tests/test_identity.py",),
}


def own_tests(mutant: str) -> tuple[str, ...] | None:
    """The test files a mutant (``gpuops.providers.vast.x_f__mutmut_3``) is limited to, or None
    for a module that runs every covering test."""
    if "__mutmut_" not in mutant:
        return None
    return own_tests_of_function(mutant.partition("__mutmut_")[0])


def own_tests_of_function(function: str) -> tuple[str, ...] | None:
    """The test files the mutants of one function (mutmut's key, ``gpuops.ledger.x_advance``)
    are limited to, or None for a module that runs every covering test."""
    for module, files in OWN_TESTS.items():
        if function.startswith(module + ".x"):
            return files
    return None


def select_own_tests(tests_by_function: dict[str, set[str]]) -> int:
    """Narrow mutmut's coverage map (function -> covering test ids) to OWN_TESTS, in place,
    before any mutant is scheduled: each mutant's pytest then collects only its own test files
    (rather than every covering file, deselected afterwards by tests/conftest.py), and mutmut's
    time estimate and CPU limit are those of the tests that actually run. Only narrows: a
    function left with no test makes its mutants "no tests", which the gate counts as survived.
    Returns how many (function, test) pairs were dropped."""
    dropped = 0
    for function, tests in tests_by_function.items():
        files = own_tests_of_function(function)
        if files is None:
            continue
        keep = {test for test in tests if test.split("::")[0] in files}
        dropped += len(tests) - len(keep)
        tests.intersection_update(keep)
    return dropped


def gate_test_files() -> list[str] | None:
    """The test files the gate's mutmut run collects: every file some gated module's mutants
    may run, when each gated module has OWN_TESTS; None (the whole tests/ folder) otherwise."""
    modules = [p[: -len(".py")].replace("/", ".") for p in FLOORS if p not in NO_MUTANTS]
    if any(module not in OWN_TESTS for module in modules):
        return None
    return sorted({file for module in modules for file in OWN_TESTS[module]})


class CollectedOnce:
    """One pytest session over the gate's test files, configured and collected once in mutmut's
    parent, just before the first mutant is forked; each mutant's child runs its tests from it.

    mutmut starts a whole ``pytest.main`` per mutant: parsing the options, registering every
    plugin, walking tests/ and collecting each named file again. That start-up was about five
    sixths of a mutant's time (a profile of 273 mutants of alarms.py: 0.19 s of its 0.22 s;
    the tests themselves, 0.035 s). The child here does what the rest of that ``pytest.main``
    does, on the same items: conftest's ``pytest_collection_modifyitems`` as a mutant sees it
    (its hang limits), pytest's own test loop with every plugin's wrappers and ``-x``, and the
    session's finish, which tears the fixtures down. Its exit code is pytest's: 1 when a test
    failed, else 0. A mutant with a test this session lacks runs mutmut's own way."""

    def __init__(self) -> None:
        self.session: Any = None
        self.items: dict[str, Any] = {}

    def build(self, args: list[str]) -> None:
        from _pytest.config import _prepareconfig
        from _pytest.main import Session

        # pytest's terminal reporter keeps the stdout it is configured with: here, and in every
        # child, that is /dev/null, as mutmut makes it for its own per-mutant pytest.main.
        self.quiet = open(os.devnull, "w")  # noqa: SIM115 (open for the reporter's lifetime)
        with contextlib.redirect_stdout(self.quiet):
            config = _prepareconfig(args)
            config._do_configure()
            session = Session.from_config(config)
            config.hook.pytest_sessionstart(session=session)
            session.perform_collect()
        self.session = session
        self.items = {item.nodeid: item for item in session.items}

    def run(self, tests: list[str]) -> int | None:
        """Run ``tests`` (node ids, in order) in this forked child; None when one is unknown."""
        items = [self.items.get(test) for test in tests]
        if self.session is None or not items or None in items:
            return None
        session = self.session
        config = session.config
        config.hook.pytest_collection_modifyitems(session=session, config=config, items=items)
        session.items = items
        session.testscollected = len(items)
        try:
            config.hook.pytest_runtestloop(session=session)
        except (session.Failed, session.Interrupted):
            pass
        finally:
            status = 1 if session.testsfailed else 0
            config.hook.pytest_sessionfinish(session=session, exitstatus=status)
        return status


def run_mutmut(max_children: int, *names: str) -> None:
    """``mutmut run`` in this process, with six changes to its runner mechanics (mutmut 3.8.1):

    * the tests collected are gate_test_files(), not the whole suite;
    * pytest's plugin autoload is off and the plugins the tests use are named (PLUGINS);
    * the coverage map is narrowed to OWN_TESTS (select_own_tests) once stats are in;
    * the "clean run" of the whole selection is skipped when this very invocation has just run
      it for stats: mutmut stops at once if that run fails, so a second pass over the same
      tests with no mutant active proves nothing new. A run that loads cached stats still
      does its clean run;
    * the tests are configured and collected once, and each mutant runs its own from that
      collection (CollectedOnce) instead of starting pytest afresh;
    * in a mutant's child, the trampolines' "which mutant is active?" is a constant, not an
      os.environ look-up per call of a mutated function.
    """
    import mutmut.__main__ as mm
    from mutmut.configuration import config
    from mutmut.mutation import trampoline
    from mutmut.runners.harness import PytestRunner
    from mutmut.state import state
    from mutmut.utils.file_utils import change_cwd
    from mutmut.workers.isolation import ForkRunner

    files = gate_test_files()
    if files is not None:
        config().pytest_add_cli_args_test_selection = files
    # Each mutant's pytest starts afresh: looking up every installed distribution's entry
    # points (and listing their files, for assertion rewriting) was about half its start-up.
    # The plugins the tests use are named instead.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    config().pytest_add_cli_args = [*config().pytest_add_cli_args, *PLUGINS]

    fresh_full_stats = False
    collect_stats, collect_or_load = mm.run_stats_collection, mm.collect_or_load_stats

    def run_stats_collection(runner, tests=None):  # type: ignore[no-untyped-def]
        nonlocal fresh_full_stats
        collect_stats(runner, tests)
        fresh_full_stats = fresh_full_stats or not tests

    def collect_or_load_stats(runner, **kwargs):  # type: ignore[no-untyped-def]
        collect_or_load(runner, **kwargs)
        dropped = select_own_tests(state().tests_by_mangled_function_name)
        print(f"    OWN_TESTS: {dropped} (function, test) pairs outside a module's own tests")

    clean = ForkRunner.run_clean_tests

    def run_clean_tests(self, tests):  # type: ignore[no-untyped-def]
        if fresh_full_stats and not tests:
            print("    (the stats run just passed the same tests: no second clean run)")
            return 0
        return clean(self, tests)

    collected = CollectedOnce()
    startup, run_tests = ForkRunner.startup, PytestRunner.run_tests

    def startup_once(self):  # type: ignore[no-untyped-def]
        # the arguments mutmut's own per-mutant pytest.main is given, less the node ids
        runner = self.test_runner
        args = ["--rootdir=.", "--tb=native", *runner._pytest_args_regular_run([])]
        with change_cwd("mutants"):
            collected.build([*args, *runner._pytest_add_cli_args])
        startup(self)  # mutmut freezes the collector's heap here, the collection with it

    def run_tests_collected(self, *, mutant_name, tests):  # type: ignore[no-untyped-def]
        if mutant_name and "__mutmut_" in mutant_name:
            # This child tests one mutant for its whole life: each mutated function's trampoline
            # asks which, on every call, of os.environ; the answer is now a constant.
            trampoline.get_mutant_under_test = lambda: mutant_name
            with change_cwd("mutants"):
                status = collected.run(list(tests))
            if status is not None:
                return status
        return run_tests(self, mutant_name=mutant_name, tests=tests)

    mm.run_stats_collection = run_stats_collection
    mm.collect_or_load_stats = collect_or_load_stats
    ForkRunner.run_clean_tests = run_clean_tests  # type: ignore[method-assign]
    ForkRunner.startup = startup_once  # type: ignore[method-assign]
    PytestRunner.run_tests = run_tests_collected  # type: ignore[method-assign]
    mm.cli(["run", "--max-children", str(max_children), *names])


# Mutants tested at once: mutmut's own default on the 2-core CI machine (one per core); each
# mutant's pytest is CPU-bound, so more children only share the same two cores.
CHILDREN = 2

# The pytest plugins the gated tests need, loaded by name under PYTEST_DISABLE_PLUGIN_AUTOLOAD:
# xdist (the ini's -n), pytest-timeout (the ini's --timeout and conftest's hang limits) and
# Hypothesis's own.
PLUGINS = ("-p", "xdist.plugin", "-p", "pytest_timeout", "-p", "_hypothesis_pytestplugin")

# Modules mutmut cannot mutate (it mutates code inside functions only): timing.py is module-level
# constants, pinned value by value in tests/test_timing.py. Any other module without results
# means mutmut did not run on it, and that fails the gate.
NO_MUTANTS = frozenset({"gpuops/timing.py"})

# mutmut 3.8 exit codes per mutant (shared/reference/tooling.md §1).
KILLED_CODES = {1, 3, 36, 24, -24, 152, 255, 37}  # failed, timed out, or caught by types
SURVIVED_CODES = {0, 33, 5}  # tests passed, or no test covered the mutant
SKIPPED_CODES = {34}

_JUSTIFIED = re.compile(r"^\|\s*`?(gpuops\.[^\s|`]+__mutmut_\d+)`?\s*\|\s*(\S[^|]*?)\s*\|")


@dataclass
class ModuleScore:
    path: str
    killed: int = 0
    justified: list[str] = field(default_factory=list)
    survivors: list[str] = field(default_factory=list)  # unjustified
    skipped: int = 0
    odd: list[str] = field(default_factory=list)  # segfaults and unknown codes

    @property
    def tested(self) -> int:
        return self.killed + len(self.justified) + len(self.survivors) + len(self.odd)

    @property
    def score(self) -> float:
        return (
            100.0 if self.tested == 0 else 100.0 * (self.killed + len(self.justified)) / self.tested
        )


def read_justified(text: str) -> dict[str, str]:
    """Mutant name -> reason, from the table rows of survivors.md."""
    out = {}
    for line in text.splitlines():
        match = _JUSTIFIED.match(line.strip())
        if match:
            out[match.group(1)] = match.group(2)
    return out


def score_module(
    path: str, codes: Mapping[str, int | None], justified: Mapping[str, str]
) -> ModuleScore:
    result = ModuleScore(path)
    for name, code in sorted(codes.items()):
        if code in KILLED_CODES:
            result.killed += 1
        elif code in SKIPPED_CODES:
            result.skipped += 1
        elif code in SURVIVED_CODES and name in justified:
            result.justified.append(name)
        elif code in SURVIVED_CODES:
            result.survivors.append(name)
        else:
            result.odd.append(f"{name} (exit code {code})")
    return result


def judge(scores: Iterable[ModuleScore], floors: Mapping[str, float]) -> tuple[bool, list[str]]:
    """Whether every module meets its floor, and the report lines."""
    ok = True
    lines = []
    for s in scores:
        floor = floors[s.path]
        passed = s.score >= floor
        ok = ok and passed
        lines.append(
            f"{'ok  ' if passed else 'FAIL'} {s.path:<24} {s.score:6.1f}% (floor {floor:.0f}%)"
            f"  killed {s.killed}, justified {len(s.justified)}, survived {len(s.survivors)},"
            f" odd {len(s.odd)}, skipped {s.skipped}"
        )
        lines.extend(f"       unjustified survivor: {name}" for name in s.survivors)
        lines.extend(f"       odd result: {name}" for name in s.odd)
    return ok, lines


def read_meta(mutants: Path, path: str) -> dict[str, int | None]:
    """Exit code per mutant of ``path``; a module with no results is an error unless it is
    one mutmut cannot mutate."""
    meta = mutants / f"{path}.meta"
    if not meta.exists():
        if path in NO_MUTANTS:
            return {}
        raise SystemExit(f"mutation gate: no mutmut results for {path} ({meta} missing): FAIL")
    codes = dict(json.loads(meta.read_text())["exit_code_by_key"])
    if not codes and path not in NO_MUTANTS:
        raise SystemExit(f"mutation gate: mutmut made no mutants of {path}: FAIL")
    return codes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--judge", action="store_true", help="only judge existing results")
    parser.add_argument(
        "--children",
        type=int,
        default=CHILDREN,
        help=f"mutants tested at once (default {CHILDREN})",
    )
    args = parser.parse_args(argv)
    mutants = ROOT / "mutants"
    if not args.judge:
        env = {**os.environ, "HYPOTHESIS_PROFILE": "mutation"}
        # ``python -c`` keeps sys.path as ``python -m mutmut`` has it (the checkout first)
        code = f"import sys; sys.path.insert(1, 'mutation'); import gate; gate.run_mutmut({args.children})"
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
    if not args.judge:
        subprocess.run([sys.executable, "-m", "mutmut", "export-cicd-stats"], cwd=ROOT, check=True)
        stats = json.loads((mutants / "mutmut-cicd-stats.json").read_text())
        print(f"mutmut export-cicd-stats: {stats}")
    justified = read_justified((ROOT / "mutation" / "survivors.md").read_text())
    scores = [score_module(p, read_meta(mutants, p), justified) for p in FLOORS]
    ok, lines = judge(scores, FLOORS)
    total = sum(s.tested for s in scores)
    good = sum(s.killed + len(s.justified) for s in scores)
    print("\n".join(lines))
    print(f"mutation gate: {good}/{total} killed or justified -> {'PASS' if ok else 'FAIL'}")
    gated = tuple(path[: -len(".py")].replace("/", ".") + "." for path in FLOORS)
    in_gate = {name for name in justified if name.startswith(gated)}
    stale = sorted(in_gate - {n for s in scores for n in s.justified})
    for name in stale:
        print(f"note: survivors.md lists {name}, which no longer survives; remove it")
    if not ok:
        print(
            "see a mutant with: mutmut show <name>; kill it with a test or justify it in "
            "mutation/survivors.md",
            file=sys.stderr,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
