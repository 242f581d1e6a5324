"""Benchmark: `sweep` and `boxes` over an account with 1,000 instances on loopback FakeVast.

    .venv/bin/python tests/benchmarks/bench_sweep.py [--total 1000] [--ours 100] [--runs 3]

Prints wall-clock seconds per phase (median of runs). DESIGN §4: well under a minute.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scale_world import build  # noqa: E402

from gpuops.market.rent import sweep  # noqa: E402


def once(total: int, ours: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        account = build(Path(tmp), total, ours)
        built = time.perf_counter()
        try:
            listed = account.market.vast.list_instances()
            assert len(listed) == total
            after_list = time.perf_counter()
            rentals = account.market.rentals.all()
            pending = account.market.ledger.retry_list()
            assert len(rentals) == ours and not pending
            after_boxes = time.perf_counter()
            report = sweep(account.market)
            assert len(report.expired) == ours and len(report.unowned) == total - ours
            after_sweep = time.perf_counter()
        finally:
            account.close()
    return {
        "seed the fake": built - started,
        "list (paged v1)": after_list - built,
        "boxes (state reads)": after_boxes - after_list,
        "sweep": after_sweep - after_boxes,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--total", type=int, default=1000)
    parser.add_argument("--ours", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = [once(args.total, args.ours) for _ in range(args.runs)]
    print(
        f"{args.total} instances, {args.ours} of them ours and past their deadline; "
        f"median of {args.runs} runs"
    )
    for phase in runs[0]:
        values = [r[phase] for r in runs]
        print(f"  {phase:<22} {statistics.median(values):7.2f} s  (min {min(values):.2f})")


if __name__ == "__main__":
    main()
