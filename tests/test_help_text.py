"""Every option and positional of every command says what it is in `--help`."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from gpuops.cli import build_parser


def undocumented(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from undocumented(sub, f"{path} {name}")
        elif not action.help and action.help is not argparse.SUPPRESS:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_flag_and_argument_of_every_command_has_help_text():
    """The whole parser (no stubs): `rent`'s NAME, --gpu, --vram-gb, --disk-gb, --image,
    `lane script`'s --command, --input, --import, --min-free-gb and every other one."""
    assert list(undocumented(build_parser(), "gpuops")) == []


def test_the_walk_finds_an_option_without_help():
    """The check can fail: a parser with one bare option is reported."""
    parser = argparse.ArgumentParser(prog="p")
    sub = parser.add_subparsers().add_parser("c")
    sub.add_argument("--bare")

    assert list(undocumented(parser, "p")) == ["p c --bare"]
