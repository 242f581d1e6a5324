"""The lane board (L3): one strict state line, prose history never parsed, pure transitions."""

from __future__ import annotations

import dataclasses
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops.errors import CorruptState, Refused, UsageError
from gpuops.lane import board as b

T0 = 1796029925.0
FREE = b.Board("gpu-lane", "gpu-lane", T0)


def _held(**changes: object) -> b.Board:
    return dataclasses.replace(
        b.claim(FREE, "alice", "portraits", T0 + 60),
        **changes,  # type: ignore[arg-type]
    )


BOARDS = [
    FREE,
    _held(),
    _held(state=b.STARTING, attempt=3, stockouts=2, boot="abc123"),
    _held(state=b.RUNNING, attempt=1, boot="f00d", started=T0 + 120, revision=42),
]


@pytest.mark.parametrize("board", BOARDS, ids=lambda x: x.state)
def test_a_board_round_trips_through_its_state_line(board):
    """L3: render then parse gives the same state and history."""
    text = b.render(board, ["2026-11-30T09:00:00Z alice: claimed", "back to free"])

    parsed, history = b.parse(text)

    assert parsed == board
    assert history == ["2026-11-30T09:00:00Z alice: claimed", "back to free"]


def test_the_state_line_has_every_field_in_order():
    """L3/L13: lane, state, owner, job, attempt, instance, since, revision and the claim's
    epoch, machine-readable."""
    line = b.state_line(_held(state=b.STARTING, attempt=2, boot="b1"))

    assert line == (
        "lane=gpu-lane state=starting owner=alice job=portraits attempt=2 stockouts=0 "
        "instance=gpu-lane since=2026-11-30T09:13:05.000000Z claimed=2026-11-30T09:13:05.000000Z "
        "started=- boot=b1 revision=1 epoch=1"
    )


_prose = st.one_of(
    st.text(max_size=200).map(lambda t: t.replace("\n", " ")),
    st.sampled_from(["back to free", "lane is free", "state=free", "STATE: free"]),
    st.sampled_from(BOARDS).map(b.state_line),
    st.sampled_from(BOARDS).map(lambda x: "  " + b.state_line(x)),
)


@given(st.sampled_from(BOARDS), st.lists(_prose, max_size=12))
def test_no_prose_line_changes_the_parsed_state_l3(board, prose):
    """L3 (12 November): "back to free", copied state lines and garbage under the state line
    never change what the board says."""
    text = b.render(board, prose)

    parsed, _ = b.parse(text)

    assert parsed == board


@given(st.sampled_from(BOARDS), st.text(max_size=300))
def test_any_text_after_the_first_line_is_ignored_l3(board, tail):
    """L3: whatever follows the state line (even without the history header) is not state."""
    parsed, _ = b.parse(b.state_line(board) + "\n" + tail)

    assert parsed == board


@pytest.mark.parametrize(
    "first",
    [
        "",
        "back to free",
        "# history: prose",
        " " + b.state_line(FREE),
        b.state_line(FREE) + " ",
        b.state_line(FREE).replace("state=free", "state=idle"),
        b.state_line(FREE).replace("attempt=0", "attempt=-1"),
        b.state_line(FREE).replace("attempt=0", "attempt=01"),
        b.state_line(FREE).replace("revision=0", "revision=x"),
        b.state_line(FREE).replace("since=2026-11-30T09:12:05.000000Z", "since=2026-11-30 09:12:05"),
        b.state_line(FREE).replace(" owner=-", ""),
        b.state_line(FREE).replace("lane=gpu-lane state=free", "state=free lane=gpu-lane"),
        b.state_line(FREE).replace("boot=-", "boot=a-b"),
    ],
)
@pytest.mark.fault(
    "a stale or damaged board state line",
    handled="corrupt, never guessed: named with where it is (L3)",
)
def test_a_first_line_that_is_not_exactly_a_state_line_is_corrupt_never_guessed(first):
    """L3: the parser refuses anything but the exact format, naming what it saw."""
    with pytest.raises(CorruptState, match="not a board state line"):
        b.parse(first + "\n" + b.state_line(FREE) + "\n")


@pytest.mark.parametrize(
    "line",
    [
        b.state_line(FREE).replace("owner=-", "owner=alice"),
        b.state_line(FREE).replace("job=-", "job=x"),
        b.state_line(FREE).replace("claimed=-", "claimed=2026-11-30T09:12:05Z"),
        b.state_line(FREE).replace("boot=-", "boot=ab"),
        b.state_line(_held()).replace("owner=alice", "owner=-"),
        b.state_line(_held()).replace("job=portraits", "job=-"),
        b.state_line(_held()).replace("claimed=2026-11-30T09:13:05.000000Z", "claimed=-"),
        b.state_line(_held(state=b.STARTING, boot="x")).replace("boot=x", "boot=-"),
        b.state_line(_held(state=b.RUNNING, boot="x")).replace("boot=x", "boot=-"),
    ],
)
def test_an_inconsistent_state_line_is_corrupt(line):
    """L3: a free lane holds nothing; a held one names owner, job, claim and its boot."""
    with pytest.raises(CorruptState) as raised:
        b.parse(line, "lane/gpu-lane/board")

    assert raised.value.where == "lane/gpu-lane/board"
    assert raised.value.reason in (
        "a free lane must not name an owner, job, claim or boot",
        "a claimed lane must name its owner, job and claim time",
        "a starting lane must name the boot marker it expects",
        "a running lane must name the boot marker it expects",
    )


@pytest.mark.parametrize(
    ("field", "bad"),
    [("since", "2026-02-30T09:12:05Z"), ("claimed", "2026-11-30T25:13:05Z"),
     ("started", "2026-13-30T09:14:05Z")],
)  # fmt: skip
@pytest.mark.fault(
    "one character of the board changed by hand into a time that does not exist",
    handled="corrupt, naming the field (L12): never an untyped error that stops every command",
)
def test_a_board_time_that_names_no_instant_is_corrupt_naming_the_field_l12(field, bad):
    """L12: a time the state line's pattern accepts but no calendar has is corrupt."""
    held = _held(state=b.RUNNING, boot="x", started=T0 + 120.0)
    line = b.state_line(held)
    good = line.split(f"{field}=")[1].split(" ")[0]

    with pytest.raises(CorruptState) as raised:
        b.parse(line.replace(f"{field}={good}", f"{field}={bad}"), "lane/gpu-lane/board")

    assert raised.value.where == "lane/gpu-lane/board"
    assert raised.value.reason == f"{field}={bad} is not a UTC time"


def test_a_corrupt_first_line_names_where_and_shows_its_start():
    """Bad input: the error says where, and quotes the first 120 characters only."""
    with pytest.raises(CorruptState) as named:
        b.parse("x" * 200, "lane/l/board")
    with pytest.raises(CorruptState) as default:
        b.parse("garbage")

    assert named.value.where == "lane/l/board" and default.value.where == "lane board"
    assert repr("x" * 120) in named.value.reason and "x" * 121 not in named.value.reason


def test_history_without_its_header_keeps_every_line():
    """L3: only the exact header line is dropped from the history."""
    _, history = b.parse(b.state_line(FREE) + "\nfirst prose\nsecond\n")

    assert history == ["first prose", "second"]


def test_stamps_are_utc_whatever_the_local_zone(monkeypatch):
    """L3: a board shared between hosts in different zones reads the same."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        line = b.state_line(FREE)
        parsed, _ = b.parse(line)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()

    assert "since=2026-11-30T09:12:05.000000Z" in line and parsed.since == T0


def test_a_board_written_before_the_one_stamp_form_reads_the_same():
    """L3: a board an earlier gpuops wrote (whole seconds, no fraction) is read, not corrupt;
    a fraction of another width, or an offset other than Z, is no board stamp."""
    line = b.state_line(_held())
    old = line.replace(".000000Z", "Z")
    assert old != line and b.parse(old)[0] == b.parse(line)[0]
    for bad in (".000Z", ".0000000Z", "+00:00"):
        with pytest.raises(CorruptState):
            b.parse(line.replace(".000000Z", bad, 1))


def test_a_consistent_held_line_without_a_boot_parses():
    """L3: claimed needs no boot marker; only starting and running do."""
    board, _ = b.parse(b.state_line(_held()))

    assert board.boot is None and board.state == b.CLAIMED


def test_history_is_bounded_to_the_newest_lines():
    """L3: the board stays small; the newest history is kept."""
    lines = [f"line {i}" for i in range(b.MAX_HISTORY_LINES + 5)]

    _, history = b.parse(b.render(FREE, lines))

    assert history == lines[5:]


def test_claiming_a_free_lane_records_owner_job_and_time():
    """L3: free -> claimed, a new revision, retry counters at zero."""
    stale = dataclasses.replace(FREE, attempt=4, stockouts=2, started=T0, boot="old")
    claimed = b.claim(stale, "alice", "p", T0 + 5)

    assert (claimed.state, claimed.owner, claimed.job) == (b.CLAIMED, "alice", "p")
    assert (claimed.claimed, claimed.since, claimed.revision) == (T0 + 5, T0 + 5, 1)
    assert (claimed.attempt, claimed.stockouts, claimed.started, claimed.boot) == (0, 0, None, None)


def test_claiming_a_held_lane_is_refused_naming_the_holder_l3():
    """L3: a second claim is refused; the same claim again changes nothing."""
    held = _held()

    with pytest.raises(Refused) as refused:
        b.claim(held, "bob", "vids", T0 + 99)

    assert refused.value.rule == "L3" and "'alice'" in str(refused.value)
    assert b.claim(held, "alice", "portraits", T0 + 99) is held
    with pytest.raises(Refused):
        b.claim(held, "alice", "other", T0 + 99)


def test_a_bad_job_name_is_a_usage_error():
    """Bad input names what was wrong."""
    with pytest.raises(UsageError, match="job name"):
        b.claim(FREE, "alice", "bad name", T0)


def test_an_attempt_moves_count_and_boot_marker_together():
    """L3/L11: begin_attempt bumps the attempt and names the boot it expects, in one write."""
    started = b.begin_attempt(_held(attempt=2), "alice", "portraits", "b9", T0 + 200)

    assert (started.state, started.attempt, started.boot, started.since) == (
        b.STARTING,
        3,
        "b9",
        T0 + 200,
    )
    assert started.revision == _held().revision + 1


@pytest.mark.parametrize(
    "board, operator, job",
    [
        (FREE, "alice", "portraits"),
        (_held(), "bob", "portraits"),
        (_held(), "alice", "other"),
        (_held(state=b.STARTING, boot="x"), "alice", "portraits"),
        (_held(state=b.RUNNING, boot="x"), "alice", "portraits"),
    ],
)
def test_only_the_claimant_of_a_claimed_lane_begins_an_attempt_l2(board, operator, job):
    """L2: no start for a lane you do not hold, or one already starting or running."""
    with pytest.raises(Refused) as refused:
        b.begin_attempt(board, operator, job, "b1", T0)

    assert refused.value.rule == "L2"
    assert str(refused.value).removeprefix("refused (L2): ") in (
        "lane gpu-lane is free: claim it for 'portraits' first",
        "lane gpu-lane is held by 'alice' for job 'portraits', not by you",
        "you hold lane gpu-lane for job 'portraits', not 'other'",
        "lane gpu-lane is starting; a start needs it claimed",
        "lane gpu-lane is running; a start needs it claimed",
    )


def test_a_stockout_keeps_the_claim_and_counts_l7():
    """L7: starting -> claimed, same owner and job, one more stockout, boot cleared."""
    starting = _held(state=b.STARTING, attempt=1, boot="b1")

    after = b.stockout(starting, T0 + 300)

    assert (after.state, after.owner, after.job, after.stockouts) == (
        b.CLAIMED,
        "alice",
        "portraits",
        1,
    )
    assert (after.boot, after.attempt, after.since) == (None, 1, T0 + 300)


def test_a_failed_attempt_keeps_the_claim_without_counting_a_stockout():
    """L7: a no-op or an error returns to claimed; stockouts are not touched."""
    after = b.attempt_failed(_held(state=b.STARTING, attempt=2, stockouts=1, boot="b"), T0 + 1)

    assert (after.state, after.stockouts, after.attempt, after.boot) == (b.CLAIMED, 1, 2, None)


def test_booted_records_the_first_start_only():
    """L8: started is the first successful start; a later boot keeps it."""
    first = b.booted(_held(state=b.STARTING, boot="b"), T0 + 500)
    again = b.booted(dataclasses.replace(first, state=b.STARTING), T0 + 900)

    assert (first.state, first.started) == (b.RUNNING, T0 + 500)
    assert again.started == T0 + 500


@pytest.mark.parametrize("transition", [b.stockout, b.attempt_failed, b.booted])
@pytest.mark.parametrize("state", [b.FREE, b.CLAIMED, b.RUNNING])
def test_attempt_outcomes_apply_only_to_a_starting_lane(transition, state):
    """L3: an outcome for an attempt that is not in flight is refused, not applied."""
    board = FREE if state == b.FREE else _held(state=state, boot="b")

    with pytest.raises(Refused) as refused:
        transition(board, T0)

    assert refused.value.rule == "L3"
    assert str(refused.value) == f"refused (L3): lane gpu-lane is {state}, not starting"


def test_release_needs_the_claimant_and_a_terminated_instance_l1():
    """L1/L3: the claimant releases once TERMINATED; anyone else, or earlier, is refused."""
    running = _held(state=b.RUNNING, boot="b", started=T0 + 9, attempt=1, stockouts=3)

    freed = b.release(running, "alice", "portraits", True, T0 + 999)
    with pytest.raises(Refused) as not_off:
        b.release(running, "alice", "portraits", False, T0 + 999)
    with pytest.raises(Refused) as not_yours:
        b.release(running, "bob", "portraits", True, T0 + 999)

    assert freed == dataclasses.replace(
        FREE, since=T0 + 999, revision=running.revision + 1, epoch=running.epoch
    )
    assert not_off.value.rule == "L1" and not_yours.value.rule == "L3"
    assert str(not_off.value) == (
        "refused (L1): instance gpu-lane is not TERMINATED: the lane is released only after "
        "the job powers the instance off (gpuops never stops it)"
    )


def test_a_claim_carries_its_epoch_and_the_line_reads_it_back_strictly_l13():
    """L13: claim takes the given epoch (by default one past the board's), release keeps it,
    and the state line's epoch is a plain number or the line is corrupt."""
    claimed = b.claim(FREE, "alice", "portraits", T0 + 1, 7)
    default = b.claim(dataclasses.replace(FREE, epoch=3), "alice", "portraits", T0 + 1)
    freed = b.release(claimed, "alice", "portraits", True, T0 + 2)
    line = b.state_line(claimed)

    assert (claimed.epoch, default.epoch, freed.epoch) == (7, 4, 7)
    assert line.endswith(" epoch=7") and b.parse(line + "\n")[0] == claimed
    for bad in ("epoch=07", "epoch=-1", "epoch=x", "epoch="):
        with pytest.raises(CorruptState):
            b.parse(line.replace("epoch=7", bad) + "\n")
    with pytest.raises(CorruptState):
        b.parse(line.replace(" epoch=7", "") + "\n")
