"""Fuzz the CLI's argv with N Hypothesis cases (default 10,000) and print counts by exit code.

    .venv/bin/python tests/benchmarks/bench_cli_fuzz.py [N]

Exit 0 only if every case was a usage error, a typed refusal or success (never a traceback).
Runs in a throwaway state dir with no provider environment.
"""

from __future__ import annotations

import collections
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from cli_fuzz import ARGV, clean, run_case  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Run N cases (argv: [N]); the environment is the caller's again after. SystemExit(1)
    after printing when any case was a traceback or an unexpected exit."""
    n = int(argv[0]) if argv else 10_000
    saved = dict(os.environ)
    try:
        return _fuzz(n)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _fuzz(n: int) -> list[tuple[str, str, str]]:
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            del os.environ[name]
    root = Path(tempfile.mkdtemp(prefix="gpuops-fuzz-"))
    os.environ.update(
        GPUOPS_STATE=str(root / "state"), GPUOPS_OPERATOR="alice",
        XDG_STATE_HOME=str(root / "xdg"), HOME=str(root / "home"),
    )  # fmt: skip
    codes: collections.Counter[int] = collections.Counter()
    bad: list[tuple[list[str], int, str]] = []

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(argv=ARGV)
    def case(argv: list[str]) -> None:
        code, stderr = run_case(argv)
        codes[code] += 1
        if not clean(code, stderr):
            bad.append((argv, code, stderr[-400:]))

    started = time.perf_counter()
    try:
        case()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    took = time.perf_counter() - started
    total = sum(codes.values())
    print(f"cases {total} in {took:.1f} s ({total / took:.0f}/s); load {os.getloadavg()[0]:.2f}")
    for code, count in sorted(codes.items()):
        print(f"  exit {code}: {count}")
    print(f"tracebacks or unexpected exits: {len(bad)}")
    for argv, code, stderr in bad[:5]:
        print(f"  {argv!r} -> {code}: {stderr}")
    if bad or total < n:
        raise SystemExit(1)
    exits = ", ".join(f"{count} exit {code}" for code, count in sorted(codes.items()))
    return [(f"CLI fuzz {total:,} argv cases", f"{total / took:.0f}/s",
             f"0 tracebacks ({exits}); load {os.getloadavg()[0]:.2f}")]  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)
