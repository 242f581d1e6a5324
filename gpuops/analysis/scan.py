"""Streaming the JSONL event log fast: find the interesting lines in whole blocks of bytes.

``gpuops stats`` must read 1,000,000 events in a few seconds in bounded memory. Almost every
line is written by ``EventLog.append`` in one layout (``{"ts":"...","operator":...,"kind":"...``
and ``}`` last), so a block of lines can be checked for that layout with two byte counts, its
lines counted with a third, and only the lines of wanted kinds found (one regular-expression
pass over the block for every wanted kind's key) and read straight into its kind's typed event
(``event_types.decode_line``: parsing and checking in one C pass, what gets `stats` through
1,000,000 events in time; tests/benchmarks/bench_stats.py). A line that pass does not accept
is read again (msgspec's plain JSON decoder), to tell a payload that is no event (yielded as
None) from a line that is not an event at all. A block with any line in another layout, or a
scan with ``since``, goes line by line; a line in another layout takes the full parser in
events.py, which also judges torn and non-UTF-8 lines (they are counted, never fatal).

Memory is one block plus what the caller keeps. ``start`` and ``ScanCounts.offset`` let a
caller fold a log incrementally: the offset is just past the last complete line read.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpuops import event_types as ev
from gpuops.errors import UsageError
from gpuops.events import BadLine, _parse_line
from gpuops.timestamps import moment

_TS_HEAD = b'{"ts":"'
_TS_END = len(_TS_HEAD) + len("2026-07-18T00:00:00.000000Z")
_KIND_HEAD = b'"kind":"'
_JOINT = b'}\n{"ts":"'  # one line's end and the next one's start, in EventLog's layout
BLOCK_BYTES = 1 << 22  # 4 MiB read at a time: the memory bound, and few Python steps a line
BAD_LINES_KEPT = 20  # bounded memory: the first few unreadable lines, and a count
# a line counted but not yielded (its needle missed, or it came before ``since``)
_Event = tuple[str, str, ev.Event | None]  # (ts, kind, event)
_SKIP: _Event = ("", "", None)
_Found = _Event | None
_JSON = msgspec.json.Decoder()  # any JSON value: a line read again
# EventLog's stamps end in Z at a fixed width: one that does not (a naive time, another width)
# is judged by the full parser; a Z stamp that is no time is the fold's ValueError (counted)
_STAMP_END = b'Z"'


@dataclass
class ScanCounts:
    """What a scan saw: every complete line, those it decoded, and the lines it could not read;
    ``offset`` is the byte just past the last complete line read."""

    events: int = 0
    decoded: int = 0
    before_since: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    bad_total: int = 0
    offset: int = 0


def scan_events(
    path: str | os.PathLike[str],
    *,
    kinds: Collection[str],
    since: str = "",
    counts: ScanCounts | None = None,
    needles: Mapping[str, bytes] | None = None,
    start: int = 0,
    tail: bool = True,
) -> Iterator[tuple[str, str, ev.Event | None]]:
    """Yield ``(ts, kind, event)`` for each event of a wanted kind at or after ``since`` (an
    ISO-8601 UTC prefix, compared as text: the log's stamps are fixed-width), reading from byte
    ``start`` (a line boundary); ``event`` is the payload read as its kind's typed event
    (``event_types``), None when it does not decode (count it, skip it). A kind in ``needles``
    is decoded only when its raw line holds that byte string (a cheap pre-filter for frequent
    kinds of which few lines matter; the fold still checks the decoded value). With
    ``tail=False`` an unterminated last line (one being written now) is left for a later scan
    instead of being judged torn."""
    reader = _Reader(kinds, since, counts, needles)
    return _read(path, reader, start, tail)


def _read(
    path: str | os.PathLike[str], reader: _Reader, start: int, tail: bool
) -> Iterator[_Event]:
    counts = reader.counts
    try:
        handle = Path(path).open("rb")  # noqa: SIM115 (closed by the with below)
    except FileNotFoundError:
        raise UsageError(f"no event log at {path}") from None
    except OSError as exc:  # a file where a directory should be, a directory, no permission
        raise UsageError(f"cannot read the event log {path}: {exc.strerror or exc}") from None
    counts.offset = start
    with handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            # a device (/dev/full, /dev/zero) or a pipe never ends: reading it would hang
            raise UsageError(f"the event log {path} is not a regular file")
        handle.seek(start)
        carry = b""
        while True:
            chunk = handle.read(BLOCK_BYTES)
            if not chunk:
                break
            block = carry + chunk
            cut = block.rfind(b"\n") + 1
            carry = block[cut:]
            if cut:
                yield from reader.block(block[:cut])
                counts.offset += cut
        if carry and tail:
            yield from reader.lines(carry)


class _Reader:
    """The per-block and per-line readers, sharing the wanted kinds and the counts."""

    def __init__(
        self,
        kinds: Collection[str],
        since: str,
        counts: ScanCounts | None,
        needles: Mapping[str, bytes] | None,
    ) -> None:
        self.wanted = {kind.encode() for kind in kinds}
        self.needle_of = {kind.encode(): needle for kind, needle in (needles or {}).items()}
        # One pass over a block (in C) finds every wanted kind's key, closing quote included,
        # a kind with a needle only where the needle follows on its line (one group a kind:
        # the hit's last group is its kind); a hit is then checked to be its line's own kind,
        # the first "kind" key after the stamp, not text in a payload.
        alternatives = [
            b"(" + re.escape(kind) + b')"' + _rest_of_line_holds(self.needle_of.get(kind))
            for kind in sorted(self.wanted)
        ]
        self.kind_key = re.compile(re.escape(_KIND_HEAD) + b"(?:" + b"|".join(alternatives) + b")")
        self.text = {kind: kind.decode() for kind in self.wanted}
        self.since, self.since_b = since, since.encode()
        self.counts = counts if counts is not None else ScanCounts()
        self.lineno = 0

    def block(self, body: bytes) -> Iterator[_Event]:
        """Every line of ``body`` (complete lines) in EventLog's layout: find, don't walk."""
        lines = body.count(b"\n")
        in_layout = (
            not self.since
            and body.startswith(_TS_HEAD)
            and body.endswith(b"}\n")
            and body.count(_JOINT) == lines - 1
        )
        if not in_layout:
            yield from self.lines(body)
            return
        rfind, find, wanted_line = body.rfind, body.find, self._wanted_line  # per hit: local
        for hit in self.kind_key.finditer(body) if self.wanted else ():
            at = hit.start()
            begin = rfind(b"\n", 0, at) + 1
            if find(_KIND_HEAD, begin + _TS_END) != at:
                continue  # a payload mentioning a kind: not its line's own
            raw = body[begin : find(b"\n", at) + 1]
            found = wanted_line(raw, hit.group(hit.lastindex or 0))
            if found is _SKIP:
                continue
            if found is None:  # rare: judged by the full parser, numbered only now
                found = self._judged(raw, self.lineno + body.count(b"\n", 0, begin) + 1)
                self.counts.events -= 1  # the block counts every line once, or it was bad
                if found is None or found is _SKIP:
                    continue
            yield found
        self.counts.events += lines
        self.lineno += lines

    def lines(self, body: bytes) -> Iterator[_Event]:
        """Line by line: any layout, any ``since``; bad lines are judged by events.py."""
        counts = self.counts
        for raw in _split(body):
            self.lineno += 1
            kind = None
            if raw.startswith(_TS_HEAD) and raw.endswith(b"}\n"):
                begin = raw.find(_KIND_HEAD, _TS_END)
                end = raw.find(b'"', begin + len(_KIND_HEAD)) if begin > 0 else -1
                kind = raw[begin + len(_KIND_HEAD) : end] if end > 0 else None
            if kind is not None:
                counts.events += 1
                if raw[len(_TS_HEAD) : _TS_END] < self.since_b:
                    counts.before_since += 1
                    continue
                if kind not in self.wanted:
                    continue
                found = self._wanted_line(raw, kind)
                if found is _SKIP:
                    continue
                if found is not None:
                    yield found
                    continue
                counts.events -= 1  # the full parser below counts it, or judges it bad
            found = self._judged(raw, self.lineno)
            if found is not None and found is not _SKIP:
                yield found

    def _judged(self, raw: bytes, lineno: int) -> _Found:
        """A line through the full parser: an event (counted), _SKIP, or None (judged bad)."""
        counts = self.counts
        event, reason = _parse_line(raw)
        if event is not None and not _utc_stamp(str(event["ts"])):
            stamp = str(event["ts"])[:40]
            event, reason = None, f"its stamp {stamp!r} is not an ISO-8601 time with a UTC offset"
        if event is None:
            counts.bad_total += 1
            if len(counts.bad_lines) < BAD_LINES_KEPT:
                counts.bad_lines.append(BadLine(lineno, reason))
            return None
        counts.events += 1
        if str(event["ts"]) < self.since:
            counts.before_since += 1
            return _SKIP
        if str(event["kind"]).encode() not in self.wanted:
            return _SKIP
        counts.decoded += 1
        kind = str(event["kind"])
        return str(event["ts"]), kind, ev.decode(kind, event["payload"])

    def _wanted_line(self, raw: bytes, kind: bytes) -> _Found:
        """A line of a wanted kind in EventLog's layout, decoded; _SKIP when its needle is
        absent (counted, not decoded); None when it does not decode (the full parser judges)."""
        needle = self.needle_of.get(kind)
        if needle is not None and needle not in raw:
            return _SKIP
        if raw[_TS_END - 1 : _TS_END + 1] != _STAMP_END:
            return None  # no UTC stamp of EventLog's width (`...0"` for `...Z"`): judged again
        text = self.text[kind]
        found = ev.decode_line(text, raw)
        event = found[1] if found is not None else None
        if found is None:  # rare: read again, to tell a payload that is no event from a bad line
            payload = _fast_payload(raw)
            if payload is None:
                return None
            event = ev.decode(text, payload)
        self.counts.decoded += 1
        return raw[len(_TS_HEAD) : _TS_END].decode(), text, event


def _utc_stamp(text: str) -> bool:
    """Whether ``text`` is an ISO-8601 time with a UTC offset (what a fold can subtract)."""
    try:
        moment(text)
    except ValueError:
        return False
    return True


def _rest_of_line_holds(needle: bytes | None) -> bytes:
    """A lookahead: the rest of the line holds ``needle`` (none: no condition)."""
    return b"" if needle is None else b"(?=[^\n]*" + re.escape(needle) + b")"


def _split(body: bytes) -> Iterator[bytes]:
    """Lines with their b"\\n" (only b"\\n" ends a line, as when reading a file)."""
    parts = body.split(b"\n")
    last = parts.pop()
    for part in parts:
        yield part + b"\n"
    if last:
        yield last


def _fast_payload(raw: bytes) -> dict[str, object] | None:
    """The payload of a line in EventLog's layout, or None to let the full parser judge it."""
    try:
        obj = _JSON.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # not JSON, not UTF-8, nested too deep:
        return None  # _parse_line says which
    payload = obj.get("payload") if isinstance(obj, dict) else None
    return payload if isinstance(payload, dict) else None
