"""FakeVast in-process: ``responses`` callbacks in front of the model, for fast tests.

Every request under ``base_url`` goes to :func:`fakes.vast.routes.dispatch`, whatever its
method or path, so an unknown route is not responses' anonymous ConnectionError (which the
vastai client would retry, and the adapter would call "unavailable") but an
:class:`~fakes.vast.routes.UnknownRoute` raised into the test with every known route.
A lost create (``answer: close``) raises ``requests.ConnectionError`` after the box exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import parse_qsl, urlsplit

from fakes.vast.routes import dispatch
from fakes.vast.wire import Request

if TYPE_CHECKING:
    import requests
    import responses

    from fakes.vast.model import FakeVast

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
# What a responses callback returns: an exception to raise, or (status, headers, body).
Answer: TypeAlias = Exception | tuple[int, dict[str, str], str]


@contextmanager
def activate(
    model: FakeVast, base_url: str, *, mock: responses.RequestsMock | None = None
) -> Iterator[responses.RequestsMock]:
    """Route ``base_url`` to ``model`` for the duration; onto ``mock`` when given (so a test
    can mix the fake with other registrations), else on a fresh RequestsMock."""
    import responses

    if mock is not None:
        register(model, mock, base_url)
        yield mock
        return
    with responses.RequestsMock(assert_all_requests_are_fired=False) as fresh:
        register(model, fresh, base_url)
        yield fresh


def register(model: FakeVast, mock: responses.RequestsMock, base_url: str) -> None:
    """Add one callback per HTTP method answering everything under ``base_url``."""
    prefix = re.compile(re.escape(base_url.rstrip("/")) + r"(/.*)?$")

    def callback(prepared: requests.PreparedRequest) -> Answer:
        return _answer(model, prepared)

    for method in METHODS:
        mock.add_callback(method, prefix, callback=callback, content_type=None)


def _answer(model: FakeVast, prepared: requests.PreparedRequest) -> Answer:
    import requests

    parts = urlsplit(str(prepared.url))
    body = prepared.body
    raw = body.encode() if isinstance(body, str) else body if isinstance(body, bytes) else b""
    request = Request(
        method=str(prepared.method),
        path=parts.path,
        query=dict(parse_qsl(parts.query, keep_blank_values=True)),
        headers={k.lower(): _text(v) for k, v in prepared.headers.items()},
        body=raw,
    )
    reply = dispatch(model, request)
    if reply.drop:
        return requests.ConnectionError(
            f"FakeVast closed the connection without answering {request.method} {request.path}"
        )
    return reply.status, dict(reply.headers), reply.body


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
