"""One writer and one parser of stored instants: a scan of gpuops/ for any other.

Kept apart from tests/test_timestamps.py, which pins the module itself under the mutation gate
(whose copy of gpuops/ is rewritten by mutmut, so a scan there would count its trampolines)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Text an instant is written as, or read back from, outside gpuops/timestamps.py. What is left:
# a provider's own wire form (the adapters read it), a user's command-line input, a calendar day
# (no instant), file and key names made from a time, and human-facing report text.
ALLOWED = {
    "gpuops/providers/gcs.py": 1,  # GCS's own `updated` field
    "gpuops/cli/guard.py": 1,  # --deadline as the user typed it (its zone required)
    "gpuops/cli/learn.py": 1,  # --since as the user typed it (a day or a time)
    "gpuops/register.py": 3,  # incident dates: calendar days
    "gpuops/record.py": 3,  # a recording's file name and day
    "gpuops/record_gce.py": 2,
    "gpuops/market/drill.py": 2,  # a drill's key and day
    "gpuops/market/cost.py": 2,  # a cost period's label
    "gpuops/archive.py": 1,  # an archive's month
    "gpuops/analysis/page.py": 1,  # the report's human text
    "gpuops/analysis/report.py": 1,
    "gpuops/providers/__init__.py": 1,  # a recording's date
    "gpuops/events.py": 2,  # the event log's strictly increasing stamp (FORMAT) and a day's text
}
TIME_TEXT = {"fromisoformat", "isoformat", "strftime", "strptime"}


def _uses(path: Path) -> int:
    tree = ast.parse(path.read_text())
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in TIME_TEXT
    )


def test_stamps_are_written_and_parsed_only_by_the_one_module():
    """A new strftime/isoformat/fromisoformat anywhere in gpuops/ fails here: write stamps with
    timestamps.utc_iso and read them with timestamps.epoch_of. Removing one shrinks the list."""
    found = {}
    for path in sorted((ROOT / "gpuops").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "gpuops/timestamps.py":
            continue
        n = _uses(path)
        if n:
            found[rel] = n
    assert found == ALLOWED
