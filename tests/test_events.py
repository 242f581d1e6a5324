"""The event log: secrets never reach the file (H3), many writers never tear a line, reads stream.

Leak tests append a payload that carries a secret and then search the raw bytes of the file,
not the returned event, because the file is what leaks.
"""

from __future__ import annotations

import enum
import json
import multiprocessing
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_fakes import WallOf

from gpuops import events
from gpuops.errors import CorruptState, StateError, UsageError
from gpuops.events import REDACTED, REDACTED_PRIVATE_KEY, EventLog, read_events, scrub

VAST_KEY = "3f9a" * 16  # a Vast.ai API key is 64 lowercase hex
AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GOOGLE_KEY = "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
OAUTH_TOKEN = "ya29.a0AfH6SMBx3kQ-vLq_Zr9Tq8pW2nXyUu.hJ7"
BEARER = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.dG9wc2VjcmV0"
PEM_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    """A log file under a directory that does not exist yet."""
    return tmp_path / "state" / "events.jsonl"


@pytest.fixture
def log(log_path: Path) -> EventLog:
    """An event log for the operator alice@laptop."""
    return EventLog(log_path, "alice@laptop")


def assert_not_written(path: Path, secret: str) -> None:
    raw = path.read_bytes()
    assert secret.encode() not in raw
    assert b"[REDACTED" in raw


def pem(kind: str, body: str = PEM_BODY, end: bool = True) -> str:
    head = f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n{body}\n"
    return head + (f"-----END {kind}PRIVATE KEY-----\n" if end else "")


# --- H3: try to leak -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "X-Api-Key",
        "apikey",
        "vast_token",
        "client_secret",
        "password",
        "db_passwd",
        "Authorization",
        "private_key",
        "credentials",
        "X-Goog-Signature",
        "key",
        "sig",
        "pwd",
        "auth",
        "ssh_passphrase",
        "api-key",
        "AWS_SESSION_TOKEN",
    ],
)
def test_a_value_under_a_secret_name_is_redacted_at_any_depth(log: EventLog, name: str) -> None:
    """H3: a secret-named key anywhere in nested dicts and lists never has its value written."""
    log.append("provider.call", request={"calls": [{"headers": {name: "s3cr3t-value-42"}}]})

    assert_not_written(log.path, "s3cr3t-value-42")


def test_an_authorization_header_dict_is_redacted(log: EventLog) -> None:
    """H3: {"Authorization": "Bearer ..."} in a header dict loses its value, not its name."""
    event = log.append("provider.call", headers={"Authorization": f"Bearer {BEARER}"})

    assert_not_written(log.path, BEARER)
    assert event["payload"] == {"headers": {"Authorization": REDACTED}}


def test_a_secret_named_pair_in_a_header_list_is_redacted(log: EventLog) -> None:
    """H3: [("X-Api-Key", value)] header lists are judged by their name like a dict."""
    log.append("provider.call", headers=[("X-Api-Key", "plainvalue99"), ("Accept", "json")])

    assert_not_written(log.path, "plainvalue99")
    assert b'["Accept","json"]' in log.path.read_bytes()


def test_a_value_after_a_secret_flag_in_an_argv_list_is_redacted(log: EventLog) -> None:
    """H3: ["vastai", "--api-key", value] loses the value; other flags keep theirs."""
    argv = ["vastai", "--api-key", "plainvalue99", "--label", "job-1", "-i", "~/.ssh/id"]

    event = log.append("provider.call", argv=argv, opts=("--password", "plainvalue99"))

    assert_not_written(log.path, "plainvalue99")
    assert event["payload"] == {
        "argv": ["vastai", "--api-key", REDACTED, "--label", "job-1", "-i", "~/.ssh/id"],
        "opts": ["--password", REDACTED],
    }


def test_a_bearer_token_inside_an_exception_message_is_redacted(log: EventLog) -> None:
    """H3: an error carrying the request's Authorization header is logged without the token."""
    headers = {"Authorization": f"Bearer {BEARER}"}
    exc = RuntimeError(f"401 for GET /instances with headers {headers}")

    log.append("provider.error", error=str(exc), again=exc, text=f"curl -H Bearer {BEARER}")

    assert_not_written(log.path, BEARER)


@pytest.mark.parametrize("param", ["api_key", "token", "access_token", "key", "X-Amz-Signature"])
def test_a_secret_query_parameter_in_a_url_is_redacted(log: EventLog, param: str) -> None:
    """H3: https://...?api_key=... keeps the URL and loses the value."""
    url = f"https://console.vast.ai/api/v0/instances/?owner=me&{param}=qwerty12345&page=2"

    event = log.append("provider.call", url=url)

    assert_not_written(log.path, "qwerty12345")
    assert event["payload"] == {"url": url.replace("qwerty12345", REDACTED)}


@pytest.mark.parametrize("kind", ["", "OPENSSH ", "RSA ", "EC ", "ENCRYPTED "])
def test_a_pem_private_key_in_a_multi_line_string_is_redacted(log: EventLog, kind: str) -> None:
    """H3: a whole PEM private key block goes; the text around it stays."""
    event = log.append("box.setup", output=f"copied key:\n{pem(kind)}done\n")

    assert_not_written(log.path, PEM_BODY)
    assert event["payload"] == {"output": f"copied key:\n{REDACTED_PRIVATE_KEY}\ndone\n"}


def test_a_truncated_pem_private_key_is_redacted_to_the_end(log: EventLog) -> None:
    """H3: a key block cut off before its END line (a truncated log) is still redacted."""
    event = log.append("box.setup", tail=f"last 200 bytes: {pem('OPENSSH ', end=False)[:120]}")

    assert_not_written(log.path, PEM_BODY[:40])
    assert event["payload"] == {"tail": f"last 200 bytes: {REDACTED_PRIVATE_KEY}"}


@pytest.mark.parametrize(
    "text",
    [
        f"creds: {AWS_ID} in use",
        f"aws_secret_access_key = {AWS_SECRET}\nregion = us-east-1",
        f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
        f"key={GOOGLE_KEY}&q=1",
        f"maps {GOOGLE_KEY} loaded",
        f"token {OAUTH_TOKEN} expired",
        f"vast key {VAST_KEY}.",
        f"ASIA{AWS_ID[4:]} is a session id",
    ],
    ids=["aws-id", "aws-ini", "aws-export", "google-param", "google-key", "oauth", "vast", "asia"],
)
def test_a_self_identifying_key_inside_prose_is_redacted(log: EventLog, text: str) -> None:
    """H3: AWS ids and secrets, Google keys and OAuth tokens, Vast keys never reach the file."""
    log.append("note", text=text, nested=[[{"deep": text}]])

    raw = log.path.read_bytes()
    for secret in (AWS_ID, AWS_ID[4:], AWS_SECRET, GOOGLE_KEY, OAUTH_TOKEN, VAST_KEY):
        assert secret.encode() not in raw
    assert raw.count(b"[REDACTED]") == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"api_key": "hunter2hunter2", "n": 1}', '{"api_key": "[REDACTED]", "n": 1}'),
        ('{\\"api_key\\": \\"hunter2hunter2\\"}', '{\\"api_key\\": \\"[REDACTED]\\"}'),
        ("{'password': 'hunter2hunter2'}", "{'password': '[REDACTED]'}"),
        ('"client_secret" : "hunter2hunter2', '"client_secret" : "[REDACTED]"'),
        ("Authorization: Basic hunter2hunter2", "Authorization: Basic [REDACTED]"),
        ("X-Api-Key: hunter2hunter2", "X-Api-Key: [REDACTED]"),
    ],
    ids=["json", "escaped-json", "repr", "truncated-json", "basic-header", "header-line"],
)
def test_a_json_ish_secret_pair_inside_a_string_is_redacted(
    log: EventLog, text: str, expected: str
) -> None:
    """H3: '"api_key": "..."' in a string loses its value and keeps its own quoting."""
    event = log.append("provider.response", body=text)

    assert_not_written(log.path, "hunter2hunter2")
    assert event["payload"] == {"body": expected}


def test_an_environment_secret_inside_an_unrelated_string_is_redacted(
    log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """H3: the values of VAST_API_KEY and friends are redacted wherever they turn up."""
    monkeypatch.setenv("VAST_API_KEY", "Plain-Looking-Secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEBYaDHqa0AP")
    monkeypatch.setenv("DB_PASSWORD", "correct horse battery")

    log.append(
        "job.output",
        line="ssh root@box 'echo Plain-Looking-Secret > ~/.vast' ok",
        list=["x", ("FwoGZXIvYXdzEBYaDHqa0AP",)],
        prose="said correct horse battery staple",
    )

    raw = log.path.read_bytes()
    for secret in ("Plain-Looking-Secret", "FwoGZXIvYXdzEBYaDHqa0AP", "correct horse battery"):
        assert secret.encode() not in raw
    assert raw.count(b"[REDACTED]") == 3


def test_short_or_unrelated_environment_values_are_not_treated_as_secrets() -> None:
    """H3: only secret-named variables with values of 8+ chars count, longest first."""
    environ = {
        "VAST_API_KEY": "k" * 20,
        "MY_TOKEN": "k" * 8,
        "GH_SECRET": "short",
        "HOME": "/home/alice-long",
        "db_password": "p" * 9,
        "X_CREDENTIAL": "c" * 8,
        "OLD_PASSWD": "d" * 8,
    }

    assert events.env_secrets(environ) == ("k" * 20, "p" * 9, "c" * 8, "d" * 8, "k" * 8)


def test_a_kind_or_operator_that_looks_like_a_secret_is_refused(log_path: Path) -> None:
    """H3: identity fields are written as they are, so a secret-shaped one is refused."""
    with pytest.raises(UsageError) as operator:
        EventLog(log_path, f"bot {VAST_KEY}")
    with pytest.raises(UsageError) as kind:
        EventLog(log_path, "alice").append("a" * 64)

    assert str(operator.value) == (
        "the event operator 'bot [REDACTED]' looks like a secret (H3); not logging it"
    )
    assert str(kind.value) == (
        "the event kind '[REDACTED]' looks like a secret (H3); not logging it"
    )
    assert VAST_KEY not in str(operator.value)
    assert not log_path.exists()


# --- H3: property tests --------------------------------------------------------------------
HEX = "0123456789abcdef"
UPPER_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
vast_keys = st.text(alphabet=HEX, min_size=64, max_size=64)
aws_ids = st.builds(
    lambda p, s: p + s,
    st.sampled_from(["AKIA", "ASIA"]),
    st.text(alphabet=UPPER_ALNUM, min_size=16, max_size=16),
)
google_keys = st.text(alphabet=UPPER_ALNUM + "abcxyz_-", min_size=35, max_size=35).map(
    lambda s: "AIza" + s
)
PROPERTY = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@PROPERTY
@given(before=st.text(), secret=st.one_of(vast_keys, aws_ids, google_keys), after=st.text())
@pytest.mark.fault(
    "an API key in a logged message",
    handled="scrubbed before the event log is written (H3)",
)
def test_a_generated_key_in_random_text_never_reaches_the_file(
    tmp_path: Path, before: str, secret: str, after: str
) -> None:
    """H3: whatever text surrounds a Vast key, AWS id or Google key, the key is not written."""
    log = EventLog(tmp_path / "prop" / "events.jsonl", "prop")

    log.append("note", text=before + secret + after, nested={"list": [after + secret]})

    assert secret.encode() not in log.path.read_bytes()


@PROPERTY
@given(
    before=st.text(),
    secret=st.text(alphabet=UPPER_ALNUM + "abcdef/+=-_", min_size=8),
    after=st.text(),
    name=st.sampled_from(
        ["VAST_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "SERVICE_CREDENTIAL"]
    ),
)
def test_a_random_environment_secret_in_random_text_never_reaches_the_file(
    tmp_path: Path, before: str, secret: str, after: str, name: str
) -> None:
    """H3: any 8+ char value of a secret-named variable is redacted in any surrounding text."""
    log = EventLog(tmp_path / "env" / "events.jsonl", "prop")
    secret = "s3-" + secret  # never a substring of the REDACTED marker itself

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(name, secret)
        log.append("note", text=before + secret + after)

    assert secret.encode() not in log.path.read_bytes()


# --- H3: the scrubber is not just deleting everything --------------------------------------
def test_non_secrets_survive_unchanged(log: EventLog) -> None:
    """H3: ordinary fields, a 63-hex string and the word token in prose are written verbatim."""
    payload: dict[str, object] = {
        "gpu_name": "RTX 4090",
        "instance_id": 12345678,
        "dph_total": 0.4213,
        "actual_status": "running",
        "label": "gpuops-intent-5f2c9e1a",
        "hex63": VAST_KEY[:63],
        "upper_hex64": VAST_KEY.upper(),
        "almost_aws": "AKIA" + "X" * 15,
        "note": "the token expired; refresh the token. monkey=banana keyboard=us",
        "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx7 alice@laptop",
        "url": "https://console.vast.ai/api/v0/instances/123/?owner=me",
        "tokens_left": None,
        "password": "",
        "empty": [],
        "ok": True,
    }

    event = log.append("offer.decision", **payload)

    assert event["payload"] == payload
    assert next(iter(read_events(log.path)))["payload"] == payload
    assert b"REDACTED" not in log.path.read_bytes()


def test_scrub_returns_a_copy_and_keeps_container_types() -> None:
    """H3: scrub is pure: the input is untouched, tuples stay tuples, numbers pass through."""
    original = {"token": "abc12345", "pairs": ("x", 1, 2.5, None), "list": ["api_key=zzz"]}
    snapshot = json.dumps(original)

    result = scrub(original)

    assert result == {
        "token": REDACTED,
        "pairs": ("x", 1, 2.5, None),
        "list": ["api_key=[REDACTED]"],
    }
    assert json.dumps(original) == snapshot
    assert scrub(7) == 7


def test_a_secret_in_a_dict_key_is_redacted() -> None:
    """H3: keys are strings too: a token used as a key does not survive as one."""
    assert scrub({f"Bearer {BEARER}": 1}) == {f"Bearer {REDACTED}": 1}


def test_a_secret_name_at_the_end_of_a_list_does_not_redact_its_first_item() -> None:
    """H3: only the item after a secret name or flag goes; the list does not wrap around."""
    assert scrub(["plainvalue99", "password"]) == ["plainvalue99", "password"]
    assert scrub(("job-1", "x", "--token")) == ("job-1", "x", "--token")


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ('{{"private_key": "{}", "n": 1}}', '{"private_key": "[REDACTED PRIVATE KEY]", "n": 1}'),
        ("{{'private_key': '{}'}}", "{'private_key': '[REDACTED PRIVATE KEY]'}"),
        ("private_key={} (rotated)", "private_key=[REDACTED PRIVATE KEY] (rotated)"),
    ],
    ids=["double-quoted", "single-quoted", "bare"],
)
def test_a_private_key_under_a_secret_name_keeps_its_private_key_marker(
    template: str, expected: str
) -> None:
    """H3: a value already redacted by the PEM rule is not redacted a second time."""
    assert scrub(template.format(pem("RSA ").strip())) == expected


def test_a_value_with_text_before_the_marker_is_not_taken_as_already_redacted() -> None:
    """H3: a secret value counts as redacted only when it starts with the marker."""
    assert scrub('password="X[REDACTED]"') == 'password="[REDACTED]"'


def test_an_auth_scheme_with_no_credential_does_not_end_the_scan() -> None:
    """H3: a bare "auth=basic" is kept, and the pairs after it are still judged."""
    assert scrub("auth=basic&password=hunter22") == "auth=basic&password=[REDACTED]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "api_key=a1b2c3&password=d4e5f6&page=2",
            "api_key=[REDACTED]&password=[REDACTED]&page=2",
        ),
        (
            "password=a1b2c3 Authorization: Basic dXNlcjpw",
            "password=[REDACTED] Authorization: Basic [REDACTED]",
        ),
    ],
    ids=["two-pairs", "pair-then-scheme"],
)
def test_every_secret_pair_in_one_string_loses_its_value_and_keeps_the_text_between(
    text: str, expected: str
) -> None:
    """H3: several secret pairs in one string are each redacted; nothing else is dropped."""
    assert scrub(text) == expected


# --- many writers ----------------------------------------------------------------------------
WRITERS = 4
APPENDS = 250
SIZES = (10, 900, 5000, 70_000)  # some over a 4 KiB pipe buffer, some over 64 KiB


def _writer(path: str, writer: int, start: multiprocessing.synchronize.Barrier) -> None:
    log = EventLog(path, f"writer-{writer}")
    start.wait()
    for seq in range(APPENDS):
        log.append(
            "test.concurrent", writer=writer, seq=seq, blob="x" * SIZES[(writer + seq) % len(SIZES)]
        )


@pytest.mark.slow
def test_concurrent_writers_never_tear_or_lose_a_line(log_path: Path) -> None:
    """Four processes x 250 appends of up to 70 KB: 1000 whole lines, each event exactly once."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_writer, args=(str(log_path), w, start)) for w in range(WRITERS)]
    began = time.perf_counter()

    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=60)
    wall_s = time.perf_counter() - began

    assert [proc.exitcode for proc in procs] == [0] * WRITERS
    raw = log_path.read_bytes()
    lines = raw.split(b"\n")
    assert lines.pop() == b""
    parsed = [json.loads(line) for line in lines]
    seen = [(e["payload"]["writer"], e["payload"]["seq"]) for e in parsed]
    assert len(lines) == WRITERS * APPENDS
    assert sorted(seen) == [(w, s) for w in range(WRITERS) for s in range(APPENDS)]
    for e in parsed:
        writer, seq = e["payload"]["writer"], e["payload"]["seq"]
        assert e["payload"]["blob"] == "x" * SIZES[(writer + seq) % len(SIZES)]
        assert e["operator"] == f"writer-{writer}"
    for w in range(WRITERS):
        stamps = [e["ts"] for e in parsed if e["payload"]["writer"] == w]
        assert stamps == sorted(stamps) and len(set(stamps)) == APPENDS
    print(
        f"\nevent log: {WRITERS} processes, {len(lines)} lines, {len(raw)} bytes, "
        f"{wall_s:.2f} s wall"
    )


# --- torn lines ------------------------------------------------------------------------------
def test_an_append_after_a_torn_last_line_starts_a_line_of_its_own(log: EventLog) -> None:
    """A writer that died mid-line leaves a fragment; the next event is still a whole line."""
    log.append("first", n=1)
    with log.path.open("ab") as fh:
        fh.write(b'{"ts":"2025-01-01T00:00:00.000000Z","operator":"bob","kind":"half","pay')

    log.append("second", n=2)

    lines = log.path.read_bytes().split(b"\n")
    assert lines[1].endswith(b'"pay') and json.loads(lines[2])["kind"] == "second"
    stream = read_events(log.path)
    assert [e["kind"] for e in stream] == ["first", "second"]
    assert stream.events == 2
    assert [bad.lineno for bad in stream.bad_lines] == [2]
    assert "incomplete or not JSON" in stream.bad_lines[0].reason


def test_strict_reading_names_the_file_and_line_of_a_torn_line(log: EventLog) -> None:
    """A strict read raises CorruptState at path:lineno and has yielded the good lines before."""
    log.append("first")
    with log.path.open("ab") as fh:
        fh.write(b'{"ts":"2025-01')
    log.append("second")
    seen: list[str] = []

    with pytest.raises(CorruptState, match=r"events\.jsonl:2") as caught:
        seen.extend(str(e["kind"]) for e in read_events(log.path, strict=True))

    assert seen == ["first"]
    assert caught.value.where == f"{log.path}:2"
    assert "not JSON" in caught.value.reason


def test_a_torn_line_is_not_repaired_twice(log: EventLog) -> None:
    """Only a missing final newline is added: a healthy file gets no blank lines."""
    log.append("a")
    log.append("b")

    assert log.path.read_bytes().count(b"\n") == 2
    assert read_events(log.path, strict=True).bad_lines == []


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "empty line"),
        (b"   ", "empty line"),
        (b"[1, 2]", "a JSON list, not an event object"),
        (b'{"ts": "x"}', "not an event: missing operator, kind, payload"),
        (b"\xff\xfe{}", "not UTF-8 (invalid start byte at byte 0)"),
        (
            b'{"ts": 1, "operator": "a", "kind": "k", "payload": {}}',
            "not an event: ts, operator and kind must be strings, payload an object",
        ),
        (
            b'{"ts": "t", "operator": "a", "kind": "k", "payload": []}',
            "not an event: ts, operator and kind must be strings, payload an object",
        ),
        (
            b'{"ts": "t", "operator": "a",',
            "incomplete or not JSON (Expecting property name enclosed in double quotes"
            " at column 29)",
        ),
    ],
    ids=["empty", "blank", "array", "missing", "binary", "ts-number", "payload-list", "torn"],
)
def test_a_line_that_is_not_an_event_is_reported_with_its_reason(
    log: EventLog, line: bytes, reason: str
) -> None:
    """A hand-edited or foreign line is skipped and listed, never silently accepted."""
    log.append("good")
    with log.path.open("ab") as fh:
        fh.write(line + b"\n")

    stream = read_events(log.path)

    assert [e["kind"] for e in stream] == ["good"]
    assert stream.bad_lines == [events.BadLine(2, reason)]


def test_reading_a_missing_log_is_a_usage_error(tmp_path: Path) -> None:
    """A typo'd path is named, not read as an empty history."""
    with pytest.raises(UsageError, match="no event log at .*nope.jsonl"):
        list(read_events(tmp_path / "nope.jsonl"))


def test_an_event_stream_is_lenient_by_default_and_counts_nothing_before_it_is_read(
    log: EventLog,
) -> None:
    """EventStream(path) lists a bad line instead of raising; its counters start at zero."""
    log.append("good")
    with log.path.open("ab") as fh:
        fh.write(b"{\n")

    stream = events.EventStream(log.path)

    assert (stream.strict, stream.events, stream.bad_lines) == (False, 0, [])
    assert [e["kind"] for e in stream] == ["good"]
    assert stream.events == 1
    assert stream.bad_lines == [
        events.BadLine(
            2,
            "incomplete or not JSON (Expecting property name enclosed in double quotes"
            " at column 2)",
        )
    ]


def test_read_events_streams_a_20000_line_log(tmp_path: Path) -> None:
    """Streaming reads count every line of a large log one at a time."""
    path = tmp_path / "big.jsonl"
    line = {"ts": "2025-01-01T00:00:00.000000Z", "operator": "a", "kind": "k", "payload": {}}
    path.write_text((json.dumps(line) + "\n") * 20_000)

    stream = read_events(path)
    count = sum(1 for _ in stream)

    assert count == stream.events == 20_000
    assert stream.bad_lines == []


# --- what is recorded ------------------------------------------------------------------------
def test_timestamps_are_utc_and_increase_per_writer_even_when_the_clock_steps_back(
    log_path: Path,
) -> None:
    """Each event is stamped in UTC with microseconds; a clock going back is clamped forward."""
    base = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    ticks = iter([base, base - timedelta(seconds=5), base, base + timedelta(seconds=1)])
    log = EventLog(log_path, "alice", clock=WallOf(lambda: next(ticks).timestamp()))

    stamps = [log.append("tick")["ts"] for _ in range(4)]

    assert stamps == [
        "2025-03-01T10:00:00.000000Z",
        "2025-03-01T10:00:00.000001Z",
        "2025-03-01T10:00:00.000002Z",
        "2025-03-01T10:00:01.000000Z",
    ]
    assert all(datetime.fromisoformat(s).tzinfo == UTC for s in stamps)


def test_events_at_the_same_instant_get_distinct_increasing_stamps(log_path: Path) -> None:
    """A clock that returns one time again and again still gives each event its own stamp."""
    at = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    log = EventLog(log_path, "alice", clock=WallOf(at.timestamp))

    stamps = [log.append("tick")["ts"] for _ in range(3)]

    assert stamps == [
        "2025-03-01T12:00:00.000000Z",
        "2025-03-01T12:00:00.000001Z",
        "2025-03-01T12:00:00.000002Z",
    ]


@pytest.fixture
def local_zone_is_not_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is UTC+05:30 for one test, then restored."""
    monkeypatch.setenv("TZ", "IST-05:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("local_zone_is_not_utc")
def test_stamps_are_utc_whatever_the_local_time_zone(log_path: Path) -> None:
    """A clock reading is stamped in UTC, never in the host's local zone."""
    at = datetime(2025, 3, 1, 12, 0, 0, tzinfo=timezone(timedelta(hours=-7)))
    log = EventLog(log_path, "alice", clock=WallOf(at.timestamp))

    assert log.append("tick")["ts"] == "2025-03-01T19:00:00.000000Z"


def test_the_real_clock_gives_utc_stamps(log: EventLog) -> None:
    """Without an injected clock the stamp is now, in UTC."""
    before = datetime.now(UTC)

    stamp = datetime.fromisoformat(str(log.append("tick")["ts"]))

    assert stamp.tzinfo == UTC and before <= stamp <= datetime.now(UTC)


def test_operator_kind_and_payload_are_recorded_as_returned(log: EventLog) -> None:
    """The returned event is exactly the line in the file; payload keys may be named kind."""
    event = log.append("ledger.transition", name="job-1", kind="shadowed", before=None)

    assert json.loads(log.path.read_bytes()) == event
    assert list(event) == ["ts", "operator", "kind", "payload"]
    assert (event["operator"], event["kind"]) == ("alice@laptop", "ledger.transition")
    assert event["payload"] == {"name": "job-1", "kind": "shadowed", "before": None}


@pytest.mark.parametrize("kind", ["", "Offer", "9lives", "a b", "tick\n", "x/y", 7])
def test_a_bad_kind_is_a_usage_error_naming_it(log: EventLog, kind: str) -> None:
    """Kinds are lower-case dotted names; anything else is refused before writing."""
    with pytest.raises(UsageError, match="event kind") as caught:
        log.append(kind)

    assert repr(kind) in str(caught.value)
    assert not log.path.exists()


@pytest.mark.parametrize("operator", ["", "   ", None])
def test_an_empty_operator_is_a_usage_error(log_path: Path, operator: str) -> None:
    """Every event says who acted; an empty operator is refused."""
    with pytest.raises(UsageError) as caught:
        EventLog(log_path, operator)

    assert str(caught.value) == "an event log needs a non-empty operator id"


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"tags": {"a", "b"}}, "payload.tags is a set"),
        ({"box": {"spec": [1, object()]}}, r"payload.box.spec\[1\] is a object"),
        ({"ratio": float("nan")}, "payload.ratio is nan"),
        ({"ratio": float("inf")}, "payload.ratio is inf"),
        ({"by_id": {1: "x"}}, "payload.by_id has the non-string key 1"),
    ],
)
def test_an_unserialisable_payload_is_a_usage_error_naming_the_key(
    log: EventLog, payload: dict[str, object], where: str
) -> None:
    """The error names the exact key path, and nothing is written."""
    with pytest.raises(UsageError, match=where):
        log.append("note", **payload)

    assert not log.path.exists()


class Status(enum.Enum):
    RUNNING = "running"


@dataclass(frozen=True)
class Offer:
    offer_id: int
    seen_at: datetime
    api_key: str


class Ratio(enum.Enum):
    UNKNOWN = float("nan")


@dataclass(frozen=True)
class Box:
    name: str
    tags: set[str]


ACCEPTED = "(use str, numbers, lists, dicts, datetime, Path, bytes, enums or dataclasses)"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"ratio": Ratio.UNKNOWN}, "event payload payload.ratio is nan, which JSON cannot hold"),
        (
            {"box": Box("b1", {"a"})},
            f"event payload payload.box.tags is a set, which the event log cannot write {ACCEPTED}",
        ),
        (
            {"ids": frozenset()},
            "event payload payload.ids is a frozenset, which the event log cannot write "
            + ACCEPTED,
        ),
    ],
    ids=["enum-value", "dataclass-field", "plain"],
)
def test_a_bad_value_inside_an_enum_or_dataclass_is_named_by_its_full_key_path(
    log: EventLog, payload: dict[str, object], message: str
) -> None:
    """The error gives the whole path through enums and dataclasses and the accepted types."""
    with pytest.raises(UsageError) as caught:
        log.append("note", **payload)

    assert str(caught.value) == message
    assert not log.path.exists()


def test_common_values_are_converted_deterministically(log: EventLog) -> None:
    """datetime, Path, bytes, enums, dataclasses and exceptions become plain JSON values."""
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    event = log.append(
        "note",
        at=at,
        day=at.date(),
        path=Path("/tmp/x"),
        blob=b"\x00secret",
        status=Status.RUNNING,
        offer=Offer(7, at, "k-123456789"),
        error=ValueError("bad"),
        wait=timedelta(seconds=1.5),
        raw=bytearray(3),
        pair=(1, 2),
    )

    assert event["payload"] == {
        "at": "2025-01-02T03:04:05.000000Z",
        "day": "2025-01-02",
        "path": "/tmp/x",
        "blob": "<7 bytes>",
        "status": "running",
        "offer": {"offer_id": 7, "seen_at": "2025-01-02T03:04:05.000000Z", "api_key": REDACTED},
        "error": "ValueError: bad",
        "wait": 1.5,
        "raw": "<3 bytes>",
        "pair": [1, 2],
    }
    assert b"secret" not in log.path.read_bytes()


# --- the file ------------------------------------------------------------------------------
def test_the_log_is_private_to_its_user(log: EventLog) -> None:
    """The file is created 0600 and its directory 0700 (DESIGN §4 security)."""
    log.append("first")

    assert stat.S_IMODE(log.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.path.parent.stat().st_mode) == 0o700


def test_an_append_creates_every_missing_directory_above_the_log(tmp_path: Path) -> None:
    """A log three directories below anything that exists is created, and every directory made
    for it is private (0700), not only its own one, even under umask 0."""
    path = tmp_path / "a" / "b" / "c" / "events.jsonl"

    old = os.umask(0)
    try:
        EventLog(path, "alice").append("first", n=1)
    finally:
        os.umask(old)

    assert [e["payload"] for e in read_events(path)] == [{"n": 1}]
    modes = [stat.S_IMODE((tmp_path / p).stat().st_mode) for p in ("a", "a/b", "a/b/c")]
    assert modes == [0o700, 0o700, 0o700]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_fsync_is_called_only_when_asked_for(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync is off by default (an audit trail, not the truth) and on per event when set."""
    calls: list[int] = []
    real_fsync: Callable[[int], None] = os.fsync
    monkeypatch.setattr(events.os, "fsync", lambda fd: calls.append(fd) or real_fsync(fd))

    EventLog(log_path, "alice").append("quiet")
    EventLog(log_path, "alice", fsync=True).append("durable")

    assert len(calls) == 1


def test_a_log_that_cannot_be_written_is_a_state_error(tmp_path: Path) -> None:
    """An OS failure is translated once into the gpuops tree, naming the file."""
    (tmp_path / "dir.jsonl").mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("")

    with pytest.raises(StateError, match="dir.jsonl"):
        EventLog(tmp_path / "dir.jsonl", "alice").append("x")
    with pytest.raises(StateError, match="cannot open"):
        EventLog(blocker / "events.jsonl", "alice").append("x")


def test_a_short_write_is_completed_by_the_write_loop(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write(2) may write part of a buffer; the loop writes the rest, so the line is whole."""
    real_write = os.write
    monkeypatch.setattr(events.os, "write", lambda fd, data: real_write(fd, bytes(data[:100])))

    EventLog(log_path, "alice").append("long", text="y" * 1000)

    assert json.loads(log_path.read_bytes())["payload"]["text"] == "y" * 1000


def test_a_write_of_one_byte_at_a_time_still_completes_the_line(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """write(2) returning 1 is progress, not failure: the loop writes the line byte by byte."""
    real_write = os.write
    monkeypatch.setattr(events.os, "write", lambda fd, data: real_write(fd, bytes(data[:1])))

    event = EventLog(log_path, "alice").append("slow", n=1)

    assert log_path.read_bytes() == json.dumps(event, separators=(",", ":")).encode() + b"\n"


def test_a_write_that_makes_no_progress_is_an_error_not_a_hang(
    log_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write returning 0 would loop forever; it is raised as a StateError instead."""
    monkeypatch.setattr(events.os, "write", lambda fd, data: 0)

    with pytest.raises(StateError, match="write returned 0"):
        EventLog(log_path, "alice").append("x")


def test_a_password_inside_a_url_is_redacted(log: EventLog) -> None:
    """H3: https://user:password@host keeps the user and host and loses the password."""
    log.append("http.call", url="https://deploy:hunter2-secret@example.com/x")

    text = log.path.read_text()

    assert "hunter2-secret" not in text
    assert "https://deploy:[REDACTED]@example.com/x" in text


def test_a_cookie_header_is_redacted(log: EventLog) -> None:
    """H3: a session cookie is a credential."""
    log.append("http.call", headers={"Cookie": "session=abcdef123456"}, note="Cookie: sid=zz99")

    text = log.path.read_text()

    assert "abcdef123456" not in text and "zz99" not in text


def test_a_line_nested_too_deep_is_named_at_its_line_not_a_recursion_error(log: EventLog) -> None:
    """Bad input: 3,000 nested arrays raised RecursionError out of the reader; a strict read
    names the line and the reason, the good line before it yielded."""
    log.append("first")
    with log.path.open("ab") as fh:
        fh.write(b'{"ts":"x","payload":' + b"[" * 3000 + b"]" * 3000 + b"}\n")
    seen: list[str] = []

    with pytest.raises(CorruptState, match=r"events\.jsonl:2") as caught:
        seen.extend(str(e["kind"]) for e in read_events(log.path, strict=True))

    assert seen == ["first"] and caught.value.reason == "JSON nested too deep to read"


def test_a_datetime_with_no_utc_offset_is_refused_naming_its_field(tmp_path):
    """An instant in a payload is written in the one stamp form; a naive one names no instant
    (each reader would place it in its own zone), so the write is refused, naming the field."""
    log = EventLog(tmp_path / "events.jsonl", operator="alice")
    with pytest.raises(UsageError, match=r"^event payload payload\.at is a datetime with no UTC offset$"):
        log.append("note", at=datetime(2025, 1, 2, 3, 4, 5))
    assert not (tmp_path / "events.jsonl").exists() or (tmp_path / "events.jsonl").read_text() == ""
