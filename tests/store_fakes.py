"""Fakes shared by tests: a MemoryStore that lets another process act mid-operation, an
event sink that keeps what it is given, and a codec that keeps a record's bytes as they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuops.store.memory import MemoryStore


class Interleaved(MemoryStore):
    """A MemoryStore where another process acts just before our next get, create or put:
    ``before[op]`` holds the actions, each run once, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.before: dict[str, list[Callable[[], object]]] = {"get": [], "create": [], "put": []}
        self.calls: list[str] = []

    def _meanwhile(self, op: str) -> None:
        self.calls.append(op)
        if self.before[op]:
            self.before[op].pop(0)()

    def get(self, key: str) -> Any:
        self._meanwhile("get")
        return super().get(key)

    def create(self, key: str, data: bytes) -> str:
        self._meanwhile("create")
        return super().create(key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        self._meanwhile("put")
        return super().put(key, data, version)


class Events:
    """An event sink (``EventLog.append``'s shape) that keeps every event in memory."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def append(self, kind: str, /, **payload: Any) -> None:
        self.events.append((kind, payload))

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [p for k, p in self.events if k == kind]


class WallOf:
    """A Clock whose wall time is ``read()``, a test's scripted reading (a counter, a list of
    instants); its monotonic time is the same reading, and it is never waited on."""

    def __init__(self, read: Callable[[], float]) -> None:
        self.read = read

    def wall(self) -> float:
        return float(self.read())

    def monotonic(self) -> float:
        return self.wall()

    def sleep(self, seconds: float) -> None:
        raise AssertionError(f"a scripted clock is never waited on ({seconds} s)")


class RawCodec:
    """Records whose value is their stored bytes, as they are (a listing's own test)."""

    what = "raw value"

    def encode(self, value: bytes) -> bytes:
        return value

    def decode(self, key: str, data: bytes) -> bytes:
        return data
