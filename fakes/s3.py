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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fakes.seam import SHUTDOWN_POLL_S, serve_in_thread

BUCKET = "gpuops-fakes"
STATE_PREFIX = "state"  # `fakes serve` protects it: writes there must be conditional
REGION = "us-east-1"
# moto accepts any credentials; these say what they are (never a real key, H3).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "fake-s3-access-key", "AWS_SECRET_ACCESS_KEY": "fake-s3-secret"}


class S3Unavailable(RuntimeError):
    """moto's server is not installed (the dev extras are absent)."""


@dataclass
class FakeS3:
    """A running moto server on 127.0.0.1; ``url`` is its endpoint (the policy front's, when
    the bucket is protected: ``front``)."""

    server: Any
    url: str
    bucket: str = BUCKET
    front: S3Front | None = None

    def exports(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.url,
            "GPUOPS_S3_ENDPOINT": self.url,
            "AWS_DEFAULT_REGION": REGION,
            **CREDENTIALS,
            "GPUOPS_FAKE_S3_BUCKET": self.bucket,
        }

    def close(self) -> None:
        if self.front is not None:
            self.front.close()
        _stop_promptly(self.server.stop, self.server.get_host_and_port())


def _stop_promptly(stop: Callable[[], None], address: tuple[str, int]) -> None:
    """``stop()`` a server whose serving loop looks for a stop request only between waits of
    half a second (moto's, through werkzeug's default), waking that wait with a connection
    until the stop returns."""
    import contextlib
    import socket
    import threading

    stopping = threading.Thread(target=stop, daemon=True)
    stopping.start()
    while stopping.is_alive():
        with contextlib.suppress(OSError):
            socket.create_connection(address, timeout=SHUTDOWN_POLL_S).close()
        stopping.join(SHUTDOWN_POLL_S)


def serve_s3(
    host: str = "127.0.0.1", bucket: str = BUCKET, *, protect: str | None = None
) -> FakeS3:
    """Start moto's S3 on ``host`` (loopback only) on a free port, with ``bucket`` created.
    ``protect``: a prefix whose writes must be conditional; the stand-in is then moto behind an
    :class:`S3Front`, which enforces bucket policies, with :func:`conditional_writes_policy`
    set on that prefix (``url`` is the front's)."""
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
    if protect is None:
        return fake
    import json

    fake.front = S3Front(fake.url)
    fake.url = fake.front.url
    policy = json.dumps(conditional_writes_policy(bucket, protect))
    boto3.client(  # through the front, which keeps what it enforces
        "s3",
        endpoint_url=fake.url,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    ).put_bucket_policy(Bucket=bucket, Policy=policy)
    return fake


def conditional_writes_policy(bucket: str, prefix: str) -> dict[str, Any]:
    """AWS's documented way to require conditional writes (S3 user guide, "Enforce conditional
    writes on Amazon S3 buckets"): deny every PutObject under ``prefix`` that carries neither
    an ``If-None-Match`` nor an ``If-Match`` header (the ``s3:if-none-match`` and
    ``s3:if-match`` condition keys, both null)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "GpuopsStateConditionalWritesOnly",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{bucket}/{prefix.strip('/')}/*",
                "Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}},
            }
        ],
    }


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


# --- bucket policies: the part of AWS's evaluation the stand-in enforces (H4) -----------------
# moto keeps a bucket's policy but enforces none of it. The front enforces the Deny statements
# of the policies set through it, as AWS does (IAM JSON policy reference): an explicit Deny wins
# when its Action, its Resource and every one of its Conditions match; under one condition
# operator, several keys must all hold. ``s3:if-none-match`` and ``s3:if-match`` are present
# when the request carries the ``If-None-Match`` / ``If-Match`` header (S3 user guide,
# "Enforce conditional writes on Amazon S3 buckets"); a PutObject, a copy, a part upload or a
# multipart completion is the ``s3:PutObject`` action. The stand-in has one caller, so it
# models only Principal ``"*"``; a policy with anything it does not model (another principal,
# NotAction, NotResource, a condition operator other than Null, another condition key) is
# refused when it is set (501 NotImplemented), never half-enforced.
POLICY_KEYS = {"s3:if-none-match": "if-none-match", "s3:if-match": "if-match"}
_STATEMENT_FIELDS = {"Sid", "Effect", "Principal", "Action", "Resource", "Condition"}
DENIED_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access '
    "Denied: an explicit deny in the bucket policy</Message></Error>"
)  # AWS's code and status for an explicit deny; the message is the stand-in's own


def _error(code: str, message: str, bucket: str) -> bytes:
    """An S3 error body (AWS's codes; the messages of the policy calls are AWS's own words
    where the stand-in knows them, else its own)."""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
        f"</Message><BucketName>{bucket}</BucketName></Error>"
    ).encode()


class UnmodelledPolicy(ValueError):
    """A bucket policy with something the front does not enforce."""


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else [value]


def deny_statements(policy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The Deny statements of a policy document, each checked to be one the front models;
    UnmodelledPolicy naming what is not."""
    out: list[Mapping[str, Any]] = []
    for statement in _listed(policy.get("Statement", [])):
        if not isinstance(statement, dict):
            raise UnmodelledPolicy(f"a statement that is not an object: {statement!r}")
        extra = set(statement) - _STATEMENT_FIELDS
        if extra:
            raise UnmodelledPolicy(f"the statement field {min(extra)}")
        if statement.get("Effect") != "Deny":
            continue  # its one caller owns the bucket: an Allow grants nothing it lacks
        if statement.get("Principal") not in ("*", {"AWS": "*"}):
            raise UnmodelledPolicy(f"the principal {statement.get('Principal')!r}")
        for operator, keys in dict(statement.get("Condition", {})).items():
            if operator != "Null":
                raise UnmodelledPolicy(f"the condition operator {operator}")
            for key, value in dict(keys).items():
                if key.lower() not in POLICY_KEYS:
                    raise UnmodelledPolicy(f"the condition key {key}")
                if str(value).lower() not in ("true", "false"):
                    raise UnmodelledPolicy(f"the Null value {value!r}")
        out.append(statement)
    return out


def _glob(pattern: str, text: str, *, case: bool) -> bool:
    """An IAM wildcard match: ``*`` any run of characters, ``?`` any one."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch("".join(parts), text, 0 if case else re.IGNORECASE) is not None


def denied(
    statements: list[Mapping[str, Any]], action: str, resource: str, headers: Mapping[str, str]
) -> bool:
    """Whether a Deny statement refuses ``action`` on ``resource`` (an ARN) for a request
    with these (lower-case) headers."""
    for statement in statements:
        if not any(_glob(a, action, case=False) for a in _listed(statement.get("Action"))):
            continue
        if not any(_glob(r, resource, case=True) for r in _listed(statement.get("Resource"))):
            continue
        nulls = dict(statement.get("Condition", {})).get("Null", {})
        if all(
            (POLICY_KEYS[key.lower()] not in headers) == (str(value).lower() == "true")
            for key, value in nulls.items()
        ):
            return True
    return False


def object_action(method: str, query: Mapping[str, str]) -> str | None:
    """The IAM action of a request on an object, or None for one the front does not judge."""
    if method == "PUT" or (method == "POST" and ("uploads" in query or "uploadId" in query)):
        return "s3:PutObject"  # a put, a copy, a part, a multipart start or completion
    if method == "DELETE" and "uploadId" not in query:
        return "s3:DeleteObject"
    if method in ("GET", "HEAD"):
        return "s3:GetObject"
    return None


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

    Bucket policies are the front's own (``PutBucketPolicy``, ``GetBucketPolicy``, whose
    answer is NoSuchBucketPolicy while none is set, ``DeleteBucketPolicy``; moto never sees
    them, as its own evaluation misjudges the conditional-write keys): one is enforced on every
    object request after it (``deny_statements``, ``denied``), and what a Deny statement
    refuses is answered 403 AccessDenied and does not land (``denied`` lists them).
    """

    def __init__(self, upstream: str, *, blind: bool = False) -> None:
        import http.client
        import json
        import socket
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qsl, unquote, urlsplit

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
        # bucket -> its policy's text and its Deny statements (``deny_statements``)
        self.policies: dict[str, tuple[str, list[Mapping[str, Any]]]] = {}
        self.denied: list[tuple[str, str]] = []  # (method, path) refused by a bucket policy
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
                url = urlsplit(self.path)
                query = dict(parse_qsl(url.query, keep_blank_values=True))
                bucket, _, key = unquote(url.path).lstrip("/").partition("/")
                if not key and "policy" in query:
                    self._policy(bucket, body)
                    return
                action = object_action(self.command, query) if key else None
                with front.lock:
                    statements = front.policies.get(bucket, ("", []))[1]
                if action and denied(statements, action, f"arn:aws:s3:::{bucket}/{key}", lower):
                    with front.lock:
                        front.denied.append((self.command, self.path))
                    self._reply(403, [("Content-Type", "application/xml")], DENIED_BODY.encode())
                    return
                conditional = any(lower.get(name) for name in CONDITIONS)
                if conditional:
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

            def _policy(self, bucket: str, body: bytes) -> None:
                """PutBucketPolicy, GetBucketPolicy, DeleteBucketPolicy, kept here: moto
                judges policies itself, and misjudges the conditional-write keys."""
                xml = [("Content-Type", "application/xml")]
                if self.command == "GET":
                    with front.lock:
                        kept = front.policies.get(bucket)
                    if kept is None:
                        self._reply(404, xml, _error("NoSuchBucketPolicy", "The bucket "
                                    "policy does not exist", bucket))  # fmt: skip
                    else:
                        self._reply(200, [("Content-Type", "application/json")], kept[0].encode())
                    return
                if self.command == "DELETE":
                    with front.lock:
                        front.policies.pop(bucket, None)
                    self._reply(204, [], b"")
                    return
                try:
                    statements = deny_statements(json.loads(body))
                except UnmodelledPolicy as exc:
                    self._reply(501, xml, _error("NotImplemented", f"the S3 stand-in does "
                                f"not model {exc}", bucket))  # fmt: skip
                    return
                except (ValueError, AttributeError, TypeError):
                    self._reply(400, xml, _error("MalformedPolicy", "Policies must be valid "
                                "JSON and the first byte must be '{'", bucket))  # fmt: skip
                    return
                with front.lock:
                    front.policies[bucket] = (body.decode(), statements)
                self._reply(204, [], b"")

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
        self.thread = serve_in_thread(self.server)

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
