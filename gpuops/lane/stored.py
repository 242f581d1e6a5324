"""The lane as the shared store alone shows it: the board file and its codec, the lane's
configuration, and the reads of `lane board` (without --live) and `lane board --history`.

``gpuops.lane.runner.Lane`` is this with the provider behind it (the instance, the bucket, the
event log's writes, the script's metadata). `lane board` without --live builds this one alone
(lane/session.py's ``open_board``), so it loads neither the runner nor the script linter nor
any provider: tests/test_cli_startup.py pins it. A missing board is the one case a store-only
read cannot answer (L12: free only while the instance says nobody holds it): ``fresh``, the
full Lane's, is asked then, and the free board it proves is written (create-if-absent), so the
next read is the store's alone again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuops.clock import SYSTEM, Clock
from gpuops.errors import CorruptState, Refused, StoreUnavailable
from gpuops.lane import board as b
from gpuops.lane import decide as d
from gpuops.lane.journal import CODEC as JOURNAL
from gpuops.lane.journal import journal_key
from gpuops.store.base import Store
from gpuops.store.records import Records

if TYPE_CHECKING:  # imported where used: a board read raises no alarm on a fresh claim
    from gpuops.alarms import Alarms
    from gpuops.lane import history as h

# The prose lines under the state line that `lane board` shows, the last ones: the board keeps
# every line it was written with, and `lane board --history` is the whole record.
BOARD_HISTORY_LINES = 5


@dataclass(frozen=True)
class BoardFile:
    """The lane board as stored: the state line and the history under it."""

    board: b.Board
    history: tuple[str, ...]


class BoardCodec:
    """The board file's text (board.py's ``render``/``parse``) as a record for ``Records``."""

    what = "lane board"

    def encode(self, value: BoardFile) -> bytes:
        return b.render(value.board, list(value.history)).encode("utf-8")

    def decode(self, key: str, data: bytes) -> BoardFile:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptState(key, "not UTF-8") from None
        board, history = b.parse(text, key)
        return BoardFile(board, tuple(history))


@dataclass(frozen=True)
class LaneConfig:
    instance: str
    bucket: str
    usd_per_hour: float = d.RUNNING_USD_PER_HOUR
    disk_usd_per_day: float = d.DISK_USD_PER_DAY


class StoredLane:
    """The board, its claim journal and its history, read from ``store``; STALE (L8) and the
    cost from the board's stamps at ``config``'s prices. ``fresh`` gives the board of a lane
    that has none (the evidence decides, L12); ``alarms`` hears a stale claim (O1)."""

    def __init__(
        self,
        store: Store,
        config: LaneConfig,
        *,
        clock: Clock = SYSTEM,
        alarms: Alarms,
        fresh: Callable[[], b.Board],
        operator: str,
    ) -> None:
        self.store, self.config, self.alarms = store, config, alarms
        self.operator = operator
        self.clock = clock  # board stamps and waits: wall time, and its sleep
        self.fresh = fresh
        self.key = f"lane/{config.instance}/board"
        self.journal_key = journal_key(config.instance)
        self.boards = Records(store, "lane/", BoardCodec())

    def read(self) -> tuple[b.Board, list[str], str | None]:
        """The board. Without a readable state line the lane is unknown, never free (L12):
        a corrupt board is refused, as is one older than its claim journal (``_rewound``),
        and a missing one is a free lane only while nothing (the
        instance, its metadata, a recent lane event) says somebody holds it (``fresh``)."""
        got, problem = self._raw()
        if problem is not None:
            raise self._unknown(problem)
        if got is None:
            return self._keep_fresh(self.fresh())
        return got

    def _keep_fresh(self, board: b.Board) -> tuple[b.Board, list[str], str | None]:
        """Write the free board the evidence has just proved (``fresh``), create-if-absent, so
        that every later read is the store's alone, with no provider call. It never writes over
        a board: one written meanwhile (a claim's) is read instead. A store that refuses the
        write (a read-only key) leaves the board unwritten and the answer the same.

        Safe against a claim racing it: a claim writes its epoch into the instance's label
        before its board (L13), so a free board written from evidence read before that label
        can take nothing; the claim's own compare-and-swap goes on over it."""
        line = (
            f"{b.stamp(self.clock.wall())} {self.operator}: no board was stored, and neither the "
            "instance nor the claim journal showed a claim (L12): the lane is free"
        )
        try:
            written = self.boards.create(self._name, BoardFile(board, (line,)))
        except StoreUnavailable:
            return board, [], None
        if written:
            return board, [line], None
        got, problem = self._raw()
        if problem is not None:
            raise self._unknown(problem)
        return (board, [], None) if got is None else got

    def _unknown(self, problem: str) -> Refused:
        return Refused(
            "L12",
            f"{problem}; the lane is unknown, not free, and the file is left as it is: "
            "`gpuops lane repair` rebuilds the state line from the instance and the claim "
            "journal and keeps a copy of this file",
        )

    def _raw(self) -> tuple[tuple[b.Board, list[str], str] | None, str | None]:
        """(the board, its history, its version) or None when absent; or the problem."""
        try:
            got, version = self.boards.read(self._name)
        except CorruptState as exc:
            return None, f"lane board {self.key} has no readable state line ({exc.reason})"
        if got is None or version is None:
            return None, None
        rewound = self._rewound(got.board)
        if rewound is not None:
            return None, rewound
        return (got.board, list(got.history), version), None

    def _rewound(self, board: b.Board) -> str | None:
        """Why a board that parses is still not the lane's state: its revision is older than
        the claim journal's, the board's last write (an old copy put back, a hand's edit), so
        its counts and its state may be a claim's past; None when it is not behind (L12)."""
        try:
            found = self.store.get(self.journal_key)
            entry = None if found is None else JOURNAL.decode(found.key, found.data)
        except CorruptState:
            return None  # an unreadable journal says nothing of the board's age
        if entry is None or entry.revision <= board.revision:
            return None
        return (
            f"lane board {self.key} is revision {board.revision}, older than its claim "
            f"journal's revision {entry.revision} (an old copy put back, or edited by hand)"
        )

    @property
    def _name(self) -> str:
        return self.key.removeprefix("lane/")

    def history(self, limit: int) -> h.Page:
        """The lane's last ``limit`` history entries, from the store alone (the board is not
        read: a lost board's history stays readable)."""
        from gpuops.lane import history as h

        return h.read(self.store, self.config.instance, limit)

    def cost(self, running_s: float, held_s: float) -> float:
        return d.cost_usd(
            running_s,
            held_s,
            usd_per_hour=self.config.usd_per_hour,
            disk_usd_per_day=self.config.disk_usd_per_day,
        )

    @staticmethod
    def _spent(board: b.Board, ended_at: float | None, now: float) -> tuple[float, float]:
        """(running_s, held_s) of ``board``'s job by ``now``: running from the board's
        ``started`` until the job ended (``ended_at``, its status file's last write) or
        ``now``; held from ``claimed`` until ``now``."""
        until = now if ended_at is None else min(now, ended_at)
        running_s = 0.0 if board.started is None else max(0.0, until - board.started)
        held_s = 0.0 if board.claimed is None else max(0.0, now - board.claimed)
        return running_s, held_s

    def view(self) -> dict[str, Any]:
        """The board for humans and --json, from the store alone (no provider call, no Google
        SDK import): the state line, STALE (L8), cost, the last ``BOARD_HISTORY_LINES`` prose
        lines under the state line (and how many it holds). The instance, the last log line
        and the billing alarm are None: runner.py's ``Lane.view(live=True)`` asks for them."""
        board, history, _ = self.read()
        now = self.clock.wall()
        view = self._stored_view(board, history, now)
        self._stale_alarm(board, view)
        return view

    def _stored_view(self, board: b.Board, history: list[str], now: float) -> dict[str, Any]:
        running_s, held_s = self._spent(board, None, now)
        return {
            "state_line": b.state_line(board),
            "lane": board.lane,
            "state": board.state,
            "owner": board.owner,
            "job": board.job,
            "attempt": board.attempt,
            "stockouts": board.stockouts,
            "status": None,
            "stale": d.is_stale(board, now),
            "held_s": held_s,
            "cost_usd": self.cost(running_s, held_s),
            "last_log_line": None,
            "billing_alarm": None,
            "job_outcome": None,
            "history": history[-BOARD_HISTORY_LINES:],
            "history_lines": len(history),
        }

    def _stale_alarm(self, board: b.Board, view: dict[str, Any]) -> None:
        """L8/O1: a claim busy for hours without a successful start is sent to a person, once
        per claim, with the instance state, the retry state and the last log line."""
        if not view["stale"] or board.claimed is None:
            return
        detail = (
            f"instance {view['status'] or 'not read (board without --live)'}, "
            f"{board.attempt} start attempt(s), {board.stockouts} stockout(s), "
            f"last log line: {view['last_log_line']}"
        )
        owner, job = board.owner or "?", board.job or "?"
        from gpuops.alarms import lane_stale_claim

        self.alarms.raise_alarm(lane_stale_claim(board.lane, owner, job, board.claimed, detail))
