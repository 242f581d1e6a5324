"""What `gpuops rules` shows for a rule: its status, earned only by a dated observation.

Apart from register.py so that `gpuops rules` loads only this when nothing was observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuops.rules import IMPLEMENTED, VERIFIED, WRITTEN, Rule


def shown_status(rule: Rule, observed: Sequence[Any]) -> tuple[str, str | None]:
    """The status ``gpuops rules`` shows and the observation that earns it, if any."""
    if rule.status == WRITTEN:
        return "written (not enforced)", None
    if rule.status == VERIFIED:
        return VERIFIED, rule.observed
    mine = sorted((o for o in observed if o.rule == rule.id), key=lambda o: (o.date, o.id))
    if rule.status == IMPLEMENTED and mine:
        last = mine[-1]
        return VERIFIED, f"{last.date}: {last.what} ({last.kind}, recorded by {last.recorded_by})"
    return rule.status, None
