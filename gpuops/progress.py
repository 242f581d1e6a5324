"""Progress lines while a command waits, and colour that NO_COLOR turns off.

A person watching `gpuops watch` or `gpuops destroy` should never stare at a silent terminal:
``paced`` wraps the command's sleep so every wait is cut into pieces of at most
``timing.PROGRESS_EVERY_S / 2`` with a line before each, so a line comes at least every
``timing.PROGRESS_EVERY_S`` of waiting. The lines go to whatever ``say`` writes to (stderr in
the CLI, so `--json` keeps stdout clean). No clock is read here but the one passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from gpuops import timing
from gpuops.clock import Clock

Say = Callable[[str], None]


def paced(
    clock: Clock,
    say: Say,
    what: Callable[[float, float], str],
) -> Callable[[float], None]:
    """A sleep on ``clock`` that says ``what(waited_s, next_s)`` before each piece of every
    wait; waited_s counts (on the clock's monotonic time) from the first wait through this
    sleep, next_s is the piece about to be slept."""
    piece_s = timing.PROGRESS_EVERY_S / 2
    started: list[float] = []

    def wait(seconds: float) -> None:
        if not started:
            started.append(clock.monotonic())
        left = max(seconds, 0.0)
        while left > 0:
            piece = min(left, piece_s)
            say(what(clock.monotonic() - started[0], piece))
            clock.sleep(piece)
            left -= piece

    return wait


def colour_on(stream: TextIO, allowed: bool) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (any value) or TERM=dumb:
    ``allowed`` is Settings.colour, which says so."""
    if not allowed:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


_CODES = {"green": "32", "red": "31", "bold": "1", "dim": "2"}


def paint(text: str, colour: str, on: bool) -> str:
    """``text`` in ``colour`` (green, red, bold, dim) when ``on``, else unchanged."""
    return f"\033[{_CODES[colour]}m{text}\033[0m" if on else text
