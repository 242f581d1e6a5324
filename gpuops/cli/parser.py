"""The command line's parser classes: help at the terminal's width, found without shutil, and
the one ArgumentParser class every command's parser is built of. A leaf: the command modules
take these types (their add_parsers) without importing the package that calls them."""

from __future__ import annotations

import argparse
import functools
import gettext
import os
import sys
from typing import TypeAlias

# argparse translates its own few words ("options", "show this help message and exit", ...)
# for every parser built, and gettext looks for a catalogue in the locale directories anew on
# every call (it keeps only one it found): a third of building `lane board`'s parser. One
# look-up per word for the process gives the same words (the locale is read once, as settings
# are).
if argparse._ is gettext.gettext:  # type: ignore[attr-defined]
    argparse._ = functools.cache(gettext.gettext)  # type: ignore[attr-defined]


def columns(given: int | None) -> int:
    """shutil.get_terminal_size's width (COLUMNS if positive, else the terminal's, else 80),
    without importing shutil (and the compression modules it loads) just to print help.
    ``given``: COLUMNS as settings.py read it."""
    if given:
        return given
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class Width(argparse.HelpFormatter):
    """Help at the terminal's width, found without shutil (argparse asks for a formatter on
    every add_argument, so the default one would import shutil for every command)."""

    columns: int | None = None  # COLUMNS, set per parser built (build_parser)

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = columns(self.columns) - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class RawWidth(Width, argparse.RawDescriptionHelpFormatter):
    """The top-level help: its epilog (the exit codes) printed as written."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose help formatter is Width; subparsers are built of this class."""

    formatter: type[Width] = Width

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", self.formatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


# What the command modules' add_parsers take: the subcommands of the one parser class.
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"
