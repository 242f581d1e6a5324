"""`gpuops record gce`: the lane's calls against GCE, captured raw (H1, H3), never a stop (L1).

The lane's own calls, through the real adapter (gpuops/providers/gce.py) built with an
``ExchangeLog`` observer (gpuops/providers/transport.py: requests' public response hook on the
adapter's own session), so each exchange is kept as it came off the wire: get the instance; set its ``startup-script`` metadata by the
fingerprint just read (other items kept, as the runner merges them); start it, only when it
was TERMINATED (otherwise nothing is changed: the boot running may be someone's job); every
zone-operation poll; the serial port until the recording script's boot shows. The script
prints one line and powers the instance off itself: there is no stop, suspend or delete here
or anywhere in gpuops (L1). Each exchange is written as one recording with provenance
``captured``, the date and the client versions, scrubbed (H3) by record.py's one writer
(``write_exchanges``), the same as ``record vast``.

Spending: nothing at all without ``yes_spend``; the capture costs the lane's running $/h
(``gpuops.lane.decide``) for timing.RECORD_GCE_RUN_S, and is refused when that is over
``max_usd`` (default 0.05), before any network call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import Refused, UsageError
from gpuops.events import EventLog
from gpuops.lane import decide
from gpuops.providers.transport import Exchange, ExchangeLog
from gpuops.record import DEFAULT_MAX_USD, client_versions, write_exchanges

SCRIPT_KEY = "startup-script"
VERSIONS = ("gpuops", "google-auth", "requests")
# (method, last path segment or a part of the path) -> the operation a recording is named after
_OPS = (
    ("POST", "/setMetadata", "set_metadata"),
    ("POST", "/start", "start"),
    ("GET", "/operations/", "operation"),
    ("GET", "/serialPort", "serial"),
    ("GET", "/instances/", "get"),
)


def capture_cost_usd(usd_per_hour: float = decide.RUNNING_USD_PER_HOUR) -> float:
    """What the instance may cost while the capture runs: the lane's rate for the run bound."""
    return decide.cost_usd(timing.RECORD_GCE_RUN_S, 0.0, usd_per_hour=usd_per_hour)


def check_spend(max_usd: float, yes_spend: bool, usd_per_hour: float) -> float:
    """The capture's cost when it may go ahead; refuses before any network call."""
    if not yes_spend:
        raise UsageError(
            "record gce starts the lane's GPU instance and spends real money: pass --yes-spend "
            f"(it is capped by --max-usd, default {DEFAULT_MAX_USD})"
        )
    if not max_usd > 0:
        raise UsageError(f"--max-usd {max_usd!r} must be a positive number of dollars")
    if not usd_per_hour > 0:
        raise UsageError(f"--usd-per-hour {usd_per_hour!r} must be a positive number of dollars")
    cost = capture_cost_usd(usd_per_hour)
    if cost > max_usd:
        raise UsageError(
            f"record gce may cost ${cost:.4f} ({timing.RECORD_GCE_RUN_S:.0f} s at "
            f"${usd_per_hour:.2f}/h), over --max-usd {max_usd}: nothing was called"
        )
    return cost


def op_of(method: str, path: str) -> str:
    for verb, part, op in _OPS:
        if method == verb and (path.endswith(part) or (part.endswith("/") and part in path)):
            return op
    return "call"


def recording_script(stamp: str) -> str:
    """The startup script the capture installs: one line on the serial port, then poweroff."""
    return (
        "#!/bin/bash\n"
        f"# gpuops record gce {stamp}: capture only; the instance powers itself off (L1)\n"
        f'echo "gpuops record gce {stamp}: booted"\n'
        "poweroff\n"
    )


@dataclass
class CapturedGce:
    """What the capture saw: each exchange's parsed answer (to compare a replay with)."""

    name: str
    cost_usd: float
    files: list[Path] = field(default_factory=list)
    parsed: dict[str, tuple[str, Any]] = field(default_factory=dict)  # name -> (op, value)
    status_before: str = ""
    started: bool = False


def record_gce(
    *,
    project: str,
    zone: str,
    instance: str,
    events: EventLog,
    max_usd: float,
    yes_spend: bool,
    root: Path,
    usd_per_hour: float = decide.RUNNING_USD_PER_HOUR,
    endpoint: str | None = None,
    clock: Clock = SYSTEM,
    progress: Callable[[str], None] = lambda line: None,
) -> CapturedGce:
    cost = check_spend(max_usd, yes_spend, usd_per_hour)  # before any network call
    from gpuops.providers.gce import GceAdapter

    started = datetime.fromtimestamp(clock.wall(), UTC)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    captured = CapturedGce(f"record-gce-{stamp}", cost)
    checks: list[tuple[int, str, Any]] = []  # (exchange index, op, parsed answer)
    log = ExchangeLog()
    gce = GceAdapter(project, zone, events=events, endpoint=endpoint, observers=(log,), clock=clock)

    def kept(op: str, call: Callable[[], Any]) -> Any:
        first = len(log)  # the call's first exchange
        value = call()
        checks.append((first, op, value))
        return value

    try:
        before = kept("get", lambda: gce.get(instance))
        captured.status_before = before.status_raw
        if before.status_raw != decide.TERMINATED:
            raise Refused(
                "L2",
                f"instance {instance} is {before.status_raw}: record gce changes and starts "
                "only a TERMINATED instance (a boot you did not start may be running)",
            )
        progress(f"{instance} is TERMINATED; installing the recording script")
        items = {**before.metadata, SCRIPT_KEY: recording_script(stamp)}
        kept("set_metadata", lambda: gce.set_metadata(instance, items, before.fingerprint))
        kept("get", lambda: gce.get(instance))
        progress(f"starting {instance} (priced at ${cost:.4f})")
        kept("start", lambda: gce.start(instance))
        captured.started = True
        _read_serial(instance, gce, kept, clock)
        kept("get", lambda: gce.get(instance))
    finally:
        _write(captured, list(log.exchanges), checks, root, stamp, started)
    return captured


def _read_serial(
    instance: str,
    gce: Any,
    kept: Callable[[str, Callable[[], Any]], Any],
    clock: Clock,
) -> None:
    """Serial port 1 from the start, then from each next offset, until the startup script
    shows or the run bound passes."""
    deadline = clock.monotonic() + timing.RECORD_GCE_RUN_S
    seen, start = "", 0
    while True:
        contents, start = kept("serial", functools.partial(gce.serial_output, instance, start))
        seen += contents
        if SCRIPT_KEY in seen or clock.monotonic() >= deadline:
            return
        clock.sleep(timing.LANE_POLL_S)


def _write(
    captured: CapturedGce,
    exchanges: list[Exchange],
    checks: list[tuple[int, str, Any]],
    root: Path,
    stamp: str,
    started: datetime,
) -> None:
    by_index = {index: (op, value) for index, op, value in checks}
    for index, stem, path in write_exchanges(
        exchanges,
        root / "gce" / "captured" / stamp,
        op_of=op_of,
        tool="gpuops record gce",
        versions=client_versions(VERSIONS),
        day=started.date().isoformat(),
        notes=lambda i, n: (
            f"Exchange {i + 1} of {n} of {captured.name} (the lane's calls; "
            f"instance was {captured.status_before or 'unread'} before), kept as it came off the "
            "wire by the adapter's session hook (gpuops/providers/transport.py); scrubbed by "
            "gpuops.secrets.scrub (H3); request headers (Authorization) and response headers "
            "other than Content-Type left out."
        ),
    ):
        captured.files.append(path)
        if index in by_index:
            captured.parsed[f"captured/{stamp}/{stem}"] = by_index[index]


def summary(captured: CapturedGce) -> dict[str, Any]:
    return {
        "name": captured.name,
        "cost_usd_cap": captured.cost_usd,
        "status_before": captured.status_before,
        "started": captured.started,
        "files": [str(p) for p in captured.files],
        "checked": sorted(captured.parsed),
    }
