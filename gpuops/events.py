"""The append-only JSONL event log of every provider call and decision, scrubbed (rule H3).

Owns: the line format, safe appends from many processes, streaming reads that report torn
lines. What a secret looks like is gpuops/secrets.py's (``scrub`` is re-exported here).

One JSON object per line: ``{"ts", "operator", "kind", "payload"}``. ``ts`` is UTC ISO-8601
with microseconds and a ``Z``, strictly increasing per EventLog (a clock stepping back is
clamped to the last stamp + 1 µs, so one writer's events sort in the order they happened).

Why scrub at write time and not when reading or printing: the file is what leaks. It is
attached to bug reports, synced to buckets and read by ``gpuops stats`` on other hosts, and
once a key is on disk no reader-side filter can take it back. So ``append`` turns the payload
into plain JSON values, scrubs every key and string, and encodes only the scrubbed copy.
Scrubbing is deliberately greedy (see gpuops/secrets.py for what it costs and what it keeps).

Concurrency: each append opens the file O_APPEND, takes an exclusive flock on it, writes
b"\\n" first when the file does not end in one (a writer crashed mid-line: the torn line stays
visibly separate and the new line is complete), writes the whole line in a loop, closes.
Readers take no lock: they see complete lines and at most one line still being written.
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path, PurePath

from gpuops.clock import SYSTEM, Clock
from gpuops.errors import CorruptState, StateError, UsageError
from gpuops.private import private_dirs
from gpuops.secrets import (
    REDACTED,
    REDACTED_PRIVATE_KEY,
    env_secrets,
    is_secret_name,
    scrub,
    scrub_text,
)
from gpuops.timestamps import FORMAT, utc_iso

__all__ = [
    "REDACTED",
    "REDACTED_PRIVATE_KEY",
    "BadLine",
    "EventLog",
    "EventStream",
    "env_secrets",
    "is_secret_name",
    "read_events",
    "scrub",
]

Event = dict[str, object]
_FIELDS = ("ts", "operator", "kind", "payload")
_KIND = re.compile(r"[a-z][a-z0-9_.-]*")


# --- turning a payload into JSON values ---------------------------------------------------------
def _jsonable(value: object, where: str) -> object:
    """Plain JSON values, converted deterministically; anything else is a UsageError."""
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, where)
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError(f"event payload {where} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, datetime):  # an instant: the one stamp form (gpuops/timestamps.py)
        if value.utcoffset() is None:
            raise UsageError(f"event payload {where} is a datetime with no UTC offset")
        return utc_iso(value.timestamp())
    if isinstance(value, date | time):  # a day or a time of day: no instant, ISO 8601 as is
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"  # never the content: it may be key material
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value), where)
    if isinstance(value, Mapping):
        return {_key(k, where): _jsonable(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item, f"{where}[{i}]") for i, item in enumerate(value)]
    raise UsageError(
        f"event payload {where} is a {type(value).__name__}, which the event log cannot write "
        "(use str, numbers, lists, dicts, datetime, Path, bytes, enums or dataclasses)"
    )


def _key(key: object, where: str) -> str:
    if not isinstance(key, str):
        raise UsageError(f"event payload {where} has the non-string key {key!r}")
    return key


# --- writing ------------------------------------------------------------------------------------
class EventLog:
    """Appends scrubbed events to one JSONL file; safe with many writer processes.

    ``fsync`` defaults to False: the log is an audit trail, not the source of truth (the
    state store fsyncs every value), and an fsync per event costs milliseconds on a real
    disk. A power cut can lose the last events or tear the last line; the next append and
    ``read_events`` both cope with a torn line. Set it for a log that must survive one.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        operator: str,
        *,
        fsync: bool = False,
        clock: Clock = SYSTEM,
    ) -> None:
        if not isinstance(operator, str) or not operator.strip():
            raise UsageError("an event log needs a non-empty operator id")
        _refuse_secret("operator", operator)
        self.path = Path(path)
        self.operator = operator
        self.fsync = fsync
        self._clock = clock
        self._last_ts: datetime | None = None

    def append(self, kind: str, /, **payload: object) -> Event:
        """Write one event line and return the event exactly as written (scrubbed)."""
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise UsageError(f"event kind {kind!r} must match {_KIND.pattern}")
        _refuse_secret("kind", kind)
        body = _jsonable(payload, "payload")
        event: Event = {
            "ts": self._stamp(),
            "operator": self.operator,
            "kind": kind,
            "payload": scrub(body),
        }
        self._write(json.dumps(event, separators=(",", ":"), allow_nan=False).encode() + b"\n")
        return event

    def _stamp(self) -> str:
        now = datetime.fromtimestamp(self._clock.wall(), UTC)
        if self._last_ts is not None and now <= self._last_ts:
            now = self._last_ts + timedelta(microseconds=1)
        self._last_ts = now
        return now.strftime(FORMAT)

    def _write(self, line: bytes) -> None:
        try:
            private_dirs(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"cannot open the event log {self.path}: {exc}") from exc
        try:
            # A blocking lock: it is held only for one write loop, and polling for a timeout
            # would cost a sleep per contended append.
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a writer died mid-line: keep its fragment on its own line
            _write_all(fd, line)
            if self.fsync:
                os.fsync(fd)
        except OSError as exc:
            raise StateError(f"cannot append to the event log {self.path}: {exc}") from exc
        finally:
            os.close(fd)  # closing releases the flock


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"write returned {written} with {len(view)} bytes left")
        view = view[written:]


def _refuse_secret(field: str, value: str) -> None:
    """Identity fields are written unscrubbed, so one that looks like a secret is refused."""
    shown = scrub_text(value)
    if shown != value:
        # the message names the field and shows the value scrubbed: an error must not leak it
        raise UsageError(f"the event {field} {shown!r} looks like a secret (H3); not logging it")


# --- reading ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BadLine:
    """A line that is not a complete event: 1-based line number and why."""

    lineno: int
    reason: str


class EventStream:
    """The events of one log, read one line at a time (memory bounded by the longest line).

    A line that is not a complete event (torn by a writer that crashed, edited by hand, not
    UTF-8) is skipped and listed in ``bad_lines``, complete once iteration ends; with
    ``strict=True`` it raises CorruptState naming ``path:lineno`` instead. A last line with
    no newline is judged on its content: it may be an append still in progress.
    """

    def __init__(self, path: str | os.PathLike[str], *, strict: bool = False) -> None:
        self.path = Path(path)
        self.strict = strict
        self.events = 0
        self.bad_lines: list[BadLine] = []

    def __iter__(self) -> Iterator[Event]:
        self.events, self.bad_lines = 0, []
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            raise UsageError(f"no event log at {self.path}") from None
        with handle:
            for lineno, raw in enumerate(handle, start=1):
                event, reason = _parse_line(raw)
                if event is not None:
                    self.events += 1
                    yield event
                elif self.strict:
                    raise CorruptState(f"{self.path}:{lineno}", reason)
                else:
                    self.bad_lines.append(BadLine(lineno, reason))


def read_events(path: str | os.PathLike[str], *, strict: bool = False) -> EventStream:
    """Stream the events of ``path``; see EventStream for how bad lines are reported."""
    return EventStream(path, strict=strict)


def _parse_line(raw: bytes) -> tuple[Event | None, str]:
    text = raw.removesuffix(b"\n")
    if not text.strip():
        return None, "empty line"
    try:
        obj = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, f"incomplete or not JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return None, "JSON nested too deep to read"
    if not isinstance(obj, dict):
        return None, f"a JSON {type(obj).__name__}, not an event object"
    missing = [name for name in _FIELDS if name not in obj]
    if missing:
        return None, f"not an event: missing {', '.join(missing)}"
    if not all(isinstance(obj[name], str) for name in _FIELDS[:3]) or not isinstance(
        obj["payload"], dict
    ):
        return None, "not an event: ts, operator and kind must be strings, payload an object"
    return obj, ""
