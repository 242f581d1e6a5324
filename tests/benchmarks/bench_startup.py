"""Start-up benchmark: median wall time of `gpuops --help` and `gpuops rules` (DESIGN §4).

    python tests/benchmarks/bench_startup.py [--runs N]

Prints one line per command with the median and the spread over N runs, beside bare
`python -c pass` for scale. A figure, not a test: timed assertions flake on shared machines.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def measure(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    entry = shutil.which("gpuops")
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -m gpuops --help": [sys.executable, "-m", "gpuops", "--help"],
        "python -m gpuops rules": [sys.executable, "-m", "gpuops", "rules"],
    }
    if entry:
        cases["gpuops --help (entry point)"] = [entry, "--help"]
        cases["gpuops rules (entry point)"] = [entry, "rules"]
    print(f"{'command':<30} {'median':>9} {'min':>9} {'max':>9}   ({runs} runs each)")
    for label, argv in cases.items():
        times = measure(argv, runs)
        print(f"{label:<30} {statistics.median(times):8.4f}s {min(times):8.4f}s {max(times):8.4f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
