"""The fakes' one HTTP seam (fakes/seam.py), judged on every fake it serves: loopback only, an
unknown route a loud 404 listing the known ones, one body limit answered the same way by each
fake (in process and over HTTP), UTF-8 text and bytes passed through."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import requests

from fakes import seam
from fakes.gce import FakeGCE, LaneScenario
from fakes.gce import inprocess as gce_inprocess
from fakes.gce.server import serve_http as serve_gce
from fakes.gce.server import site as gce_site
from fakes.scenario import parse_scenario
from fakes.vast import FakeClock, FakeVast
from fakes.vast import serve_http as serve_vast
from fakes.vast.server import site as vast_site

KEY = "fake-key-T1"
BUCKET_PATH = "/storage/v1/b/gpuops-lane-jobs/o"


def _vast() -> FakeVast:
    return FakeVast(parse_scenario({"vast": {"api_key": KEY}}), clock=FakeClock())


def _gce() -> FakeGCE:
    return FakeGCE(LaneScenario(), FakeClock())  # type: ignore[arg-type]


@contextmanager
def _served(which: str) -> Iterator[str]:
    """One fake on loopback, by name; yields its base URL."""
    if which == "vast":
        with serve_vast(_vast()) as server:
            yield server.url
        return
    server = serve_gce(_gce(), ticker=False)
    try:
        yield server.url
    finally:
        server.close()


FAKES = ["vast", "gce"]


@pytest.mark.parametrize("which", FAKES)
def test_every_fake_is_bound_to_loopback(which):
    """DESIGN §4: whatever fake it is, the socket is on 127.0.0.1."""
    with _served(which) as url:
        assert url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "localhost", "::1", "::"])
@pytest.mark.parametrize("make_site", [lambda: vast_site(_vast()), lambda: gce_site(_gce())])
def test_no_fake_can_be_bound_beyond_loopback(make_site: Callable[[], seam.Site], host):
    """The seam refuses a non-loopback host before any socket exists, for every fake."""
    with pytest.raises(ValueError, match="loopback"):
        seam.LoopbackServer(make_site(), host)


@pytest.mark.parametrize("which", FAKES)
def test_an_unknown_route_is_each_fakes_own_404_listing_its_known_routes(which):
    """Loud over the wire: a 404 JSON body that names every route the fake knows."""
    with _served(which) as url:
        answer = requests.get(f"{url}/no/such/route", timeout=30)

    body = answer.json()
    known = body["known_routes"] if which == "vast" else body["error"]["known_routes"]
    assert answer.status_code == 404
    assert len(known) >= 5 and all(isinstance(route, str) for route in known)


@pytest.mark.parametrize("which", FAKES)
def test_an_oversized_body_is_the_same_413_from_every_fake_over_http(which):
    """One limit, one answer: the body is never dispatched, whatever the route."""
    path = "/api/v0/bundles/" if which == "vast" else f"/upload{BUCKET_PATH}"
    with _served(which) as url:
        answer = requests.post(
            f"{url}{path}", data=b"x" * (seam.MAX_BODY_BYTES + 1), timeout=30
        )

    assert answer.status_code == 413
    assert answer.json() == {
        "success": False,
        "error": "fake_body_too_large",
        "msg": answer.json()["msg"],
        "limit_bytes": seam.MAX_BODY_BYTES,
    }
    assert f"a {seam.MAX_BODY_BYTES + 1}-byte request body" in answer.json()["msg"]


def test_an_oversized_body_is_the_same_413_in_process():
    """In process the limit holds too: the same body as over HTTP, for each fake."""
    vast, gce = _vast(), _gce()
    base = "https://fake.invalid"
    with vast.activate(base):
        from_vast = requests.post(f"{base}/api/v0/bundles/", data=b"x" * (seam.MAX_BODY_BYTES + 1))
    with gce_inprocess.activate(gce, base):
        from_gce = requests.post(
            f"{base}/upload{BUCKET_PATH}", data=b"x" * (seam.MAX_BODY_BYTES + 1)
        )

    assert from_vast.status_code == from_gce.status_code == 413
    assert from_vast.json()["error"] == from_gce.json()["error"] == "fake_body_too_large"


def test_a_body_at_the_limit_is_read_and_dispatched():
    """The limit is inclusive: a body of exactly MAX_BODY_BYTES reaches the fake."""
    with serve_vast(_vast()) as server:
        answer = requests.post(
            f"{server.url}/api/v0/bundles/", data=b"x" * seam.MAX_BODY_BYTES, timeout=30
        )

    assert answer.status_code == 401  # the fake's own check ran: no key given


def _toy(reply: seam.Reply) -> seam.Site:
    return seam.Site("FakeToy", answer=lambda request: reply, unknown=seam.unknown_reply)


@pytest.mark.parametrize(
    ("body", "sent"),
    [
        ("naïve → ok", "naïve → ok".encode()),
        (b"\x00\x80\xff raw", b"\x00\x80\xff raw"),
    ],
)
def test_text_is_sent_as_utf8_and_bytes_as_they_are(body, sent):
    """UTF-8 everywhere: text whatever its content type; bytes untouched; in both servings."""
    reply = seam.Reply(200, (("Content-Type", "text/plain"),), body)
    with seam.LoopbackServer(_toy(reply)) as server:
        over_http = requests.get(f"{server.url}/x", timeout=30).content
    with seam.activate(_toy(reply), "https://toy.invalid"):
        in_process = requests.get("https://toy.invalid/x").content

    assert over_http == in_process == sent


@pytest.mark.parametrize("serving", ["http", "in-process"])
def test_an_object_download_is_the_objects_bytes_in_both_servings(serving):
    """FakeGCE's object downloads are bytes, never re-encoded: every byte value survives."""
    gce = _gce()
    data = bytes(range(256))
    gce.objects["jobs/x/results/blob"] = data
    path = "/download/storage/v1/b/gpuops-lane-jobs/o/jobs%2Fx%2Fresults%2Fblob"
    if serving == "http":
        server = serve_gce(gce, ticker=False)
        try:
            got = requests.get(f"{server.url}{path}?alt=media", timeout=30).content
        finally:
            server.close()
    else:
        with gce_inprocess.activate(gce, "https://gce.invalid"):
            got = requests.get(f"https://gce.invalid{path}?alt=media").content

    assert got == data


def test_the_seams_own_unknown_route_lists_the_routers_routes():
    """A Router names its fake and every route; the seam's 404 says both."""

    class Route:
        method = "GET"

        def __init__(self, template: str) -> None:
            self.template = template
            self.pattern = __import__("re").compile(template)

        def __str__(self) -> str:
            return f"GET {self.template}"

    router = seam.Router("FakeToy", [Route("/a"), Route("/b/[0-9]+")])

    def answer(request: seam.Request) -> seam.Reply:
        if router.find(request.method, request.path) is None:
            raise router.unknown(request.method, request.path)
        return seam.Reply(200, (), "ok")

    site = seam.Site("FakeToy", answer=answer, unknown=seam.unknown_reply)
    with seam.LoopbackServer(site) as server:
        found = requests.get(f"{server.url}/b/12", timeout=30)
        missing = requests.get(f"{server.url}/c", timeout=30)
    with seam.activate(site, "https://toy.invalid"), pytest.raises(AssertionError, match="/c"):
        requests.get("https://toy.invalid/c")

    assert found.text == "ok"
    assert missing.status_code == 404
    assert json.loads(missing.content) == {
        "success": False,
        "error": "fake_unknown_route",
        "msg": "FakeToy has no route GET /c",
        "known_routes": ["GET /a", "GET /b/[0-9]+"],
    }


def test_a_bug_in_a_fake_is_a_loud_500_over_http():
    """An exception that is no unknown route is the fakes' own 500, naming the fake."""

    def broken(request: seam.Request) -> seam.Reply:
        raise KeyError("oops")

    site = seam.Site("FakeToy", answer=broken, unknown=seam.unknown_reply)
    with seam.LoopbackServer(site) as server:
        answer = requests.get(f"{server.url}/x", timeout=30)

    assert answer.status_code == 500
    assert answer.json()["error"] == "fake_internal_error"
    assert answer.json()["msg"] == "FakeToy: KeyError: 'oops'"


@pytest.mark.parametrize("serving", ["http", "in-process"])
def test_a_chunked_upload_is_stored_whole_in_both_servings_h6(serving):
    """H6: a body sent chunked (Transfer-Encoding: chunked, no Content-Length: what requests
    does with a generator) is read chunk by chunk, never as empty: a chunked GCS upload stored
    0 bytes with a 200 before."""
    gce = _gce()
    parts = [bytes(range(256)), b"", b"x" * 70000, b"end"]
    path = "/upload/storage/v1/b/gpuops-lane-jobs/o?uploadType=media&name=jobs/x/chunked"

    def chunks() -> Iterator[bytes]:
        yield from parts

    if serving == "http":
        server = serve_gce(gce, ticker=False)
        try:
            sent = requests.post(f"{server.url}{path}", data=chunks(), timeout=30)
        finally:
            server.close()
    else:
        with gce_inprocess.activate(gce, "https://gce.invalid"):
            sent = requests.post(f"https://gce.invalid{path}", data=chunks())

    assert sent.status_code == 200, sent.text
    assert gce.objects["jobs/x/chunked"] == b"".join(parts)
    assert sent.request.headers.get("Transfer-Encoding") == "chunked"


def test_a_chunked_body_over_the_limit_or_malformed_is_refused_unread_h6():
    """A chunked body is held to the one limit too, and a chunk size that is not hex is 413."""
    import socket

    server = serve_gce(_gce(), ticker=False)
    host, port = server.url.removeprefix("http://").split(":")
    answers = []
    try:
        for body in (f"{seam.MAX_BODY_BYTES + 1:x}\r\n".encode(), b"zz\r\n"):
            with socket.create_connection((host, int(port)), timeout=30) as conn:
                conn.sendall(
                    b"POST /upload/storage/v1/b/gpuops-lane-jobs/o?uploadType=media&name=a "
                    b"HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body
                )
                answers.append(conn.recv(65536).split(b"\r\n", 1)[0])
    finally:
        server.close()

    assert len(answers) == 2 and all(b" 413 " in answer for answer in answers)


def test_a_direct_serving_answers_as_the_responses_serving_does():
    """seam.direct (the soak's serving, at requests' transport) gives what seam.activate gives:
    the status, reason, headers, text and bytes of each reply, the request it answered, a
    dropped answer as a ConnectionError, an unknown route raised into the caller, any other
    URL refused, and requests' own transport back once it ends."""
    replies = {
        "/text": seam.Reply(201, (("Content-Type", "application/json; charset=utf-8"),), "{}"),
        "/bytes": seam.Reply(200, (("X-Thing", "1"),), b"\x00\xff"),
        "/odd": seam.Reply(599, (), "odd"),
        "/drop": seam.Reply(200, (), "", drop=True),
    }

    def answer(request: seam.Request) -> seam.Reply:
        if request.path not in replies:
            raise seam.Router("FakeToy", []).unknown(request.method, request.path)
        return replies[request.path]

    site = seam.Site("FakeToy", answer=answer, unknown=seam.unknown_reply)
    base = "https://toy.invalid"

    def served(serving: Callable[..., object]) -> list[object]:
        seen: list[object] = []
        with serving(site, base), requests.Session() as session:
            for path in ("/text", "/bytes", "/odd"):
                got = session.post(f"{base}{path}?q=1", json={"a": 1})
                seen.append(
                    (got.status_code, got.reason, dict(got.headers), got.text, got.content)
                )
                seen.append((got.url, got.request.method, got.request.body))
            for path, error in (("/drop", requests.ConnectionError), ("/none", AssertionError)):
                with pytest.raises(error, match=path):
                    session.get(f"{base}{path}")
            with pytest.raises(requests.ConnectionError):
                session.get("https://elsewhere.invalid/text")
        return seen

    direct = served(seam.direct)
    assert direct == served(seam.activate)
    json_type = {"Content-Type": "application/json; charset=utf-8"}
    assert direct[0] == (201, "Created", json_type, "{}", b"{}")
    assert direct[5] == ("https://toy.invalid/odd?q=1", "POST", b'{"a": 1}')
    with pytest.raises(requests.ConnectionError):  # the real transport again: nothing there
        requests.get("http://127.0.0.1:9/text", timeout=5)
