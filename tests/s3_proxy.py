"""A loopback HTTP proxy in front of the S3 stand-in that can lose an answer: it forwards a
request to moto's server, lets it land there, and then closes the client's connection without
a byte of the reply, as a network cut after the request went out does.

``drop(n, method, conditional=True)``: the next ``n`` matching requests (``PUT`` with an
``If-Match`` or ``If-None-Match`` header, or ``DELETE`` with ``If-Match``) land upstream and
lose their answer. Everything else passes through untouched.

``blind=True`` makes it a store that ignores preconditions: it strips ``If-Match`` and
``If-None-Match`` from every request before forwarding it, as some S3-compatible stores
silently do (every conditional write lands).
"""

from __future__ import annotations

import http.client
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

CONDITIONS = ("if-match", "if-none-match")
HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


class LossyProxy:
    def __init__(self, upstream: str, *, blind: bool = False) -> None:
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.lock = threading.Lock()
        self.drops: dict[str, int] = {}
        self.skips: dict[str, int] = {}
        self.dropped: list[tuple[str, str]] = []  # (method, path) whose answers were lost
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
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
                ignored = HOP | (set(CONDITIONS) if blind else set())
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ignored}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection(proxy.host, proxy.port, timeout=30)
                upstream.connect()
                assert upstream.sock is not None
                upstream.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                payload = answer.read()
                upstream.close()
                conditional = any(self.headers.get(name) for name in CONDITIONS)
                if conditional and proxy._take(self.command):
                    with proxy.lock:
                        proxy.dropped.append((self.command, self.path))
                    self.close_connection = True  # it landed; the answer is lost
                    return
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP and name.lower() != "content-length":
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

    def clear(self) -> None:
        with self.lock:
            self.drops.clear()
            self.skips.clear()

    def _take(self, method: str) -> bool:
        with self.lock:
            if self.drops.get(method, 0) <= 0:
                return False
            if self.skips.get(method, 0) > 0:
                self.skips[method] -= 1
                return False
            self.drops[method] -= 1
            return True

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
