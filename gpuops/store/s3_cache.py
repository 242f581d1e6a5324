"""The S3 store's listing cache: the values a listing of a whole kind read, by key and ETag.

A listing of ``market/rentals/`` or ``ledger/boxes/`` over S3 would read every record each
time, one round trip each: history would cost every `boxes` a read per record. The listing
itself gives each key's ETag, so a value read before at that ETag need not be read again.

Only bytes that are provably the object's own are kept or served: S3's ETag of an object
written in one part (every value gpuops writes) is the quoted MD5 of its bytes, and an entry
is used only when its bytes hash to the ETag the listing gives now. A value whose ETag is
anything else (a multipart upload, SSE-KMS) is never cached, only read. So a stale, torn or
edited cache file can make a listing slower, never wrong.

Kept per kind (a prefix ending in ``/``; a listing narrowed to one name is not kept): in this
process, and, with a directory, in one file per store and kind, ``<sha256>.pack`` (msgpack),
written atomically only when the listing changed. The directory is the user's own (0700, files
0600), like the state directory. A cache that cannot be read or written is ignored: the values
are read from S3 as if it were empty.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

FORMAT = 1
# key -> (ETag, the object's bytes)
Held = dict[str, tuple[str, bytes]]


def verified(etag: str, data: bytes) -> bool:
    """Whether ``data`` is the object whose ETag is ``etag``: its quoted MD5 (S3's ETag of
    an object written in one part)."""
    import hashlib

    return etag.lower() == f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


def kept(prefix: str) -> bool:
    """Whether listings of ``prefix`` are cached: a whole kind, never one name's records."""
    return prefix.endswith("/")


class ListingCache:
    """What the last listing of each kind of one store read; ``directory``: where it is kept
    between processes (None: this process only)."""

    def __init__(self, url: str, directory: Path | None) -> None:
        self.url = url
        self.directory = directory
        self._memory: dict[str, Held] = {}

    def held(self, prefix: str) -> Held:
        """The verified values the last listing of ``prefix`` read (empty when none was)."""
        if not kept(prefix):
            return {}
        if prefix not in self._memory:
            self._memory[prefix] = self._load(prefix)
        return self._memory[prefix]

    def keep(self, prefix: str, listed: Held, before: Held) -> None:
        """What a listing of ``prefix`` read now (every listed key, each at the ETag it was
        read at); written to the directory only when it differs from ``before``."""
        if not kept(prefix):
            return
        # a value kept before was verified then (or when its file was read): hash the new ones
        now = {k: v for k, v in listed.items() if before.get(k) == v or verified(*v)}
        self._memory[prefix] = now
        if now != before:
            self._save(prefix, now)

    def path(self, prefix: str) -> Path | None:
        if self.directory is None:
            return None
        import hashlib

        name = hashlib.sha256(f"{self.url}\0{prefix}".encode()).hexdigest()
        return self.directory / f"{name}.pack"

    def _load(self, prefix: str) -> Held:
        path = self.path(prefix)
        if path is None:
            return {}
        import msgspec

        try:
            body = msgspec.msgpack.decode(path.read_bytes())
        except (OSError, msgspec.DecodeError):
            return {}  # none yet, or unreadable: read everything from S3
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            return {}
        if body.get("url") != self.url or body.get("prefix") != prefix:
            return {}  # another store's file under this name: never its values
        entries = body.get("entries")
        if not isinstance(entries, dict):
            return {}
        out: Held = {}
        for key, value in entries.items():
            if (
                isinstance(key, str)
                and isinstance(value, list)
                and len(value) == 2
                and isinstance(value[0], str)
                and isinstance(value[1], bytes)
                and verified(value[0], value[1])
            ):
                out[key] = (value[0], value[1])
        return out

    def _save(self, prefix: str, held: Held) -> None:
        path = self.path(prefix)
        if path is None:
            return
        import tempfile

        import msgspec

        from gpuops.store.local import private_dirs

        body = {
            "format": FORMAT,
            "url": self.url,
            "prefix": prefix,
            "entries": {key: list(value) for key, value in held.items()},
        }
        try:
            private_dirs(path.parent, path.anchor)
            fd, tmp = tempfile.mkstemp(dir=path.parent)  # 0600, a name of its own
        except OSError:
            return  # a full or read-only disk: the next listing reads S3 in full
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(msgspec.msgpack.encode(body))
            os.replace(tmp, path)  # readers see the old file or the new, never a mix
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
