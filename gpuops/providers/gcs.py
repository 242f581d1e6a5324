"""The GCS adapter for the lane: list, read, stat, write and delete objects under the lane
bucket.

The Cloud Storage JSON API (v1), spoken through the adapter's own session (gce.py's
``google_session``: plain for a loopback ``endpoint``, google-auth's ``AuthorizedSession``
otherwise), exactly the requests google-cloud-storage sends for these calls (``objects.list``,
``/download/...?alt=media``, ``objects.get``, a media upload, ``objects.delete``: an object,
never the lane's VM, L1; only `gpuops check` deletes, its own probe object). The client
library is not used at run time: its ``Client`` offers no public transport seam (``_http`` is
documented as private), it retries on its own for up to two minutes (a ``lane watch --timeout
0`` with storage unreachable used to block 77 s and end in an untranslated ``RetryError``),
and it reads ``STORAGE_EMULATOR_HOST`` itself. Here every call is sent once, bounded by
timing.HTTP_TIMEOUT_S, and its failure is translated by google_errors.py. A missing object
is ``None``, not an error. FakeGCS is still judged by the real client library in
tests/test_fake_gce_contract.py.
"""

from __future__ import annotations

import base64
import binascii
import builtins
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from gpuops import timing
from gpuops.providers import google_errors
from gpuops.providers.gce import google_session
from gpuops.providers.transport import Observer

PROVIDER = "gcs"
STORAGE = "https://storage.googleapis.com"
# objects.list pages; a listing that needs more than this many pages is refused, not looped on
MAX_PAGES = 1000


def _hex(md5: object) -> str | None:
    """An object's ``md5Hash`` (base64 of 16 bytes) in hex; None when it has none."""
    if md5 is None:
        return None
    raw = base64.b64decode(str(md5), validate=True)
    if len(raw) != 16:
        raise ValueError(f"md5Hash of {len(raw)} bytes")
    return raw.hex()


class GcsAdapter:
    """The lane bucket's objects. ``endpoint``: a loopback fake (anonymous), else real GCS
    over Application Default Credentials. ``observers`` see every response (transport.py)."""

    def __init__(
        self,
        bucket: str,
        project: str | None = None,
        *,
        endpoint: str | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        self.bucket_name, self.project, self.endpoint = bucket, project, endpoint
        self._observers = tuple(observers)
        self._session: Any = None

    def _base(self) -> str:
        return (self.endpoint or STORAGE).rstrip("/")

    def _object_path(self, name: str) -> str:
        return f"/b/{quote(self.bucket_name, safe='')}/o/{quote(name, safe='')}"

    def _call(
        self,
        what: str,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        missing_ok: bool = False,
    ) -> Any:
        """One request; the response (None for a 404 when ``missing_ok``), or the error."""
        if self._session is None:
            self._session = google_session(self.endpoint, self._observers)
        headers = {"Content-Type": "application/octet-stream"} if data is not None else None
        try:
            reply = self._session.request(
                method,
                url,
                params=params,
                data=data,
                headers=headers,
                timeout=(timing.HTTP_TIMEOUT_S, timing.HTTP_TIMEOUT_S),
            )
        except google_errors.foreign() as exc:
            raise google_errors.from_exception(PROVIDER, what, exc) from exc
        if missing_ok and reply.status_code == 404:
            return None
        if reply.status_code >= 400:
            raise google_errors.from_status(PROVIDER, what, reply.status_code, reply.text)
        return reply

    def _json(self, what: str, reply: Any) -> Mapping[str, Any]:
        return google_errors.json_object(PROVIDER, what, reply.text)

    def list(self, prefix: str) -> list[str]:
        """Object names under ``prefix``, sorted (every page)."""
        what = f"list gs://{self.bucket_name}/{prefix}"
        return sorted(str(item["name"]) for item in self._items(what, prefix))

    def objects(self, prefix: str) -> dict[str, tuple[int, str | None]]:
        """Every object under ``prefix`` (every page): its size in bytes and its md5 in hex
        (None when storage keeps none, as for a composite object)."""
        what = f"list gs://{self.bucket_name}/{prefix}"
        found: dict[str, tuple[int, str | None]] = {}
        for item in self._items(what, prefix):
            size, md5 = item.get("size"), item.get("md5Hash")
            try:
                found[str(item["name"])] = (int(str(size)), _hex(md5))
            except (ValueError, binascii.Error):
                raise google_errors.unexpected(
                    PROVIDER, what, f"size {size!r} or md5Hash {md5!r}", str(item)
                ) from None
        return found

    def _items(self, what: str, prefix: str) -> Sequence[Mapping[str, Any]]:
        """Every object resource under ``prefix``, every page."""
        url = f"{self._base()}/storage/v1/b/{quote(self.bucket_name, safe='')}/o"
        names: builtins.list[Mapping[str, Any]] = []
        params = {"prefix": prefix}
        for _ in range(MAX_PAGES):
            doc = self._json(what, self._call(what, "GET", url, params=params))
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise google_errors.unexpected(PROVIDER, what, "items is not a list", str(doc))
            for item in items:
                name = item.get("name") if isinstance(item, dict) else None
                if not isinstance(name, str):
                    raise google_errors.unexpected(
                        PROVIDER, what, "an item without a name", str(doc)
                    )
                names.append(item)
            token = doc.get("nextPageToken")
            if not token:
                return names
            if not isinstance(token, str):
                raise google_errors.unexpected(
                    PROVIDER, what, "nextPageToken is not a string", str(doc)
                )
            params = {"prefix": prefix, "pageToken": token}
        raise google_errors.unexpected(PROVIDER, what, f"more than {MAX_PAGES} pages", "")

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None when it does not exist."""
        what = f"read gs://{self.bucket_name}/{name}"
        url = f"{self._base()}/download/storage/v1{self._object_path(name)}"
        reply = self._call(what, "GET", url, params={"alt": "media"}, missing_ok=True)
        return None if reply is None else bytes(reply.content)

    def updated(self, name: str) -> float | None:
        """When the object was last written (epoch seconds), or None when it does not exist."""
        what = f"stat gs://{self.bucket_name}/{name}"
        url = f"{self._base()}/storage/v1{self._object_path(name)}"
        reply = self._call(what, "GET", url, missing_ok=True)
        if reply is None:
            return None
        stamp = self._json(what, reply).get("updated")
        if stamp is None:
            return None
        try:
            when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            if when.tzinfo is None:  # RFC 3339 always has an offset; never the host's zone
                when = when.replace(tzinfo=UTC)
            return when.timestamp()
        except (ValueError, OverflowError, OSError) as exc:
            raise google_errors.unexpected(
                PROVIDER, what, f"updated is {stamp!r}", reply.text
            ) from exc

    def write(self, name: str, data: bytes) -> None:
        """Write the object whole (a media upload: one request)."""
        what = f"write gs://{self.bucket_name}/{name}"
        url = f"{self._base()}/upload/storage/v1/b/{quote(self.bucket_name, safe='')}/o"
        self._call(what, "POST", url, params={"uploadType": "media", "name": name}, data=data)

    def delete_object(self, name: str) -> None:
        """Delete the object (``objects.delete``: an empty answer). Only `gpuops check` calls
        it, on the probe object it has just written; nothing here touches the lane's VM."""
        what = f"delete gs://{self.bucket_name}/{name}"
        self._call(what, "DELETE", f"{self._base()}/storage/v1{self._object_path(name)}")
