"""The lane board (L3): one machine-readable state line, then prose history nobody parses.

On 12 November an operator read "back to free" inside a prose entry, took it for the lane's
state and overwrote another session's startup script (docs/rules.md, L3). So the board's state is
the first line and only the first line, in one strict format; everything under it is
history for humans and is never read by any code. ``parse`` refuses a first line that is
not exactly a state line (CorruptState) instead of guessing.

Every transition is a pure function ``Board -> Board`` that raises ``Refused`` naming the
rule; ``gpuops.lane.runner`` applies them through the store's compare-and-swap. The retry
state (attempt, stockouts, the expected boot marker) lives in the same line, so one write
moves it and the state together: the board can never show an older attempt than the one
running (the 10 November stale-attempt entry). The line also carries the claim's epoch, which
the instance's own label must carry too before install or start act (L13, decide.py).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from gpuops.errors import CorruptState, Refused, UsageError
from gpuops.timestamps import epoch_of, utc_iso

FREE = "free"
CLAIMED = "claimed"  # held by a job; not started, or waiting out a stockout (L7)
STARTING = "starting"  # a start was sent; this attempt's boot marker is not yet seen (L2)
RUNNING = "running"  # this attempt's boot marker was seen: the job is ours and running
STATES = (FREE, CLAIMED, STARTING, RUNNING)
NONE = "-"

FIELDS = (
    "lane",
    "state",
    "owner",
    "job",
    "attempt",
    "stockouts",
    "instance",
    "since",
    "claimed",
    "started",
    "boot",
    "revision",
    "epoch",
)
HISTORY_HEADER = "# history: prose for humans, never parsed; the state is the line above only"
MAX_HISTORY_LINES = 500

_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}"
# the one stamp form (gpuops/timestamps.py); whole seconds, as boards before it were written
_STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?Z"
_PATTERNS = {
    "lane": _NAME,
    "state": "|".join(STATES),
    "owner": _NAME + "|-",
    "job": _NAME + "|-",
    "attempt": r"0|[1-9]\d{0,5}",
    "stockouts": r"0|[1-9]\d{0,5}",
    "instance": _NAME,
    "since": _STAMP,
    "claimed": _STAMP + "|-",
    "started": _STAMP + "|-",
    "boot": r"[A-Za-z0-9]{1,64}|-",
    "revision": r"0|[1-9]\d{0,9}",
    "epoch": r"0|[1-9]\d{0,9}",
}
STATE_LINE = re.compile(" ".join(f"{name}=(?P<{name}>{_PATTERNS[name]})" for name in FIELDS))
_JOB = re.compile(_NAME)


@dataclass(frozen=True)
class Board:
    """The parsed state line. Times are epoch seconds; ``None`` is '-' on the line."""

    lane: str
    instance: str
    since: float
    state: str = FREE
    owner: str | None = None
    job: str | None = None
    attempt: int = 0
    stockouts: int = 0
    claimed: float | None = None
    started: float | None = None
    boot: str | None = None
    revision: int = 0
    epoch: int = 0  # the claim's epoch, as the instance's label carries it (L13)


def stamp(when: float) -> str:
    """Epoch seconds as the board writes them: the one stamp form, to the whole second."""
    return utc_iso(int(when))


def _epoch(text: str, field: str, where: str) -> float:
    """A board time the state line's pattern matched (``_STAMP``); one that names no real
    instant (a hand's edit: February 30th, hour 25) is a corrupt board naming the field, never
    an untyped error (L12)."""
    try:
        return epoch_of(text)
    except ValueError:
        raise CorruptState(where, f"{field}={text} is not a UTC time") from None


def state_line(board: Board) -> str:
    values = {
        "lane": board.lane,
        "state": board.state,
        "owner": board.owner or NONE,
        "job": board.job or NONE,
        "attempt": str(board.attempt),
        "stockouts": str(board.stockouts),
        "instance": board.instance,
        "since": stamp(board.since),
        "claimed": NONE if board.claimed is None else stamp(board.claimed),
        "started": NONE if board.started is None else stamp(board.started),
        "boot": board.boot or NONE,
        "revision": str(board.revision),
        "epoch": str(board.epoch),
    }
    return " ".join(f"{name}={values[name]}" for name in FIELDS)


def render(board: Board, history: list[str]) -> str:
    """The whole board file: the state line, the history header, the newest history last."""
    kept = history[-MAX_HISTORY_LINES:]
    return "\n".join([state_line(board), HISTORY_HEADER, *kept]) + "\n"


def parse(text: str, where: str = "lane board") -> tuple[Board, list[str]]:
    """The state and the history lines. Only the first line is read as state (L3)."""
    first, _, rest = text.partition("\n")
    match = STATE_LINE.fullmatch(first)
    if match is None:
        raise CorruptState(where, f"the first line is not a board state line: {first[:120]!r}")
    f = match.groupdict()
    board = Board(
        lane=f["lane"],
        instance=f["instance"],
        since=_epoch(f["since"], "since", where),
        state=f["state"],
        owner=_opt(f["owner"]),
        job=_opt(f["job"]),
        attempt=int(f["attempt"]),
        stockouts=int(f["stockouts"]),
        claimed=None if f["claimed"] == NONE else _epoch(f["claimed"], "claimed", where),
        started=None if f["started"] == NONE else _epoch(f["started"], "started", where),
        boot=_opt(f["boot"]),
        revision=int(f["revision"]),
        epoch=int(f["epoch"]),
    )
    _check_consistent(board, where)
    lines = rest.split("\n")
    if lines and lines[0] == HISTORY_HEADER:
        lines = lines[1:]
    return board, [line for line in lines if line]


def _opt(value: str) -> str | None:
    return None if value == NONE else value


def _check_consistent(board: Board, where: str) -> None:
    """A free lane holds nothing; a held lane names its owner, job and claim time."""
    held = (board.owner, board.job, board.claimed)
    if board.state == FREE and (any(v is not None for v in held) or board.boot is not None):
        raise CorruptState(where, "a free lane must not name an owner, job, claim or boot")
    if board.state != FREE and any(v is None for v in held):
        raise CorruptState(where, f"a {board.state} lane must name its owner, job and claim time")
    if board.state in (STARTING, RUNNING) and board.boot is None:
        raise CorruptState(where, f"a {board.state} lane must name the boot marker it expects")


def check_job(job: str) -> str:
    if not _JOB.fullmatch(job):
        raise UsageError(f"job name {job!r} must be 1-128 characters of letters, digits and _.@+-")
    return job


def _next(board: Board, now: float, **changes: Any) -> Board:
    return dataclasses.replace(board, since=now, revision=board.revision + 1, **changes)


def _own(board: Board, operator: str, job: str, rule: str) -> None:
    """Refuse unless ``operator`` holds the lane for ``job``."""
    if board.state == FREE:
        raise Refused(rule, f"lane {board.lane} is free: claim it for {job!r} first")
    if board.owner != operator:
        raise Refused(
            rule, f"lane {board.lane} is held by {board.owner!r} for job {board.job!r}, not by you"
        )
    if board.job != job:
        raise Refused(rule, f"you hold lane {board.lane} for job {board.job!r}, not {job!r}")


def claim(board: Board, operator: str, job: str, now: float, epoch: int | None = None) -> Board:
    """free -> claimed, under ``epoch`` (the one written into the instance's label, L13; by
    default the next). Claiming again what you already hold for the same job changes nothing."""
    check_job(job)
    if board.state != FREE:
        if board.owner == operator and board.job == job:
            return board
        raise Refused(
            "L3", f"lane {board.lane} is {board.state}, held by {board.owner!r} for {board.job!r}"
        )
    return _next(
        board,
        now,
        state=CLAIMED,
        owner=operator,
        job=job,
        claimed=now,
        attempt=0,
        stockouts=0,
        started=None,
        boot=None,
        epoch=board.epoch + 1 if epoch is None else epoch,
    )


def begin_attempt(board: Board, operator: str, job: str, boot: str, now: float) -> Board:
    """claimed -> starting: the attempt count and the boot marker it expects move together."""
    _own(board, operator, job, "L2")
    if board.state != CLAIMED:
        raise Refused("L2", f"lane {board.lane} is {board.state}; a start needs it claimed")
    return _next(board, now, state=STARTING, attempt=board.attempt + 1, boot=boot)


def stockout(board: Board, now: float) -> Board:
    """starting -> claimed after a stockout: the claim is kept (L7)."""
    _expect(board, STARTING)
    return _next(board, now, state=CLAIMED, stockouts=board.stockouts + 1, boot=None)


def attempt_failed(board: Board, now: float) -> Board:
    """starting -> claimed: the start did not produce this attempt's boot (a no-op, an error)."""
    _expect(board, STARTING)
    return _next(board, now, state=CLAIMED, boot=None)


def booted(board: Board, now: float) -> Board:
    """starting -> running: this attempt's boot marker was seen."""
    _expect(board, STARTING)
    first = board.started if board.started is not None else now
    return _next(board, now, state=RUNNING, started=first)


def release(board: Board, operator: str, job: str, instance_terminated: bool, now: float) -> Board:
    """held -> free, only by the claimant and only once the instance is TERMINATED."""
    _own(board, operator, job, "L3")
    if not instance_terminated:
        raise Refused(
            "L1",
            f"instance {board.instance} is not TERMINATED: the lane is released only after the "
            "job powers the instance off (gpuops never stops it)",
        )
    return _next(
        board,
        now,
        state=FREE,
        owner=None,
        job=None,
        claimed=None,
        started=None,
        boot=None,
        attempt=0,
        stockouts=0,
    )


def _expect(board: Board, state: str) -> None:
    if board.state != state:
        raise Refused("L3", f"lane {board.lane} is {board.state}, not {state}")
