"""Where a guardian's results go, and copying them off a box before it is destroyed (M5).

``open_results`` turns ``GPUOPS_RESULTS`` (a directory or ``s3://bucket/prefix``) into a
destination; ``copy_results`` streams the job's results tarball off the box over ssh within a
budget, keeping the guardian's lease alive while it waits, and delivers it. A destination also
takes a sync's files one at a time (``put_file``: each whole or not at all) and its manifest
(``put_manifest``, ``read_manifest``), for ``market/sync.py``.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

from gpuops.errors import GpuopsError, StoreUnavailable, UsageError
from gpuops.market import watchdog as w
from gpuops.market.jobs import BoxShell, Copies
from gpuops.market.sync_plan import MANIFEST, PARTIAL
from gpuops.model import Instance
from gpuops.private import extract_private, open_private, private_dirs

_T = TypeVar("_T")
RESULTS_ENV = "GPUOPS_RESULTS"  # where results go: a directory or s3://bucket/prefix
# S3 error codes that mean the destination itself is wrong, not that it is down (the S3 API
# reference's error code list)
_CONFIG_CODES = frozenset(
    {"NoSuchBucket", "AccessDenied", "InvalidBucketName", "AllAccessDisabled"}
)


_CHUNK = 1 << 20  # bytes read at a time from a file being delivered


class Results(Protocol):
    def deliver(self, name: str, tarball: Path) -> str: ...

    def where(self, name: str) -> str: ...

    def put_file(self, name: str, path: str, source: IO[bytes]) -> tuple[int, str]: ...

    def put_manifest(self, name: str, data: bytes) -> None: ...

    def read_manifest(self, name: str) -> bytes | None: ...


@dataclass(frozen=True)
class LocalResults:
    root: Path

    def deliver(self, name: str, tarball: Path) -> str:
        target = self.root / name
        with tarfile.open(tarball, "r:gz") as tar:
            extract_private(tar, target)  # 0700/0600; no absolute paths, no '..', no devices
        return str(target)

    def where(self, name: str) -> str:
        return str(self.root / name)

    def put_file(self, name: str, path: str, source: IO[bytes]) -> tuple[int, str]:
        """Write ``source`` to ``name/path`` whole or not at all: into a temporary name in the
        delivery's partial folder (0600), fsync'd, then renamed into place. (size, sha256)."""
        target = self.root / name
        temp = private_dirs(target / PARTIAL) / uuid.uuid4().hex
        digest, size = hashlib.sha256(), 0
        try:
            with os.fdopen(open_private(temp, os.O_WRONLY | os.O_EXCL), "wb") as out:
                while chunk := source.read(_CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())
            final = target / path
            private_dirs(final.parent)
            os.replace(temp, final)
        finally:
            temp.unlink(missing_ok=True)
        _fsync_dir(final.parent)
        return size, digest.hexdigest()

    def put_manifest(self, name: str, data: bytes) -> None:
        """The manifest, written as a file is (a temporary name, fsync'd, renamed: atomic); the
        partial folder, empty once every file is in place, removed."""
        self.put_file(name, MANIFEST, io.BytesIO(data))
        shutil.rmtree(self.root / name / PARTIAL, ignore_errors=True)

    def read_manifest(self, name: str) -> bytes | None:
        try:
            return (self.root / name / MANIFEST).read_bytes()
        except FileNotFoundError:
            return None


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (the directory's own entry written)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class S3Results:
    bucket: str
    prefix: str
    endpoint: str | None = None  # GPUOPS_S3_ENDPOINT (settings.py); else boto3's own

    def deliver(self, name: str, tarball: Path) -> str:
        where = self.where(name)

        def put_all(client: Any) -> None:
            with tarfile.open(tarball, "r:gz") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    handle = tar.extractfile(member)
                    if handle is None:
                        continue
                    key = self._key(name, member.name.removeprefix("./"))
                    client.put_object(Bucket=self.bucket, Key=key, Body=handle.read())

        self._s3(put_all, where)
        return where

    def _key(self, name: str, path: str) -> str:
        base = f"{self.prefix.strip('/')}/{name}".strip("/")
        return f"{base}/{path}"

    def where(self, name: str) -> str:
        return f"s3://{self.bucket}/{self._key(name, '')}"

    def put_file(self, name: str, path: str, source: IO[bytes]) -> tuple[int, str]:
        """One object per file: S3 makes an object whole or not at all (a multipart upload
        that does not complete leaves none). (size, sha256) of what was read."""
        hashing = _Hashing(source)
        self._s3(lambda client: client.upload_fileobj(hashing, self.bucket, self._key(name, path)))
        return hashing.size, hashing.digest.hexdigest()

    def put_manifest(self, name: str, data: bytes) -> None:
        key = self._key(name, MANIFEST)
        self._s3(lambda client: client.put_object(Bucket=self.bucket, Key=key, Body=data))

    def read_manifest(self, name: str) -> bytes | None:
        key = self._key(name, MANIFEST)

        def get(client: Any) -> bytes | None:
            try:
                answer = client.get_object(Bucket=self.bucket, Key=key)
            except client.exceptions.NoSuchKey:
                return None
            return bytes(answer["Body"].read())

        return self._s3(get)

    def _s3(self, call: Callable[[Any], _T], where: str | None = None) -> _T:
        """One S3 call, its errors translated once, here (the bucket, its permissions, no
        connection, no credentials), named by ``where`` (default: the bucket and prefix)."""
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        where = where or f"s3://{self.bucket}/{self.prefix.strip('/')}"
        try:
            return call(boto3.client("s3", endpoint_url=self.endpoint))
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _CONFIG_CODES:
                raise UsageError(
                    f"{RESULTS_ENV}: {where} refused the results ({code}); check the bucket"
                ) from None
            raise StoreUnavailable(f"{where}: {code or 'error'}: {exc}") from None
        except BotoCoreError as exc:
            raise StoreUnavailable(f"{where}: {type(exc).__name__}: {exc}") from None


class _Hashing:
    """A reader that hashes and counts what is read through it."""

    def __init__(self, source: IO[bytes]) -> None:
        self.source, self.digest, self.size = source, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        chunk = self.source.read(n)
        self.digest.update(chunk)
        self.size += len(chunk)
        return chunk


def open_results(url: str, s3_endpoint: str | None = None) -> Results:
    if url.startswith("s3://"):
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise UsageError(f"{RESULTS_ENV}={url!r} names no bucket")
        return S3Results(bucket, prefix, s3_endpoint)
    return LocalResults(Path(url.removeprefix("file://")).expanduser())


# --- copying them off a box ----------------------------------------------------------------
@dataclass(frozen=True)
class Copied:
    """How a copy ended: ``error`` is empty when the results reached ``destination``."""

    error: str
    destination: str | None
    size: int
    none_made: bool = False  # the job has no results directory: nothing was there to copy


def copy_results(
    shell: BoxShell,
    instance: Instance,
    name: str,
    results_dir: str,
    budget_s: float,
    *,
    deliver: Callable[[Path], str],
    poll_s: float,
    keep_alive: Callable[[], object],
    copies: Copies | None = None,
) -> Copied:
    """Stream the job's ``results_dir`` off ``instance`` as a tarball, then deliver it.

    The copy is a real ssh process on a worker thread, registered in ``copies`` (the
    guardian's: a signal ends it there, M17); the caller's ``keep_alive`` (the guardian's
    heartbeat) runs every ``poll_s`` while it lasts. The tarball's folder is removed however
    this ends, a signal's exit included.
    """
    folder = Path(tempfile.mkdtemp(prefix="gpuops-results-"))
    tarball = folder / "results.tar.gz"
    outcome: dict[str, str] = {}
    status: list[int | None] = []

    def pull() -> None:
        script = w.results_script(name, results_dir)
        try:
            outcome["error"], code = shell.stream_to(instance, script, tarball, budget_s, copies)
            status.append(code)
        except OSError as exc:  # ssh could not even start: a failed copy, said so
            outcome["error"] = f"the copy could not start: {type(exc).__name__}: {exc}"

    worker = threading.Thread(target=pull, daemon=True)
    try:
        worker.start()
        # The worker enforces the budget itself (stream_to kills the ssh when it overruns), so
        # wait for it to end: removing its folder while it still writes there lost results. A
        # signal's exit leaves this wait only once the handler has ended the copy (Copies).
        while worker.is_alive():
            worker.join(poll_s)  # the copy is a real process: wait for real
            keep_alive()  # and keep the lease through it
        error = outcome.get("error", "the copy ended without a result")
        destination = None
        if not error:
            try:
                destination = deliver(tarball)
            except (OSError, tarfile.TarError, GpuopsError) as exc:
                error = f"delivering the results failed: {type(exc).__name__}: {exc}"
        size = tarball.stat().st_size if tarball.exists() else 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return Copied(error, destination, size, none_made=status == [w.NO_RESULTS])
