"""The one HTTP transport seam every adapter shares: a ``requests.Session`` the adapter owns.

Each adapter (vast.py, gce.py, gcs.py) sends every request through one session of its own,
built here, that points at the real endpoint or a fake (a base URL is all that differs). What
a caller wants to see of the exchanges (``gpuops record``) it passes to the adapter's
constructor as ``observers``: each is registered on the session's public
``hooks["response"]`` (requests' documented event hooks), so it sees every response as it came
off the wire, with its request, and nothing is swapped or patched after construction.

``ExchangeLog`` is the observer ``record vast`` and ``record gce`` use: it keeps each exchange
(method, URL, status, content type, body text) in order. No test library and no private SDK
module is imported at run time. ``requests`` is imported inside the functions: the CLI's
start-up does not pay for it until a provider is called.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

# An observer sees each response (with its ``.request``) as the session received it.
Observer = Callable[[Any], None]


@dataclass(frozen=True)
class Exchange:
    """One HTTP exchange as it went over the wire (the body as text, never parsed)."""

    method: str
    url: str
    status: int
    content_type: str | None
    body: str


def new_session(observers: Sequence[Observer] = (), base: Any = None) -> Any:
    """A ``requests.Session`` (or ``base``, e.g. google-auth's ``AuthorizedSession``, a
    subclass) with each observer on its response hook."""
    import requests

    session: Any = requests.Session() if base is None else base
    session.auth = _as_sent  # the caller's Authorization header, never a ~/.netrc entry's
    for observer in observers:
        session.hooks["response"].append(_hook(observer))
    session.merge_environment_settings = _read_once_per_host(session.merge_environment_settings)
    return session


def _as_sent(request: Any) -> Any:
    """The session's ``auth``: the request as its caller built it.

    With no ``auth`` on the request or the session, requests looks the URL's host up in
    ``~/.netrc`` (or ``$NETRC``) on every request and, where an entry names the host, replaces
    the Authorization header the caller set with that entry's login and password: Vast's
    ``Bearer`` key, or google-auth's token, would give way to a password the user keeps for
    something else, sent to the provider (requests documents the precedence: .netrc over
    ``headers=``). A session ``auth`` that leaves the request as it is turns that lookup off,
    and nothing else: proxies and CA bundles still come from the environment."""
    return request


def _read_once_per_host(merge: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """``merge`` (a session's ``merge_environment_settings``) asked once per scheme and host.

    requests reads the proxy variables and the CA bundle from the environment on every request,
    walking the whole environment twice per call (about a fifth of an exchange with an
    in-process fake). The answer depends only on the URL's scheme and host (``no_proxy``) and
    on the environment, which a gpuops process never changes after start-up, so each host's
    answer is kept: the same answer requests would give, read once. A request that passes its
    own proxies, stream, verify or cert is merged afresh, as requests would."""
    kept: dict[tuple[str, str], dict[str, Any]] = {}
    lock = threading.Lock()

    def merge_once(url: str, proxies: Any, stream: Any, verify: Any, cert: Any) -> dict[str, Any]:
        if proxies or stream is not None or verify is not None or cert is not None:
            return merge(url, proxies, stream, verify, cert)
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        with lock:
            found = kept.get(key)
            if found is None:
                found = kept[key] = merge(url, {}, None, None, None)
        return {**found, "proxies": dict(found["proxies"])}

    return merge_once


def _hook(observer: Observer) -> Callable[..., None]:
    def hook(response: Any, *args: Any, **kwargs: Any) -> None:
        observer(response)  # returns None: requests keeps the response as it is

    return hook


class ExchangeLog:
    """An observer that keeps every exchange, in the order the responses arrived."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exchanges: list[Exchange] = []

    def __call__(self, response: Any) -> None:
        content_type = response.headers.get("Content-Type")
        exchange = Exchange(
            method=str(response.request.method),
            url=str(response.request.url),
            status=int(response.status_code),
            content_type=content_type if isinstance(content_type, str) else None,
            body=response.text,
        )
        with self._lock:
            self.exchanges.append(exchange)

    def __len__(self) -> int:
        with self._lock:
            return len(self.exchanges)
