"""Opening the state store named by a URL: a local directory or ``s3://bucket/prefix``.

Its own module, above base.py and the backends it chooses between: base.py is what every
backend imports, so it must import none of them. Each backend is imported when its URL is
opened (s3.py imports boto3 only when a store is built), so a local command loads no S3 code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuops.errors import UsageError
from gpuops.store.base import Store

if TYPE_CHECKING:
    from pathlib import Path


def open_store(url: str, s3_endpoint: str | None = None, s3_cache: Path | None = None) -> Store:
    """Open ``s3://bucket/prefix`` or a local directory path (``file://`` optional).
    ``s3_endpoint``: Settings.s3_endpoint (GPUOPS_S3_ENDPOINT), for s3:// only; ``s3_cache``:
    where an s3:// store keeps its listing cache (Settings.open_state passes one; None: in
    memory only)."""
    if url.startswith("s3://"):
        from gpuops.store.s3 import S3Store

        return S3Store.from_url(url, s3_endpoint, s3_cache)
    if "://" in url and not url.startswith("file://"):
        raise UsageError(
            f"unsupported state URL {url!r}: use a directory path or s3://bucket/prefix"
        )
    from gpuops.store.local import LocalStore

    return LocalStore(url.removeprefix("file://"))
