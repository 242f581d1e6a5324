"""Every benchmark, one after another, and one table of their figures with the machine's load.

    python -m tests.benchmarks [--quick] [--only bench_startup,bench_stats,...]

Runs bench_startup, bench_stats, bench_offers, bench_guard, bench_sweep, bench_race, bench_lane,
bench_s3_listing, bench_soak, bench_protocol, bench_cli_fuzz, bench_wire_fuzz and bench_fuzz (last: every surface) with their defaults (``--quick``: smaller sizes, for a smoke run),
then prints one table. Each benchmark prints its own detail (and the load while it ran) as it
goes. This process is a child subreaper: after each benchmark, any process it started that is
still alive (a descendant, however detached) is named in the table, and ended; a benchmark
that failed (SystemExit) is a row too, and the run exits 1 after the table.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from gpuops.procs import become_subreaper
from tests.benchmarks import (
    bench_cli_fuzz,
    bench_fuzz,
    bench_guard,
    bench_lane,
    bench_offers,
    bench_protocol,
    bench_race,
    bench_s3_listing,
    bench_soak,
    bench_startup,
    bench_stats,
    bench_sweep,
    bench_wire_fuzz,
)
from tests.benchmarks.common import end_leftovers, load

Bench = Callable[[list[str]], list[tuple[str, str, str]]]


def plan(quick: bool) -> list[tuple[Bench, list[str]]]:
    """Each benchmark and its arguments: its defaults, or smaller sizes with ``quick``."""
    return [
        (
            bench_startup.main,
            ["--runs", "5", "--history", "300", "--recent", "300"] if quick else [],
        ),
        (bench_stats.main, ["--events", "100000"] if quick else []),
        (bench_offers.main, ["--events", "100000", "--runs", "3"] if quick else []),
        (bench_guard.main, ["--boxes", "2"] if quick else []),
        (bench_sweep.main, ["--sizes", "100:10,1000:100"] if quick else []),
        (bench_race.main, ["--trials", "40"] if quick else []),
        (bench_lane.main, ["--runs", "3"] if quick else []),
        (bench_s3_listing.main, ["--runs", "3", "--recent", "100"] if quick else []),
        (bench_soak.main, ["--lifecycles", "300"] if quick else []),
        (bench_protocol.main, ["--scopes", "skewed"] if quick else []),
        (bench_cli_fuzz.main, ["300"] if quick else []),
        # last: it replaces time.sleep and time.monotonic with a virtual clock for the process
        (bench_wire_fuzz.main, ["500"] if quick else []),
        # every input surface at once, untyped exceptions counted (it also replaces time.sleep)
        (bench_fuzz.main, ["300"] if quick else []),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated benchmarks to run (e.g. bench_startup,bench_stats); default all",
    )
    args = parser.parse_args()
    chosen = plan(args.quick)
    if args.only:
        wanted = {n.strip() for n in args.only.split(",") if n.strip()}
        known = {bench.__module__.rpartition(".")[2] for bench, _ in chosen}
        if not wanted <= known:
            parser.error(f"no benchmark named {', '.join(sorted(wanted - known))}")
        chosen = [c for c in chosen if c[0].__module__.rpartition(".")[2] in wanted]
    become_subreaper()
    rows: list[tuple[str, str, str]] = []
    failed = False
    for bench, argv in chosen:
        name = bench.__module__.rpartition(".")[2]
        print(f"== {name} {' '.join(argv)}", flush=True)
        try:
            rows += bench(argv)
        except SystemExit as exc:
            failed = True
            rows.append((name, f"FAILED (exit {exc.code})", "see its output above"))
        left = end_leftovers()
        if left:
            failed = True
            rows.append((name, f"left {len(left)} processes", "; ".join(left)[:200]))
    width = max(len(r[0]) for r in rows)
    print(f"\n{'what':<{width}}  {'figure':<28}  target / note   ({load()} at the end)")
    for what, figure, note in rows:
        print(f"{what:<{width}}  {figure:<28}  {note}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
