"""Streaming the JSONL event log fast: skip uninteresting lines without parsing them.

``gpuops stats`` must read 1,000,000 events in a few seconds in bounded memory. Almost every
line is written by ``EventLog.append`` in one layout (``{"ts":"...","operator":...,"kind":"...``),
so the kind and the timestamp can be read from the raw bytes and a line whose kind nobody
asked for is counted, not decoded. A line in any other layout takes the full parser in
events.py, which also judges torn and non-UTF-8 lines (they are counted, never fatal).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gpuops.errors import UsageError
from gpuops.events import BadLine, _parse_line

_TS_HEAD = b'{"ts":"'
_TS_END = len(_TS_HEAD) + len("2026-07-18T00:00:00.000000Z")
_KIND_HEAD = b'"kind":"'


@dataclass
class ScanCounts:
    """What a scan saw: every complete line, those it decoded, and the lines it could not read."""

    events: int = 0
    decoded: int = 0
    before_since: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_total: int = 0


def scan(
    path: str | os.PathLike[str],
    *,
    kinds: Collection[str],
    since: str = "",
    counts: ScanCounts | None = None,
) -> Iterator[tuple[str, str, dict[str, object]]]:
    """Yield ``(ts, kind, payload)`` for each event of a wanted kind at or after ``since``
    (an ISO-8601 UTC prefix, compared as text: the log's stamps are fixed-width)."""
    counts = counts if counts is not None else ScanCounts()
    wanted = {kind.encode() for kind in kinds}
    try:
        handle = Path(path).open("rb")
    except FileNotFoundError:
        raise UsageError(f"no event log at {path}") from None
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            quick = _quick(raw) if raw.endswith(b"}\n") else None
            if quick is not None:
                ts, kind = quick
                counts.events += 1
                if ts < since:
                    counts.before_since += 1
                    continue
                if kind not in wanted:
                    continue
            event, reason = _parse_line(raw)
            if event is None:
                counts.events -= quick is not None  # counted above on its layout alone
                counts.bad_total += 1
                if len(counts.bad_lines) < 20:  # bounded memory: the first few, and a count
                    counts.bad_lines.append(BadLine(lineno, reason))
                continue
            if quick is None:
                counts.events += 1
                if str(event["ts"]) < since:
                    counts.before_since += 1
                    continue
                if str(event["kind"]).encode() not in wanted:
                    continue
            counts.decoded += 1
            payload = event["payload"]
            assert isinstance(payload, dict)  # _parse_line checked it
            yield str(event["ts"]), str(event["kind"]), payload


def _quick(raw: bytes) -> tuple[str, bytes] | None:
    """The stamp and kind of a line in EventLog's own layout; None for any other line."""
    if not raw.startswith(_TS_HEAD):
        return None
    start = raw.find(_KIND_HEAD, _TS_END)
    if start < 0:
        return None
    start += len(_KIND_HEAD)
    end = raw.find(b'"', start)
    if end < 0:
        return None
    return raw[len(_TS_HEAD) : _TS_END].decode("ascii", "replace"), raw[start:end]
