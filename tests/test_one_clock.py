"""One clock: time is read and waited on through gpuops/clock.py's ``Clock``.

A scan of gpuops/ for direct reads of the system clock (``time.time``, ``time.monotonic``,
``time.sleep``, ``time.perf_counter``, ``datetime.now``, ``datetime.utcnow``) and for a
parameter that takes time as a bare callable (``clock: Callable[...]``) instead of a Clock.
clock.py is the one place allowed both. ``LEFT`` would list, per file, reads not yet moved onto
a Clock; it is empty: a new one anywhere fails here.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gpuops"
READS = {("time", "time"), ("time", "monotonic"), ("time", "sleep"), ("time", "perf_counter"),
         ("datetime", "now"), ("datetime", "utcnow")}  # fmt: skip

# Every read is on a Clock now: a new one anywhere fails here. (An entry per file would list
# the reads not yet moved, as this list did until the demo's waits and the alarms' flush moved.)
LEFT: dict[str, int] = {}


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


# The one time-scale mechanism: a faster clock (settings.clock()), and nothing else. These may
# read the scale: clock.py and settings.py build the clock, and the demo chooses its world's
# scale and says it in its story.
SCALE_OK = {"gpuops/clock.py", "gpuops/settings.py", "gpuops/demo/market.py"}


def scale_reads(source: str) -> int:
    """Reads of a time scale: a ``.factor``, a ``.time_scale`` or a ``time_factor``."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            found += node.attr in ("factor", "time_scale", "time_factor")
        elif isinstance(node, ast.Name):
            found += node.id == "time_factor"
    return found


def test_no_module_divides_by_the_time_scale_the_clock_alone_runs_faster():
    """Under GPUOPS_TIME_SCALE every duration passes faster because the clock does; a module
    that read the scale itself (to divide a lease or a wait by it) would be a second mechanism."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in SCALE_OK and (count := scale_reads(path.read_text())):
            found[rel] = count
    assert found == {}


def test_the_scale_scan_sees_each_way_of_reading_the_scale():
    assert scale_reads("k = clock.factor\nj = settings.time_scale\n") == 2
    assert scale_reads("k = settings.time_factor()\nk = time_factor\n") == 2
    assert scale_reads("k = factor\nscale_of(clock)\n") == 0
