"""The incident register and the observations that earn a rule `verified` (seed 000).

"Write it down the day it happens, find the cause": an incident is recorded with its date,
what happened and its cost; its cause and the rule it led to are added once known. A rule is
shown `verified` only when a real observation or a drill of it is recorded here with its date
(or rules.py carries one); a `written` rule stays "not enforced" whatever was observed.

Both live in the state store (``register/incidents/<id>``, ``register/observations/<id>``),
written by create-if-absent and compare-and-swap, so operators on several hosts share one
register. ``check_*`` and ``shown_status`` are pure; ``Register`` is the store shell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date
from typing import TYPE_CHECKING, Any

from gpuops.errors import CorruptState, UsageError
from gpuops.rule_status import shown_status  # noqa: F401  (re-exported for callers)
from gpuops.rules import RULES
from gpuops.store.base import Store

if TYPE_CHECKING:
    from gpuops.store.records import JsonCodec

INCIDENTS = "register/incidents/"
OBSERVATIONS = "register/observations/"
KINDS = ("real", "drill")
MAX_PER_DAY = 1000
_ID = re.compile(r"\d{4}-\d{2}-\d{2}-\d{1,3}")


@dataclass(frozen=True)
class Incident:
    id: str
    date: str
    what: str
    cost_usd: float | None
    cause: str | None  # None until known
    rule: str | None  # the rule it led to, once there is one
    recorded_by: str
    revision: int = 1


@dataclass(frozen=True)
class Observation:
    id: str
    rule: str
    date: str
    kind: str  # real | drill
    what: str
    recorded_by: str


def check_date(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise UsageError(f"date {text!r} is not a date (use YYYY-MM-DD)") from None


def check_rule(rule_id: str | None) -> str | None:
    if rule_id is None:
        return None
    if rule_id not in {r.id for r in RULES}:
        raise UsageError(f"no rule {rule_id!r}; `gpuops rules` lists them")
    return rule_id


def check_text(field: str, text: str | None) -> str | None:
    if text is not None and not text.strip():
        raise UsageError(f"{field} must not be empty")
    return text


def check_cost(cost_usd: float | None) -> float | None:
    if cost_usd is not None and not cost_usd >= 0:
        raise UsageError(f"cost {cost_usd!r} must be a non-negative number of dollars")
    return cost_usd


def _codec(kind: type, what: str) -> JsonCodec:  # type: ignore[type-arg]
    # lazily: `gpuops rules` reads the register and must start fast
    from gpuops.store.records import Check, JsonCodec, parses

    checks: dict[str, Check] = {
        "date": parses(date.fromisoformat, "a date (YYYY-MM-DD)"),
        "id": (lambda text: _ID.fullmatch(text) is not None, "an entry id like 2026-09-20-1"),
    }
    return JsonCodec(kind, what, checks=checks)


class Register:
    def __init__(self, store: Store, operator: str) -> None:
        self.store = store
        self.operator = operator
        # entries `incidents` and `observations` could not read: each blocks only itself
        self.corrupt: dict[str, CorruptState] = {}

    def add(
        self, *, on: str, what: str, cost_usd: float | None, cause: str | None, rule: str | None
    ) -> Incident:
        incident = Incident(
            "",
            check_date(on),
            str(check_text("what", what)),
            check_cost(cost_usd),
            check_text("cause", cause),
            check_rule(rule),
            self.operator,
        )
        return replace(incident, id=self._create(INCIDENTS, incident.date, incident))

    def update(
        self, incident_id: str, *, cause: str | None, rule: str | None, cost_usd: float | None
    ) -> Incident:
        """Add the cause, the rule or the cost once known (compare-and-swap)."""
        if not _ID.fullmatch(incident_id):
            raise UsageError(f"incident id {incident_id!r} is not like 2026-09-20-1")
        if cause is None and rule is None and cost_usd is None:
            raise UsageError("nothing to update: give --cause, --rule or --cost-usd")
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("cause", check_text("cause", cause)),
                ("rule", check_rule(rule)),
                ("cost_usd", check_cost(cost_usd)),
            )
            if v is not None
        }

        def add_what_is_known(current: Incident | None) -> Incident:
            if current is None:
                raise UsageError(f"no incident {incident_id!r}; `gpuops incident list` shows them")
            return replace(current, **changes, revision=current.revision + 1)

        done = self._records(INCIDENTS, Incident).update(incident_id, add_what_is_known)
        return done.after  # type: ignore[no-any-return]

    def observe(self, *, rule: str, on: str, kind: str, what: str) -> Observation:
        """Record a real observation or a drill of an implemented rule working."""
        checked = check_rule(rule)
        if kind not in KINDS:
            raise UsageError(f"observation kind {kind!r} must be one of {', '.join(KINDS)}")
        observation = Observation(
            "", str(checked), check_date(on), kind, str(check_text("what", what)), self.operator
        )
        return replace(observation, id=self._create(OBSERVATIONS, observation.date, observation))

    def incidents(self) -> list[Incident]:
        return sorted(self._all(INCIDENTS, Incident), key=lambda i: (i.date, _seq(i.id)))

    def observations(self) -> list[Observation]:
        return sorted(self._all(OBSERVATIONS, Observation), key=lambda o: (o.date, _seq(o.id)))

    def _records(self, prefix: str, kind: type):  # type: ignore[no-untyped-def]
        from gpuops.store.records import Records

        return Records(self.store, prefix, _codec(kind, "register entry"))

    def _create(self, prefix: str, day: str, value: Incident | Observation) -> str:
        """The next free ``<day>-<n>``, taken by create-if-absent (a lost race tries n + 1)."""
        records = self._records(prefix, type(value))
        taken = len(self.store.list(f"{prefix}{day}-"))
        for n in range(taken + 1, MAX_PER_DAY):
            if records.create(f"{day}-{n}", replace(value, id=f"{day}-{n}")):
                return f"{day}-{n}"
        raise UsageError(f"more than {MAX_PER_DAY - 1} register entries on {day}")

    def _all(self, prefix: str, kind: type) -> list:  # type: ignore[type-arg]
        records = self._records(prefix, kind)
        out: list = records.all()  # type: ignore[type-arg]
        self.corrupt.update(records.corrupt)
        return out


def _seq(entry_id: str) -> int:
    return int(entry_id.rsplit("-", 1)[1])
