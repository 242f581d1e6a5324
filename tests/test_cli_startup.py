"""Start-up: only the parser of the command being run is built, and help reads the same."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from gpuops import cli


def subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


FULL = cli.build_parser()
COMMANDS = list(subparsers(FULL).choices)


def test_the_stub_help_texts_are_the_ones_the_command_modules_give():
    """cli.GROUPS names each group's commands, in order, with their modules' own help."""
    full_help = {a.dest: a.help for a in subparsers(FULL)._choices_actions}

    for group in cli.GROUPS.values():
        for command, text in group:
            assert full_help[command] == text
    order = [c for group in cli.GROUPS.values() for c, _ in group]
    assert [c for c in COMMANDS if c in order] == order


@pytest.mark.parametrize("only", [None, "", "nosuch", *COMMANDS])
def test_the_top_level_help_is_the_same_whichever_parser_is_built_in_full(only):
    """`gpuops --help` lists every command with its help, stubs or not."""
    assert cli.build_parser(only=only).format_help() == FULL.format_help()


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_s_own_parser_is_built_in_full_when_it_is_the_one_run(command):
    """`gpuops COMMAND --help` reads exactly as with every parser built."""
    built = subparsers(cli.build_parser(only=command)).choices[command]

    assert built.format_help() == subparsers(FULL).choices[command].format_help()


@pytest.mark.parametrize(
    ("command", "built"),
    [
        ("lane", {"lane"}),
        ("boxes", {"boxes"}),
        ("rules", {"rules"}),
        ("guard", {"guard", "run", "watch"}),
    ],
)
def test_every_other_command_is_a_stub_when_one_is_run(command, built):
    """Only the run command's parser is built (its group's, the market's commands one by
    one): a stub has no option, so `lane board` pays for no `rent`, `offers` or `budget set`."""
    choices = subparsers(cli.build_parser(only=command)).choices

    full = {name for name, parser in choices.items()
            if any(not isinstance(a, argparse._HelpAction) for a in parser._actions)}  # fmt: skip
    assert full == built


def test_argparse_s_words_are_looked_up_once_a_process_not_once_a_parser(monkeypatch):
    """gettext searches the locale directories on every call; cli/parser.py keeps each of
    argparse's words once found, so a parser built after the first asks gettext nothing."""
    import gettext

    cli.build_parser(only="lane")
    searched: list[str] = []
    monkeypatch.setattr(gettext, "find", lambda *a, **k: searched.append(a[0]))

    again = cli.build_parser(only="lane")

    assert searched == []
    assert again.format_help() == FULL.format_help()


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["boxes"], "boxes"),
        (["--json", "boxes", "--all"], "boxes"),
        (["--state", "lane", "rules"], "rules"),
        (["--st", "x", "--op", "y", "lane", "board"], "lane"),
        (["--state=x", "stats"], "stats"),
        (["--help"], None),
        (["--", "rules"], None),
        ([], None),
    ],
)
def test_the_command_word_is_found_past_global_options_and_their_values(argv, command):
    """--state and --operator (and their abbreviations) take the next word; flags do not."""
    assert cli.command_of(argv) == command


@pytest.mark.process  # a whole-CLI process: under mutmut the trampolines import more
def test_help_and_rules_import_no_other_command_s_modules():
    """`--help` and `rules` load neither the guard, lane nor learning parsers, nor socket."""
    code = (
        "import sys, io, contextlib; from gpuops.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(sys.argv[1:])\n"
        "    except SystemExit: pass\n"
        "print(__import__('json').dumps(sorted(sys.modules)))"
    )
    unwanted = {"gpuops.cli.guard", "gpuops.cli.lane", "gpuops.cli.learn_args", "gpuops.cli.daily",
                "shutil"}  # fmt: skip

    for argv in (["--help"], ["rules"]):
        out = subprocess.run(
            [sys.executable, "-c", code, *argv],
            capture_output=True,
            text=True,
            check=True,
            env={
                "GPUOPS_STATE": "/nonexistent-gpuops-state",
                "PATH": "/usr/bin:/bin",
                "GPUOPS_CONFIG": os.devnull,  # not the config file of whoever runs the suite
            },
        ).stdout
        loaded = set(json.loads(out.splitlines()[-1]))
        assert not loaded & unwanted, argv
        assert "socket" not in loaded or argv == ["--help"], argv


# What `gpuops boxes` may load of gpuops over an empty state: the store, the ledger and the
# rentals, and nothing of the market's machinery (event types, probe, guardian), the providers
# or the analysis. A new import here costs every `boxes`; add it on purpose or not at all.
BOXES_GPUOPS = {
    "gpuops",
    "gpuops.archive",
    "gpuops.cli",
    "gpuops.cli.parser",  # the parser classes (argparse only)
    "gpuops.cli.market",
    "gpuops.clock",  # SYSTEM, the clock `boxes` reads (imports only math, time, typing)
    "gpuops.errors",
    "gpuops.output",  # printing: JSON or lines
    "gpuops.ledger",
    "gpuops.market",
    "gpuops.market.budget",  # M15: the burn line's arithmetic (pure: datetime, math)
    "gpuops.market.budgets",  # M15: its spend records, read from the store
    "gpuops.market.gpu_names",  # M8: the one GPU-name fold (imports nothing)
    "gpuops.listing",  # what `boxes` shows, built from the store
    "gpuops.market.rentals",
    "gpuops.settings",
    "gpuops.store",
    "gpuops.store.base",
    "gpuops.store.local",
    "gpuops.store.opener",
    "gpuops.store.records",
    "gpuops.timestamps",  # the one stamp form and parser (imports only datetime)
    "gpuops.timing",
}
# Standard modules that cost milliseconds at import and that `boxes` never needs: OpenSSL
# (hashlib, hmac, secrets), sockets, the random generator, the secret-scrubbing patterns.
BOXES_NEVER = {"_hashlib", "hashlib", "hmac", "secrets", "socket", "random", "gpuops.secrets"}


def loaded_modules(argv: list[str], env: dict[str, str]) -> set[str]:
    code = (
        "import sys, io, contextlib; from gpuops.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(sys.argv[1:])\n"
        "print(__import__('json').dumps([code, sorted(sys.modules)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "GPUOPS_CONFIG": os.devnull, **env},
    ).stdout
    code, modules = json.loads(out.splitlines()[-1])
    assert code == 0
    return set(modules)


@pytest.mark.process  # a whole-CLI process: under mutmut the trampolines import more
def test_boxes_over_an_empty_state_loads_only_the_store_the_ledger_and_the_rentals(tmp_path):
    """The import set of `gpuops boxes` is pinned: start-up within 5x bare Python's (DESIGN §4)."""
    state = tmp_path / "state"

    loaded = loaded_modules(["boxes", "--state", str(state)], {"GPUOPS_OPERATOR": "a@host"})

    assert {m for m in loaded if m.split(".")[0] == "gpuops"} == BOXES_GPUOPS
    assert not loaded & BOXES_NEVER


@pytest.mark.process
def test_boxes_over_a_live_rental_loads_no_event_type_probe_or_socket(tmp_path):
    """With a rental to show, `boxes` reads its lease too, and still builds no event."""
    from gpuops.market.rentals import Rentals
    from gpuops.store.local import LocalStore

    Rentals(LocalStore(str(tmp_path)), "a@host").begin_race("job", deadline_at=2e9)

    loaded = loaded_modules(["boxes", "--state", str(tmp_path)], {"GPUOPS_OPERATOR": "a@host"})

    assert "gpuops.market.rentals" in loaded and "gpuops.market.leases" in loaded
    assert not loaded & {"gpuops.event_types", "gpuops.market.probe", "socket", "random"}


@pytest.mark.process
def test_a_config_file_adds_only_its_parser_to_what_boxes_loads(tmp_path):
    """With a config file, `boxes` loads gpuops/config.py and tomllib besides the pinned set;
    an empty one (/dev/null) loads neither."""
    path = tmp_path / "config.toml"
    path.write_text(f'state = "{tmp_path / "state"}"\noperator = "a@host"\n')

    with_file = loaded_modules(["boxes"], {"GPUOPS_CONFIG": str(path)})
    empty = loaded_modules(["boxes", "--state", str(tmp_path / "s")], {"GPUOPS_OPERATOR": "a"})

    assert {m for m in with_file if m.split(".")[0] == "gpuops"} == BOXES_GPUOPS | {"gpuops.config"}
    assert "tomllib" in with_file and not with_file & BOXES_NEVER
    assert "tomllib" not in empty and "gpuops.config" not in empty


# What `gpuops lane board` (without --live, and with --history) may load of gpuops: the store,
# the board, its store-only reader (lane/stored.py) and the lane's pure decisions, the session
# and the event log an alarm would write to; never the runner or the script linter (only a
# missing board builds the full Lane: lane/session.py's open_board), a provider adapter, the
# transport, the event log, the event types or the alarms (they load at first use:
# lane/session.py's Deferred and its events). Its start-up stays within 5x bare Python's, near `boxes`.
LANE_BOARD_GPUOPS = {
    "gpuops",
    "gpuops.cli",
    "gpuops.cli.parser",  # the parser classes (argparse only)
    "gpuops.cli.lane",
    "gpuops.clock",
    "gpuops.errors",
    "gpuops.output",  # printing: JSON or lines
    "gpuops.lane",
    "gpuops.lane.board",
    "gpuops.lane.decide",  # L8's stale test and the cost: pure
    "gpuops.lane.journal",
    "gpuops.lane.protocol",  # decide's stage names and the manifest's first word
    "gpuops.lane.session",
    "gpuops.lane.stored",  # the board, its journal and history, read from the store
    "gpuops.settings",
    "gpuops.store",
    "gpuops.store.base",
    "gpuops.store.local",
    "gpuops.store.opener",
    "gpuops.store.records",
    "gpuops.timestamps",  # the one stamp form and parser (imports only datetime)
    "gpuops.timing",
}
LANE_BOARD_NEVER = {
    "gpuops.events",  # the event log: a board read writes no event (opened at its first use)
    "gpuops.secrets",  # its scrubbing
    "gpuops.lane.runner",  # the provider-calling Lane: --live, claim, start, ...
    "gpuops.lane.script",  # the script linter and its shell parser
    "gpuops.lane.shell",
    "gpuops.providers.gce",
    "gpuops.providers.gcs",
    "gpuops.providers.transport",
    "gpuops.event_types",
    "gpuops.alarms",
    "gpuops.ledger",
    "gpuops.market.probe",
    "msgspec",
    "requests",
    "google",
    "tree_sitter",
    "socket",
}


@pytest.mark.process
def test_lane_board_without_live_loads_no_runner_provider_transport_event_types_or_alarms(
    tmp_path,
):
    """`lane board` and `lane board --history` over a stored board read the store alone: the
    import set is pinned, and neither the runner, the Google stack, the event types nor the
    alarms is among it."""
    from gpuops.lane import board as b
    from gpuops.store.local import LocalStore

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    held = b.Board(
        "gpu-lane", "gpu-lane", 1.8e9, state=b.CLAIMED, owner="a", job="j", claimed=1.8e9, epoch=1
    )
    LocalStore(str(state)).create("lane/gpu-lane/board", b.render(held, ["a: claimed"]).encode())
    lane = {
        "GPUOPS_OPERATOR": "a",
        "GPUOPS_LANE_PROJECT": "p",
        "GPUOPS_LANE_ZONE": "us-central1-a",
        "GPUOPS_LANE_INSTANCE": "gpu-lane",
        "GPUOPS_LANE_BUCKET": "b",
    }

    for argv in (["board"], ["board", "--history"]):
        loaded = loaded_modules(["--state", str(state), "lane", *argv], lane)

        assert {m for m in loaded if m.split(".")[0] == "gpuops"} - {
            "gpuops.lane.history",  # --history's reader
            "gpuops.lane.cost",  # the history entries' costs
        } == LANE_BOARD_GPUOPS, argv
        assert "gpuops.lane.history" in loaded or argv == ["board"], argv
        assert (
            not {m.split(".")[0] if m.startswith(("google", "requests")) else m for m in loaded}
            & LANE_BOARD_NEVER
        ), argv
