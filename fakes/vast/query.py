"""Vast's filter language, as the fake applies it: ``{"field": {"op": value}}`` over wire rows.

Used by the offer search (``POST /api/v0/bundles/``) and the v1 instance list
(``select_filters``). A field the rows do not have, or an operator Vast does not document, is
an :class:`InvalidQuery`, answered as Vast's ``invalid_request`` (provider-formats.md A.6):
a fake that silently ignored a filter would let a wrong query pass its tests.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Row = Mapping[str, object]


class InvalidQuery(Exception):
    """A filter the fake cannot honour; the message names the field or operator."""


def _in(have: object, want: object) -> bool:
    return isinstance(want, list) and have in want


OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "neq": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "in": _in,
    "notin": lambda have, want: isinstance(want, list) and have not in want,
    # search_offers.yaml documents `nin`; vastai's query parser sends `notin` for it.
    "nin": lambda have, want: isinstance(want, list) and have not in want,
}


def _coerced(have: object, want: object) -> object:
    """The CLI's query language sends numbers as strings ("num_gpus": {"eq": "1"})."""
    if isinstance(have, int | float) and not isinstance(have, bool) and isinstance(want, str):
        try:
            return float(want)
        except ValueError:
            return want
    return want


def matches(
    row: Row, filters: Mapping[str, object], aliases: Mapping[str, Callable[[Row], object]]
) -> bool:
    """Whether ``row`` passes every filter; ``aliases`` are filter keys that are not fields."""
    for name, condition in filters.items():
        if name in aliases:
            have = aliases[name](row)
        elif name in row:
            have = row[name]
        else:
            raise InvalidQuery(f"{name} is not a valid search key")
        if not isinstance(condition, Mapping):
            raise InvalidQuery(f"{name} needs {{op: value}}, not {condition!r}")
        for op, want in condition.items():
            if op not in OPERATORS:
                raise InvalidQuery(f"{op} is not an operator; known: {', '.join(OPERATORS)}")
            want = [_coerced(have, w) for w in want] if isinstance(want, list) else want
            want = _coerced(have, want)
            try:
                if not OPERATORS[op](have, want):
                    return False
            except TypeError:  # null against a number: Vast's SQL would not match either
                return False
    return True


def _sortable(value: object) -> tuple[int, float, str]:
    """Numbers before text, each in its own order (Vast's columns are one type each)."""
    if isinstance(value, int | float):
        return (0, float(value), "")
    return (1, 0.0, str(value))


def ordered(rows: Sequence[Row], order: object) -> list[Row]:
    """Rows sorted by ``[[field, "asc"|"desc"], ...]`` (search) , stable, nulls last."""
    if not isinstance(order, list):
        raise InvalidQuery(f"order must be a list of [field, direction], not {order!r}")
    result = list(rows)
    for item in reversed(order):
        if not (isinstance(item, list) and len(item) == 2 and item[1] in ("asc", "desc")):
            raise InvalidQuery(f"order item {item!r} is not [field, 'asc'|'desc']")
        name, direction = item
        if result and name not in result[0]:
            raise InvalidQuery(f"{name} is not a valid order key")
        present = [r for r in result if isinstance(r.get(name), int | float | str)]
        missing = [r for r in result if not isinstance(r.get(name), int | float | str)]
        present.sort(key=lambda r: _sortable(r[name]), reverse=direction == "desc")
        result = present + missing
    return result
