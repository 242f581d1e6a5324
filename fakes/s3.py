"""The S3 stand-in `gpuops fakes serve` starts: moto's server on loopback, with one bucket.

moto (``moto[server]``) is a dev dependency only, so it is imported here, lazily: a user
without the dev extras gets the other fakes and an ``# S3 stand-in absent`` line in the
exports instead of a crash. The exports point both ways gpuops reaches S3 at it: boto3's own
``AWS_ENDPOINT_URL`` (the state store, ``--state s3://...``) and ``GPUOPS_S3_ENDPOINT`` (the
guardian's ``GPUOPS_RESULTS=s3://...``), with throwaway credentials and a region.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BUCKET = "gpuops-fakes"
REGION = "us-east-1"
# moto accepts any credentials; these say what they are (never a real key, H3).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fake-s3-access-key", "AWS_SECRET_ACCESS_KEY": "fake-s3-secret"}


class S3Unavailable(RuntimeError):
    """moto's server is not installed (the dev extras are absent)."""


@dataclass
class FakeS3:
    """A running moto server on 127.0.0.1; ``url`` is its endpoint."""

    server: Any
    url: str
    bucket: str = BUCKET

    def exports(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.url,
            "GPUOPS_S3_ENDPOINT": self.url,
            "AWS_DEFAULT_REGION": REGION,
            **CREDENTIALS,
            "GPUOPS_FAKE_S3_BUCKET": self.bucket,
        }

    def close(self) -> None:
        self.server.stop()


def serve_s3(host: str = "127.0.0.1", bucket: str = BUCKET) -> FakeS3:
    """Start moto's S3 on ``host`` (loopback only) on a free port, with ``bucket`` created."""
    if not ipaddress.ip_address(host).is_loopback:
        raise ValueError(f"the S3 stand-in binds loopback only, not {host}")
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise S3Unavailable(
            f"moto[server] is not installed ({exc}); install the dev extras"
        ) from None
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    bound_host, port = server.get_host_and_port()
    fake = FakeS3(server, f"http://{bound_host}:{port}", bucket)
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=fake.url,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=bucket)
    return fake


# --- AWS's conditional-write rules, judged on every request the front forwards (H6) -----------
# Each rule is AWS's own, from the Amazon S3 API reference and user guide:
# - PutObject's If-None-Match "Expects the '*' (asterisk) character" (API_PutObject, IfNoneMatch);
#   If-Match "Expects the ETag value as a string" (API_PutObject, IfMatch), and an ETag is an
#   RFC 7232 entity-tag: a quoted string, as S3 itself returns it.
# - Conditional writes are PutObject, CompleteMultipartUpload and CopyObject; CreateMultipartUpload,
#   UploadPart and UploadPartCopy "don't accept conditional headers" (userguide
#   conditional-writes-enforce.html).
# - DeleteObject takes If-Match only: an ETag, or "*" for "the object exists" (userguide
#   conditional-deletes.html); If-None-Match is no delete's precondition.
# - "To use conditional writes, you must ... use AWS Signature Version 4 to sign the request"
#   (userguide conditional-writes.html).
# - A concurrent conditional write may be answered 409 ConditionalRequestConflict, which means
#   "retry" (API_PutObject); S3Front can answer it (``conflict``) without the write landing.
CONDITIONS = ("if-match", "if-none-match")
_ENTITY_TAG = re.compile(r'(W/)?"[\x21\x23-\x7e]*"')  # RFC 7232 2.3: a quoted opaque tag
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}
CONFLICT_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>ConditionalRequestConflict</Code>'
    "<Message>A conflicting conditional operation is currently in progress against this "
    "resource. Please try again.</Message></Error>"
)  # the code and status API_PutObject names; the message is the stand-in's own


def conditional_breaches(
    method: str, query: Mapping[str, str], headers: Mapping[str, str]
) -> list[str]:
    """Every way one S3 request breaks AWS's conditional-write rules (empty: none).
    ``headers``: lower-case names."""
    match, none_match = headers.get("if-match"), headers.get("if-none-match")
    if match is None and none_match is None:
        return []
    where = f"{method} {'uploadId' if 'uploadId' in query else 'object'}"
    out: list[str] = []
    if method not in ("PUT", "POST", "DELETE", "GET", "HEAD"):
        out.append(f"{where}: a conditional header on a {method}")
    if method in ("GET", "HEAD"):
        return out  # conditional reads: RFC 7232's own rules, not judged here
    if "partNumber" in query or (method == "POST" and "uploads" in query):
        out.append(f"{where}: UploadPart and CreateMultipartUpload take no conditional header")
    if not headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 "):
        out.append(f"{where}: a conditional write not signed with Signature Version 4")
    if method == "DELETE":
        if none_match is not None:
            out.append(f"{where}: If-None-Match on DeleteObject (only If-Match is a delete's)")
        if match is not None and match != "*" and not _ENTITY_TAG.fullmatch(match):
            out.append(f"{where}: If-Match {match!r} is not a quoted ETag or '*'")
        return out
    if none_match is not None and none_match != "*":
        out.append(f"{where}: If-None-Match {none_match!r}, AWS expects '*' only")
    if match is not None and not _ENTITY_TAG.fullmatch(match):
        out.append(f"{where}: If-Match {match!r} is not a quoted ETag")
    if match is not None and none_match is not None:
        out.append(f"{where}: both If-Match and If-None-Match on one write")
    return out


class S3Front:
    """A loopback HTTP front for the S3 stand-in, for what moto never does.

    Every request is judged by :func:`conditional_breaches` (``breaches``, ``judged``) and
    forwarded to moto, except where scripted:

    - ``drop(n, method)``: the next ``n`` conditional ``method`` requests (``PUT`` with an
      ``If-Match`` or ``If-None-Match``, ``DELETE`` with ``If-Match``) land upstream and lose
      their answer: the connection closes without a byte, as a network cut after the request
      went out does;
    - ``conflict(n, method)``: the next ``n`` conditional ``method`` requests are answered AWS's
      409 ConditionalRequestConflict and do not land;
    - ``blind=True``: a store that ignores preconditions (``If-Match``/``If-None-Match``
      stripped before forwarding, as some S3-compatible stores silently do).
    """

    def __init__(self, upstream: str, *, blind: bool = False) -> None:
        import http.client
        import socket
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qsl, urlsplit

        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.lock = threading.Lock()
        self.drops: dict[str, int] = {}
        self.skips: dict[str, int] = {}
        self.conflicts: dict[str, int] = {}
        self.dropped: list[tuple[str, str]] = []  # (method, path) whose answers were lost
        self.conflicted: list[tuple[str, str]] = []  # (method, path) answered 409
        self.breaches: list[str] = []
        self.judged = 0  # conditional requests judged
        front = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                return

            def setup(self) -> None:
                super().setup()  # headers and body go out as they are written: no 40 ms waits
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            self.rfile.readline()
                            return out
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _forward(self) -> None:
                body = self._body()
                lower = {k.lower(): v for k, v in self.headers.items()}
                conditional = any(lower.get(name) for name in CONDITIONS)
                if conditional:
                    query = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
                    found = conditional_breaches(self.command, query, lower)
                    with front.lock:
                        front.judged += 1
                        front.breaches += found
                    if front._take(front.conflicts, self.command, skip=False):
                        with front.lock:
                            front.conflicted.append((self.command, self.path))
                        self._reply(409, [("Content-Type", "application/xml")],
                                    CONFLICT_BODY.encode())  # fmt: skip
                        return
                ignored = _HOP | (set(CONDITIONS) if blind else set())
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ignored}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection(front.host, front.port, timeout=30)
                upstream.connect()
                if upstream.sock is not None:
                    upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                payload = answer.read()
                upstream.close()
                if conditional and front._take(front.drops, self.command, skip=True):
                    with front.lock:
                        front.dropped.append((self.command, self.path))
                    self.close_connection = True  # it landed; the answer is lost
                    return
                self._reply(answer.status, answer.getheaders(), payload)

            def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def drop(self, n: int, method: str, skip: int = 0) -> None:
        """Lose the answers of the next ``n`` conditional ``method`` requests, after letting
        ``skip`` of them through."""
        with self.lock:
            self.drops[method] = self.drops.get(method, 0) + n
            self.skips[method] = self.skips.get(method, 0) + skip

    def conflict(self, n: int, method: str) -> None:
        """Answer the next ``n`` conditional ``method`` requests 409 ConditionalRequestConflict
        (they do not land)."""
        with self.lock:
            self.conflicts[method] = self.conflicts.get(method, 0) + n

    def clear(self) -> None:
        with self.lock:
            self.drops.clear()
            self.skips.clear()
            self.conflicts.clear()

    def _take(self, counts: dict[str, int], method: str, *, skip: bool) -> bool:
        with self.lock:
            if counts.get(method, 0) <= 0:
                return False
            if skip and self.skips.get(method, 0) > 0:
                self.skips[method] -= 1
                return False
            counts[method] -= 1
            return True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
