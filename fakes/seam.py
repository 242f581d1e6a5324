"""The one HTTP seam every fake shares: requests and replies, a router that knows its routes, one
loopback server and one in-process registration (``responses`` callbacks).

A fake is a :class:`Site`: its name, how it answers a :class:`Request` (raising
:class:`UnknownRoute`, or its own exception that ``unknown`` turns into its loud 404), and the
clock work a server does in the background. Everything else is the same for every fake:

- **loopback only**: :func:`check_loopback` refuses any host but a literal 127.x address before
  a socket exists, and the server asserts the address it bound;
- **one body limit**: a request body over :data:`MAX_BODY_BYTES` is never read nor dispatched; it
  is answered 413 with the fakes' own body (:func:`too_large`), in process and over HTTP alike;
- **UTF-8**: a text reply is sent as UTF-8 whatever its content type; a reply whose body is
  bytes is sent as those bytes (an object download);
- **loud**: an unknown route is a 404 listing every known route (over HTTP) or an
  ``AssertionError`` raised into the test (in process); a bug in the fake is a 500 that says so.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    import requests
    import responses

LOOPBACK = "127.0.0.1"
# The largest request body any fake reads: no call gpuops or a provider's client makes comes
# close (a Vast call is a few KiB; the lane's uploads are small result files).
MAX_BODY_BYTES = 8 << 20
# The longest chunk-size line (or trailer line) a chunked request body may have.
MAX_CHUNK_LINE = 4096
# Real seconds between two applications of the clock by a server's ticker.
TICK_S = 0.2
# How often serve_forever looks for a shutdown request: close() waits at most this long.
SHUTDOWN_POLL_S = 0.05
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
JSON = (("Content-Type", "application/json"),)


@dataclass(frozen=True)
class Request:
    """One HTTP request as a fake sees it; header names are lower-case."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes = b""

    def json(self) -> object:
        return json.loads(self.body or b"{}")


@dataclass(frozen=True)
class Reply:
    """One answer. ``body``: text (sent as UTF-8) or bytes (sent as they are). ``drop``: close
    the connection without answering (a lost response)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: str | bytes
    drop: bool = False

    @property
    def data(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else self.body.encode("utf-8")

    def json(self) -> Any:
        return json.loads(self.data)


class UnknownRoute(AssertionError):
    """A request a fake has no route for: a test or client bug, never a provider answer."""

    def __init__(self, fake: str, method: str, path: str, known: Sequence[str]) -> None:
        self.fake, self.method, self.path, self.known = fake, method, path, list(known)
        listed = "\n  ".join(self.known)
        super().__init__(f"{fake} has no route {method} {path}; known routes:\n  {listed}")


class RouteLike(Protocol):
    @property
    def method(self) -> str: ...
    @property
    def pattern(self) -> re.Pattern[str]: ...


R = TypeVar("R", bound=RouteLike)


class Router(Generic[R]):
    """A fake's URL table: which route answers a method and path, and every route it knows."""

    def __init__(self, fake: str, routes: Sequence[R]) -> None:
        self.fake, self.routes = fake, tuple(routes)

    def known(self) -> list[str]:
        return [str(route) for route in self.routes]

    def find(self, method: str, path: str) -> tuple[R, dict[str, str]] | None:
        for route in self.routes:
            found = route.pattern.fullmatch(path)
            if found is not None and route.method == method.upper():
                return route, found.groupdict()
        return None

    def unknown(self, method: str, path: str) -> UnknownRoute:
        return UnknownRoute(self.fake, method, path, self.known())


def too_large(fake: str, length: int) -> Reply:
    """The fakes' own 413 for a body over the one limit: the same shape from every fake."""
    body = {
        "success": False,
        "error": "fake_body_too_large",
        "msg": f"{fake}: a {length}-byte request body is over the fakes' {MAX_BODY_BYTES}-byte limit",
        "limit_bytes": MAX_BODY_BYTES,
    }
    return Reply(413, JSON, json.dumps(body))


def internal_error(fake: str, message: str) -> Reply:
    """The fake itself failed: a bug in the fake, said as such."""
    body = {"success": False, "error": "fake_internal_error", "msg": f"{fake}: {message}"}
    return Reply(500, JSON, json.dumps(body))


@dataclass(frozen=True)
class Site:
    """A fake as the seam serves it.

    ``answer``: the fake's dispatch (may raise an unknown-route exception). ``unknown``: the
    fake's own 404 for such an exception, or None for any other. ``tick``: applied every TICK_S
    by a server's ticker; ``close``: run when the server closes. ``keep_alive``: HTTP/1.1
    connections that stay open (else HTTP/1.0, one request a connection).
    """

    name: str
    answer: Callable[[Request], Reply]
    unknown: Callable[[Exception], Reply | None]
    tick: Callable[[], None] | None = None
    close: Callable[[], None] | None = None
    keep_alive: bool = False


def unknown_reply(exc: Exception) -> Reply | None:
    """The seam's own 404 for a :class:`UnknownRoute`: what was asked, and every known route."""
    if not isinstance(exc, UnknownRoute):
        return None
    body = {
        "success": False,
        "error": "fake_unknown_route",
        "msg": str(exc).partition(";")[0],
        "known_routes": exc.known,
    }
    return Reply(404, JSON, json.dumps(body))


def answer(site: Site, request: Request) -> Reply:
    """The one entry both servings use: the body limit first, then the fake."""
    if len(request.body) > MAX_BODY_BYTES:
        return too_large(site.name, len(request.body))
    return site.answer(request)


# --- loopback -----------------------------------------------------------------------------------
def check_loopback(host: str, fake: str = "a fake") -> str:
    """``host`` if it is a literal IPv4 loopback address; anything else is refused (DESIGN §4:
    a fake never listens beyond the machine)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{fake} binds a literal loopback address, not {host!r}") from None
    if not address.is_loopback or address.version != 4:
        raise ValueError(f"{fake} binds loopback only (DESIGN §4), not {host}")
    return host


def serve_in_thread(httpd: ThreadingHTTPServer, name: str | None = None) -> threading.Thread:
    """``httpd.serve_forever()`` on a daemon thread, started, that looks for a shutdown request
    every SHUTDOWN_POLL_S: a ``shutdown()`` waits at most that long, not the standard library's
    default half second (paid in every test's teardown that stops a server)."""
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_S},
        name=name,
        daemon=True,
    )
    thread.start()
    return thread


class LoopbackServer:
    """A running loopback server for one site; ``url`` is its base URL."""

    def __init__(self, site: Site, host: str = LOOPBACK, port: int = 0) -> None:
        self.site = site
        httpd = ThreadingHTTPServer((check_loopback(host, site.name), port), _handler(site))
        httpd.daemon_threads = True
        bound = str(httpd.server_address[0])
        if not ipaddress.ip_address(bound).is_loopback:  # what the socket really got
            httpd.server_close()
            raise ValueError(f"{site.name} was bound to {bound}, not loopback")
        self._httpd = httpd
        self.host, self.port = bound, int(httpd.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        self._stop = threading.Event()
        self._threads = [serve_in_thread(httpd, f"{site.name}-http")]
        if site.tick is not None:
            ticker = threading.Thread(target=self._tick, name=f"{site.name}-tick", daemon=True)
            ticker.start()
            self._threads.append(ticker)

    def _tick(self) -> None:
        assert self.site.tick is not None
        while not self._stop.wait(TICK_S):
            self.site.tick()

    def close(self) -> None:
        """Stop answering, run the site's own close, and release the port."""
        self._stop.set()
        if self.site.close is not None:
            self.site.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(url={self.url!r})"


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = site.name
        protocol_version = "HTTP/1.1" if site.keep_alive else "HTTP/1.0"
        disable_nagle_algorithm = True  # headers and body leave at once: no 40 ms ACK stalls

        def handle(self) -> None:
            # a client process that exits with its keep-alive open resets the connection
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                super().handle()

        def _serve(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            parts = urlsplit(self.path)
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            body: bytes | None = b""
            if chunked:  # a body sent in chunks has no Content-Length (RFC 9112, 7.1)
                body = self._chunks()
                length = -1 if body is None else len(body)
            if not 0 <= length <= MAX_BODY_BYTES:  # never read: the connection closes after
                self.close_connection = True
                self._send(too_large(site.name, length))
                return
            if not chunked:
                body = self.rfile.read(length) if length else b""
            assert body is not None
            request = Request(
                method=self.command,
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
            try:
                reply = answer(site, request)
            except Exception as exc:
                found = site.unknown(exc)
                if found is None:  # a bug in the fake: answer it loudly, never hang
                    traceback.print_exc(file=sys.stderr)
                    found = internal_error(site.name, f"{type(exc).__name__}: {exc}")
                reply = found
            if reply.drop:
                self.close_connection = True  # no status line: the answer is lost
                return
            self._send(reply)

        def _chunks(self) -> bytes | None:
            """A chunked body, chunk by chunk up to the last (size 0) and its trailers; None
            when it is malformed or grows over MAX_BODY_BYTES (answered 413, never dispatched)."""
            data = bytearray()
            while True:
                line = self.rfile.readline(MAX_CHUNK_LINE)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    return None
                if size == 0:
                    while self.rfile.readline(MAX_CHUNK_LINE).strip():
                        pass  # trailer fields, none of which a fake reads
                    return bytes(data)
                if size < 0 or len(data) + size > MAX_BODY_BYTES:
                    return None
                data += self.rfile.read(size)
                self.rfile.readline(MAX_CHUNK_LINE)  # the CRLF after each chunk

        def _send(self, reply: Reply) -> None:
            data = reply.data
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _serve

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: request lines would carry ?api_key= when a client sends it (H3)."""

    return Handler


# --- in process ---------------------------------------------------------------------------------
# What a responses callback returns: an exception to raise, or (status, headers, body).
Answer: TypeAlias = Exception | tuple[int, dict[str, str], bytes]


def register(site: Site, mock: responses.RequestsMock, base_url: str) -> None:
    """Answer every method and path under ``base_url`` on ``mock`` from ``site``. An unknown
    route raises into the test (it is an AssertionError); a dropped answer is a
    ``requests.ConnectionError``."""
    prefix = re.compile(re.escape(base_url.rstrip("/")) + r"(/.*)?$")

    def callback(prepared: requests.PreparedRequest) -> Answer:
        return _in_process(site, prepared)

    for method in METHODS:
        mock.add_callback(method, prefix, callback=callback, content_type=None)


@contextlib.contextmanager
def activate(
    site: Site, base_url: str, *, mock: responses.RequestsMock | None = None
) -> Iterator[responses.RequestsMock]:
    """Route ``base_url`` to ``site`` for the duration; onto ``mock`` when given (so a test can
    mix the fake with other registrations), else on a fresh RequestsMock."""
    import responses

    if mock is not None:
        register(site, mock, base_url)
        yield mock
        return
    with responses.RequestsMock(assert_all_requests_are_fired=False) as fresh:
        register(site, fresh, base_url)
        yield fresh


@contextlib.contextmanager
def direct(site: Site, base_url: str) -> Iterator[None]:
    """Route ``base_url`` to ``site`` at requests' transport (``HTTPAdapter.send``), for the
    duration: every request a ``requests.Session`` sends is prepared, hooked and answered as
    with :func:`activate` (a dropped answer is a ``requests.ConnectionError``, an unknown route
    an ``AssertionError`` raised into the caller, any other URL a ``ConnectionError``, as
    ``responses`` answers an unregistered one), without ``responses``' matching and call
    records or urllib3's response objects (the soak runs about a quarter faster so). For loops
    of thousands of exchanges (the soak); tests that read ``responses``' call list use
    :func:`activate`. Not nestable with itself or with ``responses`` on the same thread."""
    import requests
    from requests.adapters import HTTPAdapter

    prefix = base_url.rstrip("/")
    original = HTTPAdapter.send

    def send(  # HTTPAdapter.send's own signature; the transport's options mean nothing here
        adapter: HTTPAdapter,
        prepared: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        url = str(prepared.url)
        if url != prefix and not url.startswith((prefix + "/", prefix + "?")):
            raise requests.ConnectionError(f"{site.name} is direct at {prefix}, not {url}")
        reply = _in_process(site, prepared)
        if isinstance(reply, Exception):
            raise reply
        return _response(prepared, *reply)

    HTTPAdapter.send = send  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        HTTPAdapter.send = original  # type: ignore[method-assign]


def _response(
    prepared: requests.PreparedRequest, status: int, headers: dict[str, str], body: bytes
) -> requests.Response:
    """The ``requests.Response`` an HTTPAdapter builds from a reply, from its parts."""
    import io
    from http import HTTPStatus

    import requests
    from requests.structures import CaseInsensitiveDict
    from requests.utils import get_encoding_from_headers

    response = requests.Response()
    response.status_code = status
    response.headers = CaseInsensitiveDict(headers)
    response.encoding = get_encoding_from_headers(response.headers)
    try:
        response.reason = HTTPStatus(status).phrase
    except ValueError:  # a status code http knows no phrase for: none, as responses gives
        response.reason = None  # type: ignore[assignment]
    response.raw = io.BytesIO(body)  # read by .content, as a urllib3 response is
    response.url = str(prepared.url)
    response.request = prepared
    return response


def _body_bytes(body: object) -> bytes:
    """A prepared body as the bytes it sends: text, bytes, a file (read whole), or an iterable
    of chunks (what requests sends chunked), never silently empty."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    read = getattr(body, "read", None)
    if callable(read):
        data = read()
        return data.encode() if isinstance(data, str) else bytes(data)
    if isinstance(body, Iterable):
        return b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in body)
    raise TypeError(f"a request body of type {type(body).__name__} cannot be sent")


def _in_process(site: Site, prepared: requests.PreparedRequest) -> Answer:
    import requests

    parts = urlsplit(str(prepared.url))
    raw = _body_bytes(prepared.body)
    request = Request(
        method=str(prepared.method),
        path=parts.path,
        query=dict(parse_qsl(parts.query, keep_blank_values=True)),
        # requests adds Host only when it sends; a reply may need it (a resumable upload's
        # Location), as the loopback server has it
        headers={"host": parts.netloc} | {k.lower(): _text(v) for k, v in prepared.headers.items()},
        body=raw,
    )
    reply = answer(site, request)
    if reply.drop:
        return requests.ConnectionError(
            f"{site.name} closed the connection without answering {request.method} {request.path}"
        )
    return reply.status, dict(reply.headers), reply.data


def _text(value: str | bytes) -> str:
    """A header value as HTTP carries it (ISO-8859-1, as http.server reads headers too)."""
    return value.decode("latin-1") if isinstance(value, bytes) else value
