"""Wire fuzz at scale: N fuzzed cases per adapter (default 10,000), counts by outcome.

    .venv/bin/python -m tests.benchmarks.bench_wire_fuzz [N] [--providers vast,gce,gcs]

Each case is one adapter call (tests/wire_fuzz.py's CALLS) against a list of fuzzed wire
answers served through ``responses``: valid (the call returned), typed (a gpuops error),
escaped (any other exception) or late (it waited longer than the call may, on its clock).
``time.sleep`` and ``time.monotonic`` are replaced by a virtual clock for the whole run, so a
client that retries on its own (an older checkout's storage library) is judged on the time it
would have waited, not made to wait it. Exit 0 only if nothing escaped or was late and every
adapter ran N cases. ``python -m tests.benchmarks`` runs it too (``--quick``: 500 a piece).
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests import wire_fuzz  # noqa: E402


def _virtual_time() -> None:
    real_monotonic = time.monotonic

    def sleep(seconds: float) -> None:
        wire_fuzz.SLEPT_OUTSIDE[0] += max(0.0, float(seconds))

    def monotonic() -> float:
        return real_monotonic() + wire_fuzz.SLEPT_OUTSIDE[0]

    time.sleep = sleep
    time.monotonic = monotonic


def run(provider: str, n: int, root: Path) -> tuple[collections.Counter[str], list[str], float]:
    counts: collections.Counter[str] = collections.Counter()
    escaped: collections.Counter[str] = collections.Counter()

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(call=st.sampled_from(sorted(wire_fuzz.CALLS[provider])),
           served=wire_fuzz.answers(provider))  # fmt: skip
    def case(call: str, served: list[wire_fuzz.Answer]) -> None:
        outcome = wire_fuzz.run_case(provider, call, served, root / f"{provider}.jsonl")
        counts[outcome.verdict] += 1
        if outcome.verdict in ("escaped", "late"):
            escaped[f"{call}: {outcome.verdict} {type(outcome.error).__name__}"] += 1

    started = time.perf_counter()
    case()
    took = time.perf_counter() - started
    return counts, [f"{k} x{v}" for k, v in escaped.most_common(8)], took


def main(argv: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Rows for ``python -m tests.benchmarks``: one per adapter."""
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv and not argv[0].startswith("-") else 10_000
    providers = list(wire_fuzz.PROVIDERS)
    if "--providers" in argv:
        providers = argv[argv.index("--providers") + 1].split(",")
    _virtual_time()  # for the rest of this process: the benchmark runner runs it last
    root = Path(tempfile.mkdtemp(prefix="gpuops-wire-fuzz-"))
    rows = []
    for provider in providers:
        counts, worst, took = run(provider, n, root)
        total = sum(counts.values())
        bad = counts["escaped"] + counts["late"]
        print(
            f"{provider}: {total} cases in {took:.1f} s; valid {counts['valid']}, typed "
            f"{counts['typed']}, escaped {counts['escaped']}, late {counts['late']}; "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        for line in worst:
            print(f"    {line}")
        verdict = "ok" if bad == 0 and total >= n else "FAILED"
        rows.append(
            (f"wire fuzz {provider}", f"{bad} of {total} untyped/late", f"target 0 ({verdict})")
        )
    return rows


if __name__ == "__main__":
    found = main()
    sys.exit(0 if all(note.endswith("(ok)") for _, _, note in found) else 1)
