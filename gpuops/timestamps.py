"""The one timestamp form gpuops writes, and the one parser that reads it back.

Every instant gpuops stores as text (an event's ``ts``, a box record's ``updated_at`` and
``deadline_at``, the lane board's times, an alarm's ``raised_at``) is written by :func:`utc_iso`
as UTC with microseconds and a ``Z``: ``2026-12-03T06:18:29.000000Z``. The width is fixed, so
stamps sort as text (the event log's ``--since`` compares them so). Everything gpuops reads back
goes through :func:`epoch_of`, which also reads the forms earlier versions wrote (``+00:00``
from ``isoformat()``, whole seconds) and refuses a time with no offset: a naive time would be
read in the reading host's own time zone, so one host's deadline would be another's plus its
offset.

The epoch seconds themselves come from a :class:`gpuops.clock.Clock`; this module only turns
them into text and back.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["FORMAT", "epoch_of", "moment", "utc_iso"]

# strftime's spelling of the one form (UTC, microseconds, Z)
FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_iso(epoch_s: float) -> str:
    """Epoch seconds as the one form gpuops writes."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime(FORMAT)


def moment(text: str) -> datetime:
    """A stored stamp as an aware datetime; ValueError for text that is not an ISO 8601 time
    or that names no UTC offset."""
    if not isinstance(text, str):
        raise ValueError(f"a timestamp is text, not {type(text).__name__}")
    when = datetime.fromisoformat(text)
    if when.utcoffset() is None:
        raise ValueError(f"the timestamp {text!r} names no UTC offset")
    return when


def epoch_of(text: str) -> float:
    """A stored stamp as epoch seconds; ValueError as :func:`moment`."""
    return moment(text).timestamp()
