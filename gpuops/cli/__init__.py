"""The `gpuops` command line: parsing and printing only; every decision lives elsewhere.

Start-up stays near bare Python's: only argparse and gpuops' own light modules load here,
only the parser of the command being run is built in full (the others are one-line stubs
that carry their help text, so `gpuops --help` reads the same), and each command imports what
it needs when it runs (no provider SDK for `--help` or `rules`).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from gpuops.cli.parser import Commands, Parser, RawWidth, Width
from gpuops.errors import ExitCode, GpuopsError, Interrupted, UsageError
from gpuops.output import print_json

TYPE_CHECKING = False  # not typing's: importing typing is a cost `gpuops --help` would pay
if TYPE_CHECKING:
    from gpuops.identity import Identity
    from gpuops.settings import Settings

EXIT_CODES = """exit codes:
  0 ok                        1 unexpected error          2 usage
  3 refused by a safety rule  4 capacity or provider unavailable after retries
  5 still running or unknown  6 the job failed or died
  7 a guardian verified that another guardian is responsible (M7)"""


def _json_and_state(parser: argparse.ArgumentParser) -> None:
    """--json and --state, as every command takes them (`budget set` has its own --operator)."""
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output"
    )
    parser.add_argument(
        "--state",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="state store: a directory or s3://bucket/prefix (env GPUOPS_STATE)",
    )


def _common() -> Parser:
    """Global options, accepted before or after the command name."""
    common = Parser(add_help=False)
    _json_and_state(common)
    common.add_argument(
        "--operator",
        metavar="ID",
        default=argparse.SUPPRESS,
        help="who is acting (env GPUOPS_OPERATOR; default user@host)",
    )
    return common


# The commands that other modules add to the parser, in order, with their one-line help: all
# `gpuops --help` and the choice of a command need. tests/test_cli_startup.py checks them
# against the modules' own parsers.
GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "guard": (
        ("guard", "start a detached guardian: copy results off, destroy at the deadline"),
        ("run", "start a job detached under tmux on a box: run NAME -- CMD"),
        ("watch", "running, dead (a fact), stalled (alert only) or unknown"),
    ),
    "daily": (
        ("cost", "what was spent, per operator or per day, week or month: market and lane (M15)"),
        (
            "logs",
            "a job's log from its box (or --lane JOB's from the bucket); --follow until it ends",
        ),
        ("ssh", "ssh to your live rental's box with its pinned host key, or print a config stanza"),
    ),
    "lane": (("lane", "the shared single-GPU GCE lane (no stop, no delete)"),),
    "learn": (
        ("stats", "figures from the event log: create failures, probe verdicts, spend"),
        ("policy", "score a selection policy from the log, renting nothing"),
        ("record", "a one-cent rental that captures raw provider output"),
        ("incident", "the incident register: add, update, list, observe"),
    ),
}
_GLOBAL_VALUED = ("--state", "--operator")  # global options that take the next word
SHELLS = ("bash", "zsh", "fish")  # what `gpuops completion SHELL` writes a script for


def command_of(argv: Sequence[str]) -> str | None:
    """The command word in ``argv`` (skipping global options and their values), or None."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return None
        if word.startswith("-"):
            if "=" not in word and any(o.startswith(word) for o in _GLOBAL_VALUED if word != "-"):
                next(words, None)
            continue
        return word
    return None


def _group(
    name: str,
    commands: Commands,
    common: Parser,
    run: str | None,
) -> None:
    """Add a group's commands: in full when ``run`` is None or one of them, else as stubs."""
    if run is not None and run not in {command for command, _ in GROUPS[name]}:
        for command, text in GROUPS[name]:
            commands.add_parser(command, help=text)
        return
    if name == "guard":
        from gpuops.cli.guard import add_parsers

        add_parsers(commands, common)
    elif name == "daily":
        from gpuops.cli.daily import add_parsers as add_daily_parsers

        add_daily_parsers(commands, common)
    elif name == "lane":
        from gpuops.cli.lane import add_lane_parser

        add_lane_parser(commands, common)
    else:
        from gpuops.cli.learn_args import add_commands as add_learn_commands

        add_learn_commands(commands, common)


def _adder(
    commands: Commands, common: Parser, run: str | None
) -> Callable[[str, str], Parser | None]:
    """``add(name, help)``: a market command's parser, in full (None when ``run`` is not None
    and not this command: then a stub carrying its help is added instead, the argparse work
    that the run never parses left out), by ``_group``'s rule."""

    def add(name: str, text: str) -> Parser | None:
        if run is not None and run != name:
            commands.add_parser(name, help=text)
            return None
        return commands.add_parser(name, parents=[common], help=text)

    return add


def build_parser(only: str | None = None, columns: int | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only`` (the command word run, "" for none), every other
    command is a stub (its name and help: `gpuops --help` reads the same).
    ``columns``: the help width the environment asks for (settings.columns_of)."""
    width: type[Width] = type("Width", (Width,), {"columns": columns})
    raw: type[Width] = type("RawWidth", (RawWidth,), {"columns": columns})
    parser_class: type[Parser] = type("Parser", (Parser,), {"formatter": width})
    common = _common()
    parser = parser_class(
        prog="gpuops",
        description="A safety-first control plane for unattended GPU jobs on rented hardware.",
        epilog=EXIT_CODES,
        formatter_class=raw,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version="gpuops 0.1.0")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add = _adder(commands, common, only)
    add("demo", "the story so far against local stand-ins; exit 0 only if nothing leaked")
    add("rules", "every prevention rule with its honest status")
    if offers := add("offers", "Vast offers that pass the default filter, ranked"):
        _offers_args(offers)
    if rent := add("rent", "rent a healthy box: race offers, probe, keep one"):
        _rent_args(rent)
    _group("guard", commands, common, only)
    if boxes := add("boxes", "rented boxes and their spend"):
        boxes.add_argument("--all", action="store_true", help="every operator's, not only mine")
    if destroy := add("destroy", "destroy a box you own and confirm it gone"):
        destroy.add_argument(
            "name", metavar="NAME", help="your rental: every box of it is destroyed"
        )
    add("sweep", "retry pending destroys, end expired boxes, report boxes nobody owns")
    add("check", "before real money: the store's conditional writes, keys, results, alarms")
    budget = add(
        "budget", "the team's and each operator's limits, with what is spent and committed (M15)"
    )
    if budget:
        _budget_args(budget)
    _group("daily", commands, common, only)
    add("compact", "move released history older than a week to the archive (boxes --all shows it)")
    _group("lane", commands, common, only)
    _group("learn", commands, common, only)
    if fakes := add("fakes", "local provider fakes"):
        _fakes_args(fakes)
    if completion := add("completion", "print a completion script for bash, zsh or fish"):
        completion.add_argument(
            "shell", metavar="SHELL", choices=SHELLS, help="the shell: " + ", ".join(SHELLS)
        )
    return parser


def _offers_args(offers: Parser) -> None:
    """`offers`' options."""
    offers.add_argument("--gpu", metavar="MODEL", help="GPU model, e.g. 'RTX 4090'")
    offers.add_argument("--vram-gb", type=float, default=8.0, help="VRAM floor (default 8)")
    offers.add_argument("--all", action="store_true", help="also show what the filter removed")
    offers.add_argument(
        "--filter",
        action="append",
        metavar="QUERY",
        help="vastai's query syntax, e.g. 'reliability>0.99 geolocation in [US,CA] cuda_vers>=12'"
        " (repeatable; every term must hold)",
    )
    offers.add_argument("--max-dph", type=float, metavar="USD", help=MAX_DPH_HELP)


def _rent_args(rent: Parser) -> None:
    """`rent`'s arguments and options."""
    rent.add_argument(
        "name", metavar="NAME", help="the rental's name: 1-64 letters, digits, '_' or '-'"
    )
    rent.add_argument("--gpu", metavar="MODEL", required=True, help="GPU model, e.g. 'RTX 4090'")
    rent.add_argument("--hours", type=float, required=True, help="billing ceiling in hours")
    rent.add_argument("--race", type=int, default=3, metavar="K", help="offers raced (default 3)")
    rent.add_argument(
        "--vram-gb", type=float, default=8.0, metavar="G", help="VRAM floor in GB (default 8)"
    )
    rent.add_argument(
        "--disk-gb", type=float, default=20.0, metavar="G", help="the box's disk in GB (default 20)"
    )
    rent.add_argument(
        "--image",
        default="vastai/base-image:@vastai-automatic-tag",
        help="the Docker image the box runs (default vastai/base-image:@vastai-automatic-tag)",
    )
    rent.add_argument("--max-dph", type=float, metavar="USD", help=MAX_DPH_HELP)
    rent.add_argument(
        "--sync-every",
        type=float,
        metavar="MINUTES",
        help="while the job runs, its guardian copies what changed in its results to "
        f"GPUOPS_RESULTS this often (default {_sync_default_min():g}; 0: only at the end)",
    )
    rent.add_argument(
        "--no-guard", action="store_true", help="do not start a guardian (the box has no ceiling)"
    )


def _budget_args(budget: Parser) -> None:
    """`budget set` and its options."""
    budget_commands = budget.add_subparsers(dest="budget_command", metavar="COMMAND")
    limits = budget_commands.add_parser(
        "set", help="set limits in USD: the team's, or one operator's with --operator ID"
    )
    _json_and_state(limits)
    limits.add_argument(
        "--team-usd-per-day", type=float, metavar="X", help="the whole team's daily limit, USD"
    )
    limits.add_argument(
        "--team-usd-per-month", type=float, metavar="Y", help="the whole team's monthly limit, USD"
    )
    limits.add_argument(
        "--operator", dest="limit_operator", metavar="ID", help="whose limits --usd-per-* set"
    )
    limits.add_argument(
        "--usd-per-day", type=float, metavar="X", help="with --operator: that one's daily limit"
    )
    limits.add_argument(
        "--usd-per-month", type=float, metavar="Y", help="with --operator: that one's monthly limit"
    )


def _fakes_args(fakes: Parser) -> None:
    """`fakes serve` and its options."""
    fake_commands = fakes.add_subparsers(dest="fakes_command", metavar="COMMAND", required=True)
    serve = fake_commands.add_parser(
        "serve", help="serve the fakes on loopback; prints export lines first"
    )
    serve.add_argument(
        "--scenario",
        metavar="FILE",
        help="what the fakes do (default fakes/scenarios/default.yaml)",
    )
    serve.add_argument(
        "--port", type=int, default=0, help="FakeVast's loopback port (default 0: any free one)"
    )
    serve.add_argument(
        "--state-dir", metavar="DIR", help="where the fakes keep their state (default: a temp dir)"
    )


MAX_DPH_HELP = "leave out offers dearer than USD per hour (dph_total; default: no cap)"
# `rent --race K`: at least one offer, and no more boxes than a person would pay for at once
# (the 20 September leak was ten boxes; a race is a handful of probes, not a fleet).
MAX_RACE = 8
# `--vram-gb` / `--disk-gb`: the largest floor that could describe one rented box, in GB.
MAX_FLOOR_GB = 4096.0
# What Vast refuses on create (create_instance.yaml's x-input-validation and required image, in
# recordings/contracts/vast-openapi.yaml; tests/test_vast_conformance.py pins these to it): a
# disk under 8 GB, an image of more than 1024 characters, and none at all.
VAST_MIN_DISK_GB = 8.0
VAST_IMAGE_MAX_CHARS = 1024


def _check_create_args(args: argparse.Namespace) -> None:
    """`rent`'s create arguments, refused here as Vast would refuse them (H6): at the edge,
    before a rental, a guardian or a race exists, rather than as a 400 mid-race."""
    disk = getattr(args, "disk_gb", None)
    if disk is not None and disk < VAST_MIN_DISK_GB:
        raise UsageError(
            f"--disk-gb must be at least {VAST_MIN_DISK_GB:g} (Vast's minimum), not {disk:g}"
        )
    image = getattr(args, "image", None)
    if image is not None and not image.strip():
        raise UsageError("--image must name a Docker image, not be empty")
    if image is not None and len(image) > VAST_IMAGE_MAX_CHARS:
        raise UsageError(
            f"--image must be at most {VAST_IMAGE_MAX_CHARS} characters (Vast's limit), "
            f"not {len(image)}"
        )


def _sync_default_min() -> float:
    from gpuops import timing

    return timing.RESULTS_SYNC_EVERY_S / 60.0


def check_args(args: argparse.Namespace) -> None:
    """Numbers checked at the edge, before anything is opened or called: every float option
    finite, and the ones with a meaning in range. A refusal is one line, exit 2."""
    import math

    from gpuops import timing

    for name, value in sorted(vars(args).items()):
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"--{name.replace('_', '-')} must be a finite number, not {value}")
    hours = getattr(args, "hours", None)
    if hours is not None and not 0 < hours * 3600.0 <= timing.MAX_RENTAL_S:
        raise UsageError(
            f"--hours must be more than 0 and at most {timing.MAX_RENTAL_S / 3600.0:g}, "
            f"not {hours:g}"
        )
    race = getattr(args, "race", None)
    if race is not None and not 1 <= race <= MAX_RACE:
        raise UsageError(f"--race must be between 1 and {MAX_RACE} offers, not {race}")
    for option in ("vram_gb", "disk_gb"):
        floor = getattr(args, option, None)
        if floor is not None and not 0 <= floor <= MAX_FLOOR_GB:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} must be between 0 and {MAX_FLOOR_GB:g}, not {floor:g}")
    sync_every = getattr(args, "sync_every", None)
    if sync_every is not None:
        from gpuops.market.sync_plan import sync_every_s

        sync_every_s(sync_every)  # negative is exit 2 before anything is rented
    max_dph = getattr(args, "max_dph", None)
    if max_dph is not None and max_dph <= 0:
        raise UsageError(f"--max-dph must be more than 0 USD per hour, not {max_dph:g}")
    if getattr(args, "filter", None):
        from gpuops.market.offer_query import parse_query

        parse_query(args.filter)  # a bad term is exit 2 before any search
    _check_create_args(args)
    timeout = getattr(args, "timeout", None)
    if timeout is not None and timeout < 0:
        raise UsageError(f"--timeout must not be negative, not {timeout:g}")


def main(argv: Sequence[str] | None = None) -> int:
    from gpuops.settings import Settings, columns_of, environ_snapshot, read_config

    words = sys.argv[1:] if argv is None else argv
    environ = environ_snapshot()  # the one read of the environment; Settings holds the rest
    args = build_parser(only=command_of(words) or "", columns=columns_of(environ)).parse_args(words)
    try:
        if args.command == "completion":  # reads no settings: a broken config file still completes
            from gpuops.completion import script

            sys.stdout.write(script(args.shell, build_parser()))
            return ExitCode.OK
        options = {name: getattr(args, name, None) for name in ("state", "operator")}
        settings = Settings.from_environ(environ, options, config=read_config(environ))
        check_args(args)
        return _dispatch(args, settings)
    except GpuopsError as exc:
        print(f"gpuops: {_scrubbed(str(exc))}", file=sys.stderr)
        fix = getattr(exc, "fix", "")
        if fix:
            print(f"gpuops: {fix}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader left (`gpuops rules | head`): not our failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.BROKEN_PIPE
    except Interrupted as exc:
        print(f"gpuops: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpuops: interrupted", file=sys.stderr)
        return ExitCode.signalled(signal.SIGINT)
    except Exception:  # the last line of defence: loud, with the traceback, exit 1
        import traceback

        print(_scrubbed(traceback.format_exc()), file=sys.stderr, end="")
        print("gpuops: unexpected error (a bug): see the traceback above", file=sys.stderr)
        return ExitCode.ERROR


def _scrubbed(text: str) -> str:
    """What reaches a terminal is scrubbed like the event log (H3)."""
    from gpuops.events import scrub

    return str(scrub(text))


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    as_json = getattr(args, "json", False)
    if args.command == "rules":
        from gpuops.cli.rules import print_rules

        return print_rules(as_json, settings.state_url, settings.s3_endpoint)
    operator = settings.acting_operator()
    attested = False  # declared, unless the provider says whose key this is (M3)
    if args.command in ("rent", "destroy", "run", "sweep", "guard"):
        from gpuops.identity import acts, attest

        if acts(args) and _something_to_act_on(args, settings):
            identity = attest(settings, operator)  # M3: whose key this is, asked once
            operator, attested = identity.operator, identity.attested
            _log_identity(settings, identity)
    if args.command == "demo":
        from gpuops.demo import run_demo

        return run_demo(settings, operator, as_json, state_url=getattr(args, "state", None))
    if args.command == "fakes":
        from fakes.serve import main as serve

        argv = [f"--port={args.port}"]
        argv += [f"--scenario={args.scenario}"] if args.scenario else []
        argv += [f"--state-dir={args.state_dir}"] if args.state_dir else []
        return serve(argv)
    if args.command in ("guard", "run", "watch"):
        from gpuops.cli.guard import run_guard

        return run_guard(args, settings, operator, as_json)
    if args.command == "lane":
        from gpuops.cli.lane import run_lane

        return run_lane(args, settings, operator, as_json)
    if args.command == "compact":
        return _compact(settings, as_json)
    if args.command == "budget":
        from gpuops.cli.budget import run_budget

        return run_budget(args, settings, operator, as_json)
    if args.command in ("cost", "logs", "ssh"):
        from gpuops.cli.daily import run_daily

        return run_daily(args, settings, operator, as_json)
    if args.command == "check":
        from gpuops.check import run_check

        return run_check(settings, as_json)
    if args.command in ("stats", "policy", "incident", "record"):
        from gpuops.cli.learn import run_learn

        return run_learn(args, settings, as_json, operator)
    from gpuops.cli.market import run_market

    return run_market(args, settings, operator, as_json, attested=attested)


def _something_to_act_on(args: argparse.Namespace, settings: Settings) -> bool:
    """`run NAME` and `guard NAME` act only on a rental that exists: for a name the state has
    no rental of, their usage error comes first, without a provider call. Every other acting
    command (rent creates; destroy also ends a name's orphaned records) always asks."""
    if args.command not in ("run", "guard"):
        return True
    from gpuops.market.rentals import Rentals

    store = settings.open_state()
    return Rentals(store, settings.acting_operator()).get(args.name) is not None


def _log_identity(settings: Settings, identity: Identity) -> None:
    """The operator this command acts as, and how it was established, in the event log; an
    attested one is said on stderr too (a declared one is every command's default)."""
    from gpuops import event_ops as ops
    from gpuops.event_base import write
    from gpuops.events import EventLog

    write(
        EventLog(settings.events_path, identity.operator),
        ops.OperatorIdentity(
            operator=identity.operator, attested=identity.attested, user_id=identity.user_id
        ),
    )
    if identity.attested:
        print(f"gpuops: acting as {identity.describe()}", file=sys.stderr)


def _compact(settings: Settings, as_json: bool) -> int:
    """`gpuops compact`: archive what can never bill again; an unreadable record is named and
    left where it is (exit 1), as every listing does."""
    from gpuops.archive import compact

    done = compact(settings.open_state(), settings.clock().wall())
    if as_json:
        print_json(
            {
                "archived_boxes": done.boxes,
                "archived_rentals": done.rentals,
                "changed_meanwhile": done.changed,
                "unreadable": list(done.unreadable),
            }
        )
    else:
        print(
            f"archived {done.boxes} box record(s) and {done.rentals} rental(s); "
            f"{done.changed} changed meanwhile and stay live"
        )
    for key in done.unreadable:
        print(f"gpuops: skipped the unreadable record {key!r}; it stays live", file=sys.stderr)
    return ExitCode.ERROR if done.unreadable else ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
