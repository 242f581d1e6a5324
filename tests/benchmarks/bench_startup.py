"""Start-up benchmark: `gpuops --help`, `rules` and `boxes` against bare Python (DESIGN §4).

    python -m tests.benchmarks.bench_startup [--runs N] [--history N] [--recent N,M] [--baseline DIR]
        [--importtime]

Runs the installed `gpuops` entry point as a user would, interleaved with `python -c pass`
(round-robin, so load drift hits every case alike), and prints each case's median, its ratio to
the floor and the machine's load. `boxes` runs against an empty state, one with ``--history``
released rentals past the retention window, the same after `gpuops compact`, and states with
``--recent`` rentals released this week (within the retention window: nothing to compact). The first
`boxes` over the uncompacted history starts `gpuops compact` in the background (archive.due):
that run is timed on its own, once, and so is the compaction it started (waited for on its
lock); the interleaved runs that follow measure what every later listing costs. With
``--importtime``, the slowest imports of each command (`python -X importtime`) follow. With
``--baseline DIR`` (a copy of the code before a change, e.g. ``git archive``), every gpuops case
also runs as ``env PYTHONPATH=DIR ...`` in the same rounds: before and after, interleaved (the
baseline's figures carry `env`'s own exec, about a millisecond). A
figure, not a test: timed assertions flake on shared machines.

The package's bytecode is compiled first, as an install leaves it (pip compiles on install):
with ``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every run would recompile gpuops'
sources and the figure would measure the compiler, not the start-up a user sees.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks.common import ROOT, gpuops_argv, interleaved, load, median

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


def seed_recent(state: Path, rentals: int) -> None:
    """``rentals`` rentals released yesterday: history every listing reads, none of which
    `compact` may move yet (the first `boxes` starts no compaction)."""
    from tests.benchmarks.history import seed

    seed(str(state), rentals, recent=True)


def compile_package(package: Path = ROOT / "gpuops") -> None:
    """gpuops' bytecode, as `pip install` leaves it (see the module's docstring)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(package)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def first_run_s(argv: list[str], env: dict[str, str], state: Path) -> tuple[float, float]:
    """Wall seconds of the first `boxes` over old history, and until the compaction it
    started in the background has ended (its lock, in the state directory, is free)."""
    import fcntl

    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True, env={**os.environ, **env})
    listed = time.perf_counter() - start
    lock = os.open(state / "compact.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
    finally:
        os.close(lock)
    return listed, time.perf_counter() - start


def importtime(argv: list[str], env: dict[str, str]) -> list[tuple[int, str]]:
    """The slowest imports of ``argv`` (a case's command, a baseline's ``env PYTHONPATH=DIR``
    prefix kept: the entry script is run by path, so the baseline's package is the one
    imported, as in its timed runs; ``-m gpuops`` would import the working tree's)."""
    prefix = argv[:2] if argv[0] == "env" else []
    command = argv[len(prefix) :]
    if command[0] == sys.executable:  # no entry point: `python -m gpuops ...`
        command = command[1:]
    done = subprocess.run(
        [*prefix, sys.executable, "-X", "importtime", *command],
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
    parser.add_argument(
        "--recent",
        default="300,30000",
        help="comma-separated sizes of history released this week (default 300,30000; '' none)",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also time every gpuops case with the gpuops package under DIR first on the path "
        "(a checkout of the code before a change), interleaved with this one: A/B",
    )
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args(argv)
    gpuops = gpuops_argv()
    compile_package()
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
        first = None
        if args.history:
            first = first_run_s([*gpuops, "boxes", "--state", str(full)], env, full)
            label = f"gpuops boxes ({args.history} released, after the first)"
            cases[label] = [*gpuops, "boxes", "--state", str(full)]
            label = f"gpuops boxes ({args.history} released, compacted)"
            cases[label] = [*gpuops, "boxes", "--state", str(compacted)]
        for size in [int(n) for n in args.recent.split(",") if n.strip()]:
            recent = Path(tmp) / f"recent-{size}"
            seed_recent(recent, size)
            cases[f"gpuops boxes ({size} released this week)"] = [
                *gpuops,
                "boxes",
                "--state",
                str(recent),
            ]
        if args.baseline:
            # the same commands with the baseline's package first on the path, in the same rounds
            compile_package(Path(args.baseline) / "gpuops")
            for label, argv_ in list(cases.items()):
                if label.startswith("gpuops"):
                    cases[f"{label} [baseline]"] = ["env", f"PYTHONPATH={args.baseline}", *argv_]
        times = interleaved(cases, args.runs, env=env)
        floor = median(times["python -c pass"])
        print(f"start-up, {args.runs} interleaved runs each, {load()}")
        for label, values in times.items():
            ratio = median(values) / floor
            target = next((t for k, t in TARGETS.items() if k in label), None)
            goal = f"(target <= {target:g}x)" if target else ""
            print(f"  {label:<59} {median(values) * 1000:7.1f} ms  {ratio:5.1f}x floor {goal}")
            figure = f"{median(values) * 1000:.0f} ms, {ratio:.1f}x"
            rows.append((f"startup: {label}", figure, goal))
        if first is not None:
            label = f"gpuops boxes ({args.history} released), first run"
            note = f"once; the compaction it starts ends {first[1]:.1f} s after"
            print(f"  {label:<59} {first[0] * 1000:7.1f} ms  ({note})")
            rows.append((f"startup: {label}", f"{first[0] * 1000:.0f} ms", note))
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
