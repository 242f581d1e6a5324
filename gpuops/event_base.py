"""What every typed event shares: its number types and ``to_payload``.

Owns: the payload an event type writes (``to_payload``: JSON values, keys in field order) and
the number types their annotations use. The analysis kinds (gpuops/event_types.py) and the
operational kinds (gpuops/event_ops.py) are both built on it; event_types.py holds the one
registry and the decoder.

``Number`` is a whole number (kept whole, so a line written back is the line read) or a finite
float: NaN fails both bounds, an infinity one of them. ``Whole`` is an id or a count within 64
bits (what msgspec bounds natively); ``Probability`` one in (0, 1]: a pick made with
probability 0 was never made (it would divide a weight by 0).
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Annotated, ClassVar, Protocol

import msgspec

__all__ = ["Kinded", "Number", "Payload", "Probability", "Sink", "Whole", "write"]

_FINITE = msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)
Number = int | Annotated[float, _FINITE]
Whole = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_IN_0_1 = msgspec.Meta(gt=0, le=1)
Probability = Annotated[int, _IN_0_1] | Annotated[float, _IN_0_1]


def _plain(value: object) -> object:
    """A field's value as JSON holds it: an enum by its value, a tuple as a list, a nested
    event part by its payload; anything else (str, numbers, None, a dict of them) as it is."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Payload):
        return value.to_payload()
    return value


class Payload:
    """A typed event, or a part of one, written as its fields.

    ``LEFT_OUT`` names the fields its payload leaves out while they hold their default: what
    its writers always left out then (a guardian's ``rental_id`` before it has read one, a
    copy's ``ended`` unless it was cut), so a line is the line those writers wrote."""

    LEFT_OUT: ClassVar[frozenset[str]] = frozenset()

    def to_payload(self) -> dict[str, object]:
        """The payload as the log holds it: JSON values, keys in field order."""
        payload = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name not in self.LEFT_OUT or value != f.default:
                payload[f.name] = _plain(value)
        return payload


class Kinded(Payload):
    """A whole event: its kind, and the payload a writer logs with
    ``log.append(event.KIND, **event.to_payload())``."""

    KIND: ClassVar[str]


class Sink(Protocol):
    """Where events go: an EventLog, or a wrapper around one."""

    def append(self, kind: str, /, **payload: object) -> object: ...


def write(sink: Sink, event: Kinded) -> object:
    """Log ``event`` as its kind and payload (what ``sink.append`` returns)."""
    return sink.append(event.KIND, **event.to_payload())
