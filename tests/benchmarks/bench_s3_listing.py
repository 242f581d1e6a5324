"""`boxes` over an s3:// state with released history: what a team sharing one bucket pays.

    python -m tests.benchmarks.bench_s3_listing [--runs N] [--recent N,M] [--baseline DIR]

Starts the S3 stand-in (moto's server on loopback, fakes/s3.py), writes ``--recent`` rentals
released yesterday (each with its box record: history no compaction may move yet) under one
prefix per size, and runs the installed `gpuops boxes` over each, interleaved with `python -c
pass`:

- first listing: a fresh per-user directory each run, so no listing cache (a host's first
  `boxes`, or a new host);
- later listings: one per-user directory for every run (each command after the first);
- with ``--baseline DIR`` (a copy of the code before a change, e.g. ``git archive``), the same
  command as ``env PYTHONPATH=DIR ...`` in the same rounds.

Loopback answers a read in about a millisecond; S3 itself takes tens, so over a real bucket
every value read costs more than here, and a listing that reads none costs the same. A
figure, not a test: timed assertions flake on shared machines.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuops.store.s3 import S3Store
from tests.benchmarks.common import gpuops_argv, load, median


def seed(store: S3Store, rentals: int) -> None:
    """``rentals`` rentals released yesterday, each with its released box record."""
    from tests.benchmarks.history import DAY_S, released

    for key, data in released(rentals, time.time() - DAY_S):
        store.create(key, data)


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--recent", default="300", help="released rentals per state, N[,M...]")
    parser.add_argument("--baseline", type=Path, help="the code before a change, for A/B")
    args = parser.parse_args(argv)
    from fakes.s3 import serve_s3

    fake = serve_s3()
    os.environ.update(fake.exports())  # this process seeds the bucket with the same keys
    sizes = [int(n) for n in args.recent.split(",")]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")},
                **fake.exports(),
                "GPUOPS_OPERATOR": "bench@host",
            }
            cases: dict[str, tuple[list[str], dict[str, str] | None]] = {
                "python -c pass": ([sys.executable, "-c", "pass"], None)
            }
            fresh = (str(Path(tmp, f"fresh-{n}")) for n in range(1_000_000))
            for n in sizes:
                prefix = f"released-{n}"
                start = time.perf_counter()
                seed(S3Store(fake.bucket, prefix, endpoint=fake.url), n)
                print(f"seeded {n} released rentals in {time.perf_counter() - start:.1f} s")
                boxes = [*gpuops_argv(), "boxes", "--state", f"s3://{fake.bucket}/{prefix}"]
                kept = str(Path(tmp, f"kept-{n}"))
                cases[f"boxes, {n} released, first listing"] = (boxes, {"fresh": ""})
                cases[f"boxes, {n} released, later listings"] = (boxes, {"XDG_STATE_HOME": kept})
                if args.baseline is not None:
                    before = ["env", f"PYTHONPATH={args.baseline}", sys.executable, "-m", "gpuops"]
                    cases[f"boxes, {n} released, before the change"] = (
                        [*before, "boxes", "--state", f"s3://{fake.bucket}/{prefix}"],
                        {"fresh": ""},
                    )
                subprocess.run(boxes, env={**env, "XDG_STATE_HOME": kept}, check=True,
                               stdout=subprocess.DEVNULL)  # fmt: skip
            times: dict[str, list[float]] = {label: [] for label in cases}
            print(f"{load()} before")
            for _ in range(args.runs):
                for label, (command, extra) in cases.items():
                    run_env = dict(env)
                    if extra is not None and "fresh" in extra:
                        run_env["XDG_STATE_HOME"] = next(fresh)
                    elif extra is not None:
                        run_env.update(extra)
                    start = time.perf_counter()
                    subprocess.run(command, env=run_env, cwd=tmp, check=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
                    times[label].append(time.perf_counter() - start)
            print(f"{load()} after")
    finally:
        fake.close()
    floor = median(times["python -c pass"])
    print(f"`boxes` over s3:// (moto on loopback), {args.runs} interleaved runs each")
    rows = []
    for label, values in times.items():
        ms, ratio = median(values) * 1000, median(values) / floor
        print(f"  {label:<46} {ms:9.1f} ms  {ratio:6.1f}x floor")
        rows.append(
            (
                f"s3 state: {label}",
                f"{ms:.1f} ms ({ratio:.1f}x floor)",
                f"{args.runs} interleaved runs",
            )
        )
    return rows


if __name__ == "__main__":
    main()
