"""FakeVast on loopback HTTP: the same model and routes as in-process, for other processes.

``serve_http(model)`` binds 127.0.0.1 only (DESIGN §4: a fake never listens beyond the
machine), on a free port by default, and answers from a background thread until ``close()``.
An unknown route is a 404 whose JSON body lists every known route; a lost create closes the
connection without a byte of answer; a bug in the fake is a 500 that says so. A ticker
thread applies the clock every ``TICK_S`` so the fake ssh box table follows a scaled clock
even while nobody calls the API (a box that dies mid-job stops answering ssh).
"""

from __future__ import annotations

import ipaddress
import sys
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qsl, urlsplit

from fakes.vast import wire
from fakes.vast.model import FakeVast
from fakes.vast.routes import UnknownRoute, dispatch
from fakes.vast.wire import Reply, Request

# Real seconds between two applications of the clock to the box table.
TICK_S = 0.2
# How often serve_forever looks for a shutdown request: close() waits at most this long.
SHUTDOWN_POLL_S = 0.05
# A request body larger than this is refused: no Vast call the adapter makes comes close.
MAX_BODY_BYTES = 1 << 20


class FakeVastServer:
    """A running loopback server; ``url`` is what VAST_URL should say."""

    def __init__(self, model: FakeVast, httpd: ThreadingHTTPServer) -> None:
        self.model = model
        self._httpd = httpd
        self.host, self.port = str(httpd.server_address[0]), int(httpd.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=httpd.serve_forever,
                kwargs={"poll_interval": SHUTDOWN_POLL_S},
                name="fake-vast-http",
                daemon=True,
            ),
            threading.Thread(target=self._tick, name="fake-vast-tick", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.model.tick()

    def close(self) -> None:
        """Stop answering and release the port."""
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> FakeVastServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FakeVastServer(url={self.url!r})"


def serve_http(model: FakeVast, host: str = "127.0.0.1", port: int = 0) -> FakeVastServer:
    """Serve ``model`` on ``host:port`` (port 0: a free one); only loopback addresses."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"FakeVast binds a literal loopback address, not {host!r}") from None
    if not address.is_loopback or address.version != 4:
        raise ValueError(f"FakeVast binds loopback only (DESIGN §4), not {host}")
    httpd = ThreadingHTTPServer((host, port), _handler_for(model))
    httpd.daemon_threads = True
    return FakeVastServer(model, httpd)


def _handler_for(model: FakeVast) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "FakeVast"
        disable_nagle_algorithm = True  # headers and body leave at once: no 40 ms ACK stalls

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self._send(wire.bad_request(f"a {length}-byte body is larger than any Vast call"))
                return
            parts = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=self.rfile.read(length) if length else b"",
            )
            try:
                reply = dispatch(model, request)
            except UnknownRoute as exc:
                reply = wire.unknown_route(exc.method, exc.path, exc.known)
            except Exception as exc:  # a bug in the fake: answer it loudly, never hang
                traceback.print_exc(file=sys.stderr)
                reply = wire.internal_error(f"{type(exc).__name__}: {exc}")
            if reply.drop:
                self.close_connection = True  # no status line: the answer is lost
                return
            self._send(reply)

        def _send(self, reply: Reply) -> None:
            data = reply.body.encode("utf-8")
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
