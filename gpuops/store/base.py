"""The store interface every backend implements, and key validation.

The backends (local.py, s3.py) import this module; it imports none of them. Opening a store
by URL, which needs every backend, is opener.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from gpuops.errors import UsageError

# Keys are slash-separated names; no empty, dot-only or hidden segments, so a key can never
# escape the local store's directory or collide with its own bookkeeping files.
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+=-]{0,127}")
_MAX_SEGMENTS = 8


@dataclass(frozen=True)
class Versioned:
    """A stored value and the opaque version that a later compare-and-swap must present."""

    key: str
    data: bytes
    version: str


class Store(Protocol):
    """Get with version, put-if-version, create-if-absent, list, delete-if-version."""

    url: str

    def get(self, key: str) -> Versioned | None:
        """The value and its version, or None when the key is absent."""
        ...

    def create(self, key: str, data: bytes) -> str:
        """Write only if absent; return the new version. Raises AlreadyExists."""
        ...

    def put(self, key: str, data: bytes, version: str) -> str:
        """Write only if the key is still at ``version``; return the new version.

        Raises VersionConflict when the key changed or vanished since it was read.
        """
        ...

    def delete(self, key: str, version: str) -> None:
        """Delete only if the key is still at ``version``. Raises VersionConflict."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Every key that starts with ``prefix``, sorted."""
        ...

    def salvage(self, key: str) -> Versioned | None:
        """The stored bytes as they are, even where the backend's own framing of them is
        corrupt (a local file edited by hand), with a version ``put`` accepts to replace
        exactly those bytes. For repair: ``get`` refuses such a value (CorruptState)."""
        ...


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid store key, else raise UsageError naming the fault."""
    if is_key(key):
        return key
    segments = key.split("/")
    if len(segments) > _MAX_SEGMENTS:
        raise UsageError(f"store key {key!r} has more than {_MAX_SEGMENTS} segments")
    for segment in segments:
        if not _SEGMENT.fullmatch(segment):
            raise UsageError(
                f"store key {key!r}: segment {segment!r} must be 1-128 characters of "
                "letters, digits and _.@+=- and must not start with '.' or '-'"
            )
    return key


def is_key(key: str) -> bool:
    """Whether ``key`` is a valid store key (for filtering listings, which may hold strays)."""
    segments = key.split("/")
    return len(segments) <= _MAX_SEGMENTS and all(_SEGMENT.fullmatch(s) for s in segments)
