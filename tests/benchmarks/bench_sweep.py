"""Benchmark: `gpuops sweep` through the installed CLI against `gpuops fakes serve`.

    python -m tests.benchmarks.bench_sweep [--sizes 100:10,1000:100,5000:500] [--lag 3]

For each size TOTAL:OURS, an account of TOTAL running instances, OURS of them ours and past
their deadline, is served on loopback by `gpuops fakes serve` with a destroy lag of ``--lag``
seconds (show and list keep reporting a destroyed box that long; the fake runs at real time).
Set-up, not timed: OURS expired live rentals are written to a fresh state directory with the
real ledger (one intent label each), and the instances are the scenario's ``vast.instances``
(docs/fakes.md), running when the fake starts: ours spread evenly among the others, labelled
with our intents, the rest as someone else's. No create goes over HTTP, so 5,000 instances
are set up in seconds. Timed: one `gpuops --json sweep` process, which must destroy and
confirm every box of ours and report every other one, untouched.

The lag: Vast documents none. The one public report (provider-formats A.7) says show "can
still briefly show the row" after a DELETE; 3 s stands for "briefly", an assumption, and the
confirm loop polls every ``timing.DESTROY_CONFIRM_POLL_S`` (5 s), so any lag under that costs
one poll. Prints set-up and sweep seconds per size, milliseconds per expired box (flat when the
sweep grows linearly), the provider calls the sweep made (by kind, from its event log), the
CPU seconds the sweep process and the fake each spent, and the load; ends the fake it started.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.benchmarks.bench_offers import serve
from tests.benchmarks.common import gpuops_argv, load, stop

OPERATOR = "bench@host"
FIRST_INSTANCE_ID = 7_000_001
FIRST_OFFER_ID = 5000


def ours_at(total: int, ours: int) -> list[int]:
    """Which of the TOTAL instances (by index) are ours: OURS of them, spread evenly."""
    return [i * total // ours for i in range(ours)] if ours else []


def scenario(total: int, labels: dict[int, str], lag_s: float) -> dict[str, object]:
    """TOTAL offers, each rented at start: by us where ``labels`` says, else by someone else."""
    offers = [
        {"id": FIRST_OFFER_ID + i, "machine_id": 9000 + i, "gpu_name": "RTX 4090",
         "gpu_ram": 24564, "dph_total": 0.3, "reliability": 0.995, "disk_bw": 2000.0,
         "fate": "healthy"}
        for i in range(total)
    ]  # fmt: skip
    instances = [
        {"offer": FIRST_OFFER_ID + i, "label": labels.get(i, f"someone-else-{i}")}
        for i in range(total)
    ]
    return {
        "vast": {
            "api_key": "k-sweep", "offers": offers, "instances": instances,
            "destroy_lag_s": lag_s, "first_instance_id": FIRST_INSTANCE_ID,
        }
    }  # fmt: skip


def seed(state: Path, total: int, ours: int) -> dict[int, str]:
    """Our expired live rentals in the state directory, through the real ledger; returns the
    label of each of our instances, by index (its instance id is FIRST_INSTANCE_ID + index)."""
    from gpuops.events import EventLog
    from gpuops.ledger import Ledger, utc_iso
    from gpuops.market.rentals import LIVE, Rentals, box_name
    from gpuops.market.teardown import label_for
    from gpuops.store.local import LocalStore

    store = LocalStore(state)
    ledger = Ledger(store, EventLog(state / "seed-events.jsonl", OPERATOR), OPERATOR)
    rentals = Rentals(store, OPERATOR)
    past = time.time() - 3600.0
    labels: dict[int, str] = {}

    def make(i: int) -> None:
        name = f"sweep-{i}"
        rental = rentals.begin_race(name)
        box = box_name(name, rental.race, 0)
        record, _ = ledger.record_intent(box, "vast", deadline_at=utc_iso(past))
        instance_id = str(FIRST_INSTANCE_ID + i)
        ledger.mark_live(box, instance_id)
        rentals.update(
            name, state=LIVE, box=box, instance_id=instance_id, offer_id=FIRST_OFFER_ID + i,
            started_at=past - 3600.0, deadline_at=past, dph_total=0.3,
        )  # fmt: skip
        labels[i] = label_for(record.intent_id)

    with ThreadPoolExecutor(max_workers=8) as pool:  # each record its own files: no contention
        list(pool.map(make, ours_at(total, ours)))
    return labels


def once(total: int, ours: int, lag_s: float) -> tuple[float, float, dict[str, float], Any, str]:
    """(set-up seconds, sweep seconds, CPU seconds, the sweep's JSON report, its calls and
    phases) for one size."""
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        state = Path(tmp) / "state"
        state.mkdir(mode=0o700)
        labels = seed(state, total, ours)
        path = Path(tmp) / "scenario.json"  # JSON is YAML
        path.write_text(json.dumps(scenario(total, labels, lag_s)))
        proc, env = serve(["--scenario", str(path)])
        try:
            setup_s = time.perf_counter() - began
            env["GPUOPS_OPERATOR"] = OPERATOR
            env["GPUOPS_EVENTS"] = str(state / "events.jsonl")
            fake_cpu = cpu_s(proc.pid)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            start, wall_start = time.perf_counter(), time.time()
            done = subprocess.run(
                [*gpuops_argv(), "--json", "sweep", "--state", str(state)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            took = time.perf_counter() - start
            phases = calls_and_phases(state / "events.jsonl", wall_start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = {
                "sweep": after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime,
                "fake": cpu_s(proc.pid) - fake_cpu,
            }
        finally:
            stop(proc)
    if done.returncode != 0:
        raise SystemExit(f"sweep exited {done.returncode}: {done.stderr[-2000:]}")
    return setup_s, took, cpu, json.loads(done.stdout), phases


def calls_and_phases(events: Path, began: float) -> str:
    """The sweep's provider calls by kind and where its time went, from its event log: until
    its first destroy (start-up, reading the ledger), the destroys and their confirmations
    (until the last release), settling the rentals (until the first list page was asked for),
    then listing the account, to the end of the sweep."""
    calls: dict[str, int] = {}
    first_destroy = last_release = first_list = last = began
    for line in events.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        at = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
        payload = event["payload"]
        last = max(last, at)
        if event["kind"] == "vast.call":
            op = payload["op"]
            calls[op] = calls.get(op, 0) + 1
            if op == "destroy" and first_destroy == began:
                first_destroy = at
            if op == "list_instances" and first_list == began:
                first_list = at - float(payload["duration_s"])
        elif event["kind"] == "ledger.transition" and payload["after"] == "released":
            last_release = at
    ops = ", ".join(f"{n} {op}" for op, n in sorted(calls.items()))
    return (
        f"calls: {ops}; to the first destroy {first_destroy - began:.1f} s, destroys and "
        f"confirmations {last_release - first_destroy:.1f} s, settling rentals "
        f"{first_list - last_release:.1f} s, listing {last - first_list:.1f} s"
    )


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a running process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100:10,1000:100,5000:500")
    parser.add_argument("--lag", type=float, default=3.0, help="destroy lag, seconds")
    args = parser.parse_args(argv)
    rows = []
    print(f"gpuops sweep via the CLI against gpuops fakes serve, destroy lag {args.lag:g} s "
          f"(an assumption: Vast documents none)")  # fmt: skip
    for size in args.sizes.split(","):
        total, ours = (int(x) for x in size.split(":"))
        setup_s, took, cpu, report, phases = once(total, ours, args.lag)
        gone = sum(1 for o in report["expired"] if o["ending"] == "gone")  # type: ignore[index]
        assert gone == ours and len(report["unowned"]) == total - ours, (gone, report["unowned"])
        per = took / ours * 1000
        print(f"  {total:>6,} instances, {ours:>4} ours expired: {took:6.2f} s "
              f"({per:5.1f} ms per expired box; set-up {setup_s:.1f} s); CPU: gpuops sweep "
              f"{cpu['sweep']:.1f} s, the fake {cpu['fake']:.1f} s; {load()}\n    {phases}")  # fmt: skip
        rows.append((f"sweep {total:,} / {ours} ours expired", f"{took:.2f} s",
                     f"< 30 s at 5,000/500; {per:.1f} ms per box; {load()}"))  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
