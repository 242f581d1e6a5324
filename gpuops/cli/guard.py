"""Printing for `guard`, `run` and `watch` (M5, M7, M10); the decisions live in gpuops/market."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpuops.clock import Clock, WithSleep
from gpuops.errors import ExitCode, UsageError
from gpuops.output import out
from gpuops.settings import Settings

if TYPE_CHECKING:
    from typing import Any

    from gpuops.alarms import Alarms
    from gpuops.cli.parser import Commands, Parser
    from gpuops.market.jobs import BoxShell
    from gpuops.market.rent import Market
    from gpuops.market.rentals import Rental
    from gpuops.market.watchdog import Status


def run_guard(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    if args.command == "guard":
        return _guard(args, settings, operator, as_json)
    from gpuops.market import jobs
    from gpuops.market.session import box_shell, open_market

    market = open_market(settings, operator, need_key=False)
    rental = jobs.owned_live(market.rentals.get(args.name), args.name, operator)
    shell = box_shell(settings)
    if args.command == "run":
        return _run(market, rental, shell, args, as_json)
    from gpuops.alarms import open_alarms

    alarms = open_alarms(
        settings, market.ledger.store, market.events, operator=operator, clock=market.clock
    )
    return _watch(market, rental, shell, args, as_json, alarms=alarms)


def _guard(args: argparse.Namespace, settings: Settings, operator: str, as_json: bool) -> int:
    if args.print_systemd_unit:
        from gpuops.market.systemd import service_unit, systemd_unit

        unit = service_unit if args.all else systemd_unit
        print(unit(settings.state_url, operator), end="")
        return ExitCode.OK
    if args.all:
        return _guard_all(args, settings, operator)
    if args.name is None:
        raise UsageError("gpuops guard needs the rental NAME")
    if args.drill:
        from gpuops.analysis.learned import ranker
        from gpuops.market.drill import drill

        result = drill(
            settings, operator, args.name, args.gpu, args.hours, say=_stderr, rank=ranker
        )
        out(as_json, result, [result["summary"]])
        return ExitCode.OK if result["passed"] else ExitCode.ERROR
    from gpuops.errors import NotOwned
    from gpuops.market.session import box_shell, open_market

    market = open_market(settings, operator, need_key=False)
    rental = market.rentals.get(args.name)
    if rental is None:
        raise UsageError(f"no rental named {args.name!r}; rent it first (gpuops rent ...)")
    if rental.owner != operator:
        raise NotOwned(args.name, rental.owner, operator)
    deadline = _deadline(args, market.clock.wall())
    if deadline is not None:
        _within_contract(rental, deadline)
        _move_box_ceiling(market, rental, deadline, box_shell(settings))
        market.rentals.update(args.name, deadline_at=deadline, deadline_host=market.host)
    if args.foreground:
        from gpuops.alarms import open_alarms
        from gpuops.market import guard
        from gpuops.market.results import open_results

        alarms = open_alarms(
            settings,
            market.ledger.store,
            market.events,
            operator=operator,
            clock=market.clock,
            say=_stderr,
        )
        guardian = guard.Guardian(
            market,
            args.name,
            shell=box_shell(settings),
            results=open_results(settings.results_url, settings.s3_endpoint),
            alarms=alarms,
        )
        guard.install_signal_handlers(guardian)
        return guardian.run()
    from gpuops.market.spawn import ensure_guardian

    # M5/M7: one live guardian is enough (this incarnation's lease and pid file, M16); a
    # crash-looping caller never multiplies them, and --standby starts a backup all the same
    started = ensure_guardian(
        rental, settings, market.ledger.store, market.clock.wall(), market.host, operator,
        standby=args.standby,
    )  # fmt: skip
    if "pid" not in started:
        moved = "; deadline moved" if deadline is not None else ""
        out(
            as_json,
            {
                "name": args.name,
                "pid": None,
                "guardian": started["holder"],
                "deadline_at": deadline,
            },
            [f"{args.name}: {started['detail']}{moved}"],
        )
        return ExitCode.OK
    pid, log = started["pid"], started["log"]
    out(
        as_json,
        {"name": args.name, "pid": pid, "log": log, "deadline_at": deadline},
        [f"{args.name}: guardian pid {pid} is running detached; log {log}"],
    )
    return ExitCode.OK


def _within_contract(rental: Rental, deadline: float) -> None:
    """A deadline past the box's contract end (less the margin) is refused, naming that end:
    Vast stops the box there, before its guardian could copy and destroy it (M13)."""
    from gpuops import timing
    from gpuops.errors import Refused
    from gpuops.market.rentals import past_contract
    from gpuops.timestamps import utc_iso

    end = rental.contract_end_at
    if end is not None and past_contract(rental, deadline):
        raise Refused(
            "M13",
            f"{rental.name}: the deadline {utc_iso(deadline)} is past its box's contract end "
            f"{utc_iso(end)} less {timing.CONTRACT_END_MARGIN_S / 3600:g} h "
            "(Vast stops the box at that end); the deadline stays "
            f"{utc_iso(rental.deadline_at) if rental.deadline_at else 'as it was'}",
        )


def _move_box_ceiling(market: Market, rental: Rental, deadline: float, shell: BoxShell) -> None:
    """M14: a deadline moved later moves the box's own ceiling first, over ssh, or it is
    refused and stays where it was; the box would end itself before the new deadline. A deadline
    moved earlier leaves the box's ceiling later than it must be: the guardian's comes first."""
    from gpuops.errors import Refused
    from gpuops.market.ceiling import ceiling_at, rearm_script
    from gpuops.timestamps import utc_iso

    if rental.instance_id is None or rental.deadline_at is None:
        return  # no box yet: the race arms its box with the deadline it reads then
    if ceiling_at(deadline) <= ceiling_at(rental.deadline_at):
        return
    instance = market.vast.show(rental.instance_id)
    if instance is None:
        return  # its box is gone: nothing bills, nothing to move
    out = shell.run(instance, rearm_script(deadline))
    if out.exit_code != 0:
        raise Refused(
            "M14",
            f"{rental.name}: could not move the box's own ceiling (ssh exit {out.exit_code}: "
            f"{(out.stderr or out.stdout).strip()[:200]}); the deadline stays "
            f"{utc_iso(rental.deadline_at)}",
        )


def _guard_all(args: argparse.Namespace, settings: Settings, operator: str) -> int:
    """`gpuops guard --all`: one process guards every rental in the state, each under its own
    lease, acting as its owner (market/guard_all.py); it runs until a signal stops it."""
    given = [
        flag
        for flag, value in [
            ("NAME", args.name),
            ("--hours", args.hours),
            ("--deadline", args.deadline),
            ("--drill", args.drill or None),
            ("--standby", args.standby or None),
        ]
        if value is not None
    ]
    if given:
        raise UsageError(f"guard --all guards every rental as it stands: drop {', '.join(given)}")
    import threading

    from gpuops.alarms import open_alarms
    from gpuops.events import EventLog
    from gpuops.market import guard, guard_all
    from gpuops.market.leases import Leases
    from gpuops.market.results import open_results
    from gpuops.market.session import box_shell, open_market

    store = settings.open_state()
    shell = box_shell(settings)
    results = open_results(settings.results_url, settings.s3_endpoint)
    clock = settings.clock()  # the service's own: each guardian's is its owner's market's
    owners: dict[str, tuple[Market, Alarms]] = {}
    lock = threading.Lock()

    def guardian_for(rental: Rental, leases: Leases) -> guard.Guardian:
        with lock:  # one market per owner: its guardians act as that owner (M3)
            if rental.owner not in owners:
                market = open_market(settings, rental.owner, need_key=False)
                owners[rental.owner] = market, open_alarms(
                    settings, market.ledger.store, market.events, operator=rental.owner,
                    clock=market.clock, say=_stderr,
                )  # fmt: skip
            market, alarms = owners[rental.owner]
        return guard.Guardian(
            market,
            rental.name,
            shell=shell,
            results=results,
            alarms=alarms,
            leases=leases,
        )

    service = guard_all.Service(
        store,
        EventLog(settings.events_path, operator, clock=clock),
        guardian_for,
        clock=clock,
        say=_stderr,
        where=settings.state_url,
    )
    guard_all.install_signal_handlers(service)
    service.run()


def _deadline(args: argparse.Namespace, now: float) -> float | None:
    if args.hours is not None and args.deadline is not None:
        raise UsageError("give --hours or --deadline, not both")
    if args.hours is not None:
        if not args.hours > 0:
            raise UsageError(f"--hours must be positive, not {args.hours}")
        return float(now + args.hours * 3600.0)
    if args.deadline is not None:
        try:
            parsed = datetime.fromisoformat(args.deadline)
        except ValueError:
            raise UsageError(f"--deadline {args.deadline!r} is not an ISO-8601 time") from None
        if parsed.tzinfo is None:
            raise UsageError(f"--deadline {args.deadline!r} needs a time zone, e.g. ...Z or +00:00")
        return parsed.astimezone(UTC).timestamp()
    return None


def _run(
    market: Market, rental: Rental, shell: BoxShell, args: argparse.Namespace, as_json: bool
) -> int:
    from gpuops import event_ops as ops
    from gpuops.errors import Unavailable
    from gpuops.event_base import write
    from gpuops.market import jobs
    from gpuops.market import watchdog as w

    instance = market.vast.show(jobs.box_id(rental))
    if instance is None:
        raise Unavailable(f"{rental.name!r}: the provider no longer shows its box")
    argv = list(args.job)
    if argv and argv[0] == "--":
        argv = argv[1:]
    job = jobs.start(rental, instance, shell, argv, args.results, clock=market.clock)
    jobs.Jobs(market.ledger.store).put(job)
    write(
        market.events,
        ops.JobStarted(name=job.name, instance_id=job.instance_id, results=job.results),
    )
    where = f"~/{w.JOBS_DIR}/{job.name}"
    out(
        as_json,
        {**job.__dict__, "session": w.session_name(job.name), "log": f"{where}/log"},
        [
            f"{job.name}: started in tmux session {w.session_name(job.name)} on instance "
            f"{job.instance_id}; log {where}/log, results {where}/{job.results}"
        ],
    )
    return ExitCode.OK


def _watch(
    market: Market,
    rental: Rental,
    shell: BoxShell,
    args: argparse.Namespace,
    as_json: bool,
    *,
    say: Callable[[str], None] | None = None,
    clock: Clock | None = None,
    alarms: Alarms | None = None,
) -> int:
    """`gpuops watch`: each change of state on stdout (or one JSON object at the end); while
    it waits (on ``clock``; None: the market's), a line on stderr at least every
    timing.PROGRESS_EVERY_S. A job judged stalled or dead is an alarm (``alarms``,
    gpuops/alarms.py: once per job and judgment, O1)."""
    from gpuops import timing
    from gpuops.errors import Unavailable
    from gpuops.market import jobs
    from gpuops.market import watchdog as w

    clock = market.clock if clock is None else clock

    job = jobs.Jobs(market.ledger.store).get(rental.name)
    started = job is not None and job.instance_id == rental.instance_id

    def look() -> w.Status:
        try:
            instance = market.vast.show(jobs.box_id(rental))
        except Unavailable as exc:
            return w.unreachable(str(exc))
        return jobs.observe(rental.name, instance, shell, started=started)

    def report(status: w.Status) -> None:
        from gpuops import event_ops as ops
        from gpuops.event_base import write

        write(
            market.events,
            ops.JobStatus(
                name=rental.name,
                state=status.state.value,
                detail=status.detail,
                exit_code=status.exit_code,
            ),
        )
        if status.state is w.JobState.STALLED:
            print(f"gpuops: ALERT {rental.name}: {status.detail}", file=sys.stderr, flush=True)
        if alarms is not None and job is not None and started:
            from gpuops.alarms import job_judged

            alarm = job_judged(
                rental.name, job.instance_id, job.started_at, status.state.value, status.detail
            )
            if alarm is not None:
                alarms.raise_alarm(alarm)
        seen.append(shown(status))
        if not as_json:
            print(f"{rental.name}: {shown(status)}: {status.detail}", flush=True)
            print(f"{rental.name}: results sync {synced()['sync']}", flush=True)

    def synced() -> dict[str, Any]:
        """The last results sync as the guardian recorded it on the rental (read afresh)."""
        from gpuops.listing import sync_of

        now = market.clock.wall()
        return sync_of(market.rentals.get(rental.name) or rental, now)

    seen: list[str] = []

    def waiting(waited_s: float, next_s: float) -> str:
        return (
            f"gpuops watch {rental.name}: still {seen[-1] if seen else 'unknown'} after "
            f"{waited_s:.0f} s; looking again in {next_s:.0f} s"
        )

    if args.once:
        status = look()
        report(status)
    else:
        from gpuops.progress import paced

        timeout_s = args.timeout if args.timeout is not None else timing.WATCH_TIMEOUT_S
        status = jobs.watch(
            look,
            report,
            timeout_s=timeout_s,
            clock=WithSleep(clock, paced(clock, say or _stderr, waiting)),
        )
        if not w.settled(status) and not as_json:  # L9: a watch that timed out is no failure
            print(
                f"gpuops watch {rental.name}: stopped watching after {timeout_s:g} s; the job "
                f"is still {shown(status)} (not a failure: exit 5); `gpuops watch "
                f"{rental.name}` looks again",
                flush=True,
            )
    if as_json:
        out(True, {"name": rental.name, "state": status.state.value, "detail": status.detail,
                    "exit_code": status.exit_code, **synced()}, [])  # fmt: skip
    return w.watch_exit_code(status)


def shown(status: Status) -> str:
    """A job's state in words: a job that ended with exit code 0 succeeded, one with another
    code failed; "dead" is left for a job whose end left no exit code (the box gone, its
    session lost). ``--json`` keeps the watchdog's own state (``dead``) and ``exit_code``."""
    from gpuops.market import watchdog as w

    if status.state is w.JobState.DEAD and status.exit_code is not None:
        return "succeeded" if status.exit_code == 0 else "failed"
    return str(status.state.value)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def add_parsers(commands: Commands, common: Parser) -> None:
    """`guard`, `run` and `watch` on the command line (called by cli.build_parser)."""
    guard = commands.add_parser(
        "guard",
        parents=[common],
        help="start a detached guardian: copy results off, destroy at the deadline",
    )
    guard.add_argument(
        "name", metavar="NAME", nargs="?", help="the rental to guard (not with --all)"
    )
    when = guard.add_mutually_exclusive_group()
    when.add_argument("--hours", type=float, help="set the deadline this many hours from now")
    when.add_argument("--deadline", metavar="ISO", help="set the deadline (ISO-8601 with zone)")
    guard.add_argument("--foreground", action="store_true", help="run here, not detached")
    guard.add_argument(
        "--standby",
        action="store_true",
        help="start one even if a live guardian holds the box (a backup, e.g. on another host)",
    )
    guard.add_argument(
        "--all",
        action="store_true",
        help="guard every rental in the state, one process for all (a host's guardian service)",
    )
    guard.add_argument(
        "--print-systemd-unit",
        action="store_true",
        help="print a unit for an always-on host (with --all: the guardian service's)",
    )
    guard.add_argument(
        "--drill", action="store_true", help="rent NAME briefly and prove the guardian destroys it"
    )
    guard.add_argument("--gpu", metavar="MODEL", help="the GPU a drill rents (default: cheapest)")
    run = commands.add_parser(
        "run", parents=[common], help="start a job detached under tmux on a box: run NAME -- CMD"
    )
    run.add_argument("name", metavar="NAME", help="your live rental to run the job on")
    run.add_argument(
        "--results",
        default="results",
        help="results directory, relative to the job's (default results)",
    )
    run.add_argument(
        "job", nargs=argparse.REMAINDER, metavar="-- CMD", help="the job's command, after --"
    )
    watch = commands.add_parser(
        "watch", parents=[common], help="running, dead (a fact), stalled (alert only) or unknown"
    )
    watch.add_argument("name", metavar="NAME", help="the rental whose job to watch")
    watch.add_argument("--once", action="store_true", help="look once and exit")
    watch.add_argument("--timeout", type=float, metavar="SECONDS", help="default one hour")
