"""FakeGCE on loopback HTTP (compute and storage on one port), for other processes.

Binds 127.0.0.1 only. A ticker applies the clock so a boot plays on while nobody asks.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from fakes.gce.model import FakeGCE
from fakes.gce.routes import SLEEP, UnknownRoute, dispatch, unknown_reply
from fakes.vast.wire import Reply, Request

TICK_S = 0.2
SHUTDOWN_POLL_S = 0.05
MAX_BODY_BYTES = 8 << 20


class FakeGCEServer:
    def __init__(self, fake: FakeGCE, httpd: ThreadingHTTPServer, ticker: bool = True) -> None:
        self.fake, self._httpd = fake, httpd
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=httpd.serve_forever,
                kwargs={"poll_interval": SHUTDOWN_POLL_S},
                daemon=True,
                name="fake-gce-http",
            ),
        ]
        if ticker:
            self._threads.append(
                threading.Thread(target=self._tick, daemon=True, name="fake-gce-tick")
            )
        for thread in self._threads:
            thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            self.fake.tick()

    def close(self) -> None:
        """Stop serving and kill every boot's processes: nothing is left behind."""
        self._stop.set()
        self.fake.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        for thread in self._threads:
            thread.join()


def serve_http(
    fake: FakeGCE, port: int = 0, *, ticker: bool = True, boot_root: Path | None = None
) -> FakeGCEServer:
    """Serve ``fake`` on loopback; its boots run for real against this server. ``ticker``:
    apply the clock in the background (a scaled clock); off for a test's FakeClock."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler(fake))
    httpd.daemon_threads = True
    server = FakeGCEServer(fake, httpd, ticker=ticker)
    fake.attach(server.url, boot_root)
    return server


def _handler(fake: FakeGCE) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def handle(self) -> None:
            # a client process that exits with its keep-alive open resets the connection
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                super().handle()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            parts = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=self.rfile.read(length) if 0 < length <= MAX_BODY_BYTES else b"",
            )
            try:
                sleeping = SLEEP.fullmatch(request.path)
                if sleeping and request.method == "POST":  # held outside the model's lock
                    fake.sleep_until(
                        int(sleeping["n"]),
                        int(request.query.get("pid", "0")),
                        float(request.query.get("seconds", "0")),
                    )
                    reply = Reply(200, (), "")
                else:
                    reply = dispatch(fake, request)
            except UnknownRoute as exc:
                reply = unknown_reply(exc)
            except Exception as exc:  # a bug in the fake: loud, never a hang
                traceback.print_exc(file=sys.stderr)
                reply = Reply(500, (), f"FakeGCE internal error: {type(exc).__name__}: {exc}")
            data = reply.body.encode(
                "latin-1" if not reply.headers or "json" not in reply.headers[0][1] else "utf-8"
            )
            self.send_response(reply.status)
            for name, value in reply.headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet."""

    return Handler
