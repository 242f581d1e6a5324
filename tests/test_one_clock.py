"""One clock: time is read and waited on through gpuops/clock.py's ``Clock``.

A scan of gpuops/ for direct reads of the system clock (``time.time``, ``time.monotonic``,
``time.sleep``, ``time.perf_counter``, ``datetime.now``, ``datetime.utcnow``) and for a
parameter that takes time as a bare callable (``clock: Callable[...]``) instead of a Clock.
clock.py is the one place allowed both. ``LEFT`` lists, per file, the reads not yet moved onto
a Clock: a new one anywhere fails here, and so does moving one without shrinking the list.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpuops"
READS = {("time", "time"), ("time", "monotonic"), ("time", "sleep"), ("time", "perf_counter"),
         ("datetime", "now"), ("datetime", "utcnow")}  # fmt: skip

# Not yet on a Clock: the CLI's and the demo's own waits, the spawn and lock polls, and the
# callers that still hand a (clock, sleep) pair down.
LEFT: dict[str, int] = {
    "gpuops/alarms.py": 2,
    "gpuops/check.py": 1,
    "gpuops/cli/guard.py": 3,
    "gpuops/cli/market.py": 3,
    "gpuops/demo/__init__.py": 5,
    "gpuops/demo/lane.py": 3,
    "gpuops/demo/market.py": 6,
    "gpuops/market/jobs.py": 4,
    "gpuops/market/session.py": 3,
    "gpuops/market/spawn.py": 3,
    "gpuops/progress.py": 1,
    "gpuops/providers/vast_client.py": 1,
    "gpuops/store/local.py": 3,
    "gpuops/store/s3.py": 1,
}


def _bare_clock(node: ast.arg) -> bool:
    """A parameter named like a clock whose annotation is a bare callable."""
    if node.annotation is None or "clock" not in node.arg and "monotonic" not in node.arg:
        return False
    return "Callable" in ast.unparse(node.annotation)


def time_reads(source: str) -> int:
    """How many direct system-clock reads and bare-callable clock parameters ``source`` has."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found += (node.value.id, node.attr) in READS
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            found += sum(alias.name in {name for _, name in READS} for alias in node.names)
        elif isinstance(node, ast.arg):
            found += _bare_clock(node)
    return found


def test_time_is_read_only_through_a_clock_outside_what_is_left():
    found = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != "gpuops/clock.py":
            count = time_reads(path.read_text())
            if count:
                found[rel] = count
    assert dict(found) == LEFT


def test_the_scan_sees_each_way_of_reading_the_clock():
    assert time_reads("import time\nt = time.time()\n") == 1
    assert time_reads("import time\ntime.sleep(1)\nx = time.monotonic\n") == 2
    assert time_reads("from time import monotonic, sleep\n") == 2
    assert time_reads("from datetime import datetime\nnow = datetime.now()\n") == 1
    assert time_reads("def f(clock: Callable[[], float]) -> None: ...\n") == 1
    assert time_reads("def f(clock: Clock = SYSTEM) -> None: ...\n") == 0
    assert time_reads("def f(callback: Callable[[], float]) -> None: ...\n") == 0
    assert time_reads("import time\nt = time.strftime('%Y')\n") == 0
