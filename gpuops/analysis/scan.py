"""Streaming the JSONL event log fast: skip uninteresting lines without parsing them.

``gpuops stats`` must read 1,000,000 events in a few seconds in bounded memory. Almost every
line is written by ``EventLog.append`` in one layout (``{"ts":"...","operator":...,"kind":"...``),
so the kind and the timestamp can be read from the raw bytes and a line whose kind nobody
asked for is counted, not decoded. A line in any other layout takes the full parser in
events.py, which also judges torn and non-UTF-8 lines (they are counted, never fatal).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Iterator, Mapping
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
    needles: Mapping[str, bytes] | None = None,
) -> Iterator[tuple[str, str, dict[str, object]]]:
    """Yield ``(ts, kind, payload)`` for each event of a wanted kind at or after ``since``
    (an ISO-8601 UTC prefix, compared as text: the log's stamps are fixed-width). A kind in
    ``needles`` is decoded only when its raw line holds that byte string (a cheap pre-filter
    for frequent kinds of which few lines matter; the fold still checks the decoded value)."""
    counts = counts if counts is not None else ScanCounts()
    wanted = {kind.encode() for kind in kinds}
    needle_of = {kind.encode(): needle for kind, needle in (needles or {}).items()}
    try:
        handle = Path(path).open("rb")  # noqa: SIM115 (closed by the with below)
    except FileNotFoundError:
        raise UsageError(f"no event log at {path}") from None
    since_b = since.encode()
    events = before = 0
    try:
        with handle:
            for lineno, raw in enumerate(handle, start=1):
                # the fast path: EventLog's own layout, read from the bytes (see the docstring)
                kind = None
                if raw.startswith(_TS_HEAD) and raw.endswith(b"}\n"):
                    start = raw.find(_KIND_HEAD, _TS_END)
                    end = raw.find(b'"', start + len(_KIND_HEAD)) if start > 0 else -1
                    kind = raw[start + len(_KIND_HEAD) : end] if end > 0 else None
                if kind is not None:
                    if raw[len(_TS_HEAD) : _TS_END] < since_b:
                        events, before = events + 1, before + 1
                        continue
                    if kind not in wanted:
                        events += 1
                        continue
                    needle = needle_of.get(kind)
                    if needle is not None and needle not in raw:
                        events += 1
                        continue
                    payload = _fast_payload(raw)
                    if payload is not None:
                        events += 1
                        counts.decoded += 1
                        yield raw[len(_TS_HEAD) : _TS_END].decode(), kind.decode(), payload
                        continue
                event, reason = _parse_line(raw)
                if event is None:
                    counts.bad_total += 1
                    if len(counts.bad_lines) < 20:  # bounded memory: the first few, and a count
                        counts.bad_lines.append(BadLine(lineno, reason))
                    continue
                events += 1
                if str(event["ts"]) < since:
                    before += 1
                    continue
                if str(event["kind"]).encode() not in wanted:
                    continue
                counts.decoded += 1
                payload = event["payload"]
                assert isinstance(payload, dict)  # _parse_line checked it
                yield str(event["ts"]), str(event["kind"]), payload
    finally:
        counts.events += events
        counts.before_since += before


def _fast_payload(raw: bytes) -> dict[str, object] | None:
    """The payload of a line in EventLog's layout, or None to let the full parser judge it."""
    try:
        obj = json.loads(raw.decode())
    except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError): _parse_line says which
        return None
    payload = obj.get("payload") if isinstance(obj, dict) else None
    return payload if isinstance(payload, dict) else None
