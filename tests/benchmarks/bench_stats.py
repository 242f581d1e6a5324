"""Stats benchmark: `gpuops stats --json` over a 1,000,000-event log (the design's quality bars).

    python -m tests.benchmarks.bench_stats [--events N] [--keep FILE]

Writes a synthetic log in EventLog's exact line layout with a realistic mix (each race: one
selection of 10 candidates, creates, provider calls, candidate progress, probes, ledger
transitions, a quarantine now and then; plus guardian and lane events), then runs the real CLI
on it in a child process and prints events/s and the child's peak resident memory. Peak memory
is measured for 1/10 of the events too: bounded memory means it barely moves.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def race(rng: random.Random, i: int) -> list[tuple[str, dict[str, object]]]:
    name = f"job-{i}"
    cands = [
        {
            "id": i * 10 + j,
            "machine_id": rng.randrange(5000),
            "dph_total": 0.3 + j / 100,
            "reliability": 0.99,
            "disk_bw": 900.0,
            "gpu_ram": 24564,
        }
        for j in range(10)
    ]
    picks = [
        {"id": c["id"], "rank": j, "propensity": 0.93, "explored": False}
        for j, c in enumerate(cands[:3])
    ]
    out: list[tuple[str, dict[str, object]]] = [
        (
            "market.selection",
            {
                "name": name,
                "gpu_name": "RTX 4090",
                "k": 3,
                "candidates": cands,
                "removed": [],
                "quarantined": 0,
                "picks": picks,
            },
        ),
    ]
    for slot, c in enumerate(cands[:3]):
        box, inst = f"{name}-0-{slot}", str(i * 10 + slot)
        outcome = rng.choice(("created", "created", "created", "taken", "rate-limited"))
        out.append(
            (
                "vast.call",
                {
                    "op": "create",
                    "method": "PUT",
                    "path": "/api/v0/asks/1/",
                    "status": 200,
                    "duration_s": 0.2,
                    "attempt": 0,
                    "error": None,
                },
            )
        )
        out.append(
            (
                "ledger.transition",
                {
                    "name": box,
                    "owner": "op",
                    "intent_id": "x",
                    "instance_id": None,
                    "before": None,
                    "after": "intent",
                    "revision": 1,
                    "error": None,
                },
            )
        )
        out.append(
            (
                "market.create",
                {
                    "name": name,
                    "offer_id": c["id"],
                    "machine_id": c["machine_id"],
                    "outcome": outcome,
                    "instance_id": inst if outcome == "created" else None,
                },
            )
        )
        out.append(
            ("market.candidate", {"name": name, "slot": slot, "offer_id": c["id"], "what": outcome})
        )
        if outcome != "created":
            continue
        for _ in range(3):
            out.append(
                (
                    "vast.call",
                    {
                        "op": "show",
                        "method": "GET",
                        "path": "/api/v0/instances/1/",
                        "status": 200,
                        "duration_s": 0.1,
                        "attempt": 0,
                        "error": None,
                    },
                )
            )
        verdict = rng.choice(("pass", "pass", "pass", "ssh-auth", "slow-disk"))
        out.append(
            (
                "market.probe",
                {
                    "name": name,
                    "offer_id": c["id"],
                    "machine_id": c["machine_id"],
                    "instance_id": inst,
                    "verdict": verdict,
                },
            )
        )
        out.append(
            (
                "ledger.transition",
                {
                    "name": box,
                    "owner": "op",
                    "intent_id": "x",
                    "instance_id": inst,
                    "before": "destroying",
                    "after": "gone-confirmed",
                    "revision": 4,
                    "error": None,
                },
            )
        )
    out.append(("market.rent.done", {"name": name, "instance_id": str(i * 10), "offer_id": i * 10}))
    if i % 20 == 0:
        out.append(
            (
                "guard.confirmed_gone",
                {
                    "name": name,
                    "instance_id": str(i * 10),
                    "deadline": "2026-07-18T00:00:00+00:00",
                    "delay_s": rng.uniform(-60, 120),
                },
            )
        )
        out.append(("lane.start", {"lane": "g2", "job": name, "attempt": 1, "outcome": "stockout"}))
        out.append(
            (
                "lane.job_end",
                {
                    "lane": "g2",
                    "job": name,
                    "attempts": 2,
                    "stockouts": 1,
                    "waiting_s": 600.0,
                    "running_s": 1200.0,
                    "cost_usd": 0.3,
                    "outcome": "succeeded",
                },
            )
        )
    return out


def write_log(path: Path, events: int) -> int:
    rng = random.Random(0)
    at = datetime(2026, 7, 18, tzinfo=UTC)
    written = i = 0
    with path.open("w") as f:
        while written < events:
            for kind, payload in race(rng, i):
                at += timedelta(seconds=1)
                line = {
                    "ts": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    "operator": "bench@host",
                    "kind": kind,
                    "payload": payload,
                }
                f.write(json.dumps(line, separators=(",", ":")) + "\n")
                written += 1
            i += 1
    return written


def run_stats(path: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of `gpuops stats --json` in a fresh child, run through
    the installed entry point as a user would."""
    from tests.benchmarks.common import gpuops_argv

    start = time.perf_counter()
    child = subprocess.run(
        [*gpuops_argv(), "stats", "--json", "--log", str(path)],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    wall = time.perf_counter() - start
    json.loads(child.stdout)
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    from tests.benchmarks.common import load

    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keep", metavar="FILE", help="write the log here and keep it")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (args.events // 10, args.events):
            path = Path(args.keep) if args.keep and n == args.events else Path(tmp) / f"{n}.jsonl"
            written = write_log(path, n)
            size_mb = path.stat().st_size / 1e6
            wall, rss = run_stats(path)  # RUSAGE_CHILDREN's max: the smaller run goes first
            print(
                f"{written:>9} events ({size_mb:.0f} MB): {wall:.2f} s, "
                f"{written / wall:,.0f} events/s, peak RSS {rss:.0f} MiB  ({load()})"
            )
            rows.append(
                (f"stats: {written:,} events", f"{wall:.2f} s, {rss:.0f} MiB", "< 3 s, < 150 MiB")
            )
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
