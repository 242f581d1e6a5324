"""Who is acting and where state and events live: resolved once per command, built lazily."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuops.errors import UsageError

# checked with str methods, not a regex: `re` and socket stay out of `gpuops rules`' start-up
_OPERATOR_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_OPERATOR_REST = _OPERATOR_FIRST | frozenset(".@+-")


def user_state_dir() -> Path:
    """$XDG_STATE_HOME/gpuops, or ~/.local/state/gpuops."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuops"


def default_state_url() -> str:
    """GPUOPS_STATE, else the per-user state directory."""
    return os.environ.get("GPUOPS_STATE") or str(user_state_dir())


def default_operator() -> str:
    """GPUOPS_OPERATOR, else user@host."""
    if os.environ.get("GPUOPS_OPERATOR"):
        return os.environ["GPUOPS_OPERATOR"]
    import getpass
    import socket

    return f"{getpass.getuser()}@{socket.gethostname()}"


def check_operator(operator: str) -> str:
    if not (
        0 < len(operator) <= 128
        and operator[0] in _OPERATOR_FIRST
        and all(c in _OPERATOR_REST for c in operator)
    ):
        raise UsageError(
            f"operator id {operator!r} must be 1-128 characters of letters, digits and _.@+-"
        )
    return operator


@dataclass(frozen=True)
class Context:
    state_url: str
    operator: str
    json: bool = False

    def events_path(self) -> Path:
        """The event log: beside a local store; for s3:// state, GPUOPS_EVENTS or per-user."""
        if os.environ.get("GPUOPS_EVENTS"):
            return Path(os.environ["GPUOPS_EVENTS"])
        if "://" in self.state_url and not self.state_url.startswith("file://"):
            return user_state_dir() / "events.jsonl"
        return Path(self.state_url.removeprefix("file://")).expanduser() / "events.jsonl"
