"""The event-log scanner: the block fast path reads exactly what line-by-line reading reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuops.analysis import scan as scan_module
from gpuops.analysis.scan import ScanCounts, scan
from gpuops.analysis.stats import KINDS, NEEDLES

KIND_CHOICES = [
    "market.selection",
    "market.probe",
    "market.candidate",
    "ledger.transition",
    "lane.start",
    "lane.started",
    "guard.lease",
]


def line(i: int, kind: str, payload: dict[str, object]) -> bytes:
    event = {"ts": f"2026-07-18T00:00:{i % 60:02d}.{i:06d}Z", "operator": "o", "kind": kind}
    return json.dumps({**event, "payload": payload}, separators=(",", ":")).encode() + b"\n"


def read(path: Path, *, since: str = "", start: int = 0, tail: bool = True):
    counts = ScanCounts()
    rows = list(
        scan(path, kinds=KINDS, needles=NEEDLES, counts=counts, since=since, start=start, tail=tail)
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
    whole = line(1, "market.probe", {"name": "a"}) + line(2, "market.probe", {"name": "b"})
    path.write_bytes(whole[:-5])

    first, _, offset = read(path, tail=False)
    path.write_bytes(whole)
    second, _, end = read(path, start=offset, tail=False)

    assert [p["name"] for _, _, p in first] == ["a"]
    assert offset == len(line(1, "market.probe", {"name": "a"}))
    assert [p["name"] for _, _, p in second] == ["b"] and end == len(whole)


# --- typed: scan_events is scan, each payload decoded ---------------------------------------------
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


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.one_of(_typed_payloads(), st.tuples(st.sampled_from(KIND_CHOICES), payloads),
                             strays), max_size=30),  # fmt: skip
    block_bytes=st.integers(min_value=1, max_value=900),
    since=st.sampled_from(["", "0"]),
)
def test_the_typed_scan_yields_exactly_each_payload_decoded_and_counts_the_same(
    tmp_path_factory, rows, block_bytes, since
):
    """scan_events parses and checks a line in one step; whatever the line (valid, a field of
    the wrong type or missing, NaN, torn, not an event), it yields what scan yields, decoded,
    and counts the same, in blocks of any size and line by line."""
    from gpuops import event_types as ev
    from gpuops.analysis.scan import scan_events

    path = tmp_path_factory.mktemp("typed") / "e.jsonl"
    path.write_bytes(
        b"".join(r if isinstance(r, bytes) else line(i, *r) for i, r in enumerate(rows))
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scan_module, "BLOCK_BYTES", block_bytes)
        plain, typed = ScanCounts(), ScanCounts()
        expected = [
            (ts, kind, ev.decode(kind, payload))
            for ts, kind, payload in scan(
                path, kinds=KINDS, needles=NEEDLES, counts=plain, since=since
            )
        ]
        got = list(scan_events(path, kinds=KINDS, needles=NEEDLES, counts=typed, since=since))

    assert got == expected
    assert [type(event) for *_, event in got] == [type(event) for *_, event in expected]
    assert typed == plain


def test_a_typed_scan_yields_each_valid_event_and_none_for_a_payload_that_is_no_event(tmp_path):
    """The line the pass rates once crashed on (a verdict that is a list) yields None, counted
    as decoded (the fold counts it as malformed); the valid line beside it is its event."""
    from gpuops import event_types as ev
    from gpuops.analysis.scan import scan_events
    from tests.test_event_types import BAD_PROBE, VALID

    path = tmp_path / "e.jsonl"
    good = VALID["market.probe"]
    path.write_bytes(line(1, "market.probe", BAD_PROBE) + line(2, "market.probe", good))
    counts = ScanCounts()

    rows = list(scan_events(path, kinds=KINDS, counts=counts))

    assert [event for *_, event in rows] == [None, ev.decode("market.probe", good)]
    assert (counts.events, counts.decoded, counts.bad_total) == (2, 2, 0)
