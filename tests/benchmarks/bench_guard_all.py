"""Benchmark: the memory of one guardian service (`gpuops guard --all`) guarding many rentals,
beside one single guardian's (`gpuops guard NAME --foreground`).

    python -m tests.benchmarks.bench_guard_all [--rentals 500] [--hold 10]

Starts `gpuops fakes serve`, writes RENTALS live rentals (half alice's, half bob's, each with
its live ledger record and a deadline an hour away) into a local state, starts `gpuops guard
--all` on the real lease durations, waits until it has taken every rental's lease (the
guard.lease.taken events), then samples its VmRSS (/proc/PID/status) and CPU for ``--hold``
seconds. Then, with the service stopped (SIGTERM: it must exit 143), one single guardian of
one of those rentals, measured the same way. The rentals' boxes are records only: a guardian
asks the provider nothing until its rental's copy time, an hour away, so the figure is the
guardians' own. Every process it started is ended before it returns.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from test_guard_process import Fakes  # noqa: E402

from gpuops.ledger import BoxState, Record, encode  # noqa: E402
from gpuops.market import rentals  # noqa: E402
from gpuops.store.local import LocalStore  # noqa: E402
from tests.benchmarks.common import ROOT, end_leftovers, load, stop  # noqa: E402

# this checkout's gpuops (the installed entry point may be another checkout's)
GPUOPS = [sys.executable, "-m", "gpuops"]


def write_state(store: LocalStore, count: int, now: float) -> list[str]:
    names = []
    for i in range(count):
        name, owner = f"r{i:04d}", ("alice", "bob")[i % 2]
        box = rentals.box_name(name, 1, 0)
        rental = rentals.Rental(
            name, owner, rentals.LIVE, 1, box=box, instance_id=str(50_000 + i),
            started_at=now, deadline_at=now + 3600.0, rental_id=f"id{i:04d}",
        )  # fmt: skip
        record = Record(
            box, owner, BoxState.LIVE, f"intent{i:04d}", "vast", 3,
            "2026-01-01T00:00:00+00:00", instance_id=str(50_000 + i),
        )  # fmt: skip
        store.create(f"market/rentals/{name}", rentals.CODEC.encode(rental))
        store.create(f"ledger/boxes/{box}", encode(record))
        names.append(name)
    return names


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def taken(fakes: Fakes) -> int:
    return len({e["name"] for e in fakes.events("guard.lease.taken")})


def measure(proc: subprocess.Popen[bytes], hold_s: float) -> tuple[int, float]:
    """Peak VmRSS (KiB) over ``hold_s`` seconds, and CPU seconds per second meanwhile."""
    start_cpu, start, peak = cpu_s(proc.pid), time.monotonic(), 0
    while time.monotonic() - start < hold_s:
        peak = max(peak, rss_kib(proc.pid))
        time.sleep(0.5)
    return peak, (cpu_s(proc.pid) - start_cpu) / (time.monotonic() - start)


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rentals", type=int, default=500)
    parser.add_argument("--hold", type=float, default=10.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fakes = Fakes(Path(tmp))
        del fakes.env["GPUOPS_TIME_SCALE"]  # the real lease durations
        procs: list[subprocess.Popen[bytes]] = []
        try:
            fakes.state.mkdir(mode=0o700, exist_ok=True)
            names = write_state(LocalStore(str(fakes.state)), args.rentals, time.time())
            log = open(Path(tmp) / "all.log", "wb")  # noqa: SIM115
            began = time.monotonic()
            service = subprocess.Popen(
                [*GPUOPS, "guard", "--all"], env=fakes.env, stdout=log, stderr=log, cwd=ROOT
            )
            procs.append(service)
            fakes.wait_for("every lease taken", lambda: taken(fakes) == len(names), 600)
            ready_s = time.monotonic() - began
            all_kib, all_cpu = measure(service, args.hold)
            service.send_signal(signal.SIGTERM)
            code = service.wait(timeout=60)
            assert code == 128 + signal.SIGTERM, f"guard --all exited {code} on SIGTERM"

            single = subprocess.Popen(
                [*GPUOPS, "--operator", "alice", "guard", names[0], "--foreground"],
                env=fakes.env, stdout=log, stderr=log, cwd=ROOT,
            )  # fmt: skip
            procs.append(single)
            before = len(fakes.events("guard.lease.taken"))
            fakes.wait_for(
                "the single guardian's lease",
                lambda: len(fakes.events("guard.lease.taken")) > before,
                60,
            )
            one_kib, one_cpu = measure(single, args.hold)
            stop(single)
            n = len(names)
            print(f"{n} live rentals, real lease durations, {args.hold:g} s sampled ({load()})")
            print(f"guard --all: VmRSS {all_kib / 1024:.1f} MiB (peak), {all_cpu:.3f} CPU s/s, "
                  f"every lease taken {ready_s:.1f} s after start")  # fmt: skip
            print(f"one single guardian: VmRSS {one_kib / 1024:.1f} MiB, {one_cpu:.3f} CPU s/s; "
                  f"{n} of them: about {n * one_kib / 1024 / 1024:.1f} GiB")  # fmt: skip
            return [
                (
                    f"guard --all: {n} rentals",
                    f"{all_kib / 1024:.1f} MiB RSS",
                    f"single guardian {one_kib / 1024:.1f} MiB each "
                    f"(x{n}: {n * one_kib / 1024 / 1024:.1f} GiB)",
                )
            ]
        finally:
            for proc in procs:
                stop(proc)
            fakes.proc.terminate()
            fakes.proc.wait()
            left = end_leftovers()
            if left:
                print("left behind (ended now):", *left, sep="\n  ")


if __name__ == "__main__":
    main()
