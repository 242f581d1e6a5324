"""LocalStore behaviour beyond the shared contract: many processes, corrupt files, file
modes, crash debris, no ABA, the lock timeout, and opening a store by URL."""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from fakes.vast.clock import FakeClock
from gpuops import timing
from gpuops.errors import CorruptState, StoreUnavailable, UsageError, VersionConflict
from gpuops.store.base import Versioned, check_key
from gpuops.store.local import LocalStore
from gpuops.store.opener import open_store
from gpuops.store.s3 import S3Store


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    """An empty LocalStore in a directory that does not exist yet."""
    return LocalStore(tmp_path / "state")


def _header(data: bytes, version: object, **overrides: object) -> bytes:
    header = {"format": 1, "version": version, "sha256": hashlib.sha256(data).hexdigest()}
    header.update(overrides)
    return json.dumps(header, sort_keys=True).encode() + b"\n" + data


# --- many processes ------------------------------------------------------------------------------
PROCESSES = 4
INCREMENTS = 50


def _increment_worker(root: str, key: str, increments: int, barrier, report: str) -> None:
    """Add 1 to the counter ``increments`` times by compare-and-swap, retrying lost races.

    Runs in a forked child. It polls the lock every 0.1 ms instead of the default 10 ms: with
    the default, the process that just released the lock takes it again before the sleeping
    others wake, so the four workers barely interleave and conflicts stay near zero.
    """
    timing.STORE_LOCK_POLL_S = 0.0001
    store = LocalStore(root)
    barrier.wait(timeout=30)
    done = conflicts = 0
    while done < increments:
        current = store.get(key)
        try:
            store.put(key, str(int(current.data) + 1).encode(), current.version)
        except VersionConflict:
            conflicts += 1
            continue
        done += 1
    Path(report).write_text(json.dumps({"done": done, "conflicts": conflicts}))


@pytest.mark.slow
def test_concurrent_processes_incrementing_one_counter_lose_no_update(tmp_path: Path) -> None:
    """4 forked processes x 50 get-then-put increments end at exactly 200."""
    root = tmp_path / "state"
    LocalStore(root).create("counter", b"0")
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(PROCESSES)
    reports = [tmp_path / f"worker-{n}.json" for n in range(PROCESSES)]
    workers = [
        context.Process(
            target=_increment_worker, args=(str(root), "counter", INCREMENTS, barrier, str(report))
        )
        for report in reports
    ]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    wall = time.perf_counter() - started
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    figures = [json.loads(report.read_text()) for report in reports]
    assert [figure["done"] for figure in figures] == [INCREMENTS] * PROCESSES
    final = LocalStore(root).get("counter")
    assert final.data == str(PROCESSES * INCREMENTS).encode()
    conflicts = sum(figure["conflicts"] for figure in figures)
    print(
        f"\nlocal store: {PROCESSES} processes x {INCREMENTS} increments = {final.data.decode()}, "
        f"{conflicts} conflicts retried {[f['conflicts'] for f in figures]}, {wall:.2f} s wall"
    )
    # Every successful put bumps the revision once, so the version counts the increments too.
    assert final.version.split(".")[0] == str(1 + PROCESSES * INCREMENTS)


# --- corrupt files -------------------------------------------------------------------------------
NO_HEADER = "no header line (a truncated or foreign file)"
BAD_CHECKSUM = "checksum mismatch (half-written or edited by hand)"
CORRUPTIONS = {  # name: (bytes to write given the good file, the exact reason reported)
    "garbage": (lambda raw: b"\x00\x01 garbage, not json\nmore garbage", "header is not JSON: "),
    "truncated-header": (lambda raw: raw[:20], NO_HEADER),
    "empty-file": (lambda raw: b"", NO_HEADER),
    "data-edited-by-hand": (lambda raw: raw.replace(b"\nhello", b"\nHELLO"), BAD_CHECKSUM),
    "data-truncated": (lambda raw: raw[:-2], BAD_CHECKSUM),
    "unknown-format": (lambda raw: _header(b"hello", "1.aaaaaaaa", format=2), "unknown header "),
    "header-not-an-object": (lambda raw: b"[1]\nhello", "unknown header b'[1]'"),
    "no-version": (
        lambda raw: _header(b"hello", ""),
        "header version '' is not <revision>.<nonce>",
    ),
    "version-not-a-string": (
        lambda raw: _header(b"hello", 7),
        "header version 7 is not <revision>.<nonce>",
    ),
    "version-not-numbered": (
        lambda raw: _header(b"hello", "banana"),
        "header version 'banana' is not <revision>.<nonce>",
    ),
}


def _expected_reason(corruption: str, corrupt: bytes) -> str:
    reason = CORRUPTIONS[corruption][1]
    if corruption == "unknown-format":  # the header line is quoted, cut at 80 bytes
        head = corrupt.partition(b"\n")[0]
        assert len(head) > 80
        return f"unknown header {head[:80]!r}"
    return reason


def _scanned(store: LocalStore, key: str) -> None:
    """A listing read of ``key``'s folder: raises the CorruptState it holds in ``key``'s place."""
    found = dict(store.scan(key.rpartition("/")[0] + "/"))[key]
    if isinstance(found, CorruptState):
        raise found


OPERATIONS = {
    "get": lambda s, k, v: s.get(k),
    "scan": lambda s, k, v: _scanned(s, k),
    "create": lambda s, k, v: s.create(k, b"new"),
    "put": lambda s, k, v: s.put(k, b"new", v),
    "delete": lambda s, k, v: s.delete(k, v),
}


@pytest.mark.parametrize("operation", OPERATIONS.keys())
@pytest.mark.parametrize("corruption", CORRUPTIONS.keys())
def test_a_corrupt_value_file_raises_corrupt_state_and_is_left_on_disk(
    store: LocalStore, corruption: str, operation: str
) -> None:
    """Every read path reports CorruptState naming the file, and never rewrites the bytes."""
    version = store.create("ledger/boxes/a", b"hello")
    path = store.root / "ledger" / "boxes" / "a~"
    corrupt_bytes, reason = CORRUPTIONS[corruption]
    corrupt = corrupt_bytes(path.read_bytes())
    path.write_bytes(corrupt)
    with pytest.raises(CorruptState) as caught:
        OPERATIONS[operation](store, "ledger/boxes/a", version)
    assert caught.value.where == str(path)
    assert str(path) in str(caught.value)
    if corruption == "garbage":  # the JSON parser's own words follow
        assert caught.value.reason.startswith(reason)
    else:
        assert caught.value.reason == _expected_reason(corruption, corrupt)
    assert path.read_bytes() == corrupt
    assert list((store.root / ".tmp").iterdir()) == []
    assert store.list() == ["ledger/boxes/a"]


def test_a_corrupt_file_does_not_affect_other_keys(store: LocalStore) -> None:
    """One damaged value is reported alone; its neighbours still read and write."""
    store.create("ledger/boxes/a", b"a")
    other = store.create("ledger/boxes/b", b"b")
    (store.root / "ledger" / "boxes" / "a~").write_bytes(b"garbage")
    assert store.get("ledger/boxes/b").data == b"b"
    store.put("ledger/boxes/b", b"b2", other)
    assert store.get("ledger/boxes/b").data == b"b2"


def test_a_version_without_a_numeric_revision_is_reported_as_corrupt(store: LocalStore) -> None:
    """A checksummed header whose version is not '<int>.<nonce>' is CorruptState on put."""
    store.create("board", b"hello")
    path = store.root / "board~"
    path.write_bytes(_header(b"hello", "banana"))
    with pytest.raises(CorruptState):
        store.put("board", b"new", "banana")
    assert path.read_bytes() == _header(b"hello", "banana")


# --- on-disk layout ------------------------------------------------------------------------------
def test_a_value_file_is_a_json_header_line_then_the_raw_bytes(store: LocalStore) -> None:
    """The file holds format, version and SHA-256 in one sorted JSON line, then the data."""
    data = b"\xff\x00binary\nvalue"
    version = store.create("ledger/boxes/a", data)
    raw = (store.root / "ledger" / "boxes" / "a~").read_bytes()
    assert raw == _header(data, version)
    head = json.loads(raw.partition(b"\n")[0])
    assert head == {"format": 1, "version": version, "sha256": hashlib.sha256(data).hexdigest()}


def test_versions_count_revisions_and_carry_a_fresh_nonce(store: LocalStore) -> None:
    """Versions read '<revision>.<nonce>': revision 1, 2, 3 and an 8-hex-digit nonce."""
    versions = [store.create("board", b"0")]
    for n in (1, 2):
        versions.append(store.put("board", str(n).encode(), versions[-1]))
    revisions = [version.split(".", 1)[0] for version in versions]
    nonces = [version.split(".", 1)[1] for version in versions]
    assert revisions == ["1", "2", "3"]
    assert all(len(nonce) == 8 and int(nonce, 16) >= 0 for nonce in nonces)
    assert len(set(versions)) == 3


def test_the_state_directory_is_0700_and_value_files_are_0600(tmp_path: Path) -> None:
    """Even under a permissive umask, the root and .tmp are 0700 and value and lock files 0600."""
    old_umask = os.umask(0)
    try:
        store = LocalStore(tmp_path / "state")
        store.create("ledger/boxes/a", b"a")
        store.create("board", b"b")
    finally:
        os.umask(old_umask)

    def mode(path: Path) -> int:
        return stat.S_IMODE(path.stat().st_mode)

    assert mode(store.root) == 0o700
    assert mode(store.root / ".tmp") == 0o700
    assert mode(store.root / ".lock") == 0o600
    assert mode(store.root / "board~") == 0o600
    assert mode(store.root / "ledger" / "boxes" / "a~") == 0o600
    assert mode(store.root / "ledger" / "boxes") == 0o700


def test_a_store_root_with_missing_parents_is_created_with_them(tmp_path: Path) -> None:
    """LocalStore creates every missing directory up to its root, plus .tmp inside it."""
    store = LocalStore(tmp_path / "no" / "such" / "state")
    assert store.root == (tmp_path / "no" / "such" / "state").resolve()
    assert (store.root / ".tmp").is_dir()
    store.create("board", b"b")
    assert store.get("board").data == b"b"


def test_crash_debris_in_tmp_is_not_listed_and_does_not_affect_reads(store: LocalStore) -> None:
    """Half-written files left in .tmp/ by a crash are invisible to list, get and put."""
    version = store.create("ledger/boxes/a", b"A")
    debris = {
        store.root / ".tmp" / "a~.0123456789ab": b'{"format": 1, "versi',
        store.root / ".tmp" / "orphan~": b"garbage",
        store.root / ".tmp" / "ledger" / "boxes" / "b~": _header(b"B", "1.deadbeef"),
    }
    for path, raw in debris.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
    assert store.list() == ["ledger/boxes/a"]
    # Keys in many top-level folders, so that some are walked after .tmp/ whatever the
    # directory order: skipping the debris must not end the walk.
    spread = [f"d{n:02d}/key" for n in range(20)]
    for key in spread:
        store.create(key, b"s")
    assert store.list() == sorted(spread) + ["ledger/boxes/a"]
    assert store.list("d") == sorted(spread)
    # Hidden files at the root are walked before any folder: skipping them must not end the walk.
    (store.root / ".orphan~").write_bytes(b"garbage")
    assert store.list() == sorted(spread) + ["ledger/boxes/a"]
    assert store.get("ledger/boxes/a").data == b"A"
    assert store.get("ledger/boxes/b") is None
    store.put("ledger/boxes/a", b"A2", version)
    assert store.get("ledger/boxes/a").data == b"A2"
    assert store.list("ledger/") == ["ledger/boxes/a"]
    assert {path: path.read_bytes() for path in debris} == debris


def test_list_reports_only_valid_keys_when_stray_files_sit_beside_the_values(
    store: LocalStore,
) -> None:
    """A stray file such as an editor backup never shows up as an (invalid) key."""
    store.create("board", b"b")
    (store.root / "board~~").write_bytes(b"an emacs backup of board~")
    for key in store.list():
        check_key(key)
    assert store.list() == ["board"]


def test_a_value_larger_than_one_read_comes_back_whole(store: LocalStore) -> None:
    """A value of many read chunks (a long board history) reads back byte for byte, by get
    and by scan."""
    data = bytes(range(256)) * 1000 + b"end"
    version = store.create("board", data)
    assert store.get("board") == Versioned("board", data, version)
    assert store.scan() == [("board", Versioned("board", data, version))]


def test_a_file_without_the_value_suffix_is_never_listed(store: LocalStore) -> None:
    """Only `<key>~` files are values: a stray file whose name is a key minus one letter
    (notes, a README dropped in by hand) is not one."""
    store.create("ledger/boxes/a", b"a")
    (store.root / "ledger" / "boxes" / "README").write_bytes(b"notes")
    assert store.list("ledger/") == ["ledger/boxes/a"]
    assert [key for key, _ in store.scan("ledger/")] == ["ledger/boxes/a"]


def test_a_scan_reads_every_value_under_the_prefix_with_its_version_by_key(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scan: (key, Versioned) for each key that starts with the prefix, sorted; a corrupt
    value is its CorruptState in its place, the rest still read; a key listed but gone by
    the time it is read (moved aside by hand) is left out."""
    versions = {key: store.create(key, key.encode()) for key in ("b/2", "b/1", "b/3", "c/1")}
    (store.root / "b" / "2~").write_bytes(b"garbage")
    listed = LocalStore.list
    monkeypatch.setattr(
        LocalStore, "list", lambda self, prefix="": [*listed(self, prefix), "b/ghost"]
    )

    scanned = store.scan("b/")

    assert [key for key, _ in scanned] == ["b/1", "b/2", "b/3"]
    assert scanned[0][1] == Versioned("b/1", b"b/1", versions["b/1"])
    assert scanned[2][1] == Versioned("b/3", b"b/3", versions["b/3"])
    assert isinstance(scanned[1][1], CorruptState)
    assert scanned[1][1].where == str(store.root / "b" / "2~")
    assert [key for key, _ in store.scan()] == ["b/1", "b/2", "b/3", "c/1"]


def test_a_version_from_before_delete_and_recreate_does_not_validate(store: LocalStore) -> None:
    """No ABA: a recreated key gets a new version, so an old reader's version is refused."""
    old = store.create("lease", b"same bytes")
    store.delete("lease", old)
    new = store.create("lease", b"same bytes")
    assert new != old
    with pytest.raises(VersionConflict) as caught:
        store.put("lease", b"stale writer", old)
    assert caught.value.expected == old
    with pytest.raises(VersionConflict):
        store.delete("lease", old)
    found = store.get("lease")
    assert (found.data, found.version) == (b"same bytes", new)


# --- the lock ------------------------------------------------------------------------------------
def _hold_lock(root: Path) -> int:
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("operation", ["get", "scan", "create", "put", "delete"])
def test_a_held_lock_makes_the_operation_raise_store_unavailable_after_the_timeout(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """When another holder keeps the lock past STORE_LOCK_TIMEOUT_S, the call fails loudly."""
    version = store.create("board", b"kept")
    monkeypatch.setattr(timing, "STORE_LOCK_TIMEOUT_S", 0.05)
    clock = FakeClock(0.0)  # the wait moves it: no real time passes, however loaded the machine
    store.clock = clock
    calls = {
        "get": lambda: store.get("board"),
        "scan": lambda: store.scan(),
        "create": lambda: store.create("new", b"x"),
        "put": lambda: store.put("board", b"lost", version),
        "delete": lambda: store.delete("board", version),
    }
    fd = _hold_lock(store.root)
    try:
        with pytest.raises(StoreUnavailable) as caught:
            calls[operation]()
    finally:
        os.close(fd)
    # it polled every STORE_LOCK_POLL_S on the store's clock until the timeout, then gave up
    assert 0.05 <= clock.monotonic() < 0.05 + timing.STORE_LOCK_POLL_S + 1e-9
    assert str(store.root) in str(caught.value)
    assert "0.05 s" in str(caught.value)
    found = store.get("board")
    assert (found.data, found.version) == (b"kept", version)
    assert store.list() == ["board"]


def test_an_operation_waits_for_a_lock_released_before_the_timeout(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock held briefly by someone else delays the call instead of failing it."""
    version = store.create("board", b"one")
    monkeypatch.setattr(timing, "STORE_LOCK_TIMEOUT_S", 10.0)
    fd = _hold_lock(store.root)
    release = threading.Timer(0.1, os.close, args=(fd,))
    started = time.monotonic()
    release.start()
    try:
        new = store.put("board", b"two", version)
    finally:
        release.join()
    waited = time.monotonic() - started
    assert 0.1 <= waited < 5.0
    assert store.get("board").version == new


# --- opening a store by URL ----------------------------------------------------------------------
def test_open_store_with_a_path_gives_a_local_store_there(tmp_path: Path) -> None:
    """A bare directory path opens (and creates) a LocalStore rooted there."""
    opened = open_store(str(tmp_path / "state"))
    assert isinstance(opened, LocalStore)
    assert opened.root == (tmp_path / "state").resolve()
    assert opened.url == str((tmp_path / "state").resolve())
    assert (tmp_path / "state").is_dir()


def test_open_store_with_a_file_url_gives_a_local_store_at_its_path(tmp_path: Path) -> None:
    """file:///abs/path opens a LocalStore on /abs/path."""
    opened = open_store(f"file://{tmp_path / 'state'}")
    assert isinstance(opened, LocalStore)
    assert opened.root == (tmp_path / "state").resolve()


def test_open_store_expands_a_home_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~/state is the state directory under $HOME."""
    monkeypatch.setenv("HOME", str(tmp_path))
    opened = open_store("~/state")
    assert isinstance(opened, LocalStore)
    assert opened.root == (tmp_path / "state").resolve()


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "normalised"),
    [
        ("s3://bkt/team/state", "bkt", "team/state", "s3://bkt/team/state"),
        ("s3://bkt/team/state/", "bkt", "team/state", "s3://bkt/team/state"),
        ("s3://bkt", "bkt", "", "s3://bkt"),
        ("s3://bkt/", "bkt", "", "s3://bkt"),
    ],
)
def test_open_store_with_an_s3_url_parses_bucket_and_prefix(
    url: str, bucket: str, prefix: str, normalised: str
) -> None:
    """s3://bucket/prefix opens an S3Store without contacting S3."""
    opened = open_store(url)
    assert isinstance(opened, S3Store)
    assert (opened.bucket, opened.prefix, opened.url) == (bucket, prefix, normalised)


@pytest.mark.parametrize("url", ["http://x", "https://example.com/state", "gs://bucket/p", "s3://"])
def test_open_store_with_an_unsupported_url_raises_usage_error(url: str) -> None:
    """Any other scheme, or an s3 URL without a bucket, is a usage error."""
    with pytest.raises(UsageError):
        open_store(url)


def test_open_store_names_the_unsupported_url_in_the_error() -> None:
    """The error message quotes the URL the operator gave."""
    with pytest.raises(UsageError, match="'http://x'"):
        open_store("http://x")


def test_an_existing_state_directory_open_to_others_is_refused_untouched(tmp_path: Path) -> None:
    """DESIGN §4: an existing 0755 directory (a home, say) is never chmod'ed: it is refused."""
    root = tmp_path / "shared-looking"
    root.mkdir(mode=0o755)
    root.chmod(0o755)

    with pytest.raises(UsageError) as caught:
        LocalStore(root)

    assert str(caught.value) == (
        f"state directory {root.resolve()} is open to other users (mode 755); "
        "run `chmod 700` on it or choose another with --state"
    )

    assert root.stat().st_mode & 0o777 == 0o755


def test_an_existing_private_directory_is_used_as_it_is(tmp_path: Path) -> None:
    """A 0700 directory that already exists is accepted and left 0700."""
    root = tmp_path / "mine"
    root.mkdir(mode=0o700)
    root.chmod(0o700)

    LocalStore(root).create("k", b"v")

    assert root.stat().st_mode & 0o777 == 0o700


def test_an_eight_segment_key_with_a_bad_segment_names_the_segment(store: LocalStore) -> None:
    """A key at the segment limit is judged on its segments, and the bad one is named."""
    with pytest.raises(UsageError, match="segment '.x' must be"):
        store.get("a/b/c/d/e/f/g/.x")


@pytest.mark.parametrize(
    ("prefix", "walked"),
    [
        ("ledger/boxes/", "ledger/boxes"),
        ("ledger/bo", "ledger"),
        ("ledger", ""),
        ("", ""),
        ("../", ""),
        ("/etc/", ""),
        ("ledger/../x/", ""),
    ],
)
def test_a_listing_walks_only_the_folder_its_prefix_names(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch, prefix: str, walked: str
) -> None:
    """History archived beside live records costs their listing nothing; a prefix that is no
    key's never walks outside the store."""
    store.create("ledger/boxes/a", b"a")
    store.create("ledger/archive/2026-07/boxes/b/1", b"b")
    seen: list[Path] = []
    walk = os.walk

    def recording(top: str):  # type: ignore[no-untyped-def]
        seen.append(Path(top))
        return walk(top)

    monkeypatch.setattr(os, "walk", recording)

    keys = store.list(prefix)

    assert seen == [store.root / walked]
    assert keys == sorted(k for k in ("ledger/boxes/a", "ledger/archive/2026-07/boxes/b/1")
                          if k.startswith(prefix))  # fmt: skip


# --- opening the state directory: every refusal is one named line ------------------------------
def test_every_missing_directory_up_to_the_root_is_created_0700_under_any_umask(
    tmp_path: Path,
) -> None:
    """The parents a state path needs are private too, not only the root (DESIGN §4)."""
    old_umask = os.umask(0)
    try:
        LocalStore(tmp_path / "a" / "b" / "state")
    finally:
        os.umask(old_umask)

    for folder in ("a", "a/b", "a/b/state", "a/b/state/.tmp"):
        assert stat.S_IMODE((tmp_path / folder).stat().st_mode) == 0o700, folder


def test_the_directory_above_the_root_is_left_as_it_was(tmp_path: Path) -> None:
    """Only what was missing is made or chmod'ed: an existing parent keeps its mode."""
    parent = tmp_path / "home"
    parent.mkdir(mode=0o755)
    parent.chmod(0o755)

    LocalStore(parent / "state")

    assert stat.S_IMODE(parent.stat().st_mode) == 0o755
    assert stat.S_IMODE((parent / "state").stat().st_mode) == 0o700


def test_a_directory_another_process_makes_first_is_passed_over_and_the_rest_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First use races: a parent that appears between our look and our mkdir is another
    process's, made with the same mode; the directories below it are still made."""
    racer = tmp_path / "shared"
    real_exists = Path.exists

    def exists_as_seen_before_the_racer(self: Path, *args: object, **kwargs: object) -> bool:
        if self == racer:
            racer.mkdir(mode=0o700, exist_ok=True)  # the other process wins the mkdir
            return False
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists_as_seen_before_the_racer)
    store = LocalStore(racer / "deeper" / "state")
    monkeypatch.undo()

    assert store.root.is_dir() and (store.root / ".tmp").is_dir()
    assert stat.S_IMODE((racer / "deeper").stat().st_mode) == 0o700
    store.create("k", b"v")


def test_a_root_under_a_regular_file_is_refused_with_the_systems_reason(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    root = tmp_path / "file" / "state"

    with pytest.raises(UsageError) as caught:
        LocalStore(root)

    assert str(caught.value) == f"cannot create the state directory {root}: Not a directory"


def test_a_root_that_is_a_regular_file_is_refused_as_not_a_directory(tmp_path: Path) -> None:
    root = tmp_path / "file"
    root.write_text("x")

    with pytest.raises(UsageError) as caught:
        LocalStore(root)

    assert str(caught.value) == (
        f"state {root} is not a directory; choose a directory with --state"
    )
    assert root.read_text() == "x"


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o770, 0o701])
def test_any_group_or_other_bit_on_an_existing_root_is_refused(tmp_path: Path, mode: int) -> None:
    root = tmp_path / "state"
    root.mkdir()
    root.chmod(mode)

    with pytest.raises(UsageError, match=f"open to other users \\(mode {mode:o}\\)"):
        LocalStore(root)


@pytest.mark.parametrize("denied", [os.W_OK, os.X_OK])
def test_a_root_we_may_not_write_or_enter_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, denied: int
) -> None:
    """Asked with os.access (a read-only mount refuses root too), both write and search."""
    root = tmp_path / "state"
    root.mkdir(mode=0o700)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if Path(p) == root and m & denied else real_access(p, m)
    )

    with pytest.raises(UsageError) as caught:
        LocalStore(root)

    assert str(caught.value) == (
        f"state directory {root} is not writable (read-only); choose another with --state"
    )
    assert not (root / ".tmp").exists()


def test_a_root_whose_tmp_cannot_be_made_is_unusable_with_the_reason(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir(mode=0o700)
    (root / ".tmp").write_text("not a folder")

    with pytest.raises(UsageError) as caught:
        LocalStore(root)

    assert str(caught.value) == f"state directory {root} is unusable: File exists"


def test_an_os_error_without_a_reason_is_named_by_its_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError()

    monkeypatch.setattr(Path, "mkdir", refuse)
    root = tmp_path / "state"

    with pytest.raises(UsageError) as caught:
        LocalStore(root)

    assert str(caught.value) == f"cannot create the state directory {root}: PermissionError"


def test_a_directory_is_private_from_its_mkdir_not_only_after_the_chmod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chmod only undoes a umask that took bits away; under umask 0 the directory is made
    0700 already, so there is no moment when another user may enter it."""
    seen: dict[str, int] = {}
    real_chmod = Path.chmod

    def chmod(self: Path, mode: int, **kwargs: object) -> None:
        seen[self.name] = stat.S_IMODE(self.stat().st_mode)
        real_chmod(self, mode)

    monkeypatch.setattr(Path, "chmod", chmod)
    old_umask = os.umask(0)
    try:
        LocalStore(tmp_path / "outer" / "state")
    finally:
        os.umask(old_umask)

    assert seen == {"outer": 0o700, "state": 0o700}


def test_a_write_to_a_full_disk_is_store_unavailable_and_leaves_the_old_value_m17(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M17: a write the disk refuses (ENOSPC) is StoreUnavailable naming the key, translated
    here once; the value before it stays readable, and no temporary file is left behind."""
    import errno

    version = store.create("k", b"old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StoreUnavailable, match="cannot write k under .*No space left on device"):
        store.put("k", b"new", version)
    with pytest.raises(StoreUnavailable, match="cannot write k2 under"):
        store.create("k2", b"new")
    monkeypatch.undo()

    found = store.get("k")
    assert found is not None and found.data == b"old" and found.version == version
    assert store.get("k2") is None
    assert list((store.root / ".tmp").iterdir()) == []


def test_salvage_reads_a_hand_edited_file_and_a_put_with_its_version_replaces_only_it_l12(
    store: LocalStore,
) -> None:
    """L12: `get` refuses a file whose checksum fails; `salvage` gives its raw bytes with a
    version of its own, a put with that version replaces it, and a put with it after the
    file changed again is a conflict (a compare-and-swap on the corrupt bytes)."""
    store.create("lane/b", b"state line\n")
    path = store.root / "lane" / "b~"
    path.write_bytes(path.read_bytes().replace(b"state", b"stale"))
    with pytest.raises(CorruptState):
        store.get("lane/b")

    salvaged = store.salvage("lane/b")
    assert salvaged is not None and salvaged.data == path.read_bytes()
    assert salvaged.key == "lane/b" and salvaged.version.startswith("corrupt.")
    path.write_bytes(path.read_bytes() + b"edited again\n")
    with pytest.raises(VersionConflict) as conflict:
        store.put("lane/b", b"repaired\n", salvaged.version)
    assert (conflict.value.key, conflict.value.expected) == ("lane/b", salvaged.version)
    again = store.salvage("lane/b")
    assert again is not None
    store.put("lane/b", b"repaired\n", again.version)

    got = store.get("lane/b")
    assert got is not None and got.data == b"repaired\n"
    assert store.salvage("lane/b") == got and store.salvage("lane/none") is None


def test_a_repair_over_salvaged_bytes_on_a_full_disk_names_the_key_and_keeps_them_m17(
    store: LocalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """M17/L12: the put that replaces salvaged bytes fails as any write does on a full disk:
    StoreUnavailable naming the key, the hand-edited bytes left exactly as they were."""
    import errno

    store.create("lane/b", b"state line\n")
    path = store.root / "lane" / "b~"
    path.write_bytes(path.read_bytes().replace(b"state", b"stale"))
    edited = path.read_bytes()
    salvaged = store.salvage("lane/b")
    assert salvaged is not None

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(StoreUnavailable, match="cannot write lane/b under"):
        store.put("lane/b", b"repaired\n", salvaged.version)
    assert path.read_bytes() == edited


def test_the_thread_holding_the_lock_writes_under_it_and_another_thread_waits(tmp_path):
    """A signal's handler runs on the thread it interrupted: holding the store's flock, it
    writes under that lock at once (a second flock would wait on itself). Another thread still
    waits until the holder lets go."""
    store = LocalStore(tmp_path / "s")
    order: list[str] = []
    with store._locked():
        store.create("a", b"1")  # the same thread: no wait on itself
        order.append("held")
        other = threading.Thread(target=lambda: (store.create("b", b"2"), order.append("other")))
        other.start()
        other.join(timeout=0.5)
        assert other.is_alive()  # it waits for the lock this thread holds
        order.append("released")
    other.join()
    assert order == ["held", "released", "other"]
    assert store.get("a").data == b"1" and store.get("b").data == b"2"
