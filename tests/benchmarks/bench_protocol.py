"""Benchmark: the guardian protocol explored exhaustively over its pure core, at larger scopes
than the suite's (tests/protocol.py, tests/test_protocol.py).

    .venv/bin/python tests/benchmarks/bench_protocol.py [--scopes team,skewed,faults,wide]

Prints, for each scope, the states and transitions explored, the terminal states, the seconds,
each rare path's count and every violation; exits 1 if any scope has a violation, or if one of
the paths its scope allows was never reached.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from protocol import RENTER, Scope, explore  # noqa: E402

from gpuops import timing  # noqa: E402

SKEW = timing.CLOCK_SKEW_S
SCOPES = {
    # two guardians, one kill, one stall, every copy and destroy fault, alice's own destroy
    "team": Scope(by_hand=1),
    # guardians on the renter's host and on hosts 15 minutes behind and ahead; cron ahead
    "skewed": Scope(hosts=((RENTER, 0.0), ("B", -SKEW), ("C", SKEW)), cron=("C", SKEW),
                    copy_failures=0, slow_copies=0),  # fmt: skip
    # three guardians, two kills
    "wide": Scope(hours_s=60.0, starts=2, kills=2, stalls=0, destroy_failures=1,
                  copy_failures=0, slow_copies=0),  # fmt: skip
    # the longest rental whose slow copy still fits inside one lease TTL (the model renews the
    # lease when a slow copy ends, where the real guardian beats through it: a budget longer
    # than the TTL would show takeovers the real heartbeat prevents)
    "long": Scope(hours_s=300.0, hosts=((RENTER, 0.0), ("B", -SKEW)), destroy_failures=1,
                  copy_failures=1, slow_copies=1, stalls=0, starts=1, kills=1),  # fmt: skip
}
# the paths a scope must reach (each only where the scope allows it)
PATHS = ("take", "takeover", "destroy", "leave 0", "sweep", "kill", "start")


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scopes", default=",".join(SCOPES))
    args = parser.parse_args(argv)
    rows, bad = [], False
    for name in args.scopes.split(","):
        scope = SCOPES[name]
        load = os.getloadavg()[0]
        started = time.perf_counter()
        report = explore(scope)
        wall = time.perf_counter() - started
        print(
            f"protocol {name}: {report.states:,} states, {report.transitions:,} transitions, "
            f"{report.terminals:,} terminal, {report.bad()} violations in {wall:.1f} s "
            f"({report.states / wall:,.0f} states/s; load {load:.2f} before)"
        )
        for path, count in sorted(report.reached.items()):
            print(f"  {path:<22} {count:,}")
        for verdict, where in report.violations.items():
            print(f"  VIOLATION {verdict}: {len(where)}, e.g. {where[:3]}")
        missing = [p for p in PATHS if not report.reached[p]]
        if missing:
            print(f"  NEVER REACHED: {', '.join(missing)}")
        bad = bad or bool(report.violations) or bool(missing)
        rows.append((f"protocol {name}", f"{report.states:,} states",
                     f"{report.bad()} violations, {wall:.1f} s"))  # fmt: skip
    if bad:
        raise SystemExit(1)
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
