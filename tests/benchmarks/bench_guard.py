"""Benchmark: how far from its deadline each box is confirmed gone by its detached guardian.

    python -m tests.benchmarks.bench_guard [--boxes 5] [--hours 0.01] [--scale 1]

Starts `gpuops fakes serve` with one healthy offer per box, rents BOXES boxes with `gpuops
rent` (each starts its guardian), runs a job on each that writes results, and waits for every
guardian to confirm its box gone. Prints, per box, the deadline, the confirmed-gone time and
the delay (negative: before the deadline, as the copy-then-destroy schedule intends), read from
the event log. ``--scale`` is GPUOPS_TIME_SCALE (1: the real lease durations). Every
guardian it started (their pids from the guard.start events) and the fakes are ended before it
returns, whatever happened.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from test_guard_process import Fakes, _guardian_pids, _kill  # noqa: E402

from tests.benchmarks.common import load  # noqa: E402


def offers(boxes: int) -> list[dict[str, object]]:
    """One healthy offer per box: a rental takes its offer off the market."""
    return [
        {"id": 900 + i, "machine_id": 70 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
         "dph_total": 0.30 + i / 100, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}
        for i in range(boxes)
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxes", type=int, default=5)
    parser.add_argument("--hours", type=float, default=0.01)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fakes = Fakes(Path(tmp), offers=offers(args.boxes))
        fakes.env["GPUOPS_TIME_SCALE"] = str(args.scale)
        try:
            names = [f"bench-{i}" for i in range(args.boxes)]
            for name in names:
                fakes.gpuops("rent", name, "--gpu", "RTX 4090", "--hours", str(args.hours),
                             "--race", "1")  # fmt: skip
                fakes.gpuops("run", name, "--", "mkdir -p results && head -c 1000000 "
                             "/dev/urandom > results/ckpt.bin")  # fmt: skip
            limit = args.hours * 3600 + 180
            fakes.wait_for(
                "every box confirmed gone",
                lambda: len(fakes.events("guard.confirmed_gone")) == len(names),
                limit_s=limit,
            )
            gone = sorted(fakes.events("guard.confirmed_gone"), key=lambda e: e["name"])
            copies = {e["name"]: e for e in fakes.events("guard.copy")}
            print(f"{len(names)} boxes, --hours {args.hours} ({args.hours * 3600:.0f} s), "
                  f"guardian time scale {args.scale:g}")  # fmt: skip
            print(f"{'box':<10} {'deadline':<26} {'confirmed gone':<28} {'delay':>8}  copy")
            for e in gone:
                copy = copies.get(e["name"], {})
                print(f"{e['name']:<10} {e['deadline']:<26} {e['ts']:<28} "
                      f"{e['delay_s']:+7.1f}s  {copy.get('detail', '-')[:40]} "
                      f"({copy.get('seconds', 0):.2f} s)")  # fmt: skip
            delays = [e["delay_s"] for e in gone]
            print(
                f"delay median {statistics.median(delays):+.1f} s, "
                f"min {min(delays):+.1f} s, max {max(delays):+.1f} s"
            )
            left = len(fakes.live_instances())
            print(f"left on the account: {left}  ({load()})")
            figure = f"median {statistics.median(delays):+.1f} s, max {max(delays):+.1f} s"
            what = f"guard: {len(names)} boxes, gone vs deadline"
            return [(what, figure, f"{left} left on the account")]
        finally:
            for pid in _guardian_pids(fakes):
                _kill(pid)
            fakes.proc.terminate()
            fakes.proc.wait()


if __name__ == "__main__":
    main()
