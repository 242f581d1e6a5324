"""The event-log scanner: the block fast path reads exactly what line-by-line reading reads, and
both read exactly what events.py's reader and event_types.decode make of the log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuops import event_types as ev
from gpuops.analysis import scan as scan_module
from gpuops.analysis.scan import ScanCounts, scan_events
from gpuops.analysis.stats import KINDS, NEEDLES
from gpuops.errors import UsageError
from gpuops.events import read_events

KIND_CHOICES = [
    "market.selection",
    "market.probe",
    "market.candidate",
    "ledger.transition",
    "lane.start",
    "lane.started",
    "guard.lease",
]

ROOT = Path(__file__).resolve().parent.parent


def line(i: int, kind: str, payload: dict[str, object]) -> bytes:
    event = {"ts": f"2026-07-18T00:00:{i % 60:02d}.{i:06d}Z", "operator": "o", "kind": kind}
    return json.dumps({**event, "payload": payload}, separators=(",", ":")).encode() + b"\n"


def read(path: Path, *, since: str = "", start: int = 0, tail: bool = True):
    counts = ScanCounts()
    rows = list(
        scan_events(
            path, kinds=KINDS, needles=NEEDLES, counts=counts, since=since, start=start, tail=tail
        )
    )
    bad = [(b.lineno, b.reason) for b in counts.bad_lines]
    return rows, (counts.events, counts.decoded, counts.bad_total, bad), counts.offset


payloads = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b"])},
    optional={
        "after": st.sampled_from(["gone-confirmed", "live"]),
        "note": st.sampled_from(['"kind":"market.probe"', '"after":"gone-confirmed"', "x"]),
        "kind": st.sampled_from(KIND_CHOICES),
    },
)
strays = st.sampled_from([b"\xff\xfe not utf-8\n", b'{"ts":"2026-07-18T0\n', b"\n", b"[1]\n"])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.one_of(st.tuples(st.sampled_from(KIND_CHOICES), payloads), strays), max_size=40
    ),
    block_bytes=st.integers(min_value=1, max_value=600),
)
def test_reading_in_blocks_yields_and_counts_exactly_what_reading_line_by_line_does(
    tmp_path_factory, rows, block_bytes
):
    """Blocks of any size, payloads that mention kinds or needles, and bad lines: all agree."""
    path = tmp_path_factory.mktemp("scan") / "e.jsonl"
    path.write_bytes(
        b"".join(r if isinstance(r, bytes) else line(i, *r) for i, r in enumerate(rows))
    )
    by_line = read(path, since="0")  # any since takes the line-by-line path
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_module, "BLOCK_BYTES", block_bytes)

        by_block = read(path)

    assert by_block[:2] == by_line[:2]


def test_a_payload_that_mentions_a_wanted_kind_is_not_read_as_that_kind(tmp_path):
    """A candidate event whose payload quotes "kind":"market.probe" stays a candidate event."""
    path = tmp_path / "e.jsonl"
    path.write_bytes(line(1, "market.candidate", {"kind": "market.probe", "name": "a"}))

    rows, (events, decoded, bad, _), _ = read(path)

    assert rows == [] and (events, decoded, bad) == (1, 0, 0)


def test_an_unfinished_last_line_is_left_for_the_next_scan_and_the_offset_resumes(tmp_path):
    """With tail=False the offset stops before a half-written line; a later scan picks it up."""
    path = tmp_path / "e.jsonl"
    whole = line(1, "market.rent.stopped", {"name": "a"})
    whole += line(2, "market.rent.stopped", {"name": "b"})
    path.write_bytes(whole[:-5])

    first, _, offset = read(path, tail=False)
    path.write_bytes(whole)
    second, _, end = read(path, start=offset, tail=False)

    assert [e.name for _, _, e in first] == ["a"]
    assert offset == len(line(1, "market.rent.stopped", {"name": "a"}))
    assert [e.name for _, _, e in second] == ["b"] and end == len(whole)


# --- what the scan yields: each event of a wanted kind, decoded ---------------------------------
def _typed_payloads():
    from tests.test_event_types import VALID

    wrong = st.sampled_from([None, True, "x", [1], 1.5, -1, float("nan"), {"a": 1}])
    valid = st.sampled_from(sorted(VALID)).map(lambda kind: (kind, dict(VALID[kind])))

    def spoil(pair, field, value):
        kind, payload = pair
        name = sorted(payload)[field % len(payload)]
        return kind, {**payload, name: value}

    spoiled = st.builds(spoil, valid, st.integers(0, 20), wrong)
    dropped = valid.map(lambda pair: (pair[0], dict(list(pair[1].items())[1:])))
    return st.one_of(valid, spoiled, dropped)


def expected_of(path: Path, since: str) -> tuple[list[tuple[str, str, object]], tuple[int, ...]]:
    """What the scan must make of a log, from events.py's line-by-line reader and decode:
    the wanted kinds at or after ``since``, transitions only to gone-confirmed (the needle)."""
    assert NEEDLES == {"ledger.transition": b'"after":"gone-confirmed"'}
    stream = read_events(path)
    rows, before = [], 0
    for event in stream:
        ts, kind, payload = event["ts"], event["kind"], event["payload"]
        if ts < since:
            before += 1
        elif kind in KINDS and (
            kind != "ledger.transition" or payload.get("after") == "gone-confirmed"
        ):
            rows.append((ts, kind, ev.decode(kind, payload)))
    return rows, (stream.events, len(rows), before, len(stream.bad_lines))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.one_of(_typed_payloads(), st.tuples(st.sampled_from(KIND_CHOICES), payloads), strays),
        max_size=30,
    ),
    block_bytes=st.integers(min_value=1, max_value=900),
    since=st.sampled_from(["", "0", "2026-07-18T00:00:10"]),
)
def test_the_scan_yields_each_wanted_event_decoded_as_the_line_reader_and_decode_do(
    tmp_path_factory, rows, block_bytes, since
):
    """A line is parsed and checked in one step; whatever it is (valid, a field of the wrong
    type or missing, NaN, torn, not an event, another kind, a transition elsewhere), the scan
    yields and counts what reading the log line by line and decoding each payload give, in
    blocks of any size and line by line."""
    path = tmp_path_factory.mktemp("typed") / "e.jsonl"
    path.write_bytes(
        b"".join(r if isinstance(r, bytes) else line(i, *r) for i, r in enumerate(rows))
    )
    expected, (events, decoded, before, bad) = expected_of(path, since)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_module, "BLOCK_BYTES", block_bytes)
        counts = ScanCounts()
        got = list(scan_events(path, kinds=KINDS, needles=NEEDLES, counts=counts, since=since))

    assert got == expected
    assert [type(event) for *_, event in got] == [type(event) for *_, event in expected]
    assert (counts.events, counts.decoded, counts.before_since, counts.bad_total) == (
        events,
        decoded,
        before,
        bad,
    )


def test_a_payload_that_is_no_event_yields_none_and_the_valid_one_beside_it_its_event(tmp_path):
    """The line the pass rates once crashed on (a verdict that is a list) yields None, counted
    as decoded (the fold counts it as malformed); the valid line beside it is its event."""
    from tests.test_event_types import BAD_PROBE, VALID

    path = tmp_path / "e.jsonl"
    good = VALID["market.probe"]
    path.write_bytes(line(1, "market.probe", BAD_PROBE) + line(2, "market.probe", good))
    counts = ScanCounts()

    rows = list(scan_events(path, kinds=KINDS, counts=counts))

    assert [event for *_, event in rows] == [None, ev.decode("market.probe", good)]
    assert (counts.events, counts.decoded, counts.bad_total) == (2, 2, 0)


def test_a_line_whose_stamp_has_no_utc_offset_is_a_bad_line_and_the_others_still_read(tmp_path):
    """Bad input: a stamp ending in 0 instead of Z (naive) once stopped `stats` with a
    TypeError; that line is counted unreadable with its reason, the lines around it still read."""
    path = tmp_path / "e.jsonl"
    good = line(1, "market.rent.done", {"name": "a", "instance_id": "1"})
    bad = line(2, "market.rent.done", {"name": "b", "instance_id": "2"}).replace(b'Z"', b'0"', 1)
    path.write_bytes(good + bad + line(3, "market.rent.done", {"name": "c", "instance_id": "3"}))

    rows, (events, _, bad_total, bad), _ = read(path)

    assert [event.name for _, _, event in rows] == ["a", "c"]  # type: ignore[union-attr]
    assert bad_total == 1 and bad[0][0] == 2
    assert "'2026-07-18T00:00:02.0000020' is not an ISO-8601 time with a UTC offset" in bad[0][1]
    assert events == 2


def test_a_stamp_with_an_offset_in_another_layout_is_still_read(tmp_path):
    """A hand-written line with `+00:00` (not EventLog's layout) is an event, not a bad line."""
    path = tmp_path / "e.jsonl"
    doc = {"kind": "market.rent.done", "ts": "2026-07-18T00:00:00+00:00", "operator": "x",
           "payload": {"name": "a", "instance_id": "1"}}  # fmt: skip
    path.write_text(json.dumps(doc) + "\n")

    rows, (events, _, bad_total, _), _ = read(path)

    assert len(rows) == 1 and events == 1 and bad_total == 0


def test_an_event_log_path_through_a_file_is_a_usage_error_naming_it(tmp_path):
    """Bad input: `--state FILE` puts the log under a file (NotADirectoryError); it is a
    usage error naming the path."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(
        UsageError, match=r"cannot read the event log .*file/events.jsonl: Not a dir"
    ):
        list(scan_events(tmp_path / "file" / "events.jsonl", kinds=KINDS))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_event_log_that_is_a_device_is_refused_at_once_never_read_forever():
    """Bad input: GPUOPS_EVENTS=/dev/full made `offers` read zeros forever; a device is not
    a log. In a child with a time limit: the old scan never returned (and grew its memory)."""
    code = (
        "from gpuops.analysis.scan import scan_events\n"
        "try:\n    list(scan_events('/dev/zero', kinds={'market.probe'}))\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30,
        preexec_fn=_bounded_memory,  # the old read grew without bound: fail, not swap
    )

    assert done.stdout == "UsageError the event log /dev/zero is not a regular file\n"


def test_a_payload_nested_too_deep_is_a_bad_line_not_a_recursion_error(tmp_path):
    """Bad input: 3,000 nested arrays in a payload raised RecursionError out of the scan;
    the line is unreadable with its reason, and the next line still reads."""
    path = tmp_path / "e.jsonl"
    deep = line(1, "market.rent.done", {"name": "a"}).replace(
        b'{"name":"a"}', b'{"name":' + b"[" * 3000 + b"]" * 3000 + b"}"
    )
    path.write_bytes(deep + line(2, "market.rent.done", {"name": "b", "instance_id": "2"}))

    rows, (events, _, bad_total, bad), _ = read(path)

    assert [event.name for _, _, event in rows] == ["b"]  # type: ignore[union-attr]
    assert bad_total == 1 and bad == [(1, "JSON nested too deep to read")] and events == 1


def _bounded_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))
