"""A real notification receiver on loopback: an HTTP server that records the JSON apprise's
``json://127.0.0.1:PORT/alarms`` posts (version, title, message, type), for the O1 tests.

``answers`` scripts its status codes in order (500 twice, then 200 for the rest); with
``hold`` set it holds each request open, answering nothing, until ``release`` is set, and
records what ``look()`` saw at the moment the sender gave up (closed its end) or was let go.
"""

from __future__ import annotations

import json
import select
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fakes.seam import serve_in_thread

NET_S = 60.0  # a net for a hung test, never a pace: every wait here ends on an event


class Receiver:
    def __init__(
        self,
        answers: list[int] | None = None,
        *,
        hold: bool = False,
        look: Callable[[], object] = lambda: None,
    ) -> None:
        self.answers = list(answers or [])
        self.hold = hold
        self.look = look
        self.release = threading.Event()
        self.arrived = threading.Event()
        self.received: list[dict[str, Any]] = []
        self.attempts = 0
        self.seen_when_held: list[tuple[str, object]] = []  # ("gave up" | "released", look())
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._changed:
                    receiver.attempts += 1
                    code = receiver.answers.pop(0) if receiver.answers else 200
                    receiver._changed.notify_all()
                if receiver.hold:
                    receiver.arrived.set()
                    receiver.seen_when_held.append(receiver._held(self.connection))
                    return  # answer nothing: the sender gives up, or is let go
                if code == 200:
                    with receiver._changed:
                        receiver.received.append(json.loads(body))
                        receiver._changed.notify_all()
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = serve_in_thread(self.server)

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server.server_address[1]}/alarms"

    def _held(self, connection: socket.socket) -> tuple[str, object]:
        """Hold the request until released or the sender closes its end; what look() saw then."""
        while not self.release.wait(0.02):
            readable, _, _ = select.select([connection], [], [], 0)
            if readable and not connection.recv(1, socket.MSG_PEEK):
                return "gave up", self.look()
        return "released", self.look()

    def titles(self) -> list[str]:
        with self._changed:
            return [str(r["title"]) for r in self.received]

    def wait_for(self, what: str, check: Callable[[Receiver], bool]) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: check(self), timeout=NET_S):
                raise AssertionError(f"the receiver never saw {what}")

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
