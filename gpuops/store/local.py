"""The local-directory store: atomic writes by rename, one file lock, a checksummed version per key.

Layout under the root (0700; files 0600):
    .lock            flock'd around every read-check-write, so compare-and-swap is atomic
                     across processes; a listing (``scan``) takes it once for all its keys
    .tmp/            half-written files; a crash leaves debris here, never in place of a value
    <key>~           one file per key: a JSON header line, then the value's bytes

The header carries the version and a SHA-256 of the value. A file that fails to parse or to
match its checksum is reported as CorruptState and is never overwritten by ``put`` with an
ordinary version. ``salvage`` reads such a file's raw bytes with a version of its own
(``corrupt.<sha256 of the file>``): a ``put`` with that version replaces exactly those bytes
(a compare-and-swap on the corrupt file), for a repair that has kept a copy of them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    AlreadyExists,
    CorruptState,
    StoreUnavailable,
    UsageError,
    VersionConflict,
)
from gpuops.store.base import Versioned, check_key, is_key

_SUFFIX = "~"  # '~' is not allowed in a key segment, so a key file never collides with a folder
_FORMAT = 1
_VERSION = re.compile(r"[1-9][0-9]*\.[0-9a-f]{8}")
# what a listing read gives per key: its value, or why it could not be read (it blocks only itself)
Scanned = list[tuple[str, Versioned | CorruptState]]
_CHUNK = 1 << 16  # bytes per read of a value file: most are one read, then the end


def _encode(data: bytes, version: str) -> bytes:
    import hashlib  # at first use, not at import: an empty listing never loads OpenSSL

    header = {"format": _FORMAT, "version": version, "sha256": hashlib.sha256(data).hexdigest()}
    return json.dumps(header, sort_keys=True).encode() + b"\n" + data


def _decode(raw: bytes, where: str) -> tuple[bytes, str]:
    import hashlib

    head, sep, data = raw.partition(b"\n")
    if not sep:
        raise CorruptState(where, "no header line (a truncated or foreign file)")
    try:
        header = json.loads(head)
    except ValueError as exc:
        raise CorruptState(where, f"header is not JSON: {exc}") from exc
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise CorruptState(where, f"unknown header {head[:80]!r}")
    version = header.get("version")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise CorruptState(where, f"header version {version!r} is not <revision>.<nonce>")
    if hashlib.sha256(data).hexdigest() != header.get("sha256"):
        raise CorruptState(where, "checksum mismatch (half-written or edited by hand)")
    return data, version


_CORRUPT = "corrupt."  # a salvaged file's version: never a <revision>.<nonce> one


def _corrupt_version(raw: bytes) -> str:
    import hashlib

    return _CORRUPT + hashlib.sha256(raw).hexdigest()


def private_dirs(folder: Path, top: str | os.PathLike[str]) -> None:
    """Create ``folder`` and every missing directory above it (below ``top``) as 0700, whatever
    the umask; another process creating one at the same moment is fine (first use races)."""
    missing = []
    while not folder.exists() and folder != Path(top):
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=0o700)
        except FileExistsError:
            continue  # another process made it first: its mkdir used the same mode
        made.chmod(0o700)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _next_version(previous: str | None) -> str:
    """``<revision>.<nonce>``: readable order, and a fresh nonce so a deleted-then-recreated
    key never repeats a version an old reader still holds (no ABA)."""
    import secrets  # writers only: a listing never draws a nonce

    revision = int(previous.partition(".")[0]) + 1 if previous else 1
    return f"{revision}.{secrets.token_hex(4)}"


class LocalStore:
    """A directory of versioned values, safe for many processes on one host."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Clock = SYSTEM) -> None:
        """``clock``: what the wait for the store's lock reads and sleeps on."""
        self.root = Path(root).expanduser().resolve()
        self.clock = clock
        self.url = str(self.root)
        self._holding = threading.local()  # whether this thread holds the store's flock
        try:
            private_dirs(self.root, self.root.anchor)
        except OSError as exc:
            raise UsageError(
                f"cannot create the state directory {self.root}: {_why(exc)}"
            ) from None
        if not self.root.is_dir():
            raise UsageError(
                f"state {self.root} is not a directory; choose a directory with --state"
            )
        mode = self.root.stat().st_mode & 0o777
        if mode & 0o077:
            # never chmod a directory we did not make (it could be a home directory): say so
            raise UsageError(
                f"state directory {self.root} is open to other users (mode {mode:o}); "
                "run `chmod 700` on it or choose another with --state"
            )
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise UsageError(
                f"state directory {self.root} is not writable (read-only); "
                "choose another with --state"
            )
        try:
            (self.root / ".tmp").mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"state directory {self.root} is unusable: {_why(exc)}") from None

    # --- interface ---------------------------------------------------------------------------
    def get(self, key: str) -> Versioned | None:
        path = self._path(key)
        with self._locked():
            found = self._read(path)
        if found is None:
            return None
        return Versioned(key, found[0], found[1])

    def salvage(self, key: str) -> Versioned | None:
        path = self._path(key)
        with self._locked():
            raw = self._raw(path)
        if raw is None:
            return None
        try:
            data, version = _decode(raw, str(path))
        except CorruptState:
            return Versioned(key, raw, _corrupt_version(raw))
        return Versioned(key, data, version)

    def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        with self._locked():
            if self._read(path) is not None:
                raise AlreadyExists(key)
            return self._written(key, path, data, None)

    def put(self, key: str, data: bytes, version: str) -> str:
        path = self._path(key)
        with self._locked():
            if version.startswith(_CORRUPT):  # salvage's version: exactly those raw bytes
                raw = self._raw(path)
                if raw is None or _corrupt_version(raw) != version:
                    raise VersionConflict(key, version)
                return self._written(key, path, data, None)
            found = self._read(path)
            if found is None or found[1] != version:
                raise VersionConflict(key, version)
            return self._written(key, path, data, version)

    def delete(self, key: str, version: str) -> None:
        path = self._path(key)
        with self._locked():
            found = self._read(path)
            if found is None or found[1] != version:
                raise VersionConflict(key, version)
            path.unlink()

    def list(self, prefix: str = "") -> list[str]:
        keys = []
        # only the folder the prefix names is walked: a listing of live records never pays
        # for the archive beside them (archive.py); a prefix no key can have walks the root.
        # os.walk and plain strings, not Path.rglob: a listing of 30,000 keys is a few
        # milliseconds of walking, not a pathlib object per file
        folder = prefix.rpartition("/")[0]
        base = self.url + "/" + folder if is_key(folder) else self.url
        skip = len(self.url) + 1
        for top, _, files in os.walk(base):
            above = (top + "/")[skip:]
            for file in files:
                key = above + file[: -len(_SUFFIX)]
                # is_key drops our own dot-folders, editors' backups and any other stray file
                if file.endswith(_SUFFIX) and key.startswith(prefix) and is_key(key):
                    keys.append(key)
        return sorted(keys)

    def scan(self, prefix: str = "") -> Scanned:
        """Every key that starts with ``prefix`` with its value, by key, all read under one
        lock (one snapshot, and one lock for the listing rather than one per key). A value
        that fails its header or checksum is its CorruptState, in its place: it blocks only
        itself, and the caller names it."""
        out: Scanned = []
        with self._locked():
            for key in self.list(prefix):
                try:
                    found = self._read(f"{self.url}/{key}{_SUFFIX}")  # listed: a valid key
                except CorruptState as exc:
                    out.append((key, exc))
                    continue
                if found is not None:  # moved aside by hand since it was listed
                    out.append((key, Versioned(key, found[0], found[1])))
        return out

    # --- internals ---------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.root / (check_key(key) + _SUFFIX)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The store's flock around one read-check-write. A thread that holds it already is a
        signal's handler that interrupted this thread's own locked section (a guardian
        stopped by SIGTERM drops its lease and records its results as missing, M17): it goes
        on under the lock it holds, where a second flock would wait on itself until the
        timeout. The handler ends the process, so the interrupted section never resumes;
        another thread still waits for the lock as before."""
        if getattr(self._holding, "held", False):
            yield
            return
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = self.clock.monotonic() + timing.STORE_LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if self.clock.monotonic() >= deadline:
                        raise StoreUnavailable(
                            f"could not lock {self.root} within {timing.STORE_LOCK_TIMEOUT_S} s"
                        ) from None
                    self.clock.sleep(timing.STORE_LOCK_POLL_S)
            self._holding.held = True
            try:
                yield
            finally:
                self._holding.held = False
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _raw(self, path: str | Path) -> bytes | None:
        # os.open and os.read, not open(): no file object, half the system calls of a
        # buffered read (a listing reads one file per key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            raw = b""
            while chunk := os.read(fd, _CHUNK):
                raw += chunk
        finally:
            os.close(fd)
        return raw

    def _read(self, path: str | Path) -> tuple[bytes, str] | None:
        raw = self._raw(path)
        return None if raw is None else _decode(raw, str(path))

    def _written(self, key: str, path: Path, data: bytes, previous: str | None) -> str:
        """``_write``, its OSError (a full disk, a read-only or failing one) translated once,
        here: the old value stays, and the caller is told the store is unavailable."""
        try:
            return self._write(path, data, previous)
        except OSError as exc:
            raise StoreUnavailable(f"cannot write {key} under {self.root}: {_why(exc)}") from None

    def _write(self, path: Path, data: bytes, previous: str | None) -> str:
        import secrets

        version = _next_version(previous)
        private_dirs(path.parent, self.root)
        tmp = self.root / ".tmp" / f"{path.name}.{secrets.token_hex(6)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(_encode(data, version))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            tmp.unlink()  # a half-written temporary file is never left behind (it exists: O_EXCL)
            raise
        os.replace(tmp, path)  # atomic: readers see the old value or the new, never a mix
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return version
