"""The GCS adapter for the lane: list, read and write objects under the lane bucket.

Over ``google-cloud-storage`` (imported lazily). ``STORAGE_EMULATOR_HOST`` (the library's own
convention) points it at a loopback fake, with anonymous credentials. Errors are translated
here, once; a missing object is ``None``, not an error.
"""

from __future__ import annotations

import os
from typing import Any

from gpuops.errors import AuthFailed, ProviderError, ProviderUnavailable

PROVIDER = "gcs"


class GcsAdapter:
    def __init__(self, bucket: str, project: str | None = None) -> None:
        self.bucket_name, self.project = bucket, project
        self._bucket: Any = None

    def _get_bucket(self) -> Any:
        if self._bucket is None:
            from google.cloud import storage  # type: ignore[attr-defined,import-untyped,unused-ignore]

            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(
                    project=self.project or "gpuops-lane",
                    credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                )
            else:
                client = storage.Client(project=self.project)
            self._bucket = client.bucket(self.bucket_name)
        return self._bucket

    def _translate(self, exc: Exception, what: str) -> Exception:
        from google.api_core import exceptions as gx

        if isinstance(exc, gx.Unauthorized | gx.Forbidden):
            return AuthFailed(PROVIDER, f"{what}: {exc}", exc.code)
        if isinstance(exc, gx.ServerError | gx.TooManyRequests):
            return ProviderUnavailable(PROVIDER, f"{what}: {exc}", exc.code)
        if isinstance(exc, gx.GoogleAPICallError):
            return ProviderError(PROVIDER, f"{what}: {exc}", exc.code)
        return ProviderUnavailable(PROVIDER, f"{what}: {type(exc).__name__}: {exc}")

    def _foreign(self) -> tuple[type[Exception], ...]:
        import requests
        from google.api_core import exceptions as gx

        return (gx.GoogleAPICallError, requests.RequestException)

    def list(self, prefix: str) -> list[str]:
        """Object names under ``prefix``, sorted."""
        try:
            blobs = self._get_bucket().client.list_blobs(self.bucket_name, prefix=prefix)
            return sorted(str(b.name) for b in blobs)
        except self._foreign() as exc:
            raise self._translate(exc, f"list gs://{self.bucket_name}/{prefix}") from exc

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        from google.api_core import exceptions as gx

        try:
            return bytes(self._get_bucket().blob(name).download_as_bytes())
        except gx.NotFound:
            return None
        except self._foreign() as exc:
            raise self._translate(exc, f"read gs://{self.bucket_name}/{name}") from exc

    def updated(self, name: str) -> float | None:
        """When the object was last written (epoch seconds), or None when it does not exist."""
        try:
            blob = self._get_bucket().get_blob(name)
        except self._foreign() as exc:
            raise self._translate(exc, f"stat gs://{self.bucket_name}/{name}") from exc
        if blob is None or blob.updated is None:
            return None
        return float(blob.updated.timestamp())

    def write(self, name: str, data: bytes) -> None:
        try:
            self._get_bucket().blob(name).upload_from_string(data)
        except self._foreign() as exc:
            raise self._translate(exc, f"write gs://{self.bucket_name}/{name}") from exc
