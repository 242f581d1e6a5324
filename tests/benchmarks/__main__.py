"""Every benchmark, one after another, and one table of their figures with the machine's load.

    python -m tests.benchmarks [--quick]

Runs bench_startup, bench_stats, bench_offers, bench_guard, bench_sweep and bench_wire_fuzz
(last) with their defaults (``--quick``: smaller sizes, for a smoke run), then prints one
table. Each benchmark prints its own detail (and the load while it ran) as it goes. The race
and CLI fuzz benchmarks are run on their own (python -m tests.benchmarks.bench_race, ...).
"""

from __future__ import annotations

import argparse
import sys

from tests.benchmarks import (
    bench_guard,
    bench_offers,
    bench_startup,
    bench_stats,
    bench_sweep,
    bench_wire_fuzz,
)
from tests.benchmarks.common import load


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    quick = parser.parse_args().quick
    plan = [
        (bench_startup.main, ["--runs", "5", "--history", "300"] if quick else []),
        (bench_stats.main, ["--events", "100000"] if quick else []),
        (bench_offers.main, ["--events", "100000", "--runs", "3"] if quick else []),
        (bench_guard.main, ["--boxes", "2"] if quick else []),
        (bench_sweep.main, ["--sizes", "100:10"] if quick else []),
        # last: it replaces time.sleep and time.monotonic with a virtual clock for the process
        (bench_wire_fuzz.main, ["500"] if quick else []),
    ]
    rows: list[tuple[str, str, str]] = []
    for bench, argv in plan:
        print(f"== {bench.__module__} {' '.join(argv)}", flush=True)
        rows += bench(argv)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'what':<{width}}  {'figure':<24}  target / note   ({load()} at the end)")
    for what, figure, note in rows:
        print(f"{what:<{width}}  {figure:<24}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
