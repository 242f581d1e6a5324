"""`gpuops lane board|claim|script|install|start|watch|release|repair`: parsing and printing only.

There is no stop and no delete command (L1): the lane's jobs power themselves off.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.errors import ExitCode
from gpuops.output import out, print_json
from gpuops.settings import Settings

if TYPE_CHECKING:
    from typing import Any

    from gpuops.cli.parser import Commands, Parser
    from gpuops.lane.board import Board
    from gpuops.lane.cost import Released, Watched
    from gpuops.lane.stored import StoredLane

COMMANDS = ("board", "claim", "script", "install", "start", "watch", "release", "repair")


def add_lane_parser(commands: Commands, common: Parser) -> None:
    lane = commands.add_parser(
        "lane", parents=[common], help="the shared single-GPU GCE lane (no stop, no delete)"
    )
    sub = lane.add_subparsers(dest="lane_command", metavar="COMMAND", required=True)
    board = sub.add_parser("board", parents=[common], help="the state line, STALE, cost, log")
    board.add_argument("--usd-per-hour", type=float, default=None, help="default 0.70")
    board.add_argument("--disk-usd-per-day", type=float, default=None, help="default 0.83")
    board.add_argument(
        "--live",
        action="store_true",
        help="also ask GCE and the bucket: instance state, last log line, billing alarm",
    )
    board.add_argument(
        "--history",
        action="store_true",
        help="the board's past transitions and each job's outcome and cost, from the store "
        "(without it, the board's last few lines)",
    )
    board.add_argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="with --history: the last N entries (default 20)",
    )
    sub.add_parser(
        "repair",
        parents=[common],
        help="rebuild a missing, corrupt or rewound board's state line from the evidence (L12)",
    )
    for name, text in (
        ("claim", "claim the lane for a job (L3)"),
        ("script", "print a startup script that keeps the contract (L5, L6)"),
        ("install", "lint a script and install it for your claimed job (L4, L10)"),
        ("start", "verify TERMINATED, start, confirm this attempt's boot (L2, L7, L11)"),
        ("watch", "report the job's stage; a timeout exits 5, not failed (L9)"),
        ("release", "hand the lane back: claimant only, instance TERMINATED"),
    ):
        p = sub.add_parser(name, parents=[common], help=text)
        p.add_argument("--job", required=True, metavar="NAME", help="the lane job's name")
        if name == "script":
            p.add_argument(
                "--command",
                dest="job_command",
                default='python3 "$WORK/job.py"',
                help='the job\'s command on the VM (default: python3 "$WORK/job.py")',
            )
            p.add_argument(
                "--input",
                action="append",
                default=[],
                metavar="NAME",
                help="a staged input the script fetches from the bucket's inputs/ (repeatable)",
            )
            p.add_argument(
                "--import",
                dest="imports",
                action="append",
                default=[],
                metavar="MODULE",
                help="a Python module the preflight gate imports before work (default torch)",
            )
            p.add_argument(
                "--min-free-gb",
                type=int,
                default=20,
                metavar="G",
                help="the disk gate: free GB the VM must have before work (default 20)",
            )
            p.add_argument(
                "--max-hours",
                type=float,
                default=None,
                help="declare the job's length: `lane install` sets GCE's run ceiling from it",
            )
        if name == "install":
            p.add_argument("file", metavar="FILE", type=Path, help="the startup script to install")
            p.add_argument(
                "--max-hours",
                type=float,
                default=None,
                help="GCE stops the instance after this long running (scheduling."
                "maxRunDuration); default: the job's declared length (# gpuops: max-hours H "
                "in the script), else 6",
            )
        if name == "start":
            p.add_argument(
                "--max-attempts",
                type=int,
                default=20,
                metavar="N",
                help="starts tried through stockouts, the claim held (default 20)",
            )
        if name in ("watch", "release"):
            p.add_argument(
                "--usd-per-hour", type=float, default=None, help="the VM's price (default 0.70)"
            )
            p.add_argument(
                "--disk-usd-per-day",
                type=float,
                default=None,
                help="the disk's price per day (default 0.83)",
            )
        if name == "watch":
            p.add_argument(
                "--timeout",
                type=float,
                default=None,
                metavar="SECONDS",
                help="stop watching after this long (exit 5, the job runs on)",
            )


def run_lane(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    from gpuops.errors import UsageError

    command = args.lane_command
    if command == "script":
        from gpuops.lane import script

        bucket = settings.lane_bucket() or "BUCKET"
        print(
            script.render(
                args.job,
                bucket,
                args.job_command,
                imports=tuple(args.imports or ["torch"]),
                inputs=tuple(args.input),
                min_free_gb=args.min_free_gb,
                max_hours=args.max_hours,
            ),
            end="",
        )
        return ExitCode.OK
    from gpuops.lane import session

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    options: dict[str, Any] = {
        "usd_per_hour": getattr(args, "usd_per_hour", None),
        "disk_usd_per_day": getattr(args, "disk_usd_per_day", None),
        "progress": progress,
    }
    if command == "board" and (args.history or args.limit is not None):
        return _history(session.open_board(settings, operator, **options), args, as_json)
    if command == "board" and not args.live:  # the store alone: no runner is built (session.py)
        return _board(session.open_board(settings, operator, **options).view(), as_json)
    lane = session.open_lane(settings, operator, **options)
    if command == "board":
        return _board(lane.view(live=True), as_json)
    if command == "repair":
        board, signs = lane.repair()
        from gpuops.lane.board import state_line

        if as_json:
            print_json({"state_line": state_line(board), "evidence": signs})
        else:
            for sign in signs:
                print(f"evidence: {sign}")
            if not signs:
                print("evidence: none (the state line was readable, or nothing says it is held)")
            print(state_line(board))
        return ExitCode.OK
    if command == "claim":
        done = lane.claim(args.job)
        return _board_out(as_json, done, f"lane {done.lane} claimed by {done.owner} for {done.job}")
    if command == "install":
        try:
            text = args.file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the script {args.file}: {exc}") from exc
        if args.max_hours is not None and not args.max_hours > 0:
            raise UsageError("--max-hours must be positive")
        lane.install(args.job, text, max_hours=args.max_hours)
        out(as_json, {"job": args.job, "installed": True}, f"installed the script for {args.job}")
        return ExitCode.OK
    if command == "start":
        if args.max_attempts < 1:
            raise UsageError("--max-attempts must be at least 1")
        done = lane.start(args.job, max_attempts=args.max_attempts)
        return _board_out(as_json, done, f"{args.job} is running (attempt {done.attempt})")
    if command == "watch":
        from gpuops import timing

        timeout_s = timing.LANE_WATCH_TIMEOUT_S if args.timeout is None else args.timeout
        return _watched_out(as_json, args.job, lane.watch_job(args.job, timeout_s=timeout_s))
    released = lane.release_job(args.job)
    return _released_out(as_json, released)


DEFAULT_HISTORY = 20


def _history(lane: StoredLane, args: argparse.Namespace, as_json: bool) -> int:
    """`lane board --history`: the store's history entries, oldest first; a corrupt entry is
    named on stderr and skipped, never in the way of the rest."""
    import dataclasses

    from gpuops.errors import UsageError
    from gpuops.lane import history

    if not args.history:
        raise UsageError("--limit goes with --history")
    if args.live:
        raise UsageError("--history reads the store alone: leave out --live")
    limit = DEFAULT_HISTORY if args.limit is None else args.limit
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, not {limit}")
    page = lane.history(limit)
    for key, reason in page.corrupt:
        print(f"history entry {key} is unreadable, skipped: {reason}", file=sys.stderr)
    if as_json:
        print_json(
            {
                "lane": lane.config.instance,
                "total": page.total,
                "entries": [{"key": key, **dataclasses.asdict(e)} for key, e in page.entries],
                "corrupt": [{"key": key, "reason": reason} for key, reason in page.corrupt],
                "missing_revisions": list(page.missing),
            }
        )
        return ExitCode.OK
    print(
        f"lane {lane.config.instance}: the last {page.window} of {page.total} history entries, "
        "oldest first (times UTC, each writer's clock)"
        if page.total
        else f"lane {lane.config.instance}: no history entries yet"
    )
    for key, entry in page.entries:
        print(f"  {history.line(key, entry)}")
    if page.missing:
        print(
            "no entry for revision(s) "
            + ", ".join(str(r) for r in page.missing)
            + ": a write that stopped between the board and its history, or a board written "
            "by hand"
        )
    if any(e.cost is not None for _, e in page.entries):
        from gpuops.lane.cost import PRICE_NOTE

        print(f"costs are {PRICE_NOTE}")
    return ExitCode.OK


def _board(view: dict[str, Any], as_json: bool) -> int:
    """`lane board`: the view printed; a billing alarm on stderr too, and its exit code."""
    if as_json:
        print_json(view)
    else:
        _print_board(view)
    if view["billing_alarm"]:
        print(view["billing_alarm"], file=sys.stderr)
        from gpuops.lane import decide as d

        return d.billing_exit(d.Verdict(view["job_outcome"]))
    return ExitCode.OK


def _watched_out(as_json: bool, job: str, watched: Watched) -> int:
    """The watched job's outcome, and its cost so far (the disk bills until the release)."""
    verdict, cost = watched.verdict, watched.cost
    out(
        as_json,
        {"job": job, "outcome": verdict.value, "cost": None if cost is None else cost.to_json()},
        f"{job}: {verdict.value}" + ("" if cost is None else f"; cost so far {cost.explained()}"),
    )
    return ExitCode.OK


def _released_out(as_json: bool, released: Released) -> int:
    from gpuops.lane.board import state_line
    from gpuops.lane.cost import PRICE_NOTE

    done, cost = released.board, released.cost
    end = {
        "job": released.job,
        "outcome": released.outcome,
        "attempts": released.attempts,
        "stockouts": released.stockouts,
        "waiting_s": released.waiting_s,
        **cost.to_json(),
    }
    if as_json:
        print_json(
            {
                "state_line": state_line(done),
                "state": done.state,
                "job": done.job,
                "attempt": done.attempt,
                "stockouts": done.stockouts,
                "job_end": end,
            }
        )
        return ExitCode.OK
    print(f"lane {done.lane} released; it is {done.state}")
    print(
        f"job {released.job}: {released.outcome} after {released.attempts} attempt(s), "
        f"{released.stockouts} stockout(s); cost {cost.explained()} {PRICE_NOTE}"
    )
    return ExitCode.OK


def _board_out(as_json: bool, board: Board, line: str) -> int:
    from gpuops.lane.board import state_line

    out(
        as_json,
        {
            "state_line": state_line(board),
            "state": board.state,
            "job": board.job,
            "attempt": board.attempt,
            "stockouts": board.stockouts,
        },
        line,
    )
    return ExitCode.OK


def _print_board(view: dict[str, Any]) -> None:
    print(view["state_line"])
    if view["billing_alarm"]:
        print(view["billing_alarm"])
    if view["stale"]:
        print(
            f"STALE: held {view['held_s'] / 3600:.1f} h without a successful start; a human "
            f"should check: instance {view['status'] or 'not asked (--live)'}, attempt {view['attempt']} "
            f"({view['stockouts']} stockouts), last log line: {view['last_log_line'] or '-'} (L8)"
        )
    if view["status"] is None:
        print(f"cost so far ${view['cost_usd']:.2f} (add --live for the instance and its log)")
    else:
        print(
            f"instance {view['status']}; cost so far ${view['cost_usd']:.2f}; "
            f"last log line: {view['last_log_line'] or '-'}"
        )
    earlier = view["history_lines"] - len(view["history"])
    if earlier > 0:
        print(f"  ({earlier} earlier line(s): gpuops lane board --history)")
    for line in view["history"]:
        print(f"  {line}")
