"""One transport per provider (gpuops/providers/transport.py): each adapter owns a session,
observers see its exchanges through requests' public response hook, and nothing at run time
reaches into a test library or a private SDK method."""

from __future__ import annotations

import ast
from pathlib import Path

import requests
import responses

from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter
from gpuops.providers.transport import Exchange, ExchangeLog, new_session
from gpuops.providers.vast import VastAdapter
from gpuops.events import EventLog

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://127.0.0.1:9"


def _modules(under: str) -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in sorted((ROOT / under).rglob("*.py"))]


def test_gpuops_never_imports_responses_or_a_private_vastai_method():
    """`record` captures through a public hook: no `responses` (a test dependency), no
    `responses._recorder`, no override of vastai's private `VastClient._request`. (The
    recordings loader's ``Recording.to_response``, which tests call to replay a recording, is
    the one place that names `responses`.)"""
    found = []
    for path, tree in _modules("gpuops"):
        if path == ROOT / "gpuops" / "providers" / "__init__.py":
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n == "responses" or n.startswith("responses.") for n in names):
                found.append(f"{path.name}: import {names}")
            if isinstance(node, ast.Attribute | ast.Name) and "VastClient" in ast.dump(node):
                found.append(f"{path.name}: VastClient")
    assert found == []


HTTP_ADAPTERS = ("vast", "vast_client", "gce", "gcs", "google_errors", "transport")


def test_no_http_adapter_reads_the_process_environment():
    """Endpoints and keys are constructor arguments: no HTTP adapter module reads os.environ
    or os.getenv (the CLI's sessions pass them)."""
    found = []
    for path, tree in _modules("gpuops/providers"):
        if path.stem not in HTTP_ADAPTERS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv"):
                found.append(f"{path.name}:{node.lineno}")
    assert found == []


def test_an_exchange_log_keeps_each_exchange_as_it_came_off_the_wire():
    """Method, full URL, status, content type and the exact body text, in order."""
    log = ExchangeLog()
    session = new_session((log,))
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/a", body="<html>x</html>", status=502, content_type="text/html")
        mock.post(f"{BASE}/b", json={"ok": True})
        session.get(f"{BASE}/a?x=1")
        session.post(f"{BASE}/b", json={})

    assert log.exchanges == [
        Exchange("GET", f"{BASE}/a?x=1", 502, "text/html", "<html>x</html>"),
        Exchange("POST", f"{BASE}/b", 200, "application/json", '{"ok": true}'),
    ]
    assert len(log) == 2


def test_new_session_hooks_onto_a_given_session_and_leaves_its_responses_alone():
    """A given session (google-auth's AuthorizedSession is one) is the one returned, with the
    observer on its hook; the response the caller gets is untouched."""
    seen = []
    base = requests.Session()
    session = new_session((seen.append,), base)
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/c", body="body")
        reply = session.get(f"{BASE}/c")

    assert session is base and seen == [reply] and reply.text == "body"


def test_each_adapter_sends_every_request_through_its_observed_session(tmp_path):
    """Vast, GCE and GCS: an observer given at construction sees each of their requests."""
    log = ExchangeLog()
    vast = VastAdapter(api_key="k", base_url=BASE, observers=(log,))
    gce = GceAdapter(
        "p", "z", events=EventLog(tmp_path / "e", "t"), endpoint=BASE, observers=(log,)
    )
    gcs = GcsAdapter("b", "p", endpoint=BASE, observers=(log,))
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/api/v0/instances/1/?owner=me", json={"instances": None})
        mock.get(f"{BASE}/compute/v1/projects/p/zones/z/instances/i/serialPort", json={})
        mock.get(f"{BASE}/download/storage/v1/b/b/o/x%2Fy", status=404, json={})
        assert vast.show("1") is None
        assert gce.serial_output("i") == ("", 0)
        assert gcs.read("x/y") is None

    assert [(e.method, e.status) for e in log.exchanges] == [("GET", 200)] * 2 + [("GET", 404)]
    assert [e.url.split("?")[0] for e in log.exchanges] == [
        f"{BASE}/api/v0/instances/1/",
        f"{BASE}/compute/v1/projects/p/zones/z/instances/i/serialPort",
        f"{BASE}/download/storage/v1/b/b/o/x%2Fy",
    ]


def test_a_netrc_entry_for_the_provider_s_host_never_replaces_or_adds_an_authorization(
    tmp_path, monkeypatch
):
    """H3: requests would swap the Authorization a caller set for the login and password of a
    ~/.netrc entry naming the host (and add one where the caller set none), sending a
    password the user keeps for something else to the provider. Every gpuops session sends
    the header its adapter built, and none where it built none."""
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1\nlogin someone\npassword hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert requests.utils.get_netrc_auth(f"{BASE}/x") == ("someone", "hunter2")  # in effect
    vast = VastAdapter(api_key="k", base_url=BASE)
    gcs = GcsAdapter("b", "p", endpoint=BASE)
    with responses.RequestsMock() as mock:
        mock.get(f"{BASE}/api/v0/instances/1/?owner=me", json={"instances": None})
        mock.get(f"{BASE}/download/storage/v1/b/b/o/x%2Fy", status=404, json={})
        assert vast.show("1") is None
        assert gcs.read("x/y") is None
        sent = [call.request.headers.get("Authorization") for call in mock.calls]

    assert sent == ["Bearer k", None]


def test_the_environment_s_proxies_and_ca_bundle_are_requests_own_answer_read_once_per_host(
    monkeypatch,
):
    """requests reads the proxy variables and the CA bundle from the environment on every
    request; a gpuops session asks once per scheme and host and gives requests' own answer
    (``no_proxy`` honoured per host), the same on every later request to that host."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,metadata.google.internal")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/team-ca.pem")
    plain = requests.Session()
    session = new_session()
    urls = (
        "https://console.vast.ai/api/v0/instances/",
        "https://console.vast.ai/api/v0/instances/7/?owner=me",
        "http://127.0.0.1:9/a",
        "http://metadata.google.internal/computeMetadata/v1/",
    )
    for url in urls:
        ours = session.merge_environment_settings(url, {}, None, None, None)
        assert ours == plain.merge_environment_settings(url, {}, None, None, None)
    vast = session.merge_environment_settings(urls[0], {}, None, None, None)
    assert vast["proxies"]["https"] == "http://proxy.example:3128"
    assert vast["verify"] == "/etc/ssl/team-ca.pem"
    assert "http" not in session.merge_environment_settings(urls[2], {}, None, None, None)[
        "proxies"
    ]

    calls = []
    real = requests.utils.get_environ_proxies

    def counted(url, no_proxy=None):
        calls.append(url)
        return real(url, no_proxy=no_proxy)

    monkeypatch.setattr(requests.sessions, "get_environ_proxies", counted)
    monkeypatch.setenv("HTTPS_PROXY", "http://elsewhere.example:1")
    again = session.merge_environment_settings(urls[1], {}, None, None, None)
    assert calls == [] and again == vast  # asked once: the answer kept for the host
    again["proxies"]["https"] = "changed"  # each caller gets its own copy
    assert session.merge_environment_settings(urls[0], {}, None, None, None) == vast
    fresh = new_session().merge_environment_settings(urls[0], {}, None, None, None)
    assert calls == [urls[0]] and fresh["proxies"]["https"] == "http://elsewhere.example:1"
    own = session.merge_environment_settings(urls[0], {"https": "http://own:1"}, None, None, None)
    assert own["proxies"]["https"] == "http://own:1"  # a request's own settings merge afresh
