"""Lane command benchmark: store-only commands, and what a GCE-calling command adds.

    python tests/benchmarks/bench_lane.py [--runs N]

Runs the installed `gpuops` entry point, as a user would, against `gpuops fakes serve`
(loopback FakeGCE) with a local state store holding a claimed board. Runs are interleaved (one
of each case per round) so machine load hits every case alike; prints medians, min and max,
and the load average before and after. Cases:

- `python -c pass`                       the interpreter alone, for scale
- `lane board`                           reads the store only (no provider call, no SDK)
- `lane board` (no board: first look)    a fresh state each round: the instance is asked (L12)
                                         and the free board it proves is written
- `lane board` (no board: later looks)   the same state every round: the board the first wrote
- `lane board --history`                 the store's last 20 of HISTORY_ENTRIES entries
- `lane claim` (refused, L3)             reads the store only
- `lane board --live`                    + one instances.get, one status and one log read
- the imports of `board --live` alone    what the command adds over its calls

A figure, not a test: timed assertions flake on shared machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.common import gpuops_argv, load  # noqa: E402

HISTORY_ENTRIES = 600  # about a hundred jobs' transitions

IMPORTS = (
    "import gpuops.cli, gpuops.cli.lane, gpuops.lane.session, gpuops.providers.gce, "
    "gpuops.providers.gcs, requests, google.api_core.exceptions; "
    "from google.cloud import storage; from google.auth.credentials import AnonymousCredentials"
)


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args(argv).runs
    from gpuops.lane import board as b
    from gpuops.lane import history as h
    from gpuops.store import open_store
    from tests.test_fakes_serve import Served

    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        store = open_store(str(state))
        board = b.claim(b.Board("gpu-lane", "gpu-lane", 1.8e9), "alice", "portraits", 1.8e9)
        store.create("lane/gpu-lane/board", b.render(board, []).encode())
        for revision in range(1, HISTORY_ENTRIES + 1):
            past = b.Board("gpu-lane", "gpu-lane", 1.8e9, revision=revision)
            h.append(store, "gpu-lane", h.entry("claimed", "x", past, past, 1.8e9, "alice"))
        served = Served()
        fresh_states = (Path(tmp) / f"fresh-{n}" for n in range(1_000_000))
        looked = Path(tmp) / "looked"
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
            env.update(served.env, GPUOPS_STATE=str(state), XDG_STATE_HOME=tmp)
            # the installed entry point, as a user runs it (and as bench_startup times it)
            gpuops = [*gpuops_argv(), "--operator", "bob", "lane"]
            # label -> (argv, the exit codes it may end with, the state it reads each round)
            cases: dict[str, tuple[list[str], set[int], Callable[[], Path]]] = {
                "python -c pass": ([sys.executable, "-c", "pass"], {0}, lambda: state),
                "lane board": ([*gpuops, "board"], {0}, lambda: state),
                "lane board (no board: first look)": (
                    [*gpuops, "board"], {0}, lambda: next(fresh_states)
                ),
                "lane board (no board: later looks)": ([*gpuops, "board"], {0}, lambda: looked),
                "lane board --history": ([*gpuops, "board", "--history"], {0}, lambda: state),
                "lane claim (refused, L3)": ([*gpuops, "claim", "--job", "x"], {3}, lambda: state),
                "lane board --live": ([*gpuops, "board", "--live"], {0}, lambda: state),
                "imports of board --live": ([sys.executable, "-c", IMPORTS], {0}, lambda: state),
            }  # fmt: skip
            times: dict[str, list[float]] = {label: [] for label in cases}
            print(f"load average before: {os.getloadavg()}")
            for _ in range(runs):
                for label, (argv, ok, state_of) in cases.items():
                    run_env = {**env, "GPUOPS_STATE": str(state_of())}
                    start = time.perf_counter()
                    done = subprocess.run(
                        argv, env=run_env, cwd=ROOT, capture_output=True, check=False
                    )
                    times[label].append(time.perf_counter() - start)
                    if done.returncode not in ok:
                        print(f"{label}: exit {done.returncode}: {done.stderr.decode()[-400:]}")
                        raise SystemExit(1)
            print(f"load average after:  {os.getloadavg()}")
        finally:
            served.close()
    print(f"{'case':<36} {'median':>9} {'min':>9} {'max':>9}   ({runs} interleaved rounds)")
    rows = []
    for label, values in times.items():
        print(
            f"{label:<36} {statistics.median(values):8.3f}s {min(values):8.3f}s {max(values):8.3f}s"
        )
        rows.append((f"lane: {label}", f"{statistics.median(values):.3f} s median",
                     f"{runs} interleaved rounds; {load()}"))  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
