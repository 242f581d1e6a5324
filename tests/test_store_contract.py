"""The store contract, run unchanged against every backend.

Backends: LocalStore on a temporary directory, S3Store on moto in decorator mode
(``mock_aws``), and S3Store on a real HTTP server (``ThreadedMotoServer``) shared by the
session. Every test gets its own directory, bucket or prefix, so tests stay independent
under xdist.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from moto import mock_aws
from moto.server import ThreadedMotoServer

from gpuops.errors import AlreadyExists, UsageError, VersionConflict
from gpuops.store.base import check_key
from gpuops.store.local import LocalStore
from gpuops.store.memory import MemoryStore
from gpuops.store.s3 import S3Store

BACKENDS = ["local", "memory", "s3-mock", "s3-server"]
DUMMY_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture(scope="session")
def moto_server_url() -> Iterator[str]:
    """One moto S3 server per test session (per xdist worker), on a free loopback port."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mock_client() -> object:
    """One boto3 client for decorator mode; moto intercepts it whenever ``mock_aws`` is active.

    Building a client costs about 0.1 s, so it is shared; buckets are per test.
    """
    return boto3.client("s3", region_name="us-east-1", **DUMMY_CREDENTIALS)


@pytest.fixture(scope="session")
def server_client(moto_server_url: str) -> object:
    """One boto3 client pointed at the session's moto server."""
    return boto3.client(
        "s3",
        endpoint_url=moto_server_url,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
        **DUMMY_CREDENTIALS,
    )


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[object]:
    """A fresh, empty store of each backend."""
    if request.param == "local":
        yield LocalStore(tmp_path / "state")
    elif request.param == "memory":
        yield MemoryStore()
    elif request.param == "s3-mock":
        client = request.getfixturevalue("mock_client")
        with mock_aws():
            client.create_bucket(Bucket="gpuops-contract")
            yield S3Store("gpuops-contract", "team/state", client=client)
    else:
        client = request.getfixturevalue("server_client")
        bucket = f"gpuops-{uuid.uuid4().hex[:16]}"
        client.create_bucket(Bucket=bucket)
        yield S3Store(bucket, f"run-{uuid.uuid4().hex[:8]}", client=client)


# --- get / create ------------------------------------------------------------------------------
def test_get_of_an_absent_key_returns_none(store) -> None:
    """Reading a key that was never written gives None, not an error."""
    assert store.get("ledger/boxes/a") is None


def test_create_then_get_returns_the_data_and_the_same_version(store) -> None:
    """A created value reads back with its key, its bytes and the version create returned."""
    version = store.create("ledger/boxes/a", b"hello")
    found = store.get("ledger/boxes/a")
    assert found is not None
    assert found.key == "ledger/boxes/a"
    assert found.data == b"hello"
    assert found.version == version
    assert isinstance(version, str) and version != ""


def test_create_on_an_existing_key_raises_already_exists_and_keeps_the_value(store) -> None:
    """create-if-absent refuses an existing key and leaves its value and version alone."""
    version = store.create("board", b"first")
    with pytest.raises(AlreadyExists) as caught:
        store.create("board", b"second")
    assert caught.value.key == "board"
    found = store.get("board")
    assert (found.data, found.version) == (b"first", version)


# --- put -----------------------------------------------------------------------------------------
def test_put_with_the_current_version_stores_the_data_and_returns_a_new_version(store) -> None:
    """A compare-and-swap at the current version writes and hands back a different version."""
    first = store.create("board", b"one")
    second = store.put("board", b"two", first)
    assert second != first
    found = store.get("board")
    assert (found.data, found.version) == (b"two", second)
    third = store.put("board", b"three", second)
    assert third not in (first, second)
    assert store.get("board").data == b"three"


def test_put_with_a_stale_version_raises_version_conflict_and_keeps_the_value(store) -> None:
    """A writer holding an old version loses: VersionConflict names key and version, no write."""
    stale = store.create("board", b"one")
    current = store.put("board", b"two", stale)
    with pytest.raises(VersionConflict) as caught:
        store.put("board", b"lost update", stale)
    assert caught.value.key == "board"
    assert caught.value.expected == stale
    found = store.get("board")
    assert (found.data, found.version) == (b"two", current)


def test_put_with_a_made_up_version_raises_version_conflict(store) -> None:
    """A version the store never issued does not validate."""
    current = store.create("board", b"one")
    with pytest.raises(VersionConflict) as caught:
        store.put("board", b"two", '"not-a-version"')
    assert caught.value.expected == '"not-a-version"'
    assert store.get("board").version == current


def test_put_on_a_missing_key_raises_version_conflict_and_creates_nothing(store) -> None:
    """put never creates: a key that vanished since it was read is a conflict."""
    version = store.create("board", b"one")
    store.delete("board", version)
    with pytest.raises(VersionConflict) as caught:
        store.put("board", b"two", version)
    assert caught.value.key == "board"
    assert caught.value.expected == version
    assert store.get("board") is None
    with pytest.raises(VersionConflict):
        store.put("never/written", b"x", version)
    assert store.list() == []


# --- delete --------------------------------------------------------------------------------------
def test_delete_with_a_stale_version_raises_version_conflict_and_keeps_the_value(store) -> None:
    """delete-if-version refuses an old version and the value survives."""
    stale = store.create("lease", b"one")
    current = store.put("lease", b"two", stale)
    with pytest.raises(VersionConflict) as caught:
        store.delete("lease", stale)
    assert caught.value.key == "lease"
    assert caught.value.expected == stale
    found = store.get("lease")
    assert (found.data, found.version) == (b"two", current)


def test_delete_with_the_current_version_removes_the_key(store) -> None:
    """A delete at the current version removes the key; it can then be created again."""
    version = store.create("lease", b"one")
    store.create("lease-other", b"stays")
    assert store.delete("lease", version) is None
    assert store.get("lease") is None
    assert store.list() == ["lease-other"]
    store.create("lease", b"again")
    assert store.get("lease").data == b"again"


def test_delete_of_a_missing_key_raises_version_conflict(store) -> None:
    """Deleting a key that is not there is a conflict, not a silent success."""
    version = store.create("lease", b"one")
    store.delete("lease", version)
    with pytest.raises(VersionConflict) as caught:
        store.delete("lease", version)
    assert caught.value.key == "lease"
    assert caught.value.expected == version


# --- list ----------------------------------------------------------------------------------------
def test_list_of_an_empty_store_is_empty(store) -> None:
    """A new store lists no keys, with or without a prefix."""
    assert store.list() == []
    assert store.list("ledger/") == []


def test_list_returns_sorted_keys_filtered_by_prefix(store) -> None:
    """list(prefix) returns every key starting with prefix, nested ones included, sorted."""
    for key in ["ledger/boxes/b", "events/2", "ledger/boxes/a", "ledgerx", "ledger/claims/x", "a"]:
        store.create(key, key.encode())
    assert store.list() == [
        "a",
        "events/2",
        "ledger/boxes/a",
        "ledger/boxes/b",
        "ledger/claims/x",
        "ledgerx",
    ]
    assert store.list("") == store.list()
    assert store.list("ledger/") == ["ledger/boxes/a", "ledger/boxes/b", "ledger/claims/x"]
    assert store.list("ledger/boxes/") == ["ledger/boxes/a", "ledger/boxes/b"]
    assert store.list("ledger") == [
        "ledger/boxes/a",
        "ledger/boxes/b",
        "ledger/claims/x",
        "ledgerx",
    ]
    assert store.list("ledger/boxes/a") == ["ledger/boxes/a"]
    assert store.list("nothing/") == []


@pytest.mark.parametrize("prefix", ["../", ".", ".tmp/", ".lock", "/"])
def test_list_with_a_prefix_no_valid_key_can_start_with_returns_nothing(store, prefix) -> None:
    """Bookkeeping files and paths outside the store never show up as keys."""
    store.create("ledger/boxes/a", b"a")
    assert store.list(prefix) == []


# --- data ----------------------------------------------------------------------------------------
BINARY_VALUES = {
    "empty": b"",
    "all-bytes": bytes(range(256)),
    "not-utf8": b"\xff\xfe\x80\xc3\x28 not utf-8",
    "header-lookalike": b'\n{"format": 1, "sha256": "", "version": "9.x"}\nline\n',
    "nul-and-newlines": b"\x00\n\x00\r\n",
    "large": bytes(range(256)) * 1024,
}


def test_a_listing_read_gives_each_key_as_reading_it_gives_it(store) -> None:
    """One listing read of a prefix (the backend's own ``scan`` where it has one) gives every
    key under it, by key, with the bytes and version a read of that key gives; a second
    listing after a put, a delete and a create gives them as they are now."""
    from store_fakes import RawCodec

    from gpuops.store.records import Records

    for i in range(5):
        store.create(f"market/rentals/job-{i}", f"value {i}".encode())
    store.create("market/rentalsX", b"not under the prefix")
    store.create("ledger/boxes/job-0+1-0", b"another kind")

    def listed() -> list[tuple[str, bytes, str]]:
        return [
            (name, v, version)
            for name, v, version in Records(store, "market/rentals/", RawCodec()).entries()
        ]

    def read() -> list[tuple[str, bytes, str]]:
        out = []
        for key in store.list("market/rentals/"):
            found = store.get(key)
            out.append((key.removeprefix("market/rentals/"), found.data, found.version))
        return out

    assert listed() == read() and len(listed()) == 5
    store.put("market/rentals/job-1", b"changed", store.get("market/rentals/job-1").version)
    store.delete("market/rentals/job-3", store.get("market/rentals/job-3").version)
    store.create("market/rentals/job-9", b"new")
    assert listed() == read()
    assert [name for name, _, _ in listed()] == ["job-0", "job-1", "job-2", "job-4", "job-9"]


@pytest.mark.parametrize("data", BINARY_VALUES.values(), ids=BINARY_VALUES.keys())
def test_binary_data_round_trips_through_create_and_put(store, data) -> None:
    """Any bytes, empty and non-UTF-8 included, come back exactly as written."""
    version = store.create("blob", data)
    assert store.get("blob").data == data
    store.put("blob", data[::-1] + b"!", version)
    assert store.get("blob").data == data[::-1] + b"!"


# --- keys ----------------------------------------------------------------------------------------
INVALID_KEYS = [
    "",
    "../x",
    ".hidden",
    "a//b",
    "a~",
    "a/b/c/d/e/f/g/h/i",
    "/a",
    "a/",
    "a/..",
    "-a",
    "a b",
    "a\n",
    "x" * 129,
]
METHODS = {
    "get": lambda s, k: s.get(k),
    "create": lambda s, k: s.create(k, b"x"),
    "put": lambda s, k: s.put(k, b"x", "1.00000000"),
    "delete": lambda s, k: s.delete(k, "1.00000000"),
}


@pytest.mark.parametrize("key", INVALID_KEYS)
def test_an_invalid_key_raises_usage_error_on_every_method(store, key) -> None:
    """A malformed key is refused by get, create, put and delete before anything is written."""
    for name, method in METHODS.items():
        with pytest.raises(UsageError) as caught:
            method(store, key)
        assert repr(key) in str(caught.value), name
    assert store.list() == []


def test_the_invalid_key_message_says_what_a_segment_may_hold() -> None:
    """The UsageError quotes the key and the bad segment and states the rule in full."""
    with pytest.raises(UsageError) as caught:
        check_key("ledger/.hidden")
    assert str(caught.value) == (
        "store key 'ledger/.hidden': segment '.hidden' must be 1-128 characters of "
        "letters, digits and _.@+=- and must not start with '.' or '-'"
    )
    with pytest.raises(UsageError) as caught:
        check_key("a/b/c/d/e/f/g/h/i")
    assert str(caught.value) == "store key 'a/b/c/d/e/f/g/h/i' has more than 8 segments"


@pytest.mark.parametrize(
    "key",
    ["a/b/c/d/e/f/g/h", "x" * 128, "a.b@c+d=e-f_g", "_x", "0", "ledger/boxes/box-1.v2"],
)
def test_edge_of_valid_keys_is_accepted_by_every_method(store, key) -> None:
    """Eight segments, 128-character segments and every allowed character are valid."""
    version = store.create(key, b"v")
    assert store.get(key).data == b"v"
    assert store.list() == [key]
    version = store.put(key, b"w", version)
    store.delete(key, version)
    assert store.get(key) is None


def test_salvage_of_a_readable_value_is_get_and_its_version_puts_l12(store) -> None:
    """L12: on every backend, salvage of a sound value is what get reads, with a version a
    put accepts; an absent key is None."""
    version = store.create("lane/x/board", b"v1")

    salvaged = store.salvage("lane/x/board")
    store.put("lane/x/board", b"v2", salvaged.version)

    assert (salvaged.data, salvaged.version) == (b"v1", version)
    assert store.get("lane/x/board").data == b"v2" and store.salvage("lane/none") is None
