"""S3Store beyond the shared contract: how S3 failures become gpuops errors, prefixes, and
the client it builds for itself. moto answers in decorator mode; botocore's Stubber stands
in for answers moto never gives (409 conflicts, numeric HEAD-style codes, AccessDenied)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from moto import mock_aws

from gpuops import timing
from gpuops.clock import SYSTEM, WithSleep
from gpuops.errors import (
    AlreadyExists,
    StateError,
    StoreForbidden,
    StoreMissing,
    StoreUnavailable,
    UsageError,
    VersionConflict,
)
from gpuops.store.base import check_key
from gpuops.store.opener import open_store
from gpuops.store.s3 import _CONFLICT_ATTEMPTS, S3Store

BUCKET = "gpuops-s3-tests"
DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
STALE_ETAG = '"0123456789abcdef0123456789abcdef"'


@pytest.fixture(scope="module")
def client() -> object:
    """One boto3 client for the module (building one costs about 0.1 s)."""
    return boto3.client("s3", region_name="us-east-1", **DUMMY_CREDENTIALS)


@pytest.fixture
def s3(client) -> Iterator[object]:
    """A client with moto active and an empty bucket."""
    with mock_aws():
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def store(s3) -> S3Store:
    """An S3Store under a prefix of the test bucket."""
    return S3Store(BUCKET, "team/state", client=s3)


# --- conditional writes against moto --------------------------------------------------------------
def test_put_with_a_stale_etag_raises_version_conflict(store: S3Store, s3) -> None:
    """IfMatch with an old ETag is refused (412) and reported as VersionConflict."""
    old = store.create("board", b"one")
    current = store.put("board", b"two", old)
    with pytest.raises(VersionConflict) as caught:
        store.put("board", b"lost", old)
    assert (caught.value.key, caught.value.expected) == ("board", old)
    body = s3.get_object(Bucket=BUCKET, Key="team/state/board")
    assert (body["Body"].read(), body["ETag"]) == (b"two", current)


def test_delete_with_a_stale_etag_raises_version_conflict(store: S3Store, s3) -> None:
    """delete with IfMatch on an old ETag is refused and the object stays."""
    old = store.create("lease", b"one")
    store.put("lease", b"two", old)
    with pytest.raises(VersionConflict) as caught:
        store.delete("lease", old)
    assert (caught.value.key, caught.value.expected) == ("lease", old)
    assert s3.get_object(Bucket=BUCKET, Key="team/state/lease")["Body"].read() == b"two"


def test_create_on_an_existing_key_raises_already_exists(store: S3Store, s3) -> None:
    """IfNoneMatch='*' on an existing object is refused and reported as AlreadyExists."""
    s3.put_object(Bucket=BUCKET, Key="team/state/board", Body=b"written by someone else")
    with pytest.raises(AlreadyExists) as caught:
        store.create("board", b"mine")
    assert caught.value.key == "board"
    assert store.get("board").data == b"written by someone else"


def test_the_version_is_the_objects_etag(store: S3Store, s3) -> None:
    """create, put and get all hand out the object's ETag, quotes included."""
    created = store.create("board", b"one")
    assert created == s3.head_object(Bucket=BUCKET, Key="team/state/board")["ETag"]
    assert created.startswith('"') and created.endswith('"')
    written = store.put("board", b"two", created)
    assert written == s3.head_object(Bucket=BUCKET, Key="team/state/board")["ETag"]
    assert store.get("board").version == written


def test_writing_identical_bytes_gives_the_same_version(store: S3Store) -> None:
    """ETags compare values: identical bytes share a version (the documented S3 caveat)."""
    first = store.create("board", b"same")
    assert store.put("board", b"same", first) == first


@pytest.mark.parametrize(
    "operation",
    ["get", "create", "put", "delete", "list"],
)
def test_a_missing_bucket_is_configuration_naming_the_fix(s3, operation: str) -> None:
    """A bucket that does not exist is never an absent key; it is StoreMissing: a store a
    guardian keeps retrying (an Unavailable) but a command's exit 2, with the fix."""
    store = S3Store("no-such-bucket", "team/state", client=s3)
    calls = {
        "get": lambda: store.get("board"),
        "create": lambda: store.create("board", b"x"),
        "put": lambda: store.put("board", b"x", STALE_ETAG),
        "delete": lambda: store.delete("board", STALE_ETAG),
        "list": lambda: store.list("ledger/"),
    }
    with pytest.raises(StoreMissing) as caught:
        calls[operation]()
    assert isinstance(caught.value, StoreUnavailable) and caught.value.exit_code == 2
    assert "NoSuchBucket: the state bucket 'no-such-bucket' does not exist; create it" in str(
        caught.value
    )
    assert str(caught.value).startswith("S3 refused ")
    assert str(caught.value).endswith("or point --state / GPUOPS_STATE at one that does")


@pytest.fixture(scope="module")
def unreachable_client() -> object:
    """A client for a loopback port nobody listens on, failing fast with no retries."""
    config = Config(connect_timeout=0.5, read_timeout=0.5, retries={"total_max_attempts": 1})
    return boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        config=config,
        **DUMMY_CREDENTIALS,
    )


@pytest.mark.parametrize("operation", ["get", "create", "put", "delete", "list"])
def test_an_unreachable_endpoint_raises_store_unavailable(unreachable_client, operation) -> None:
    """A connection failure on any operation is StoreUnavailable saying S3 is unreachable."""
    store = S3Store(BUCKET, "team/state", client=unreachable_client)
    calls = {
        "get": lambda: store.get("board"),
        "create": lambda: store.create("board", b"x"),
        "put": lambda: store.put("board", b"x", STALE_ETAG),
        "delete": lambda: store.delete("board", STALE_ETAG),
        "list": lambda: store.list("ledger/"),
    }
    with pytest.raises(StoreUnavailable) as caught:
        calls[operation]()
    assert str(caught.value).startswith("S3 unreachable for ")
    assert "EndpointConnectionError" in str(caught.value)


# --- error codes moto never sends ----------------------------------------------------------------
@pytest.fixture
def stubbed(client) -> Iterator[tuple[S3Store, Stubber]]:
    """An S3Store whose client answers from a Stubber queue instead of the network."""
    stubber = Stubber(client)
    with stubber:
        yield S3Store(BUCKET, "team/state", client=client), stubber
    stubber.assert_no_pending_responses()


CONFLICT_CODES = [
    ("PreconditionFailed", 412),
    ("412", 412),
    ("ConditionalRequestConflict", 409),
    ("409", 409),
]
MISSING_CODES = [("NoSuchKey", 404), ("404", 404), ("NotFound", 404)]


@pytest.mark.parametrize(("code", "status"), CONFLICT_CODES)
def test_a_conflict_answer_to_put_or_delete_is_a_version_conflict(stubbed, code, status) -> None:
    """412 and 409 answers, by name or by number, mean someone else wrote first (a 409 to a
    put only once it kept coming back: it is retried first)."""
    store, stubber = stubbed
    tries = _CONFLICT_ATTEMPTS if status == 409 else 1
    for _ in range(tries):
        stubber.add_client_error("put_object", service_error_code=code, http_status_code=status)
    stubber.add_client_error("delete_object", service_error_code=code, http_status_code=status)
    with pytest.raises(VersionConflict) as caught:
        store.put("board", b"x", STALE_ETAG)
    assert (caught.value.key, caught.value.expected) == ("board", STALE_ETAG)
    with pytest.raises(VersionConflict) as caught:
        store.delete("board", STALE_ETAG)
    assert (caught.value.key, caught.value.expected) == ("board", STALE_ETAG)


@pytest.mark.parametrize(("code", "status"), CONFLICT_CODES)
def test_a_conflict_answer_to_create_is_already_exists(stubbed, code, status) -> None:
    """create-if-absent turns 412 and 409 answers into AlreadyExists (a 409 once it kept
    coming back: it is retried first)."""
    store, stubber = stubbed
    for _ in range(_CONFLICT_ATTEMPTS if status == 409 else 1):
        stubber.add_client_error("put_object", service_error_code=code, http_status_code=status)
    with pytest.raises(AlreadyExists) as caught:
        store.create("board", b"x")
    assert caught.value.key == "board"


@pytest.mark.parametrize(("code", "status"), MISSING_CODES)
def test_a_missing_answer_is_none_on_get_and_a_conflict_on_put_and_delete(
    stubbed, code, status
) -> None:
    """A missing object reads as None, and a conditional write to it is a VersionConflict."""
    store, stubber = stubbed
    stubber.add_client_error("get_object", service_error_code=code, http_status_code=status)
    stubber.add_client_error("put_object", service_error_code=code, http_status_code=status)
    stubber.add_client_error("delete_object", service_error_code=code, http_status_code=status)
    assert store.get("board") is None
    with pytest.raises(VersionConflict):
        store.put("board", b"x", STALE_ETAG)
    with pytest.raises(VersionConflict):
        store.delete("board", STALE_ETAG)


@pytest.mark.parametrize(("code", "status"), MISSING_CODES)
def test_a_missing_answer_to_create_is_store_unavailable(stubbed, code, status) -> None:
    """create has no version to conflict with, so a 404 there means the store is broken."""
    store, stubber = stubbed
    stubber.add_client_error("put_object", service_error_code=code, http_status_code=status)
    with pytest.raises(StoreUnavailable, match=f"S3 refused 'board': {code}: "):
        store.create("board", b"x")


@pytest.mark.parametrize("operation", ["get", "create", "put", "delete", "list"])
def test_access_denied_is_store_unavailable_naming_the_code(stubbed, operation) -> None:
    """Any other S3 refusal is StoreUnavailable quoting the key and the S3 error code."""
    store, stubber = stubbed
    method = {"list": "list_objects_v2"}.get(operation, f"{operation}_object")
    method = "put_object" if operation == "create" else method
    stubber.add_client_error(method, service_error_code="AccessDenied", http_status_code=403)
    calls = {
        "get": lambda: store.get("board"),
        "create": lambda: store.create("board", b"x"),
        "put": lambda: store.put("board", b"x", STALE_ETAG),
        "delete": lambda: store.delete("board", STALE_ETAG),
        "list": lambda: store.list("board"),
    }
    with pytest.raises(StoreUnavailable) as caught:
        calls[operation]()
    assert str(caught.value).startswith("S3 refused 'board': AccessDenied: ")


class _FailingClient:
    """A stand-in client whose every call fails with an error answer that carries no code."""

    def __getattr__(self, name: str):
        from botocore.exceptions import ClientError

        def fail(**kwargs):
            raise ClientError({}, "PutObject")

        return fail


def test_an_error_answer_without_a_code_is_store_unavailable() -> None:
    """An S3 error with no Error.Code is neither conflict nor absence: the store is unavailable."""
    store = S3Store(BUCKET, "team/state", client=_FailingClient())
    with pytest.raises(StoreUnavailable) as caught:
        store.put("board", b"x", STALE_ETAG)
    assert str(caught.value) == (
        "S3 refused 'board': : "
        "An error occurred (Unknown) when calling the PutObject operation: Unknown"
    )


# --- prefixes ----------------------------------------------------------------------------------
def test_keys_are_stored_under_the_prefix_and_list_strips_it(s3) -> None:
    """Key 'ledger/a' under prefix 'team/state' is object 'team/state/ledger/a'; list strips it."""
    store = S3Store(BUCKET, "/team/state/", client=s3)
    assert (store.prefix, store.url) == ("team/state", f"s3://{BUCKET}/team/state")
    store.create("ledger/a", b"a")
    store.create("board", b"b")
    for foreign in ["team/stateX/ledger/b", "other/ledger/c", "team/ledger/d"]:
        s3.put_object(Bucket=BUCKET, Key=foreign, Body=b"not ours")
    names = sorted(item["Key"] for item in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert "team/state/ledger/a" in names and "team/state/board" in names
    assert store.list() == ["board", "ledger/a"]
    assert store.list("ledger/") == ["ledger/a"]
    assert store.get("ledger/a").key == "ledger/a"
    assert s3.get_object(Bucket=BUCKET, Key="team/state/ledger/a")["Body"].read() == b"a"


def test_an_s3_store_made_without_a_prefix_has_none() -> None:
    """S3Store(bucket) has the empty prefix and the URL s3://bucket."""
    store = S3Store(BUCKET)
    assert (store.bucket, store.prefix, store.url) == (BUCKET, "", f"s3://{BUCKET}")


@pytest.mark.parametrize(
    ("given", "prefix"),
    [("team/state", "team/state"), ("/team/state/", "team/state"), ("//X-state-X//", "X-state-X")],
)
def test_only_slashes_are_trimmed_from_the_prefix(given: str, prefix: str) -> None:
    """Leading and trailing slashes go; every other character of the prefix stays."""
    store = S3Store(BUCKET, given)
    assert (store.prefix, store.url) == (prefix, f"s3://{BUCKET}/{prefix}")


def test_without_a_prefix_keys_are_object_names(s3) -> None:
    """An empty prefix stores each key under its own name at the bucket root."""
    store = S3Store(BUCKET, "", client=s3)
    assert store.url == f"s3://{BUCKET}"
    store.create("ledger/a", b"a")
    assert s3.get_object(Bucket=BUCKET, Key="ledger/a")["Body"].read() == b"a"
    assert store.list() == ["ledger/a"]


def test_list_reports_only_valid_keys_when_a_folder_marker_exists(store: S3Store, s3) -> None:
    """A zero-byte 'folder' object under the prefix never shows up as an (invalid) key."""
    store.create("ledger/a", b"a")
    s3.put_object(Bucket=BUCKET, Key="team/state/ledger/", Body=b"")
    for key in store.list():
        check_key(key)
    assert store.list() == ["ledger/a"]


def test_two_prefixes_in_one_bucket_do_not_see_each_other(s3) -> None:
    """Stores on different prefixes of one bucket are independent."""
    blue = S3Store(BUCKET, "blue", client=s3)
    green = S3Store(BUCKET, "green", client=s3)
    blue.create("board", b"blue")
    assert green.get("board") is None
    green.create("board", b"green")
    assert (blue.get("board").data, green.get("board").data) == (b"blue", b"green")
    assert blue.list() == ["board"] and green.list() == ["board"]


def test_an_s3_store_needs_a_bucket() -> None:
    """S3Store('') and s3:///prefix are usage errors that show the URL form."""
    with pytest.raises(UsageError) as caught:
        S3Store("")
    assert str(caught.value) == "an s3:// state URL needs a bucket: s3://bucket/prefix"
    with pytest.raises(UsageError):
        open_store("s3:///team/state")


def test_without_a_client_the_store_builds_one_with_the_http_timeout(
    s3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lazily built client uses timing.HTTP_TIMEOUT_S and one attempt per call, and works:
    a retried conditional write whose first reply was lost would read as a lost race. Its
    connection pool holds a listing's S3_SCAN_READERS (botocore's default is 10: the readers
    past it would each open and then drop a connection of their own)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "5")  # the store must insist on one attempt
    store = open_store(f"s3://{BUCKET}/team/state")
    store.create("board", b"one")
    assert s3.get_object(Bucket=BUCKET, Key="team/state/board")["Body"].read() == b"one"
    config = store._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (timing.HTTP_TIMEOUT_S,) * 2
    assert config.retries["total_max_attempts"] == 1
    assert config.max_pool_connections == timing.S3_SCAN_READERS


def test_the_store_builds_its_client_on_the_gpuops_s3_endpoint(monkeypatch) -> None:
    """GPUOPS_S3_ENDPOINT (which `fakes serve` exports), read into Settings and handed to
    open_store, is the endpoint of the store's client."""
    from gpuops.settings import Settings
    from gpuops.store import open_store

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("GPUOPS_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    settings = Settings.from_environ(cli_options={"state": f"s3://{BUCKET}/team/state"})

    client = open_store(settings.state_url, settings.s3_endpoint)._s3()  # type: ignore[attr-defined]

    assert client.meta.endpoint_url == "http://127.0.0.1:9"


def test_without_the_gpuops_s3_endpoint_the_store_uses_boto3s_default(monkeypatch) -> None:
    """Unset or empty, boto3 chooses (AWS_ENDPOINT_URL, else AWS itself)."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("GPUOPS_S3_ENDPOINT", "")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    client = S3Store(BUCKET, "team/state")._s3()

    assert client.meta.endpoint_url == "https://s3.amazonaws.com"


@pytest.mark.parametrize("code", ["ConditionalRequestConflict", "409"])
def test_a_409_to_a_conditional_write_is_retried_with_backoff_then_written(
    stubbed, code, monkeypatch
) -> None:
    """S3's 409 ConditionalRequestConflict means "try again", not "someone else won": the
    write is sent again, waiting S3_CONFLICT_BACKOFF_S and twice that, and lands."""
    store, stubber = stubbed
    slept: list[float] = []
    store.clock = WithSleep(SYSTEM, slept.append)  # the store's clock: its waits recorded
    for _ in range(2):
        stubber.add_client_error("put_object", service_error_code=code, http_status_code=409)
    stubber.add_response("put_object", {"ETag": '"e2"'})
    stubber.add_client_error("put_object", service_error_code=code, http_status_code=409)
    stubber.add_response("put_object", {"ETag": '"e3"'})

    assert store.put("board", b"x", STALE_ETAG) == '"e2"'
    assert store.create("other", b"y") == '"e3"'
    backoff = timing.S3_CONFLICT_BACKOFF_S
    assert slept == [backoff, 2 * backoff, backoff]


# --- a conditional write whose answer was lost (M17) ---------------------------------------------
class Cut:
    """The s3 client with its answers cut: each queued entry makes the next put or delete
    either land and then lose its answer ("after"), or lose the request itself ("before");
    ``meanwhile`` runs another writer's change first."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.cuts: list[str] = []
        self.meanwhile: list[object] = []
        self.sent = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def _cut(self, call: str, **params: object) -> object:
        from botocore.exceptions import ConnectionClosedError

        self.sent += 1
        while self.meanwhile:
            self.meanwhile.pop(0)()  # type: ignore[operator]
        how = self.cuts.pop(0) if self.cuts else None
        if how == "before":
            raise ConnectionClosedError(endpoint_url="http://s3")
        answer = getattr(self.real, call)(**params)
        if how == "after":
            raise ConnectionClosedError(endpoint_url="http://s3")
        return answer

    def put_object(self, **params: object) -> object:
        return self._cut("put_object", **params)

    def delete_object(self, **params: object) -> object:
        return self._cut("delete_object", **params)


@pytest.fixture
def cut(s3) -> tuple[S3Store, Cut]:
    client = Cut(s3)
    return S3Store(BUCKET, "team/state", client=client), client


def test_a_create_or_put_that_landed_and_lost_its_answer_is_ours_never_a_lost_race_m17(cut):
    """M17: the write landed and its answer was lost: read back, our own bytes are there, so
    it succeeded, with the version S3 holds; no second write is sent."""
    store, client = cut
    client.cuts = ["after"]
    version = store.create("board", b"one")
    assert store.get("board").version == version and client.sent == 1
    client.cuts = ["after"]
    again = store.put("board", b"two", version)
    found = store.get("board")
    assert (found.data, found.version, client.sent) == (b"two", again, 2)
    client.cuts = ["after"]
    store.delete("board", again)
    assert store.get("board") is None and client.sent == 3


def test_a_write_whose_request_was_lost_is_sent_once_more_still_conditional_m17(cut):
    """M17: the write never landed (the old value, or no object, is read back): it is sent
    once more, conditionally; a second lost answer is StoreUnavailable, loudly."""
    store, client = cut
    client.cuts = ["before"]
    version = store.create("board", b"one")
    assert store.get("board").data == b"one" and client.sent == 2
    client.cuts = ["before"]
    version = store.put("board", b"two", version)
    assert store.get("board").data == b"two" and client.sent == 4
    client.cuts = ["before"]
    store.delete("board", version)
    assert store.get("board") is None and client.sent == 6
    client.cuts = ["before", "before"]
    with pytest.raises(StoreUnavailable, match="unreachable for 'board'.*ConnectionClosedError"):
        store.create("board", b"three")
    assert store.get("board") is None
    version = store.create("board", b"four")
    client.cuts = ["before", "before"]  # a second lost answer is loud, never a silent retry
    with pytest.raises(StoreUnavailable, match="unreachable for 'board'.*ConnectionClosedError"):
        store.put("board", b"five", version)
    client.cuts = ["before", "before"]
    with pytest.raises(StoreUnavailable, match="unreachable for 'board'.*ConnectionClosedError"):
        store.delete("board", version)
    assert store.get("board").data == b"four"


def test_a_lost_answer_where_another_writer_won_is_a_real_conflict_m17(cut, s3):
    """M17: read back after a lost answer, another writer's value stands: the create is
    AlreadyExists, the put and the delete VersionConflict, and nothing is sent again."""
    store, client = cut
    other = S3Store(BUCKET, "team/state", client=s3)
    client.meanwhile = [lambda: other.create("board", b"theirs")]
    client.cuts = ["before"]
    with pytest.raises(AlreadyExists) as exists:
        store.create("board", b"mine")
    assert exists.value.key == "board"
    version = store.get("board").version
    client.meanwhile = [lambda: other.put("board", b"theirs too", version)]
    client.cuts = ["before"]
    with pytest.raises(VersionConflict) as put:
        store.put("board", b"mine", version)
    assert (put.value.key, put.value.expected) == ("board", version)
    version = store.get("board").version
    client.meanwhile = [lambda: other.put("board", b"theirs again", version)]
    client.cuts = ["before"]
    with pytest.raises(VersionConflict) as deleted:
        store.delete("board", version)
    assert (deleted.value.key, deleted.value.expected) == ("board", version)
    assert store.get("board").data == b"theirs again" and client.sent == 3


def test_a_ledger_write_whose_answer_a_real_network_cut_lost_still_goes_live_once_m17():
    """M17 over the wire: a loopback proxy in front of moto's S3 server lets a conditional
    PUT land and then closes the connection without its answer. `mark_live` (not idempotent)
    goes live once, the intent's create and the release as well; the record is never stuck,
    never doubled, never a conflict with itself."""
    from s3_proxy import LossyProxy
    from store_fakes import Events

    from fakes.s3 import CREDENTIALS, REGION, serve_s3
    from gpuops.ledger import BoxState, Ledger

    fake = serve_s3()
    proxy = LossyProxy(fake.url)
    try:
        config = Config(connect_timeout=2, read_timeout=5, retries={"total_max_attempts": 1})
        client = boto3.client(
            "s3",
            endpoint_url=proxy.url,
            region_name=REGION,
            config=config,
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )
        ledger = Ledger(S3Store(fake.bucket, "team", client=client), Events(), "alice")
        proxy.drop(1, "PUT")
        ledger.record_intent("job+1-0", "vast")
        proxy.drop(2, "PUT")  # the record's write and the instance claim's
        ledger.mark_live("job+1-0", "77")
        assert ledger.get("job+1-0").state is BoxState.LIVE
        ledger.begin_destroy("job+1-0")
        ledger.confirm_gone("job+1-0", "provider-show-says-gone")
        proxy.drop(1, "PUT")
        assert ledger.release("job+1-0").state is BoxState.RELEASED
        assert [method for method, _ in proxy.dropped] == ["PUT"] * 4
        moves = [p["after"] for _, p in ledger.events.events]
        assert moves == ["intent", "live", "destroying", "gone-confirmed", "released"]
    finally:
        proxy.close()
        fake.close()


def test_a_resend_after_a_lost_request_that_meets_another_writer_is_a_conflict_m17(cut, s3):
    """M17: read back after a lost request, the old value stands, so the write is sent once
    more; another writer lands between the read-back and the resend: the resend is refused
    (412) and reported as VersionConflict on the version we held, for a put and a delete."""
    store, client = cut
    other = S3Store(BUCKET, "team/state", client=s3)
    version = store.create("board", b"one")
    real_get = store.get
    meddle: list[bytes] = []

    def get_then_meddle(key: str):
        found = real_get(key)
        if meddle:
            other.put(key, meddle.pop(), found.version)
        return found

    store.get = get_then_meddle  # type: ignore[method-assign]
    acts = [lambda v: store.put("board", b"mine", v), lambda v: store.delete("board", v)]
    for act, theirs in zip(acts, [b"theirs", b"theirs again"], strict=True):
        meddle.append(theirs)  # other bytes each time: S3's version is the bytes' digest
        client.cuts = ["before"]
        with pytest.raises(VersionConflict) as caught:
            act(version)
        assert (caught.value.key, caught.value.expected) == ("board", version)
        version = real_get("board").version


@pytest.mark.parametrize("etag", [None, "", 7])
def test_an_answer_without_an_etag_is_a_state_error_never_a_version(stubbed, etag) -> None:
    """Bad input: an S3 answer with no ETag was a KeyError out of get, create and put, and an
    empty one was taken as a version; each is a StateError naming the call and the key."""
    import io

    from botocore.response import StreamingBody

    store, stubber = stubbed
    answer = {} if etag is None else {"ETag": etag}
    if isinstance(etag, int):  # botocore's stubber checks types: a client that is not boto3's
        store = S3Store(BUCKET, "team/state", client=_Answers(answer))
    else:
        body = StreamingBody(io.BytesIO(b"x"), 1)
        stubber.add_response("get_object", {"Body": body, **answer})
        stubber.add_response("put_object", answer)
        stubber.add_response("put_object", answer)
    with pytest.raises(StateError, match=r"the get of 'board' without an ETag"):
        store.get("board")
    with pytest.raises(StateError, match=r"the put of 'board' without an ETag"):
        store.create("board", b"x")
    with pytest.raises(StateError) as caught:
        store.put("board", b"x", STALE_ETAG)
    assert str(caught.value) == (
        f"S3 answered the put of 'board' without an ETag ({answer.get('ETag')!r}): the endpoint "
        "cannot version objects, so compare-and-swap is impossible; check GPUOPS_S3_ENDPOINT"
    )


class _Answers:
    """A client that answers every get and put with ``answer`` (and a body for a get)."""

    def __init__(self, answer: dict[str, object]) -> None:
        self.answer = answer

    def get_object(self, **_: object) -> dict[str, object]:
        import io

        return {"Body": io.BytesIO(b"x"), **self.answer}

    def put_object(self, **_: object) -> dict[str, object]:
        return dict(self.answer)


def test_a_non_dict_answer_is_a_state_error_too() -> None:
    """An answer that is not a mapping at all has no ETag either."""
    store = S3Store(BUCKET, "p", client=_Answers({}))
    store._client.put_object = lambda **_: None  # type: ignore[attr-defined]
    with pytest.raises(StateError, match=r"without an ETag \(None\)"):
        store.create("board", b"x")


@pytest.mark.parametrize(("error", "named"), [
    ({"Code": "NoSuchBucket", "BucketName": "team-state"}, " 'team-state'"),
    ({"Code": "NoSuchBucket", "BucketName": ""}, ""),
    ({"Code": "NoSuchBucket"}, ""),
])  # fmt: skip
def test_a_missing_bucket_is_named_when_s3_names_it(error, named) -> None:
    """S3's NoSuchBucket names the bucket; an answer that names none (or an empty one) still
    says what is wrong, with nothing invented in its place."""
    from botocore.exceptions import ClientError

    from gpuops.store.s3 import _translate

    found = _translate(ClientError({"Error": error}, "GetObject"), "board", None)

    assert isinstance(found, StoreMissing)
    assert str(found) == (
        f"S3 refused 'board': NoSuchBucket: the state bucket{named} does not exist; create it "
        "(`aws s3 mb s3://BUCKET`) or point --state / GPUOPS_STATE at one that does"
    )


# --- the bucket's policy (what `gpuops check` reads) ------------------------------------------
def test_the_bucket_policy_is_its_text_and_none_when_the_bucket_has_none(store: S3Store, s3) -> None:
    """GetBucketPolicy's document as S3 gives it; NoSuchBucketPolicy is None, not an error."""
    assert store.bucket_policy() is None
    text = (
        '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", '
        f'"Action": "s3:GetObject", "Resource": "arn:aws:s3:::{BUCKET}/*"}}]}}'
    )
    s3.put_bucket_policy(Bucket=BUCKET, Policy=text)

    assert json.loads(store.bucket_policy() or "") == json.loads(text)


@pytest.mark.parametrize(("code", "status"), [("AccessDenied", 403), ("403", 403)])
def test_a_policy_these_credentials_may_not_read_is_store_forbidden(stubbed, code, status) -> None:
    """AccessDenied to GetBucketPolicy: StoreForbidden naming the bucket and the code (exit 2)."""
    store, stubber = stubbed
    stubber.add_client_error("get_bucket_policy", service_error_code=code, http_status_code=status)
    with pytest.raises(StoreForbidden) as caught:
        store.bucket_policy()

    assert str(caught.value) == f"S3 refused to show the bucket policy of {BUCKET!r}: {code}"
    assert caught.value.exit_code == 2


def test_a_policy_read_of_a_missing_bucket_or_an_unreachable_s3_is_translated(
    s3, unreachable_client
) -> None:
    """NoSuchBucket is StoreMissing; no answer at all is StoreUnavailable (the one translator)."""
    with pytest.raises(StoreMissing, match="NoSuchBucket"):
        S3Store("no-such-bucket", "team/state", client=s3).bucket_policy()
    with pytest.raises(StoreUnavailable, match="S3 unreachable for 'the bucket policy'"):
        S3Store(BUCKET, "team/state", client=unreachable_client).bucket_policy()
