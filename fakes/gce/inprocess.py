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

        def callback(prepared: requests.PreparedRequest) -> tuple[int, dict[str, str], str]:
            parts = urlsplit(str(prepared.url))
            body = prepared.body
            raw = (
                body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else b""
            )
            request = Request(
                method=str(prepared.method),
                path=parts.path,
                query=dict(parse_qsl(parts.query, keep_blank_values=True)),
                headers={k.lower(): str(v) for k, v in prepared.headers.items()},
                body=raw,
            )
            reply = dispatch(fake, request)
            return reply.status, dict(reply.headers), reply.body

        for method in METHODS:
            mock.add_callback(method, prefix, callback=callback, content_type=None)
        yield mock
