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
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The score each load-bearing module must reach, in percent of tested mutants killed or
# justified. Everything but the store is all-or-nothing: the ledger, timing, the event log, the
# market core, the lane (its board, its decisions, the startup-script linter and the bash parse
# the linter reads) and the analysis; the store's floor is the foundation's 90%.
FLOORS: dict[str, float] = {
    "gpuops/timing.py": 100.0,
    "gpuops/ledger.py": 100.0,
    "gpuops/events.py": 100.0,
    "gpuops/secrets.py": 100.0,
    "gpuops/store/base.py": 90.0,
    "gpuops/store/opener.py": 90.0,
    "gpuops/store/local.py": 90.0,
    "gpuops/store/s3.py": 90.0,
    "gpuops/store/records.py": 100.0,
    "gpuops/market/select.py": 100.0,
    "gpuops/market/race.py": 100.0,
    "gpuops/market/quarantine.py": 100.0,
    "gpuops/market/rentals.py": 100.0,
    "gpuops/market/teardown.py": 100.0,
    "gpuops/providers/vast.py": 100.0,
    "gpuops/market/probe.py": 100.0,
    "gpuops/market/guardian.py": 100.0,
    "gpuops/market/watchdog.py": 100.0,
    "gpuops/lane/board.py": 100.0,
    "gpuops/lane/decide.py": 100.0,
    "gpuops/lane/script.py": 100.0,
    "gpuops/lane/shell.py": 100.0,
    "gpuops/analysis/stats.py": 100.0,
    "gpuops/analysis/shrink.py": 100.0,
    "gpuops/analysis/ope.py": 100.0,
}

# Per-module test selection: a mutant of a module listed here runs only that module's own tests
# (tests/conftest.py deselects the rest of what mutmut picked), instead of every test that
# happens to call it. The adapter and the probe are called by nearly every market test; their
# own tests pin them on recordings and cost a fraction of the time. A mutant no own test
# reaches is "no tests", which counts as survived: the selection can only make the gate
# stricter, never quietly pass a mutant.
_LANE = tuple(
    f"tests/test_{name}.py"
    for name in (
        "lane_board", "lane_board_view", "lane_decide", "lane_incidents", "lane_machine",
        "lane_safety", "lane_script", "lane_session", "gce_adapter", "fake_gce",
    )
)  # fmt: skip
OWN_TESTS: dict[str, tuple[str, ...]] = {
    "gpuops.ledger": ("tests/test_ledger.py", "tests/test_ledger_machine.py"),
    "gpuops.events": ("tests/test_events.py",),
    # what a secret looks like: pinned directly and through the event log's leak tests
    "gpuops.secrets": ("tests/test_secrets.py", "tests/test_events.py"),
    "gpuops.store.base": (
        "tests/test_store_contract.py",
        "tests/test_store_local.py",
        "tests/test_store_s3.py",
    ),
    "gpuops.store.local": ("tests/test_store_local.py", "tests/test_store_contract.py"),
    "gpuops.store.opener": ("tests/test_store_local.py", "tests/test_store_s3.py"),
    "gpuops.store.s3": ("tests/test_store_s3.py", "tests/test_store_contract.py"),
    # every record type goes through it: its own tests pin the loop and the codec
    "gpuops.store.records": ("tests/test_records.py",),
    "gpuops.market.select": ("tests/test_select.py",),
    "gpuops.market.race": ("tests/test_race.py",),
    "gpuops.market.quarantine": ("tests/test_quarantine.py",),
    "gpuops.market.rentals": ("tests/test_rentals.py",),
    "gpuops.market.teardown": ("tests/test_teardown.py",),
    "gpuops.providers.vast": ("tests/test_vast_adapter.py", "tests/test_vast_contract.py"),
    "gpuops.market.probe": ("tests/test_probe.py",),
    "gpuops.market.guardian": ("tests/test_guardian.py", "tests/test_guardian_more.py"),
    "gpuops.market.watchdog": ("tests/test_watchdog.py",),
    "gpuops.lane.board": _LANE,
    # The lane's decisions, its script linter and the linter's parse of the script are pinned
    # by their own pure tests: the incident replays boot real processes in FakeGCE, far too
    # slow to run per mutant.
    "gpuops.lane.decide": ("tests/test_lane_decide.py", "tests/test_lane_board.py"),
    "gpuops.lane.script": ("tests/test_lane_script.py",),
    "gpuops.lane.shell": ("tests/test_lane_shell.py",),
}


def own_tests(mutant: str) -> tuple[str, ...] | None:
    """The test files a mutant (``gpuops.providers.vast.x_f__mutmut_3``) is limited to, or None
    for a module that runs every covering test."""
    for module, files in OWN_TESTS.items():
        if mutant.startswith(module + ".") and "__mutmut_" in mutant:
            return files
    return None


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
    args = parser.parse_args(argv)
    mutants = ROOT / "mutants"
    if not args.judge:
        env = {**os.environ, "HYPOTHESIS_PROFILE": "mutation"}
        subprocess.run([sys.executable, "-m", "mutmut", "run"], cwd=ROOT, env=env, check=True)
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
