"""What a secret looks like, in one place (H3): hints stay readable, real values never survive.

The event log's own leak tests (tests/test_events.py) judge the bytes of its file; these judge
``gpuops.secrets`` directly and through each writer that uses it: the event log, a recording,
a provider error and the ssh child's environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpuops import secrets
from gpuops.errors import ProviderUnavailable
from gpuops.events import EventLog
from gpuops.providers import ssh
from gpuops.record import exchange_doc
from gpuops.secrets import REDACTED, REDACTED_PRIVATE_KEY, scrub, scrub_text

VAST_KEY = "3f9a" * 16
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


@pytest.fixture(autouse=True)
def no_environment_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """No secret-named variable of the machine running the tests takes part."""
    for name in list(os.environ):
        if secrets.is_secret_env_name(name):
            monkeypatch.delenv(name)


# --- hints survive -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "hint",
    [
        "no API key: pass api_key=..., set VAST_API_KEY",
        "no API key: pass api_key=, set VAST_API_KEY",
        "no API key: pass api_key=…, or set VAST_API_KEY",
        "no Vast.ai API key found; set VAST_API_KEY, or write it to ~/.config/vastai/vast_api_key",
        "put VAST_API_KEY=... in ~/.config/gpuops/env (VAST_API_KEY=...); it stays on this host",
        "pass api_key=<key> or --api-key $VAST_API_KEY",
        "export VAST_API_KEY=${VAST_API_KEY}",
        '{"api_key": "...", "password": "***"}',
        "token: missing; secret: none; password: unset; key: not found",
        "Authorization: Bearer ... or Authorization: Basic …",
        "api_key=...).",
    ],
)
def test_a_hint_telling_where_a_key_goes_survives_scrubbing(hint: str) -> None:
    """H3: a placeholder or an instruction word where a secret would stand is not a secret."""
    assert scrub_text(hint) == hint
    assert scrub(hint) == hint


def test_the_key_missing_message_is_not_mangled() -> None:
    """H3: "API key: pass api_key=..." once became "[REDACTED] api_key=..."; it reads as written."""
    message = "no API key: pass api_key=..., set VAST_API_KEY"

    assert scrub(message) == message
    assert scrub({"error": message}) == {"error": message}


# --- real values do not ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("api_key=abc123def456", f"api_key={REDACTED}"),
        ("VAST_API_KEY=abc123def456 gpuops run", f"VAST_API_KEY={REDACTED} gpuops run"),
        ("jupyter_token=0f1e2d3c4b5a", f"jupyter_token={REDACTED}"),
        ('{"jupyter_token": "pass1"}', f'{{"jupyter_token": "{REDACTED}"}}'),
        ("Authorization: Bearer eyJhbGciOi.x", f"Authorization: Bearer {REDACTED}"),
        ("Authorization: Basic hunter22", f"Authorization: Basic {REDACTED}"),
        ("key: password1", f"key: {REDACTED}"),
        ("key: passes", f"key: {REDACTED}"),
        ("api_key=...abc123", f"api_key={REDACTED}"),
        ("api_key=X...", f"api_key={REDACTED}"),
        ("api_key=**", f"api_key={REDACTED}"),
        ("api_key=$", f"api_key={REDACTED}"),
        ("api_key=$1abc", f"api_key={REDACTED}"),
        ("api_key=abc...", f"api_key={REDACTED}"),
        ("Authorization: Basic x...", f"Authorization: Basic {REDACTED}"),
        (f"copied\n{PEM}\ndone", f"copied\n{REDACTED_PRIVATE_KEY}\ndone"),
    ],
)
def test_a_real_secret_value_is_redacted_even_beside_a_placeholder_shape(
    text: str, expected: str
) -> None:
    """H3: only a whole placeholder is kept; a value that merely starts or ends like one goes."""
    assert scrub_text(text) == expected


def test_a_secret_in_the_environment_is_redacted_by_scrub_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """H3: scrub_text reads the environment's secret values, as scrub does."""
    monkeypatch.setenv("JUPYTER_TOKEN", "plain-words-here")

    assert scrub_text("open ?t=plain-words-here now") == f"open ?t={REDACTED} now"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("VAST_API_KEY", True),
        ("jupyter_token", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_Password", True),
        ("OLD_PASSWD", True),
        ("GCP_CREDENTIALS", True),
        ("SSH_AUTH_SOCK", False),
        ("HOME", False),
        ("PATH", False),
    ],
)
def test_a_secret_environment_name_is_known_by_its_words(name: str, secret: bool) -> None:
    """H3: KEY, TOKEN, SECRET, PASSWORD, PASSWD and CREDENTIAL, in any case, name a secret."""
    assert secrets.is_secret_env_name(name) is secret


def test_placeholders_are_only_whole_stand_ins_or_instruction_words() -> None:
    """H3: "...", "…", "***", "$NAME" and "pass"/"set"... are stand-ins; nothing else is."""
    assert all(secrets.is_placeholder(v) for v in ("...", "…", "***", "$K", "${K}", "...,", "pass"))
    assert not any(
        secrets.is_placeholder(v) for v in ("", "..", "**", "$", "pass1", "Pass", "a...", "k")
    )


# --- every writer uses the one definition ------------------------------------------------------
def test_the_ssh_child_environment_drops_every_secret_named_variable() -> None:
    """H3: ssh.child_env uses the same names: JUPYTER_TOKEN goes, SSH_AUTH_SOCK and HOME stay."""
    environ = {"JUPYTER_TOKEN": "t", "my_api_key": "k", "SSH_AUTH_SOCK": "s", "HOME": "/h"}

    assert ssh.child_env(environ) == {"SSH_AUTH_SOCK": "s", "HOME": "/h"}


def test_a_recording_keeps_a_hint_and_drops_a_key() -> None:
    """H3: the recording writer scrubs with the same module: the hint stays, the key goes."""
    hint = "no API key: pass api_key=..., set VAST_API_KEY"

    written = exchange_doc(
        "GET",
        f"https://console.vast.ai/api/v0/users/current/?api_key={VAST_KEY}",
        401,
        "application/json",
        json.dumps({"msg": hint, "api_key": VAST_KEY}),
        source="test",
        day="2026-11-30",
        notes="",
    )

    assert VAST_KEY not in json.dumps(written, default=str)
    assert hint in written["response"]["body"]


def test_a_provider_error_keeps_a_hint_and_drops_a_key() -> None:
    """H3: a provider error quotes a scrubbed body: the hint stays readable, the key does not."""
    body = f'{{"error": "no API key: pass api_key=..., set VAST_API_KEY", "api_key": "{VAST_KEY}"}}'

    error = ProviderUnavailable("vast", "503", 503, body)

    assert VAST_KEY not in error.body
    assert "pass api_key=..., set VAST_API_KEY" in error.body


# --- Hypothesis: a secret anywhere never survives ----------------------------------------------
_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/"
# A real value: 8+ chars with a digit, so never a placeholder, an instruction word or REDACTED.
values = st.text(alphabet=_TOKEN_CHARS, min_size=7, max_size=40).map(lambda s: "7" + s)
FRAMES = (
    "api_key={v}",
    "VAST_API_KEY={v}",
    "jupyter_token: {v}",
    '"api_key": "{v}"',
    "{{'password': '{v}'}}",
    "Authorization: Bearer {v}",
    "Authorization: Basic {v}",
    "X-Api-Key: {v}",
    "https://alice:{v}@example.com/x",
    "--api-key={v}",
)
words = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


def _nest(text: str, depth: int, name: str) -> object:
    """The message at ``depth`` inside a payload of dicts and lists."""
    payload: object = text
    for level in range(depth):
        payload = {name: payload, "n": level} if level % 2 == 0 else ["x", payload]
    return payload


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=values,
    frame=st.sampled_from(FRAMES),
    before=words,
    after=words,
    depth=st.integers(min_value=0, max_value=4),
    name=st.sampled_from(["message", "body", "stderr", "note"]),
)
@pytest.mark.fault(
    "a credential pair, bearer token or URL password embedded in a logged message",
    handled="scrubbed wherever it sits in the payload (H3)",
)
def test_a_secret_embedded_anywhere_in_a_payload_never_survives(
    tmp_path: Path, value: str, frame: str, before: str, after: str, depth: int, name: str
) -> None:
    """H3: a secret value in any usual frame, in any text, at any depth, is never written."""
    # a raw "/" ends a URL's authority (RFC 3986 percent-encodes it in a password), so
    # "https://alice:7000/@host" holds a port and a path, not a password
    assume(not (frame.startswith("https://") and "/" in value))
    message = f"{before} {frame.format(v=value)} {after}"
    payload = _nest(message, depth, name)
    log = EventLog(tmp_path / "hyp" / "events.jsonl", "prop")
    log.path.unlink(missing_ok=True)  # tmp_path is shared by every example: judge this one

    log.append("note", payload=payload)

    assert value not in json.dumps(scrub(payload), ensure_ascii=False)
    assert value not in scrub_text(message)
    assert value.encode() not in log.path.read_bytes()


@pytest.mark.parametrize(
    "name",
    [
        "GPUOPS_SSH_KEY",
        "gpuops_ssh_key",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AWS_SHARED_CREDENTIALS_FILE",
        "TOKEN_PATH",
        "SECRETS_DIR",
    ],
)
def test_a_variable_that_names_a_file_leaves_its_path_readable(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """H3 hides secret values, not the paths beside them: `cannot read the SSH public key
    [REDACTED]` hid which file failed. A path-valued variable still stays off the ssh child."""
    monkeypatch.setenv(name, "/home/alice/.ssh/id_ed25519.pub")
    monkeypatch.setenv("VAST_API_KEY", "k-real-secret-value")
    text = "cannot read the SSH public key /home/alice/.ssh/id_ed25519.pub; key k-real-secret-value"

    assert scrub_text(text) == (
        f"cannot read the SSH public key /home/alice/.ssh/id_ed25519.pub; key {REDACTED}"
    )
    assert secrets.env_secrets() == ("k-real-secret-value",)
    assert secrets.is_secret_env_name(name)


@pytest.mark.parametrize(
    "name", ["GPUOPS_SSH_KEYS", "MY_GPUOPS_SSH_KEY", "FILE_TOKEN", "PATHTOKEN"]
)
def test_a_variable_only_resembling_a_path_name_keeps_its_value_secret(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The path names are whole names (or a whole _FILE/_PATH/_DIR suffix), nothing looser."""
    monkeypatch.setenv(name, "s3cr3t-value-here")

    assert scrub_text("it is s3cr3t-value-here") == f"it is {REDACTED}"


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ('h="Authorization: Bearer $CONTAINER_API_KEY"', 'h="Authorization: Bearer $CONTAINER_API_KEY"'),
        ('h="Authorization: Bearer abc123def"', 'h="Authorization: Bearer [REDACTED]"'),
    ],
)
def test_a_json_quoted_credential_is_redacted_and_the_body_stays_json_h3(value, shown):
    """H3: in a JSON body (a box's onstart, as a recording holds it) the credential after a
    scheme goes, its escaped closing quote stays, and a shell variable is no secret."""
    import json

    out = scrub_text(json.dumps({"onstart": value}))
    assert json.loads(out) == {"onstart": shown}
