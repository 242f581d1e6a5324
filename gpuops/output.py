"""What every command prints: JSON for ``--json`` (sorted keys, indented, one trailing newline)
or its lines of text. Printing only; the commands decide what."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence


def print_json(value: object) -> None:
    """``value`` as JSON on stdout; what JSON has no type for (a path, a datetime) as its str."""
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def out(as_json: bool, payload: object, lines: str | Sequence[str]) -> None:
    """``payload`` as JSON under --json, else ``lines`` (one line, or several)."""
    if as_json:
        print_json(payload)
    else:
        print(lines if isinstance(lines, str) else "\n".join(lines))
