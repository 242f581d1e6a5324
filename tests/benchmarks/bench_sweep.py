"""Benchmark: `gpuops sweep` through the installed CLI against `gpuops fakes serve`.

    python -m tests.benchmarks.bench_sweep [--sizes 100:10,1000:100,5000:500] [--lag 3]

For each size TOTAL:OURS, a scenario with TOTAL offers and a destroy lag of ``--lag`` seconds
(the fake keeps showing a destroyed box that long; the fake runs at real time) is served on
loopback by `gpuops fakes serve`. Set-up, not timed: TOTAL boxes are created over that HTTP
API with the real adapter (OURS of them labelled with our intents, written to a fresh state
directory as live rentals past their deadline; the rest labelled as someone else's). Timed:
one `gpuops --json sweep` process, which must destroy and confirm every box of ours and report
every other one, untouched. Prints seconds per size, milliseconds per expired box (flat when
the sweep grows linearly), the CPU seconds the sweep process and the fake each spent (the fake
rewrites its whole box table on every destroy, so at large sizes much of the wall time is the
fake's), and the load; ends the fake it started.
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
from pathlib import Path

from tests.benchmarks.bench_offers import serve
from tests.benchmarks.common import gpuops_argv, load, stop

OPERATOR = "bench@host"


def scenario(total: int, lag_s: float) -> dict[str, object]:
    offers = [
        {"id": 5000 + i, "machine_id": 9000 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
         "dph_total": 0.3, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}
        for i in range(total)
    ]  # fmt: skip
    return {"vast": {"api_key": "k-sweep", "offers": offers, "destroy_lag_s": lag_s}}


def seed(state: Path, env: dict[str, str], total: int, ours: int) -> None:
    """Create every box over the fake's HTTP API; record ours as expired live rentals."""
    from gpuops.events import EventLog
    from gpuops.ledger import Ledger, utc_iso
    from gpuops.market.rentals import LIVE, Rentals, box_name
    from gpuops.market.teardown import label_for
    from gpuops.providers.vast import VastAdapter
    from gpuops.store.local import LocalStore

    vast = VastAdapter(api_key=env["VAST_API_KEY"], base_url=env["VAST_URL"])
    store = LocalStore(state)
    ledger = Ledger(store, EventLog(state / "seed-events.jsonl", OPERATOR), OPERATOR)
    rentals = Rentals(store, OPERATOR)
    past = time.time() - 3600.0

    def make(i: int) -> None:
        offer_id = 5000 + i
        if i >= ours:
            vast.create(offer_id, label=f"someone-else-{i}", image="x", disk_gb=10.0)
            return
        name = f"sweep-{i}"
        rental = rentals.begin_race(name)
        box = box_name(name, rental.race, 0)
        record, _ = ledger.record_intent(box, "vast", deadline_at=utc_iso(past))
        made = vast.create(offer_id, label=label_for(record.intent_id), image="x", disk_gb=10.0)
        ledger.mark_live(box, made)
        rentals.update(
            name, state=LIVE, box=box, instance_id=made, offer_id=offer_id,
            started_at=past - 3600.0, deadline_at=past, dph_total=0.3,
        )  # fmt: skip

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(make, range(total)))


def once(total: int, ours: int, lag_s: float) -> tuple[float, dict[str, list[object]]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scenario.json"  # JSON is YAML
        path.write_text(json.dumps(scenario(total, lag_s)))
        proc, env = serve(["--scenario", str(path)])
        try:
            state = Path(tmp) / "state"
            state.mkdir(mode=0o700)
            env["GPUOPS_OPERATOR"] = OPERATOR
            env["GPUOPS_EVENTS"] = str(state / "events.jsonl")
            seed(state, env, total, ours)
            fake_cpu = cpu_s(proc.pid)
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [*gpuops_argv(), "--json", "sweep", "--state", str(state)],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            took = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = {
                "sweep": after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime,
                "fake": cpu_s(proc.pid) - fake_cpu,
            }
        finally:
            stop(proc)
    if done.returncode != 0:
        raise SystemExit(f"sweep exited {done.returncode}: {done.stderr[-2000:]}")
    return took, cpu, json.loads(done.stdout)


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
    print(f"gpuops sweep via the CLI against gpuops fakes serve, destroy lag {args.lag:g} s")
    for size in args.sizes.split(","):
        total, ours = (int(x) for x in size.split(":"))
        took, cpu, report = once(total, ours, args.lag)
        gone = sum(1 for o in report["expired"] if o["ending"] == "gone")  # type: ignore[index]
        assert gone == ours and len(report["unowned"]) == total - ours, (gone, report["unowned"])
        per = took / ours * 1000
        print(f"  {total:>6,} instances, {ours:>4} ours expired: {took:6.2f} s "
              f"({per:5.1f} ms per expired box); CPU: gpuops sweep {cpu['sweep']:.1f} s, "
              f"the fake {cpu['fake']:.1f} s; {load()}")  # fmt: skip
        rows.append((f"sweep {total:,} / {ours} ours expired", f"{took:.2f} s",
                     f"< 30 s at 5,000/500; {per:.1f} ms per box"))  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
