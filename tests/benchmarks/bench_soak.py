"""Benchmark: the market soak at full size (M13, H5): faulty rent -> deadline lifecycles
through the real Market, adapter, guardian and sweep against FakeVast in-process.

    .venv/bin/python tests/benchmarks/bench_soak.py [--lifecycles 10000] [--seed 0] [--jobs 2]
        [--s3-every 20]

Every ``--s3-every``-th lifecycle (default 20; 0: none) runs over an S3 state (moto's server
behind a proxy that may lose one conditional write's answer), each host with its own client.

Prints lifecycles per second, the machine's load, and every count tests/soak.py keeps; exits 1
if any bad count (Tally.bad: leaked, wrong destroys, premature releases, exit 0 while billing,
early ends, results overwritten, a failed copy unheard, rentals left lying, ...) is not 0, or if
a rare path was never reached: each team path, a lost create, an unclear create recorded as
never found, an interrupt held around a create until its answer, a guardian's takeover, a sweep finishing a pending destroy, a guardian killed or
stopped during its copy, a results destination that refuses, a job's results delivered
(judged: never another incarnation's, never changed later), and rent killed right after each
ledger transition a rent writes (REACHED, KILL_POINTS).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from soak import Tally, run  # noqa: E402

CHUNK = 250
# Every count that must be above 0 in a full run, and every ledger transition rent must have
# been killed right after ("none": before its first write).
REACHED = ("kept", "killed", "interrupted", "interrupts_held", "guardians_killed",
           "guardians_terminated", "unguarded", "skewed_owners", "others_corrupt", "own_corrupt",
           "full_disks", "names_reused", "lost_creates", "never_found", "takeovers",
           "sweep_finished", "results_delivered", "killed_in_copy",
           "destinations_lost", "synced_rentals", "syncs_made")  # fmt: skip
KILL_POINTS = ("none", "None->intent", "intent->live", "intent->gone-confirmed",
               "live->destroying", "destroying->gone-confirmed",
               "gone-confirmed->released")  # fmt: skip


def _chunk(args: tuple[int, int, int]) -> Tally:
    count, seed, s3_every = args
    return run(count, seed, s3_every)[0]


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Run the soak; its figures as rows, or SystemExit(1) after printing when any is bad."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifecycles", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--s3-every", type=int, default=20)
    args = parser.parse_args(argv)
    chunks = [
        (min(CHUNK, args.lifecycles - start), args.seed * 100_000 + start // CHUNK, args.s3_every)
        for start in range(0, args.lifecycles, CHUNK)
    ]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    total = Tally()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for done, tally in enumerate(pool.map(_chunk, chunks), start=1):
            print(
                f"  chunk {done}/{len(chunks)}: {tally.lifecycles} lifecycles, {tally.bad()} bad",
                flush=True,
            )
            for f in fields(Tally):
                if f.name == "failures":
                    total.failures.extend(tally.failures)
                elif f.name == "kills_after":
                    total.kills_after.update(tally.kills_after)
                else:
                    setattr(total, f.name, getattr(total, f.name) + getattr(tally, f.name))
    wall = time.perf_counter() - started
    print(
        f"soak: {total.lifecycles} lifecycles in {wall:.1f} s "
        f"({total.lifecycles / wall:.1f}/s on {args.jobs} processes; "
        f"load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after)"
    )
    for name, value in asdict(total).items():
        if name not in ("failures", "kills_after"):
            print(f"  {name:<22} {value}")
    for point, count in sorted(total.kills_after.items()):
        print(f"  rent killed after {point:<28} {count}")
    for failure in total.failures[:10]:
        print(f"  FAILED {failure}")
    unreached = [n for n in REACHED if not getattr(total, n)]
    unreached += [f"a kill after {p}" for p in KILL_POINTS if not total.kills_after[p]]
    if unreached:
        print(f"  NEVER REACHED: {', '.join(unreached)}")
    if total.bad() or unreached:
        raise SystemExit(1)
    rate = total.lifecycles / wall
    return [(f"soak {total.lifecycles:,} lifecycles", f"{rate:.1f}/s",
             f"0 leaked, 0 wrong destroys, 0 premature, 0 exit-0 billing; {args.jobs} processes; "
             f"load {os.getloadavg()[0]:.2f}")]  # fmt: skip


if __name__ == "__main__":
    main()
    sys.exit(0)
