"""An S3 listing of a whole kind: one listing read, then only the values it has not read at
their listed ETag (gpuops/store/s3.py ``scan``, gpuops/store/s3_cache.py).

Two hosts share one bucket through separate boto3 clients, each with its own cache directory;
every verdict compares a listing with what a read of each key gives, and counts the reads the
store sent (botocore's own ``before-call`` hook), never what the cache says of itself.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import msgspec
import pytest
from moto import mock_aws
from store_fakes import RawCodec

from gpuops import timing
from gpuops.settings import S3_CACHE, Settings
from gpuops.store.records import Records
from gpuops.store.s3 import S3Store
from gpuops.store.s3_cache import ListingCache, verified

BUCKET = "gpuops-s3-listing"
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
KIND = "market/rentals/"


class Host:
    """One host's view of the bucket: its own client (reads counted) and cache directory."""

    def __init__(self, cache: Path | None) -> None:
        self.client = boto3.client("s3", region_name="us-east-1", **CREDENTIALS)
        self.reads: list[str] = []
        self.client.meta.events.register(
            "before-parameter-build.s3.GetObject",
            lambda params, **_: self.reads.append(params["Key"]),
        )
        self.cache = cache

    def store(self) -> S3Store:
        """The store a new command on this host opens."""
        return S3Store(BUCKET, "team/state", client=self.client, cache_dir=self.cache)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[Host, Host]]:
    with mock_aws():
        alice, bob = Host(tmp_path / "alice-cache"), Host(tmp_path / "bob-cache")
        alice.client.create_bucket(Bucket=BUCKET)
        yield alice, bob


def every_get(store: S3Store, prefix: str) -> list[tuple[str, bytes, str]]:
    out = []
    for key in store.list(prefix):
        found = store.get(key)
        assert found is not None
        out.append((key, found.data, found.version))
    return out


def scanned(store: S3Store, prefix: str = KIND) -> list[tuple[str, bytes, str]]:
    listing = store.scan(prefix)
    assert all(value.key == key for key, value in listing)  # read or kept, each names its key
    return [(key, value.data, value.version) for key, value in listing]


def seed(store: S3Store, n: int) -> None:
    for i in range(n):
        store.create(f"{KIND}job-{i:03d}", f'{{"name": "job-{i:03d}"}}'.encode())
    store.create("ledger/boxes/job-000+1-0", b"a box record, another kind")


def test_a_listing_reads_each_value_once_then_only_what_another_host_changed(hosts) -> None:
    """The first listing reads every value; a listing by the next command on this host reads
    none; once the other host has changed one value, created one and deleted one, the next
    listing reads exactly the two it does not hold at their listed ETags, and gives what a
    read of each key gives."""
    alice, bob = hosts
    seed(alice.store(), 40)  # more values than SCAN_READERS: read in several batches
    assert timing.S3_SCAN_READERS < 40

    first = scanned(alice.store())
    assert len(alice.reads) == 40 and len(first) == 40
    assert [key for key, _, _ in first] == sorted(key for key, _, _ in first)
    alice.reads.clear()
    assert scanned(alice.store()) == first and alice.reads == []  # the next command
    (pack,) = alice.cache.iterdir()
    kept = pack.stat().st_ino
    assert scanned(alice.store()) == first
    assert pack.stat().st_ino == kept  # nothing changed: the cache file is not rewritten

    theirs = bob.store()
    changed = theirs.get(f"{KIND}job-007")
    theirs.put(f"{KIND}job-007", b'{"name": "job-007", "state": "released"}', changed.version)
    theirs.delete(f"{KIND}job-010", theirs.get(f"{KIND}job-010").version)
    theirs.create(f"{KIND}job-100", b'{"name": "job-100"}')

    now = scanned(alice.store())
    assert pack.stat().st_ino != kept  # now it is
    assert sorted(alice.reads) == [f"team/state/{KIND}job-007", f"team/state/{KIND}job-100"]
    assert now == every_get(alice.store(), KIND)
    assert (f"{KIND}job-007", b'{"name": "job-007", "state": "released"}') in [
        (key, data) for key, data, _ in now
    ]


def test_the_listing_records_read_is_what_reading_each_record_gives(hosts) -> None:
    """Records.entries over S3 goes through the one listing, and a record another host wrote
    since the last listing is read at its new version (a compare-and-swap from it lands)."""
    alice, bob = hosts
    seed(alice.store(), 3)
    rentals = Records(alice.store(), KIND, RawCodec())
    assert [name for name, _, _ in rentals.entries()] == ["job-000", "job-001", "job-002"]
    bob.store().put(f"{KIND}job-001", b'{"v": 2}', bob.store().get(f"{KIND}job-001").version)

    store = alice.store()
    (_, value, version) = Records(store, KIND, RawCodec()).entries()[1]
    assert value == b'{"v": 2}'
    store.put(f"{KIND}job-001", b'{"v": 3}', version)  # the version it read is current
    assert bob.store().get(f"{KIND}job-001").data == b'{"v": 3}'


def test_a_listing_reads_scan_readers_values_at_once_and_no_more(hosts) -> None:
    """The values a listing lacks are read S3_SCAN_READERS at a time: the first that many
    reads are all in flight together (each waits for the others), and never more."""
    import threading

    alice, _ = hosts
    seed(alice.store(), 40)
    together = threading.Barrier(timing.S3_SCAN_READERS, timeout=10)
    lock, flying, most = threading.Lock(), [0], [0]

    def start(params: dict[str, str], **_: object) -> None:
        with lock:
            flying[0] += 1
            most[0] = max(most[0], flying[0])
            first = len(alice.reads) <= timing.S3_SCAN_READERS
        if first:
            together.wait()  # broken (a failed read) unless that many run at once

    def done(**_: object) -> None:
        with lock:
            flying[0] -= 1

    alice.client.meta.events.register("before-parameter-build.s3.GetObject", start)
    alice.client.meta.events.register("after-call.s3.GetObject", done)
    assert len(scanned(alice.store())) == 40
    assert most[0] == timing.S3_SCAN_READERS


def test_a_value_whose_etag_is_not_its_md5_is_read_by_every_listing(hosts) -> None:
    """An object uploaded in parts (its ETag ends in "-<parts>", not its MD5) is never kept:
    each listing reads it again, and gives what a read of it gives."""
    alice, _ = hosts
    seed(alice.store(), 2)
    key = f"team/state/{KIND}job-050"
    upload = alice.client.create_multipart_upload(Bucket=BUCKET, Key=key)
    part = alice.client.upload_part(
        Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b'{"v": 50}'
    )
    alice.client.complete_multipart_upload(
        Bucket=BUCKET,
        Key=key,
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
    )
    store = alice.store()
    assert scanned(store) == every_get(store, KIND)
    for again in (store, store, alice.store()):  # this process's next listings, the next command's
        alice.reads.clear()
        assert scanned(again)[-1][:2] == (f"{KIND}job-050", b'{"v": 50}')
        assert alice.reads == [key]


def test_a_value_deleted_between_the_listing_and_its_read_is_left_out(hosts) -> None:
    """Another host deletes a listed key before it is read: the listing leaves it out."""
    alice, bob = hosts
    seed(alice.store(), 5)
    theirs = bob.store()

    def delete_first(params: dict[str, str], **_: object) -> None:
        if params["Key"].endswith("job-002"):
            key = f"{KIND}job-002"
            found = theirs.get(key)
            if found is not None:
                theirs.delete(key, found.version)

    alice.client.meta.events.register("before-parameter-build.s3.GetObject", delete_first)
    assert [key for key, _, _ in scanned(alice.store())] == [
        f"{KIND}job-{i:03d}" for i in (0, 1, 3, 4)
    ]


def test_a_cache_file_edited_on_disk_is_never_served(hosts) -> None:
    """Bytes in the cache file that are not the object's (edited, torn, another file's) are
    read from S3 again: a cache can make a listing slower, never wrong."""
    alice, _ = hosts
    seed(alice.store(), 4)
    truth = scanned(alice.store())
    (pack,) = [p for p in alice.cache.iterdir() if p.read_bytes().count(b"job-") >= 4]
    body = msgspec.msgpack.decode(pack.read_bytes())
    etag, _ = body["entries"][f"{KIND}job-001"]
    body["entries"][f"{KIND}job-001"] = [etag, b'{"name": "job-001", "state": "live"}']
    pack.write_bytes(msgspec.msgpack.encode(body))
    alice.reads.clear()

    assert scanned(alice.store()) == truth
    assert alice.reads == [f"team/state/{KIND}job-001"]  # only the edited entry is read

    whole = pack.read_bytes()
    torn = whole[: len(whole) // 2]
    for garbage in (b"", b"\x00not msgpack", msgspec.msgpack.encode([1, 2]), torn):
        pack.write_bytes(garbage)
        assert scanned(alice.store()) == truth


def test_another_stores_cache_file_is_never_read_as_this_ones(hosts, tmp_path) -> None:
    """A cache file of another bucket or prefix, put where this store's would be, is not
    used: every value is read."""
    alice, _ = hosts
    seed(alice.store(), 3)
    other = S3Store(BUCKET, "other/state", client=alice.client, cache_dir=alice.cache)
    seed(other, 3)
    scanned(other)
    ours = alice.store()
    ours_path = ours._cache.path(KIND)
    other._cache.path(KIND).rename(ours_path)
    alice.reads.clear()

    assert scanned(ours) == every_get(ours, KIND)
    assert len([r for r in alice.reads if r.startswith("team/")]) == 6  # listing, then checks


def test_a_cache_directory_that_cannot_be_written_changes_no_listing(hosts, tmp_path) -> None:
    """A cache directory that cannot be made (a file stands in its way, as a full or read-only
    disk would refuse it): every listing is still right, and no error reaches the command."""
    alice, _ = hosts
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    store = S3Store(BUCKET, "team/state", client=alice.client, cache_dir=blocked / "cache")
    seed(store, 3)
    assert scanned(store) == every_get(store, KIND)
    assert scanned(S3Store(BUCKET, "team/state", client=alice.client, cache_dir=blocked)) == (
        every_get(store, KIND)
    )
    assert blocked.read_text() == "not a directory"


def test_a_cache_file_whose_write_fails_leaves_no_temporary_file_and_no_error(
    hosts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache file is written beside itself and renamed into place (atomic on one
    filesystem); a write that fails at the rename (a full disk), and a clean-up that fails
    too, reach no command: the listing is still right and what could be removed is."""
    alice, _ = hosts
    seed(alice.store(), 3)
    removed: list[str] = []
    real_unlink = os.unlink

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    def unlink(path: str) -> None:
        removed.append(path)
        real_unlink(path)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", full_disk)
    monkeypatch.setattr(os, "unlink", unlink)
    store = alice.store()
    assert scanned(store) == every_get(store, KIND)
    monkeypatch.undo()

    (tmp,) = removed
    assert Path(tmp).parent == alice.cache
    assert list(alice.cache.iterdir()) == []


def test_a_listing_with_no_prefix_is_every_kind(hosts) -> None:
    alice, _ = hosts
    seed(alice.store(), 2)
    assert [key for key, _ in alice.store().scan()] == [
        "ledger/boxes/job-000+1-0",
        f"{KIND}job-000",
        f"{KIND}job-001",
    ]


def test_the_cache_is_private_and_kept_per_kind_only(hosts) -> None:
    """The cache directory is 0700 and its files 0600, like the state directory; a listing
    narrowed to one name's records is never kept."""
    alice, _ = hosts
    seed(alice.store(), 3)
    store = alice.store()
    store.scan(f"{KIND}job-00")
    assert not alice.cache.exists()
    store.scan(KIND)
    assert alice.cache.stat().st_mode & 0o777 == 0o700
    assert [p.stat().st_mode & 0o777 for p in alice.cache.iterdir()] == [0o600]
    alice.reads.clear()
    store.scan(f"{KIND}job-00")
    assert len(alice.reads) == 3  # read afresh every time


def test_a_listing_with_no_cache_directory_keeps_what_it_read_in_this_process(hosts) -> None:
    alice, _ = hosts
    seed(alice.store(), 3)
    store = S3Store(BUCKET, "team/state", client=alice.client)
    scanned(store)
    alice.reads.clear()
    assert scanned(store) == every_get(store, KIND)
    assert alice.reads == [f"team/state/{KIND}job-00{i}" for i in range(3)]  # every_get's


@pytest.mark.parametrize(
    ("etag", "ok"),
    [
        ('"{}"', True),
        ('"{}"'.upper(), True),
        ("{}", False),  # unquoted: not how S3 gives it
        ('"{}-2"', False),  # a multipart upload's
        ('"0123456789abcdef0123456789abcdef"', False),  # another object's
        ("", False),
    ],
)
def test_only_bytes_whose_md5_is_the_etag_count_as_the_objects(etag: str, ok: bool) -> None:
    data = b'{"name": "job"}'
    md5 = hashlib.md5(data).hexdigest()
    assert verified(etag.format(md5), data) is ok


def test_the_cache_file_of_one_store_and_kind_is_named_by_both(tmp_path) -> None:
    one = ListingCache("s3://b/p", tmp_path)
    assert one.path(KIND) == ListingCache("s3://b/p", tmp_path).path(KIND)
    assert one.path(KIND) != one.path("ledger/boxes/")
    assert one.path(KIND) != ListingCache("s3://b/q", tmp_path).path(KIND)
    assert one.path(KIND).parent == tmp_path and one.path(KIND).suffix == ".pack"
    assert ListingCache("s3://b/p", None).path(KIND) is None


def test_a_commands_s3_state_keeps_its_listing_cache_in_the_per_user_directory(tmp_path):
    settings = Settings.from_environ(
        {"GPUOPS_STATE": "s3://team-bucket/state", "GPUOPS_S3_ENDPOINT": "http://127.0.0.1:9"},
        home=tmp_path,
    )
    store = settings.open_state()
    assert isinstance(store, S3Store)
    assert store.url == "s3://team-bucket/state" and store._endpoint == "http://127.0.0.1:9"
    assert store._cache.directory == tmp_path / ".local" / "state" / "gpuops" / S3_CACHE
    assert os.fspath(settings.open_state().url) == "s3://team-bucket/state"
