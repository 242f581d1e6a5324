"""FakeGCE in-process: ``responses`` callbacks in front of the model (as fakes/vast/inprocess.py).

An unknown route raises ``UnknownRoute`` into the test, with every known route."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from fakes.gce.routes import dispatch
from fakes.vast.wire import Request

if TYPE_CHECKING:
    import requests
    import responses

    from fakes.gce.model import FakeGCE

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")


@contextmanager
def activate(fake: FakeGCE, base_url: str) -> Iterator[responses.RequestsMock]:
    """Route ``base_url`` (compute and storage) to ``fake`` for the duration."""
    import responses

    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        prefix = re.compile(re.escape(base_url.rstrip("/")) + r"(/.*)?$")

        def callback(prepared: requests.PreparedRequest) -> tuple[int, dict[str, str], bytes]:
            parts = urlsplit(str(prepared.url))
            body = prepared.body
            raw = (
                body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else b""
            )
            request = Request(
                method=str(prepared.method),
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                # requests adds Host only when it sends; the resumable protocol's Location needs it
                headers={"host": parts.netloc}
                | {k.lower(): str(v) for k, v in prepared.headers.items()},
                body=raw,
            )
            reply = dispatch(fake, request)
            # as the loopback server: UTF-8 when the first header names JSON, else the body is
            # bytes carried as latin-1 (an object's data), never re-encoded; text beyond
            # latin-1 (a metadata value) can only be UTF-8
            json_first = bool(reply.headers) and "json" in reply.headers[0][1]
            try:
                data = reply.body.encode("utf-8" if json_first else "latin-1")
            except UnicodeEncodeError:
                data = reply.body.encode("utf-8")
            return reply.status, dict(reply.headers), data

        for method in METHODS:
            mock.add_callback(method, prefix, callback=callback, content_type=None)
        yield mock
