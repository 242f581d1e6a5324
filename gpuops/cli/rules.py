"""`gpuops rules`: every rule with its honest status; printing only."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuops.errors import ExitCode
from gpuops.output import print_json

if TYPE_CHECKING:
    from gpuops.register import Observation


def print_rules(as_json: bool, state_url: str | None, s3_endpoint: str | None = None) -> int:
    """`gpuops rules`: verified only from a dated observation (rules.py or the register)."""
    from gpuops.rule_status import shown_status
    from gpuops.rules import RULES

    observed = _observations(state_url, s3_endpoint)
    if as_json:
        rows = []
        for rule in RULES:
            status, seen = shown_status(rule, observed)
            rows.append({**rule.__dict__, "status": status.split(" ")[0], "observed": seen})
        print_json(rows)
        return ExitCode.OK
    for rule in RULES:
        status, seen = shown_status(rule, observed)
        print(f"{rule.id:<4} {status:<22} {rule.summary}")
        if rule.test:
            print(f"{'':28}enforced by {rule.test}")
        if rule.scope:
            print(f"{'':28}scope: {rule.scope}")
        if seen:
            print(f"{'':28}observed: {seen}")
    return ExitCode.OK


def _observations(state_url: str | None, s3_endpoint: str | None = None) -> list[Observation]:
    """The register's observations; none when none was ever recorded (rules creates nothing,
    and a local state without observations costs `gpuops rules` no import)."""
    if state_url is None:
        return []
    local = Path(state_url.removeprefix("file://")).expanduser()
    if not state_url.startswith("s3://") and not (local / "register" / "observations").is_dir():
        return []
    from gpuops.register import Register
    from gpuops.store import open_store

    return Register(open_store(state_url, s3_endpoint), "reader").observations()
