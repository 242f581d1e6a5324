"""Results synced while the job runs: the pure decisions (market/sync_plan.py, M5)."""

from __future__ import annotations

import json
import math

import pytest

from gpuops.errors import CorruptState, UsageError
from gpuops.market import sync_plan as sp
from gpuops.market.sync_plan import Seen, Synced, SyncState


# --- when ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("minutes", "seconds"), [(0, 0.0), (1.5, 90.0), (30, 1800.0)])
def test_sync_every_is_minutes_in_seconds_and_0_is_off(minutes, seconds):
    assert sp.sync_every_s(minutes) == seconds


@pytest.mark.parametrize("minutes", [-1.0, -0.001, math.inf, -math.inf, math.nan])
def test_a_negative_or_endless_sync_interval_is_a_usage_error_naming_the_flag(minutes):
    with pytest.raises(UsageError) as refused:
        sp.sync_every_s(minutes)
    assert str(refused.value) == (
        f"--sync-every must be 0 (off) or a number of minutes, not {minutes!r}"
    )


@pytest.mark.parametrize("every", [None, 0.0, -60.0])
def test_no_sync_falls_due_when_syncs_are_off(every):
    assert sp.next_sync_at(every, 100.0, None) is None
    assert sp.next_sync_at(every, 100.0, 500.0) is None


def test_the_first_sync_comes_an_interval_after_the_box_was_kept_the_next_after_the_last_try():
    assert sp.next_sync_at(60.0, 100.0, None) == 160.0
    assert sp.next_sync_at(60.0, 100.0, 400.0) == 460.0
    assert sp.next_sync_at(0.5, 100.0, None) == 100.5  # any interval above 0 syncs
    assert sp.next_sync_at(0.5, 100.0, 0.0) == 0.5  # a last try at epoch 0 is still a try


# --- the box's scripts -----------------------------------------------------------------------
def test_the_listing_script_lists_each_regular_file_nul_separated_or_says_there_is_none():
    assert sp.listing_script("job", "results") == (
        'J="$HOME/gpuops/job"; cd "$J" || exit 1; '
        "if [ -d results ]; then cd results && find . -type f -printf '%s %T@ %P\\0'; else "
        "echo 'gpuops: the job has no results directory results' >&2; exit 19; fi"
    )
    assert "if [ -d out/ckpt ]; then cd out/ckpt &&" in sp.listing_script("job", "out/ckpt")


def test_the_scripts_refuse_a_results_path_that_climbs_out():
    with pytest.raises(UsageError):
        sp.listing_script("job", "../etc")
    with pytest.raises(UsageError):
        sp.fetch_script("job", "/etc", ["x"])


def test_the_fetch_script_tars_exactly_the_named_files_each_quoted():
    script = sp.fetch_script("job", "results", ["a b.bin", "it's/x", "-rf"])
    assert script == (
        'J="$HOME/gpuops/job"; cd "$J" || exit 1; cd results || exit 19; '
        "tar --ignore-failed-read -cf - './a b.bin' './it'\"'\"'s/x' ./-rf; "
        "s=$?; [ $s -eq 1 ] && s=0; exit $s"
    )


def test_a_listing_reads_every_record_and_leaves_out_reserved_and_climbing_names():
    stdout = (
        "12 1733155200.5 ckpt/step 1.bin\0"
        "0 1733155201 empty\0"
        "5 1.0 .gpuops-sync.json\0"
        "5 1.0 .gpuops-partial/abc\0"
        "7 2.25 deep/.gpuops-sync.json\0"
        "3 1.0 a/../b\0"
        "3 1.0 a//b\0"
    )
    seen, left = sp.parse_listing(stdout)
    assert seen == {
        "ckpt/step 1.bin": Seen(12, "1733155200.5"),
        "empty": Seen(0, "1733155201"),
        "deep/.gpuops-sync.json": Seen(7, "2.25"),  # reserved only at the top
    }
    assert left == [".gpuops-sync.json", ".gpuops-partial/abc", "a/../b", "a//b"]
    assert sp.parse_listing("") == ({}, [])
    # an empty record (two NULs) is skipped, and what follows it still read
    assert sp.parse_listing("1 1.0 a\0\0" "2 2.0 b\0") == (
        {"a": Seen(1, "1.0"), "b": Seen(2, "2.0")},
        [],
    )


@pytest.mark.parametrize(
    "record",
    ["x 1.0 a", "-1 1.0 a", "1 1.2.3 a", "1 17. a", "1 .5 a", "1 1.x a", "1 1.0", "1 1.0 ", "1"],
)
def test_a_listing_record_gpuops_cannot_read_is_a_usage_error_naming_it(record):
    with pytest.raises(UsageError) as refused:
        sp.parse_listing(f"1 1.0 fine\0{record}\0")
    assert str(refused.value) == (
        f"the box's results listing has a record gpuops cannot read: {record!r}"
    )


# --- what to fetch, what to deliver ----------------------------------------------------------
def test_only_new_files_and_files_of_another_size_or_mtime_are_fetched_in_order():
    manifest = {
        "same": Synced(3, "1.0", "s1"),
        "bigger": Synced(3, "1.0", "s2"),
        "touched": Synced(3, "1.0", "s3"),
        "gone": Synced(3, "1.0", "s4"),
    }
    listing = {
        "touched": Seen(3, "2.0"),
        "new": Seen(1, "1.0"),
        "same": Seen(3, "1.0"),
        "bigger": Seen(4, "1.0"),
    }
    assert sp.to_fetch(manifest, listing) == ["bigger", "new", "touched"]
    assert sp.to_fetch({}, {}) == []


def test_a_file_is_delivered_only_when_it_stood_still_through_the_tar():
    before = {p: Seen(4, "1.0") for p in ("still", "grew", "touched", "gone", "lost", "short")}
    after = {
        "still": Seen(4, "1.0"),
        "grew": Seen(9, "1.0"),
        "touched": Seen(4, "1.5"),
        "lost": Seen(4, "1.0"),
        "short": Seen(4, "1.0"),
        "unasked": Seen(4, "1.0"),
    }
    members = {"still": 4, "grew": 4, "touched": 4, "gone": 4, "short": 2, "unasked": 4}
    wanted = ["touched", "still", "grew", "gone", "lost", "short", "never-listed"]
    deliver, deferred = sp.settle(wanted, before, after, members)
    assert deliver == ["still"]
    assert deferred == ["touched", "grew", "gone", "lost", "short", "never-listed"]
    assert sp.settle([], before, after, members) == ([], [])


# --- the manifest ----------------------------------------------------------------------------
def test_the_manifest_names_every_delivered_file_with_its_size_mtime_and_sha256():
    files = {"b": Synced(2, "2.0", "bb"), "a/x": Synced(1, "1.5", "aa")}
    data = sp.encode_manifest("0123456789ab", "2026-12-02T16:00:00Z", files)
    assert (
        data
        == (
            json.dumps(
                {
                    "files": {
                        "a/x": {"mtime": "1.5", "sha256": "aa", "size": 1},
                        "b": {"mtime": "2.0", "sha256": "bb", "size": 2},
                    },
                    "rental_id": "0123456789ab",
                    "synced_at": "2026-12-02T16:00:00Z",
                    "version": 1,
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        ).encode()
    )
    assert sp.decode_manifest(data) == files
    assert sp.decode_manifest(sp.encode_manifest(None, "t", {})) == {}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"version": 2, "files": {}}',
        b'{"version": 1, "files": []}',
        b'{"version": 1}',
        b'{"files": {}}',
        b'{"version": 1, "files": {"a": {"size": 1, "mtime": "1"}}}',
        b'{"version": 1, "files": {"a": {"size": true, "mtime": "1", "sha256": "x"}}}',
        b'{"version": 1, "files": {"a": {"size": 1.0, "mtime": "1", "sha256": "x"}}}',
        b'{"version": 1, "files": {"a": {"size": 1, "mtime": 1, "sha256": "x"}}}',
        b'{"version": 1, "files": {"a": {"size": 1, "mtime": "1", "sha256": 7}}}',
        b'{"version": 1, "files": {"a": "x"}}',
    ],
)
def test_a_manifest_of_another_shape_is_corrupt_state_never_a_guess(body):
    with pytest.raises(CorruptState) as corrupt:
        sp.decode_manifest(body)
    assert corrupt.value.where == ".gpuops-sync.json"
    assert corrupt.value.reason.split(":")[0] in {"ValueError", "KeyError", "TypeError"} or (
        corrupt.value.reason.startswith("JSONDecodeError")
    )


def test_a_manifest_of_the_wrong_version_or_field_type_says_which():
    with pytest.raises(CorruptState) as version:
        sp.decode_manifest(b'{"version": 2, "files": {}}')
    assert version.value.reason == "ValueError: not a version 1 manifest"
    with pytest.raises(CorruptState) as typed:
        sp.decode_manifest(b'{"version": 1, "files": {"a": {"size": 1, "mtime": 1, "sha256": ""}}}')
    assert typed.value.reason == "ValueError: 'a' has a field of the wrong type"


# --- what a failed sync means ----------------------------------------------------------------
def test_a_sync_that_works_ends_a_run_of_failures_and_is_no_alarm():
    failing = SyncState(last_try_at=5.0, last_ok_at=1.0, failing_since=5.0)
    assert sp.after_sync(failing, 9.0, True) == (SyncState(9.0, 9.0, None), False)
    assert sp.after_sync(SyncState(), 2.0, True) == (SyncState(2.0, 2.0, None), False)


def test_the_first_failure_of_a_run_is_an_alarm_and_the_rest_of_the_run_is_not():
    first, alarm = sp.after_sync(SyncState(last_ok_at=1.0), 5.0, False)
    assert (first, alarm) == (SyncState(5.0, 1.0, 5.0), True)
    second, again = sp.after_sync(first, 8.0, False)
    assert (second, again) == (SyncState(8.0, 1.0, 5.0), False)
    healed, _ = sp.after_sync(second, 9.0, True)
    assert sp.after_sync(healed, 12.0, False) == (SyncState(12.0, 9.0, 12.0), True)
    # a run that began at epoch 0 is still a run: its next failure is no second alarm
    assert sp.after_sync(SyncState(failing_since=0.0), 3.0, False) == (
        SyncState(3.0, None, 0.0),
        False,
    )


# --- what boxes and watch show ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("every", "at", "now", "said"),
    [
        (None, 5.0, 10.0, "off"),
        (0.0, 5.0, 10.0, "off"),
        (-1.0, 5.0, 10.0, "off"),
        (0.5, None, 10.0, "never"),
        (60.0, 10.0, 10.0, "0 s ago"),
        (60.0, 20.0, 10.0, "0 s ago"),  # another host's clock ahead: never a negative age
        (60.0, 0.0, 59.4, "59 s ago"),
        (60.0, 0.0, 60.0, "1 min ago"),
        (60.0, 0.0, 3599.0, "60 min ago"),
        (60.0, 0.0, 3600.0, "1.0 h ago"),
        (60.0, 0.0, 5400.0, "1.5 h ago"),
        (60.0, 0.0, 3780.0, "1.1 h ago"),
    ],
)
def test_the_last_sync_is_shown_as_off_never_or_its_age(every, at, now, said):
    assert sp.sync_age(every, at, now) == said
