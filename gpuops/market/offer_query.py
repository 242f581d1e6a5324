"""`gpuops offers --filter QUERY`: vastai's `search offers` query syntax, a documented subset.

Pure: a query string in, terms out; an offer and the terms in, the reasons it fails out. The
grammar is vastai's (its ``vastai/api/query.py``): terms separated by spaces, each
``FIELD OP VALUE`` with no space needed around a symbolic operator (``reliability>0.99``), a
word operator between spaces (``geolocation in [US,CA]``); a list is ``[a,b]``, a value with a
space is quoted or written with ``_`` for the space (``gpu_name=RTX_4090``); ``any`` (or ``*``,
``?``) with ``=`` drops the field's term. Its aliases hold (``cuda_vers`` is ``cuda_max_good``,
``dph`` is ``dph_total``) and ``gpu_ram`` is in GB, multiplied by 1000 as vastai does (Vast's
``gpu_ram`` is MB). Where vastai only warns (an unknown field) this refuses: every term names a
field gpuops parses from the offer (gpuops/model.py), and a term it cannot apply is a usage
error naming that term, never a filter that silently passes everything.

The filter runs on the offers a search returned, after the search: a term never widens what
the default filter (M1) removes. A field the provider left out (None) fails its term, as in
select.py: missing is never passing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuops.errors import UsageError
from gpuops.market.gpu_names import fold_gpu_name

# The fields a query may name: numbers, compared as numbers, with vastai's multiplier.
NUMERIC: dict[str, float] = {
    "dph_total": 1.0,
    "gpu_ram": 1000.0,  # GB in the query, MB on the offer (vastai's offers_mult)
    "reliability": 1.0,
    "disk_bw": 1.0,
    "inet_down": 1.0,
    "cuda_max_good": 1.0,
    "num_gpus": 1.0,
    "machine_id": 1.0,
    "host_id": 1.0,
    "id": 1.0,
}
# Text fields: equality and lists only.
TEXT = ("gpu_name", "geolocation", "verification")
# vastai's boolean shorthand: `verified=true` is `verification=verified`.
BOOLEAN = ("verified",)
ALIASES = {"cuda_vers": "cuda_max_good", "dph": "dph_total"}
FIELDS = tuple(sorted({*NUMERIC, *TEXT, *BOOLEAN, *ALIASES}))

# vastai's operator spellings, each to one of eight operations.
OPERATORS = {
    ">=": "gte", "gte": "gte", ">": "gt", "gt": "gt",
    "<=": "lte", "lte": "lte", "<": "lt", "lt": "lt",
    "=": "eq", "==": "eq", "eq": "eq",
    "!=": "neq", "neq": "neq", "noteq": "neq", "not eq": "neq",
    "in": "in", "notin": "notin", "nin": "notin", "not in": "notin",
}  # fmt: skip
_ORDERED = ("gt", "gte", "lt", "lte")
_WILDCARDS = ("any", "*", "?")
_TERM = re.compile(
    r"\s*(?P<field>[A-Za-z0-9_]+)"
    r"(?P<op>\s*(?:>=|<=|!=|==|=|<|>)|\s+(?:not\s+eq|not\s+in|noteq|notin|nin|neq|eq|in|gte|gt|lte|lt)\s)"
    r"\s*(?P<value>\[[^\]]*\]|\"[^\"]*\"|[^\s\[\]\"]+)"
)


@dataclass(frozen=True)
class Term:
    """One ``FIELD OP VALUE`` term: ``field`` the offer's own name (aliases resolved), ``op``
    one of OPERATORS' operations, ``values`` one value (or a list's) as numbers for NUMERIC
    fields (multiplied) and as text otherwise; ``text`` the term as written."""

    field: str
    op: str
    values: tuple[float | str, ...]
    text: str


def parse_query(queries: Iterable[str]) -> tuple[Term, ...]:
    """Every term of every ``--filter``, in order; a UsageError naming the first term (or
    text) that cannot be read or applied."""
    terms: list[Term] = []
    for query in queries:
        at = 0
        while query[at:].strip():
            found = _TERM.match(query, at)
            if found is None:
                rest = query[at:].strip()
                raise UsageError(
                    f"--filter: cannot read {rest!r}: each term is FIELD OP VALUE, e.g. "
                    "'reliability>0.99 geolocation in [US,CA] cuda_vers>=12'"
                )
            at = found.end()
            term = _term(found["field"], found["op"], found["value"], found[0].strip())
            if term is not None:
                terms.append(term)
    return tuple(terms)


def _term(field: str, op_text: str, raw: str, text: str) -> Term | None:
    op = OPERATORS[" ".join(op_text.split())]
    name = ALIASES.get(field, field)
    if name not in (*NUMERIC, *TEXT, *BOOLEAN):
        raise UsageError(
            f"--filter: {text!r} names no offer field gpuops reads; known: {', '.join(FIELDS)}"
        )
    listed = raw.startswith("[")
    if listed and op not in ("in", "notin"):
        raise UsageError(f"--filter: {text!r}: a list [..] takes `in` or `notin`")
    words = [w.strip() for w in raw.strip("[]").split(",")] if listed else [raw]
    words = [w.replace("_", " ").strip('"').strip() for w in words]
    words = [w for w in words if w]
    if not words:
        raise UsageError(f"--filter: {text!r} has no value")
    if words[0] in _WILDCARDS and not listed:
        if op != "eq":
            raise UsageError(f"--filter: {text!r}: a wildcard only makes sense with =")
        return None  # vastai: `field=any` drops the field's condition
    if name in NUMERIC:
        return Term(name, op, tuple(_number(w, text) * NUMERIC[name] for w in words), text)
    if op in _ORDERED:
        raise UsageError(f"--filter: {text!r}: {name} is text; it takes =, !=, in or notin")
    if name in BOOLEAN:
        truth = _truth(words, text)
        return Term(
            "verification", "eq" if truth == (op in ("eq", "in")) else "neq", ("verified",), text
        )
    return Term(name, op, tuple(words), text)


def _number(word: str, text: str) -> float:
    import math

    try:
        value = float(word)
    except ValueError:
        raise UsageError(f"--filter: {text!r}: {word!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"--filter: {text!r}: {word!r} is not a finite number")
    return value


def _truth(words: Sequence[str], text: str) -> bool:
    if len(words) == 1 and words[0].lower() in ("true", "false"):
        return words[0].lower() == "true"
    raise UsageError(f"--filter: {text!r}: verified is true or false")


def failed_terms(offer: object, terms: Iterable[Term]) -> list[str]:
    """The terms ``offer`` (a gpuops.model.Offer, or anything with the fields named) fails, each as ``filter TERM (the offer's value)``; empty when it
    passes them all."""
    reasons = []
    for term in terms:
        value = getattr(offer, term.field)
        if not _holds(term, value):
            shown = "unknown" if value is None else value
            reasons.append(f"filter {term.text} ({term.field} {shown})")
    return reasons


def _holds(term: Term, value: object) -> bool:
    if value is None:
        return False  # missing is never passing
    if term.field in NUMERIC:
        number = float(value)  # type: ignore[arg-type]
        first = term.values[0]
        assert isinstance(first, float)
        if term.op == "gt":
            return number > first
        if term.op == "gte":
            return number >= first
        if term.op == "lt":
            return number < first
        if term.op == "lte":
            return number <= first
        inside = number in term.values
    else:
        inside = any(_same_text(term.field, str(value), str(v)) for v in term.values)
    return inside if term.op in ("eq", "in") else not inside


def _same_text(field: str, have: str, want: str) -> bool:
    """GPU names compare as gpu_names folds them (any casing or spacing); a location matches
    its whole text or its country code, the part after the last comma (`US` matches
    `Texas, US`), in any casing; other text compares case-blind."""
    if field == "gpu_name":
        return fold_gpu_name(have) == fold_gpu_name(want)
    have, want = have.strip().casefold(), want.strip().casefold()
    if field == "geolocation":
        return want in (have, have.rpartition(",")[2].strip())
    return have == want
