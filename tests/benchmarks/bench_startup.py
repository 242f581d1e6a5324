"""Start-up benchmark: `gpuops --help`, `rules` and `boxes` against bare Python (DESIGN §4).

    python -m tests.benchmarks.bench_startup [--runs N] [--history N] [--importtime]

Runs the installed `gpuops` entry point as a user would, interleaved with `python -c pass`
(round-robin, so load drift hits every case alike), and prints each case's median, its ratio to
the floor and the machine's load. `boxes` runs against an empty state, one with ``--history``
released rentals past the retention window, and the same after `gpuops compact`. With
``--importtime``, the slowest imports of each command (`python -X importtime`) follow. A
figure, not a test: timed assertions flake on shared machines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.benchmarks.common import gpuops_argv, interleaved, load, median

TARGETS = {"--help": 3.0, "rules": 5.0, "boxes": 5.0}


def seed_history(state: Path, rentals: int) -> Path:
    """``rentals`` released rentals past the retention window in ``state``, and a copy of it
    compacted by `gpuops compact` (returned), as a user's would be."""
    from tests.benchmarks.history import seed

    seed(str(state), rentals)
    compacted = state.with_name(state.name + "-compacted")
    shutil.copytree(state, compacted)
    subprocess.run(
        [*gpuops_argv(), "compact", "--state", str(compacted)],
        check=True,
        stdout=subprocess.DEVNULL,
        env={**os.environ, "GPUOPS_OPERATOR": "bench@host"},
    )
    return compacted


def importtime(argv: list[str], env: dict[str, str]) -> list[tuple[int, str]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpuops", *argv[1:]],
        capture_output=True,
        text=True,
        env=env,
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    return sorted(rows, reverse=True)[:8]


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--history", type=int, default=3000, help="released rentals (default 3000)")
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args(argv)
    gpuops = gpuops_argv()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        empty, full = Path(tmp) / "empty", Path(tmp) / "full"
        empty.mkdir(mode=0o700)
        compacted = seed_history(full, args.history) if args.history else full
        env = {"GPUOPS_OPERATOR": "bench@host", "VAST_API_KEY": "k-bench"}
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "gpuops --help": [*gpuops, "--help"],
            "gpuops rules": [*gpuops, "rules", "--state", str(empty)],
            "gpuops boxes (no history)": [*gpuops, "boxes", "--state", str(empty)],
        }
        if args.history:
            label = f"gpuops boxes ({args.history} released)"
            cases[label] = [*gpuops, "boxes", "--state", str(full)]
            label = f"gpuops boxes ({args.history} released, compacted)"
            cases[label] = [*gpuops, "boxes", "--state", str(compacted)]
        times = interleaved(cases, args.runs, env=env)
        floor = median(times["python -c pass"])
        print(f"start-up, {args.runs} interleaved runs each, {load()}")
        for label, values in times.items():
            ratio = median(values) / floor
            target = next((t for k, t in TARGETS.items() if k in label), None)
            goal = f"(target <= {target:g}x)" if target else ""
            print(f"  {label:<32} {median(values) * 1000:7.1f} ms  {ratio:5.1f}x floor {goal}")
            figure = f"{median(values) * 1000:.0f} ms, {ratio:.1f}x"
            rows.append((f"startup: {label}", figure, goal))
        if args.importtime:
            for label, argv_ in cases.items():
                if label.startswith("gpuops"):
                    print(f"  slowest imports of {label} (cumulative us):")
                    for us, name in importtime(argv_, {**os.environ, **env}):
                        print(f"    {us:>8}  {name}")
    print(f"  ({load()} at the end)")
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
