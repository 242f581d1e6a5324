"""Offers benchmark: `gpuops offers` against `gpuops fakes serve`, with 0 and 1,000,000 events.

    python -m tests.benchmarks.bench_offers [--events N] [--runs N]

`offers` ranks by per-machine pass rates from the index in the state store (folded from the
event log by offset), so its cost should not grow with the log. Two state directories, one
with an empty log and one with ``--events`` logged (written as bench_stats does), are run
interleaved through the installed entry point against one loopback fake, with the vastai
CLI's own `vastai search offers` against the same fake beside them (the target: at most half
its time). The first call on the long log, which folds it into the index once, is timed on
its own. Load is printed.
"""

from __future__ import annotations

import argparse
import os
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tests.benchmarks.bench_stats import write_log
from tests.benchmarks.common import ROOT, gpuops_argv, interleaved, load, median, stop


def serve(extra: list[str] | None = None) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """`gpuops fakes serve` on loopback, and the environment its export lines give."""
    proc = subprocess.Popen(
        [*gpuops_argv(), "fakes", "serve", *(extra or [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or []], daemon=True).start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
    while "GPUOPS_SSH_KEY" not in env:
        words = shlex.split(lines.get(timeout=60))
        name, _, value = words[1].partition("=")
        env[name] = value
    return proc, env


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    proc, env = serve()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            empty, full = Path(tmp) / "empty", Path(tmp) / "full"
            for state in (empty, full):
                state.mkdir(mode=0o700)
            write_log(full / "events.jsonl", args.events)
            env["GPUOPS_OPERATOR"] = "bench@host"
            offers = [*gpuops_argv(), "offers", "--gpu", "RTX 4090", "--state"]
            start = time.perf_counter()
            subprocess.run([*offers, str(full)], env=env, check=True, stdout=subprocess.DEVNULL)
            first = time.perf_counter() - start
            vastai = [str(Path(sys.executable).with_name("vastai")), "--url", env["VAST_URL"],
                      "--api-key", env["VAST_API_KEY"], "search", "offers", "gpu_name=RTX_4090"]  # fmt: skip
            cases = {
                "offers, 0 events": [*offers, str(empty)],
                f"offers, {args.events:,} events": [*offers, str(full)],
                "vastai search offers": vastai,
            }
            times = interleaved(cases, args.runs, env=env)
    finally:
        stop(proc)
    print(f"offers against the loopback fake, {args.runs} interleaved runs each, {load()}")
    print(f"  first call on {args.events:,} events (folds the log into the index once): "
          f"{first:.2f} s")  # fmt: skip
    rows = [(f"offers: first call, {args.events:,} events (index built)", f"{first:.2f} s", "")]
    base = median(times["offers, 0 events"])
    sdk = median(times["vastai search offers"])
    for label, values in times.items():
        ratio, versus = median(values) / base, median(values) / sdk
        print(f"  {label:<28} {median(values) * 1000:7.0f} ms  {ratio:4.2f}x the 0-event case,"
              f" {versus:4.2f}x vastai search offers")  # fmt: skip
        rows.append((label, f"{median(values) * 1000:.0f} ms",
                     f"{ratio:.2f}x 0 events; {versus:.2f}x vastai (target <= 0.5x)"))  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
