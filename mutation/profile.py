"""Where the mutation gate's time goes, read from a finished run's results in mutants/.

    python mutation/profile.py [--top N]

Per gated module: mutants run, their summed wall seconds (each mutant's forked pytest), the
mutants per second that makes on one core, the test functions a mutant runs (mutmut's coverage
map narrowed to OWN_TESTS, as the gate narrows it) and their summed duration from the stats
run; then the tests that cost mutants the most in all (a test's stats duration times the number
of mutants that run it). A measurement, not a judgment: the verdicts are gate.py's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "mutation"))

import gate  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    mutants = ROOT / "mutants"
    stats = json.loads((mutants / "mutmut-stats.json").read_text())
    tests_by_function = {k: set(v) for k, v in stats["tests_by_mangled_function_name"].items()}
    gate.select_own_tests(tests_by_function)
    duration = stats["duration_by_test"]
    cost: Counter[str] = Counter()
    rows = []
    for path in gate.FLOORS:
        meta = mutants / f"{path}.meta"
        if not meta.exists():
            continue
        data = json.loads(meta.read_text())
        seconds = data.get("durations_by_key", {})
        ran = [k for k, code in data["exit_code_by_key"].items() if code is not None]
        total = sum(seconds.get(k, 0.0) for k in ran)
        tests = est = 0.0
        for key in ran:
            chosen = tests_by_function.get(key.partition("__mutmut_")[0], set())
            tests += len(chosen)
            est += sum(duration.get(t, 0.0) for t in chosen)
            for t in chosen:
                cost[t] += duration.get(t, 0.0)
        n = max(len(ran), 1)
        rows.append((total, path, len(ran), tests / n, est / n))
    rows.sort(reverse=True)
    whole = sum(r[0] for r in rows)
    print(f"{'module':<34} {'mutants':>7} {'core-s':>8} {'share':>6} {'mut/s':>6} "
          f"{'tests/mut':>9} {'test-s/mut':>10}")  # fmt: skip
    for total, path, ran, tests, est in rows:
        rate = ran / total if total else 0.0
        print(f"{path:<34} {ran:>7} {total:>8.1f} {100 * total / whole:>5.1f}% {rate:>6.1f} "
              f"{tests:>9.1f} {est:>10.3f}")  # fmt: skip
    print(
        f"{'all':<34} {sum(r[2] for r in rows):>7} {whole:>8.1f}  (stats run {stats['stats_time']:.0f} s)"
    )
    print(
        f"\nthe {args.top} tests that cost mutants the most (stats seconds x mutants running it):"
    )
    for test, seconds in cost.most_common(args.top):
        print(f"  {seconds:8.1f} s  {duration.get(test, 0.0) * 1000:7.1f} ms each  {test}")
    by_file: defaultdict[str, float] = defaultdict(float)
    for test, seconds in cost.items():
        by_file[test.split("::")[0]] += seconds
    print("\nby test file:")
    for file, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"  {seconds:8.1f} s  {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
