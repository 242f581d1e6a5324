"""gpuops/providers/vast_client.py: the client vastai's public API functions are handed, over
the adapter's own session; its wire format is the SDK's (``VastClient._build_url``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from store_fakes import WallOf

from gpuops.providers.vast_client import SessionClient, url_of

BASE = "https://console.vast.ai"


class _Reply:
    status_code = 200


class _Session:
    """A fake session: keeps each request, answers 200 (or raises ``fail``)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.sent: list[tuple[str, str, dict[str, Any]]] = []
        self.fail = fail

    def request(self, method: str, url: str, **kwargs: Any) -> _Reply:
        self.sent.append((method, url, kwargs))
        if self.fail is not None:
            raise self.fail
        return _Reply()


def _client(session: _Session, seen: list[tuple[Any, ...]]) -> SessionClient:
    ticks = iter([10.0, 10.5, 20.0, 21.0])
    return SessionClient(
        session,
        api_key="k-1",
        server_url=BASE,
        user_agent="vastai-sdk/1.9.1",
        timeout_s=20.0,
        observe=lambda *event: seen.append(event),
        clock=WallOf(lambda: next(ticks)),  # each reading the next tick
    )


def test_an_unversioned_subpath_gets_api_v0_and_a_versioned_one_is_kept():
    """The SDK's rule: /api/vN/ paths as they are, everything else under /api/v0."""
    assert url_of(BASE, "/instances/7/") == f"{BASE}/api/v0/instances/7/"
    assert url_of(BASE, "/api/v1/instances/") == f"{BASE}/api/v1/instances/"
    assert url_of(BASE, "/api/v12/x/") == f"{BASE}/api/v12/x/"
    assert url_of(BASE, "/xapi/v1/x/") == f"{BASE}/api/v0/xapi/v1/x/"


def test_query_arguments_are_quoted_and_non_strings_json_encoded_in_order():
    """name=quote_plus(value); a dict or a number is JSON first; order kept; none: no '?'."""
    url = url_of(BASE, "/instances/7/", {"owner": "me & you", "q": {"a": [1, 2]}, "n": 3})

    assert url == (
        f"{BASE}/api/v0/instances/7/?owner=me+%26+you&q=%7B%22a%22%3A+%5B1%2C+2%5D%7D&n=3"
    )
    assert url_of(BASE, "/x/", {}) == f"{BASE}/api/v0/x/" and url_of(BASE, "/x/", None) == url_of(
        BASE, "/x/"
    )


@pytest.mark.parametrize(
    "method, sent_body",
    [("get", None), ("post", {}), ("put", {}), ("delete", {})],
)
def test_each_method_sends_once_with_the_key_the_agent_and_the_sdks_default_body(method, sent_body):
    """GET sends no body, the others {} when given none; Bearer key, SDK agent, our timeout."""
    session, seen = _Session(), []
    client = _client(session, seen)

    reply = getattr(client, method)("/instances/7/", query_args={"owner": "me"})

    [(verb, url, kwargs)] = session.sent
    assert (verb, url) == (method.upper(), f"{BASE}/api/v0/instances/7/?owner=me")
    assert kwargs == {
        "headers": {"User-Agent": "vastai-sdk/1.9.1", "Authorization": "Bearer k-1"},
        "json": sent_body,
        "timeout": 20.0,
    }
    assert client.last_response is reply
    assert seen == [(method.upper(), url, 200, 0.5, None)]


@pytest.mark.parametrize("method", ["get", "post", "put", "delete"])
def test_a_given_body_is_sent_as_it_is(method):
    """A body the API function passes goes out unchanged, whatever the method."""
    session = _Session()

    getattr(_client(session, []), method)("/asks/7/", json_data={"label": "x"})

    assert session.sent[0][2]["json"] == {"label": "x"}


def test_a_failed_send_is_observed_and_raised_and_keeps_no_response():
    """No answer: observed with its exception and duration, raised as it is."""
    failure = ConnectionError("refused")
    session, seen = _Session(failure), []
    client = _client(session, seen)

    with pytest.raises(ConnectionError):
        client.get("/instances/7/")

    assert client.last_response is None
    assert seen == [("GET", f"{BASE}/api/v0/instances/7/", None, 0.5, failure)]


def test_the_key_is_not_in_the_clients_repr():
    """H3: repr shows the server, never the key."""
    assert repr(_client(_Session(), [])) == f"SessionClient(server_url={BASE!r})"
