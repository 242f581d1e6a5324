"""The S3 store: conditional writes (``IfMatch``/``IfNoneMatch``) make compare-and-swap shared
by operators on several hosts, with no server of our own. boto3 is imported lazily.

The version is the object's ETag. Two writes of identical bytes share an ETag, so a
compare-and-swap here compares values; every record gpuops writes carries a revision, so
identical bytes mean an identical state and that is safe.

A conditional write whose answer is lost (the connection closed or timed out after the request
went out) may or may not have landed. It is never called a lost race: the key is read back,
and our own bytes there mean it landed (its ETag is returned); the old value, or no object for
a create, means it did not, and it is sent once more (still conditional, so it can overwrite
nothing); anything else is another writer's, a real conflict. A 409 ConditionalRequestConflict
(two conditional writes to one key at once) means "try again" and is retried, backing off.

A listing of a whole kind (``scan``) costs one listing read, not a read per record: the listing
gives every key's ETag, and a value whose ETag it already holds is taken from the listing cache
(``s3_cache.py``: each cached value's MD5 is checked against its ETag, so it can only ever be
the object's own bytes); the rest are read ``timing.S3_SCAN_READERS`` at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    AlreadyExists,
    StateError,
    StoreForbidden,
    StoreMissing,
    StoreUnavailable,
    UsageError,
    VersionConflict,
)
from gpuops.store.base import Versioned, check_key, is_key
from gpuops.store.s3_cache import ListingCache

# S3 answers a failed precondition with 412; a concurrent conditional write may get 409.
_CONFLICT_CODES = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_RETRY_CODES = {"ConditionalRequestConflict", "409"}  # "try again": retried before conflict
_CONFLICT_ATTEMPTS = 4  # tries of one conditional write that keeps meeting a 409
T = TypeVar("T")
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_DENIED_CODES = {"AccessDenied", "403"}
Listed = list[tuple[str, str | None]]  # (key, ETag) per key, by key
Scanned = list[tuple[str, Versioned]]  # (key, value) per key, by key


class _Lost(Exception):
    """A request went out and its answer never came back: it may or may not have landed."""


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Store:
    """Versioned values under ``s3://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        endpoint: str | None = None,
        *,
        clock: Clock = SYSTEM,
        cache_dir: Path | None = None,
    ) -> None:
        """``clock``: what the backoff between retried conditional writes sleeps on;
        ``cache_dir``: where listings of whole kinds are kept between commands (None: in this
        process only)."""
        if not bucket:
            raise UsageError("an s3:// state URL needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client = client
        self._endpoint = endpoint
        self.clock = clock
        self._cache = ListingCache(self.url, cache_dir)

    @classmethod
    def from_url(
        cls, url: str, endpoint: str | None = None, cache_dir: Path | None = None
    ) -> S3Store:
        """``endpoint``: GPUOPS_S3_ENDPOINT (settings.py), else boto3's own AWS_ENDPOINT_URL;
        ``cache_dir``: the listing cache's directory (None: this process's memory only)."""
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        return cls(bucket, prefix, endpoint=endpoint, cache_dir=cache_dir)

    # --- interface ---------------------------------------------------------------------------
    def get(self, key: str) -> Versioned | None:
        try:
            answer = self._s3().get_object(Bucket=self.bucket, Key=self._name(key))
            data = answer["Body"].read()
        except _boto_errors() as exc:
            if _is_missing(exc):
                return None
            raise _translate(exc, key, None) from exc
        return Versioned(key, data, _etag(answer, "get", key))

    def salvage(self, key: str) -> Versioned | None:
        """No framing of our own here: the value as ``get`` reads it."""
        return self.get(key)

    def create(self, key: str, data: bytes) -> str:
        def send() -> str:
            return self._conditional(key, data, IfNoneMatch="*")

        try:
            return self._sent(send, key, None)
        except _Lost as lost:  # did our create land? read it back
            found = self.get(key)
            if found is None:
                return self._sent(send, key, None, first=False)  # no: once more
            if found.data == data:
                return found.version  # ours: it landed
            raise AlreadyExists(key) from lost  # another writer's: a real race

    def put(self, key: str, data: bytes, version: str) -> str:
        def send() -> str:
            return self._conditional(key, data, IfMatch=version)

        try:
            return self._sent(send, key, version)
        except _Lost as lost:  # did our write land? read it back
            found = self.get(key)
            if found is not None and found.data == data:
                return found.version  # ours: it landed
            if found is None or found.version != version:
                raise VersionConflict(key, version) from lost  # another writer's
            return self._sent(send, key, version, first=False)  # not: once more

    def delete(self, key: str, version: str) -> None:
        def send() -> None:
            self._s3().delete_object(Bucket=self.bucket, Key=self._name(key), IfMatch=version)

        try:
            self._sent(send, key, version)
        except _Lost as lost:  # did our delete land? read it back
            found = self.get(key)
            if found is not None and found.version != version:
                raise VersionConflict(key, version) from lost
            if found is not None:
                self._sent(send, key, version, first=False)  # not: once more

    def list(self, prefix: str = "") -> list[str]:
        return [key for key, _ in self._listing(prefix)]

    def scan(self, prefix: str = "") -> Scanned:
        """Every key that starts with ``prefix`` with its value, by key: one listing, then
        only the values the listing cache does not hold at the listed ETag, read
        S3_SCAN_READERS at a time (a key deleted since it was listed is left out)."""
        listed = self._listing(prefix)
        known = self._cache.held(prefix)
        found: dict[str, Versioned] = {}
        missing = []
        for key, etag in listed:
            cached = known.get(key)
            if cached is not None and cached[0] == etag:
                found[key] = Versioned(key, cached[1], cached[0])
            else:
                missing.append(key)
        if missing:
            self._s3()  # one client, made before the threads share it (boto3's are thread-safe)
            from concurrent.futures import ThreadPoolExecutor

            workers = min(timing.S3_SCAN_READERS, len(missing))
            with ThreadPoolExecutor(workers) as pool:
                for value in pool.map(self.get, missing):
                    if value is not None:
                        found[value.key] = value
        out = [(key, found[key]) for key, _ in listed if key in found]
        self._cache.keep(prefix, {key: (v.version, v.data) for key, v in out}, known)
        return out

    def bucket_policy(self) -> str | None:
        """The bucket's policy document (its JSON text), or None when it has none
        (NoSuchBucketPolicy). These credentials may not read it: StoreForbidden."""
        try:
            answer = self._s3().get_bucket_policy(Bucket=self.bucket)
        except _boto_errors() as exc:
            if _is_client_error(exc) and _code(exc) == "NoSuchBucketPolicy":
                return None
            if _is_client_error(exc) and _code(exc) in _DENIED_CODES:
                raise StoreForbidden(
                    f"S3 refused to show the bucket policy of {self.bucket!r}: {_code(exc)}"
                ) from exc
            raise _translate(exc, "the bucket policy", None) from exc
        return str(answer["Policy"])

    # --- internals ---------------------------------------------------------------------------
    def _listing(self, prefix: str) -> Listed:
        """(key, ETag) of every key that starts with ``prefix``, by key: one paged listing."""
        base = f"{self.prefix}/" if self.prefix else ""
        keys: Listed = []
        try:
            pages = self._s3().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=base + prefix):
                for item in page.get("Contents", []):
                    name = item["Key"][len(base) :]
                    if is_key(name):  # skip folder markers
                        keys.append((name, item.get("ETag")))  # None: read, never cached
        except _boto_errors() as exc:
            raise _translate(exc, prefix, None) from exc
        return sorted(keys)

    def _sent(
        self, send: Callable[[], T], key: str, version: str | None, *, first: bool = True
    ) -> T:
        """``send()``, its failure translated once: a conflict is AlreadyExists (a create) or
        VersionConflict; a first answer that never came back is _Lost, for a read-back."""
        try:
            return send()
        except _boto_errors() as exc:
            if version is None and _is_conflict(exc):
                raise AlreadyExists(key) from exc
            if first and not _is_client_error(exc):
                raise _Lost() from exc
            raise _translate(exc, key, version) from exc

    def _conditional(self, key: str, data: bytes, **condition: str) -> str:
        """One conditional put, retried while S3 answers 409 ConditionalRequestConflict."""
        tries = 1
        while True:
            try:
                answer = self._s3().put_object(
                    Bucket=self.bucket, Key=self._name(key), Body=data, **condition
                )
                return _etag(answer, "put", key)
            except _boto_errors() as exc:
                retry = _is_client_error(exc) and _code(exc) in _RETRY_CODES
                if not retry or tries >= _CONFLICT_ATTEMPTS:
                    raise
            self.clock.sleep(timing.S3_CONFLICT_BACKOFF_S * 2 ** (tries - 1))  # twice as long
            tries += 1

    def _name(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _s3(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            config = Config(
                connect_timeout=timing.HTTP_TIMEOUT_S,
                read_timeout=timing.HTTP_TIMEOUT_S,
                # One attempt per call: a conditional write whose reply was lost must not be
                # retried into a 412 that reads as "someone else wrote"; callers re-read instead.
                retries={"total_max_attempts": 1},
                max_pool_connections=timing.S3_SCAN_READERS,  # a scan's readers at once
            )
            # GPUOPS_S3_ENDPOINT (as the guardian's results use it), else boto3's own
            # AWS_ENDPOINT_URL: `gpuops fakes serve` exports both for its S3 stand-in.
            self._client = boto3.client("s3", config=config, endpoint_url=self._endpoint)
        return self._client


def _boto_errors() -> tuple[type[Exception], ...]:
    """botocore's two roots: evaluated only when an exception is already propagating."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def _is_client_error(exc: Exception) -> bool:
    return hasattr(exc, "response") and isinstance(exc.response, dict)


def _is_conflict(exc: Exception) -> bool:
    return _is_client_error(exc) and _code(exc) in _CONFLICT_CODES


def _is_missing(exc: Exception) -> bool:
    return _is_client_error(exc) and _code(exc) in _MISSING_CODES


def _etag(answer: Any, op: str, key: str) -> str:
    """The version S3 gave: its ETag, never absent or empty (an empty version would match
    nothing, or be taken for one); an endpoint that leaves it out cannot compare-and-swap."""
    etag = answer.get("ETag") if isinstance(answer, dict) else None
    if not isinstance(etag, str) or not etag:
        raise StateError(
            f"S3 answered the {op} of {key!r} without an ETag ({etag!r}): the endpoint cannot "
            "version objects, so compare-and-swap is impossible; check GPUOPS_S3_ENDPOINT"
        )
    return etag


def _translate(exc: Exception, key: str, version: str | None) -> Exception:
    """Map one botocore failure into the gpuops tree (the one place this happens)."""
    if _is_conflict(exc) or (version is not None and _is_missing(exc)):
        return VersionConflict(key, version)
    if _is_client_error(exc) and _code(exc) == "NoSuchBucket":
        bucket = exc.response["Error"].get("BucketName")  # type: ignore[attr-defined]  # _code read it
        named = f" {bucket!r}" if isinstance(bucket, str) and bucket else ""
        return StoreMissing(
            f"S3 refused {key!r}: NoSuchBucket: the state bucket{named} does not exist; "
            "create it (`aws s3 mb s3://BUCKET`) or point --state / GPUOPS_STATE at one that does"
        )
    if _is_client_error(exc):
        return StoreUnavailable(f"S3 refused {key!r}: {_code(exc)}: {exc}")
    return StoreUnavailable(f"S3 unreachable for {key!r}: {type(exc).__name__}: {exc}")
