"""`gpuops logs`, `gpuops ssh` and `gpuops cost`: parsing and printing only.

What they read is decided elsewhere: a box job's log by market/logs.py (the scripts, the ssh
stream), a lane job's by lane/logs.py, the ssh argv and config stanza by providers/ssh.py
(the one builder every ssh of gpuops goes through), and the spend by market/budgets.py and
market/cost.py (M15's spend records, split by period).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from gpuops.errors import ExitCode, GpuopsError, Interrupted, Unavailable, UsageError
from gpuops.output import out
from gpuops.settings import Settings

if TYPE_CHECKING:
    from gpuops.cli.parser import Commands, Parser
    from gpuops.market.budgets import Budgets
    from gpuops.market.context import Vast
    from gpuops.market.cost import Line
    from gpuops.market.rent import Market
    from gpuops.market.rentals import Rental
    from gpuops.model import Instance

DEFAULT_LINES = 100
COMMANDS = (
    ("cost", "what was spent, per operator or per day, week or month: market and lane (M15)"),
    ("logs", "a job's log from its box (or --lane JOB's from the bucket); --follow until it ends"),
    ("ssh", "ssh to your live rental's box with its pinned host key, or print a config stanza"),
)


def add_parsers(commands: Commands, common: Parser) -> None:
    """`cost`, `logs` and `ssh` on the command line (called by cli.build_parser)."""
    help_of = dict(COMMANDS)
    cost = commands.add_parser("cost", parents=[common], help=help_of["cost"])
    cost.add_argument(
        "--by",
        choices=("operator", "day", "week", "month"),
        default="operator",
        help="one row per operator (default, all recorded spend), or per UTC day, ISO week "
        "(from Monday) or month and operator",
    )
    logs = commands.add_parser("logs", parents=[common], help=help_of["logs"])
    logs.add_argument(
        "name", metavar="NAME", nargs="?", help="a live rental, anyone's (reading changes nothing)"
    )
    logs.add_argument(
        "--lane", metavar="JOB", help="a lane job's log instead: jobs/JOB/log.txt in the bucket"
    )
    logs.add_argument(
        "--lines",
        type=int,
        default=DEFAULT_LINES,
        metavar="N",
        help=f"print the last N lines (default {DEFAULT_LINES}; at least 1)",
    )
    logs.add_argument(
        "--follow",
        action="store_true",
        help="then keep printing new lines until the job ends (exit 0) or Ctrl-C (exit 130)",
    )
    ssh = commands.add_parser("ssh", parents=[common], help=help_of["ssh"])
    ssh.add_argument("name", metavar="NAME", help="your live rental")
    ssh.add_argument(
        "--print-config",
        action="store_true",
        help="print an OpenSSH config Host stanza (gpuops-NAME) for ssh -F, scp and rsync",
    )
    ssh.add_argument(
        "remote",
        nargs="*",
        metavar="-- CMD",
        help="a command to run instead of a login shell (after --, so its options stay its own)",
    )


def run_daily(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    if args.command == "cost":
        return _cost(args, settings, operator, as_json)
    if as_json:
        raise UsageError(f"gpuops {args.command} has no --json form: it prints what ssh gives back")
    if args.command == "logs":
        return _logs(args, settings, operator)
    return _ssh(args, settings, operator)


# --- logs ---------------------------------------------------------------------------------
def _logs(args: argparse.Namespace, settings: Settings, operator: str) -> int:
    from gpuops.market.logs import check_lines

    lines = check_lines(args.lines)  # before anything is opened
    if (args.name is None) == (args.lane is None):
        raise UsageError("gpuops logs needs a rental NAME or --lane JOB (one of them)")
    write = scrubbed()
    with _signals_interrupt(args.follow):
        if args.lane is not None:
            from gpuops.lane import logs as lane_logs
            from gpuops.lane.board import check_job
            from gpuops.lane.session import open_lane

            job = check_job(args.lane)
            lane_logs.show(
                open_lane(settings, operator),
                job,
                lines=lines,
                follow=args.follow,
                write=write,
                say=_stderr,
            )
            return ExitCode.OK
        return box_logs(settings, operator, args.name, lines=lines, follow=args.follow, write=write)


def box_logs(
    settings: Settings,
    operator: str,
    name: str,
    *,
    lines: int,
    follow: bool,
    write: Callable[[bytes], None],
    poll_s: float | None = None,
) -> int:
    """A live rental's job log, from its box over ssh (any operator's: reading changes
    nothing). ``poll_s``: how often a follow looks (default timing.LOGS_FOLLOW_POLL_S)."""
    from gpuops import timing
    from gpuops.market import jobs
    from gpuops.market import logs as box
    from gpuops.market.rentals import Rentals, check_name
    from gpuops.market.session import box_shell, open_market

    store = settings.open_state()
    rental = jobs.live(Rentals(store, operator).get(check_name(name)), name)
    market = open_market(settings, operator, need_key=False)
    instance = _box_of(market, rental)
    shell = box_shell(settings)
    poll_s = timing.LOGS_FOLLOW_POLL_S if poll_s is None else poll_s
    script = box.follow_script(name, lines, poll_s) if follow else box.tail_script(name, lines)
    out = box.stream(
        shell.argv(instance, script),
        shell.client.child_env(),
        write,
        timeout_s=None if follow else timing.SSH_COMMAND_TIMEOUT_S,
    )
    ended = box.judged(name, out, shell.known_hosts(instance))
    if follow:
        _stderr(f"gpuops logs {name}: {ended or 'the job is no longer running'}")
    return ExitCode.OK


def _box_of(market: Market, rental: Rental) -> Instance:
    from gpuops.market.jobs import box_id

    instance = market.vast.show(box_id(rental))
    if instance is None:
        raise Unavailable(f"{rental.name!r}: the provider no longer shows its box")
    return instance


def scrubbed(stream: IO[bytes] | None = None) -> Callable[[bytes], None]:
    """A writer of a log's bytes to ``stream`` (default: stdout's bytes, or stdout itself when
    it has none, as under a test's redirect), each piece scrubbed as everything gpuops prints
    is (H3: a token the job printed is not repeated here); bytes that are not UTF-8 pass as
    they are (surrogateescape), and every piece is flushed at once (a follow is live)."""
    from gpuops.secrets import scrub_text

    def write(data: bytes) -> None:
        if not data:
            return
        text = scrub_text(data.decode("utf-8", "surrogateescape"))
        target = stream if stream is not None else getattr(sys.stdout, "buffer", None)
        if target is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        sys.stdout.flush()  # what was printed as text before goes first
        target.write(text.encode("utf-8", "surrogateescape"))
        target.flush()

    return write


@contextmanager
def _signals_interrupt(follow: bool) -> Iterator[None]:
    """While a follow runs: Ctrl-C, SIGTERM and SIGHUP stop it (the ssh child's process group
    killed and reaped on the way out, never left to follow alone), exit 128 + the signal.
    SIGINT is handled here too, not left to Python's default: a process started where SIGINT
    is ignored (a shell's background job) has no KeyboardInterrupt, and would follow on."""
    if not follow:
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    before = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# --- ssh ----------------------------------------------------------------------------------
def _ssh(args: argparse.Namespace, settings: Settings, operator: str) -> int:
    from gpuops.market import jobs
    from gpuops.market.rentals import Rentals, check_name
    from gpuops.market.session import box_shell, open_market
    from gpuops.providers.ssh import config_stanza

    remote = list(args.remote)
    if args.print_config and remote:
        raise UsageError("give --print-config or a command after --, not both")
    store = settings.open_state()
    rental = jobs.owned_live(
        Rentals(store, operator).get(check_name(args.name)), args.name, operator
    )
    market = open_market(settings, operator, need_key=False)
    instance = _box_of(market, rental)
    endpoint = jobs.endpoint_of(instance)
    if endpoint is None:
        raise Unavailable(f"{args.name!r}: instance {instance.instance_id} has no ssh address yet")
    shell = box_shell(settings)
    known_hosts = shell.known_hosts(instance)
    if args.print_config:
        print(
            f"# gpuops ssh {args.name} --print-config: rental {args.name}, instance "
            f"{instance.instance_id}, until the box is destroyed\n"
            f"# the host key is pinned on first contact in {known_hosts}\n"
            + config_stanza(
                f"gpuops-{args.name}",
                endpoint,
                identity_file=shell.identity_file,
                known_hosts=known_hosts,
            ),
            end="",
        )
        return ExitCode.OK
    command = None if not remote else remote[0] if len(remote) == 1 else shlex.join(remote)
    argv = shell.client.argv(
        endpoint,
        command,
        identity_file=shell.identity_file,
        known_hosts=known_hosts,
        person=True,
    )
    return run_ssh(argv, shell.client.child_env())


def run_ssh(argv: list[str], environ: dict[str, str]) -> int:
    """Run ssh on this terminal (stdin, stdout and stderr are ours) and return its exit code
    (128 + the signal that ended it). Ctrl-C is ssh's to act on: gpuops waits for it."""
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(argv, env=environ)
    except FileNotFoundError as exc:
        raise UsageError(f"the ssh program {argv[0]!r} was not found (set GPUOPS_SSH)") from exc
    while True:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            continue  # the terminal sent it to ssh too; ssh decides, its exit code is ours
        return ExitCode.signalled(-code) if code < 0 else code  # ssh's own, or its signal


# --- cost ---------------------------------------------------------------------------------
def _cost(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    from gpuops.market.budgets import Budgets
    from gpuops.market.session import open_market

    market = open_market(settings, operator, need_key=False)
    if not isinstance(market.budget, Budgets):  # open_market gives every market its Budgets
        raise TypeError(f"the market's budget is {market.budget!r}, not the store's Budgets")
    view = cost_report(market.budget, market.vast, args.by, say=_stderr)
    out(as_json, view, cost_text(view))
    return ExitCode.OK


def cost_report(
    budgets: Budgets, vast: Vast, by: str, *, say: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """What `cost` shows: the spend records refreshed from the provider's instance list first
    (as `budget` does; a list that fails is said, and the stored records are shown), then
    split by ``by`` (market/cost.py)."""
    from gpuops.market import cost

    try:
        instances = vast.list_instances()
    except GpuopsError as exc:  # the store's records are still worth showing, with a warning
        say(f"gpuops: spend not refreshed from the provider: {exc}")
        instances = None
    budgets.observe(instances)
    now = budgets.snapshot(limits=False)
    return cost_view(cost.lines(now.spends, by, now.now_s), by, now.now_s)


def cost_view(rows: list[Line], by: str, now_s: float) -> dict[str, Any]:
    """The report as plain values (`--json`): its rows, their total, when it was made; every
    time in epoch seconds, as every command's --json has them (docs/cli.md)."""
    from gpuops.market import cost

    def usd(line: Line) -> dict[str, float]:
        return {
            "market_usd": round(line.market_usd, 4),
            "lane_usd": round(line.lane_usd, 4),
            "total_usd": round(line.total_usd, 4),
        }

    shown = []
    for row in rows:
        item: dict[str, Any] = {"operator": row.operator, **usd(row)}
        if row.start_s is not None:
            item["period"] = cost.label(by, row.start_s)
            item["period_start"] = row.start_s
            item["period_end"] = row.end_s
        shown.append(item)
    return {"by": by, "as_of": now_s, "rows": shown, "total": usd(cost.total(rows))}


def cost_text(view: dict[str, Any]) -> str:
    by = view["by"]
    period = by.upper() if by != "operator" else None
    head = f"{period:<11} " if period else ""
    lines = [f"{head}{'OPERATOR':<24} {'MARKET':>10} {'LANE':>10} {'TOTAL':>10}"]
    for row in view["rows"]:
        when = f"{row['period']:<11} " if period else ""
        who = row["operator"] if row["operator"] is not None else "(no owner)"
        lines.append(
            f"{when}{who:<24} ${row['market_usd']:>9.2f} ${row['lane_usd']:>9.2f} "
            f"${row['total_usd']:>9.2f}"
        )
    total = view["total"]
    lines.append(
        f"{'':<11} "
        * bool(period)
        + f"{'total':<24} ${total['market_usd']:>9.2f} ${total['lane_usd']:>9.2f} "
        f"${total['total_usd']:>9.2f}"
    )
    lines.append(
        f"as of {view['as_of']}; days, weeks (from Monday) and months are UTC; spend from the "
        "provider's start_date and dph_total, the lane's at its configured rate"
    )
    return "\n".join(lines)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
