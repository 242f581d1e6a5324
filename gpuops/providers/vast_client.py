"""The client vastai's public API functions are handed: the adapter's own session underneath.

vastai 1.9.1's ``vastai.api`` functions (``offers.search_offers``, ``instances.show_instance``,
...) take a client and call only its public ``get``/``post``/``put``/``delete(subpath,
query_args=None, json_data=None, timeout=None)``. The SDK's own ``VastClient`` builds a fresh
``VastSession`` inside its private ``_request`` for every call, with its own retry loop, so it
offers no transport to own or observe. ``SessionClient`` implements the same four methods and
sends each request through the ``requests.Session`` the adapter owns, once (no retry: the
adapter owns every retry, and a create is sent exactly once, M12).

The wire format follows the SDK (``vastai/api/client.py``, checked against recordings/vast/
and the loopback fake): a subpath without ``/api/vN/`` gets ``/api/v0``; query arguments are
``name=quote_plus(value)``, a non-string value JSON-encoded first; ``Authorization: Bearer
<key>`` and the SDK's ``User-Agent``; POST, PUT and DELETE send ``{}`` when given no body, GET
sends none. One difference, on purpose: a redirect to another host drops the Authorization
header (requests' default), where the SDK keeps it within vast.ai.

Each exchange is reported to ``observe`` (the adapter's ``vast.call`` event), and the last
response is kept: the adapter parses it itself (the SDK's post-processing of a body is not
used).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote_plus

from gpuops.clock import Clock

# method, url, status (None: no answer), seconds, the exception (None: an answer)
Observe = Callable[[str, str, int | None, float, BaseException | None], None]
_VERSIONED = re.compile(r"^/api/v(\d)+/")


def url_of(server_url: str, subpath: str, query_args: dict[str, Any] | None = None) -> str:
    """The URL the SDK builds for ``subpath`` and ``query_args`` (its ``_build_url``)."""
    if not _VERSIONED.match(subpath):
        subpath = "/api/v0" + subpath
    if not query_args:
        return server_url + subpath
    query = "&".join(
        f"{name}={quote_plus(value if isinstance(value, str) else json.dumps(value))}"
        for name, value in query_args.items()
    )
    return f"{server_url}{subpath}?{query}"


class SessionClient:
    """The four calls vastai's API functions make, over the adapter's session."""

    def __init__(
        self,
        session: Any,
        *,
        api_key: str,
        server_url: str,
        user_agent: str,
        timeout_s: float,
        observe: Observe,
        clock: Clock,
    ) -> None:
        self._session = session
        self._headers = {"User-Agent": user_agent, "Authorization": f"Bearer {api_key}"}
        self.server_url = server_url
        self._timeout_s = timeout_s
        self._observe = observe
        self._clock = clock
        self.last_response: Any = None

    def __repr__(self) -> str:
        return f"SessionClient(server_url={self.server_url!r})"  # never the key (H3)

    def get(
        self, subpath: str, query_args: Any = None, json_data: Any = None, timeout: Any = None
    ) -> Any:
        return self._send("GET", subpath, query_args, json_data)

    def post(
        self, subpath: str, query_args: Any = None, json_data: Any = None, timeout: Any = None
    ) -> Any:
        return self._send("POST", subpath, query_args, {} if json_data is None else json_data)

    def put(
        self, subpath: str, query_args: Any = None, json_data: Any = None, timeout: Any = None
    ) -> Any:
        return self._send("PUT", subpath, query_args, {} if json_data is None else json_data)

    def delete(
        self, subpath: str, query_args: Any = None, json_data: Any = None, timeout: Any = None
    ) -> Any:
        return self._send("DELETE", subpath, query_args, {} if json_data is None else json_data)

    def _send(self, method: str, subpath: str, query_args: Any, json_data: Any) -> Any:
        url = url_of(self.server_url, subpath, query_args)
        began = self._clock.monotonic()
        try:
            response = self._session.request(
                method, url, headers=self._headers, json=json_data, timeout=self._timeout_s
            )
        except Exception as exc:
            self._observe(method, url, None, self._clock.monotonic() - began, exc)
            raise
        self.last_response = response
        self._observe(method, url, response.status_code, self._clock.monotonic() - began, None)
        return response
