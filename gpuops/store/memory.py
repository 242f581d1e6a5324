"""An in-process store with the same contract as the others, for tests and throwaway demos."""

from __future__ import annotations

import itertools
import threading

from gpuops.errors import AlreadyExists, VersionConflict
from gpuops.store.base import Versioned, check_key


class MemoryStore:
    """Versioned values in a dict; versions come from one counter, so they never repeat."""

    def __init__(self) -> None:
        self.url = "memory://"
        self._values: dict[str, tuple[bytes, str]] = {}
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def get(self, key: str) -> Versioned | None:
        with self._lock:
            found = self._values.get(check_key(key))
        return None if found is None else Versioned(key, found[0], found[1])

    def salvage(self, key: str) -> Versioned | None:
        """No framing of our own here: the value as ``get`` reads it."""
        return self.get(key)

    def create(self, key: str, data: bytes) -> str:
        with self._lock:
            if check_key(key) in self._values:
                raise AlreadyExists(key)
            return self._set(key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        with self._lock:
            self._check(key, version)
            return self._set(key, data)

    def delete(self, key: str, version: str) -> None:
        with self._lock:
            self._check(key, version)
            del self._values[key]

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._values if k.startswith(prefix))

    def _check(self, key: str, version: str) -> None:
        found = self._values.get(check_key(key))
        if found is None or found[1] != version:
            raise VersionConflict(key, version)

    def _set(self, key: str, data: bytes) -> str:
        version = str(next(self._counter))
        self._values[key] = (bytes(data), version)
        return version
