"""`gpuops record vast`: a one-cent rental that captures the provider's raw output (H1, H3).

"They were caught by renting one box for a cent and printing the raw output" (seed 001).
Every HTTP exchange goes through ``responses``' recorder in pass-through mode (the request
reaches the provider; the answer is kept as it came), the SSH probe's raw output is kept step
by step, the box is destroyed with confirmation (M4), and each exchange is written as one
recording with provenance ``captured``, the date and the client versions, scrubbed (H3).

Spending: nothing at all without ``yes_spend``; ``max_usd`` (default 0.05) caps the price of
the one box: only offers whose ``dph_total`` for timing.RECORD_HOLD_S stays within it are
visible to the rent, which races one offer (k = 1) under the usual rules.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gpuops import timing
from gpuops.errors import UsageError
from gpuops.market.select import DEFAULT_VRAM_FLOOR_MB
from gpuops.secrets import scrub

DEFAULT_MAX_USD = 0.05
SECONDS_PER_HOUR = 3600.0
# (method, path prefix) -> the operation a recording is named after; the rest are "call"
_OPS = (
    ("POST", "/api/v0/bundles", "search"),
    ("PUT", "/api/v0/asks/", "create"),
    ("GET", "/api/v0/instances/", "show"),
    ("DELETE", "/api/v0/instances/", "destroy"),
    ("GET", "/api/v1/instances", "list"),
    ("GET", "/api/v0/ssh", "ssh_keys"),
)


def max_price_per_hour(max_usd: float, yes_spend: bool) -> float:
    """The dearest dph_total the recording may rent; refuses before anything is spent."""
    if not yes_spend:
        raise UsageError(
            "record vast rents a real box and spends real money: pass --yes-spend "
            f"(it is capped by --max-usd, default {DEFAULT_MAX_USD})"
        )
    if not max_usd > 0:
        raise UsageError(f"--max-usd {max_usd!r} must be a positive number of dollars")
    return max_usd * SECONDS_PER_HOUR / timing.RECORD_HOLD_S


def op_of(method: str, path: str) -> str:
    for verb, prefix, op in _OPS:
        if method == verb and path.startswith(prefix):
            return op
    return "call"


def client_versions(names: tuple[str, ...] = ("gpuops", "vastai", "requests", "responses")) -> str:
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} unknown")
    return ", ".join(found)


def _scrubbed_value(name: str, value: str) -> str:
    scrubbed = scrub({name: value})
    assert isinstance(scrubbed, dict)
    return str(scrubbed[name])


def exchange_doc(
    method: str,
    url: str,
    status: int,
    content_type: str | None,
    body: str,
    *,
    source: str,
    day: str,
    notes: str,
) -> dict[str, Any]:
    """One exchange in recordings' format (gpuops/providers/__init__.py), scrubbed (H3)."""
    parts = urlsplit(url)
    # scrubbed as {name: value}, so a value is redacted for its parameter's name (api_key=...)
    query = {k: _scrubbed_value(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)}
    request: dict[str, Any] = {"method": method, "path": str(scrub(parts.path))}
    if query:
        request["query"] = query
    response: dict[str, Any] = {"status": status, "body": str(scrub(body))}
    if content_type:
        response["headers"] = {"Content-Type": content_type}
    provenance = {
        "kind": "captured",
        "source": source,
        "date": datetime.fromisoformat(day).date(),
        "notes": notes,
    }
    return {"provenance": provenance, "request": request, "response": response}


@dataclass
class Captured:
    """What a recording run saw: the parsed answers to compare a replay with, and files."""

    name: str
    files: list[Path] = field(default_factory=list)
    parsed: dict[str, tuple[str, Any]] = field(default_factory=dict)  # file stem -> (op, value)
    destroyed: list[Any] = field(default_factory=list)  # teardown.Outcome, one per box
    verdict: str | None = None


class _CappedVast:
    """The provider as the rent sees it: offers above the price cap are not there."""

    def __init__(self, vast: Any, max_dph: float) -> None:
        self._vast = vast
        self._max_dph = max_dph

    def search_offers(self, gpu_name: str | None = None, num_gpus: int | None = None) -> list[Any]:
        return [
            o for o in self._vast.search_offers(gpu_name, num_gpus) if o.dph_total <= self._max_dph
        ]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vast, name)


def record_vast(
    *,
    state_url: str,
    operator: str,
    gpu_name: str,
    max_usd: float,
    yes_spend: bool,
    root: Path,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    progress: Callable[[str], None] = lambda line: None,
) -> Captured:
    max_dph = max_price_per_hour(max_usd, yes_spend)  # before any network call
    from responses._recorder import Recorder

    from gpuops.market.rent import RentRequest, destroy_rental
    from gpuops.market.session import open_market

    started = now()
    stamp = started.strftime("%Y%m%dT%H%M%S")
    captured = Captured(f"record-{stamp}")
    steps: list[tuple[str, Any, Any]] = []  # (step, argv, StepOutput) in order
    checks: list[tuple[int, str, Any]] = []  # (exchange index, op, parsed answer)
    recorder = Recorder()
    with recorder:
        market = open_market(state_url, operator, progress=progress, rng=random.Random(0))
        market.pass_rates = None  # the cheapest box under the cap: this is about formats
        adapter = market.vast
        market.vast = _CappedVast(adapter, max_dph)
        market.probe = _capturing_prober(state_url, DEFAULT_VRAM_FLOOR_MB, steps, captured)

        def kept(op: str, call: Callable[[], Any]) -> Any:
            value = call()
            checks.append((len(recorder.get_registry().registered) - 1, op, value))
            return value

        kept("search", lambda: adapter.search_offers(gpu_name, 1))
        kept("ssh_keys", adapter.list_ssh_keys)
        try:
            rental = market.rent(
                RentRequest(
                    name=captured.name,
                    gpu_name=gpu_name,
                    race_k=1,
                    hours=timing.RECORD_HOLD_S / SECONDS_PER_HOUR,
                )
            )
            kept("show", lambda: adapter.show(str(rental.instance_id)))
        finally:
            if market.rentals.get(captured.name) is not None:
                captured.destroyed = destroy_rental(market, captured.name)  # confirmed (M4)
        exchanges = list(recorder.get_registry().registered)
    _write(captured, exchanges, checks, steps, root, stamp, started)
    return captured


def _capturing_prober(
    state_url: str, vram_floor_mb: int, steps: list[tuple[str, Any, Any]], captured: Captured
) -> Any:
    """session.ssh_prober's probe, with a runner that keeps each step's raw output."""
    from gpuops.market.probe import Verdict
    from gpuops.market.select import MIN_DISK_MB_PER_S
    from gpuops.market.session import local_dir, public_key_path
    from gpuops.providers import ssh

    def runner(argv: Any, limit: float) -> Any:
        out = ssh.run_command(argv, limit)
        steps.append((("gpu", "cuda", "disk", "extra")[min(len(steps), 3)], list(argv), out))
        return out

    def probe(instance: Any, box: str) -> Verdict:
        if instance.ssh_host and instance.ssh_port:
            endpoint = ssh.SshEndpoint(instance.ssh_host, instance.ssh_port)
        elif instance.public_ipaddr and instance.direct_ssh_port:
            endpoint = ssh.SshEndpoint(instance.public_ipaddr, instance.direct_ssh_port)
        else:
            return Verdict.SSH_UNREACHABLE
        result = ssh.probe(
            endpoint,
            identity_file=public_key_path().with_suffix(""),
            known_hosts=ssh.known_hosts_path(local_dir(state_url), instance.instance_id),
            vram_floor_mb=vram_floor_mb,
            disk_floor_mb_per_s=MIN_DISK_MB_PER_S,
            runner=runner,
        )
        captured.verdict = result.cause.value
        return result.cause

    return probe


def _write(
    captured: Captured,
    exchanges: list[Any],
    checks: list[tuple[int, str, Any]],
    steps: list[tuple[str, Any, Any]],
    root: Path,
    stamp: str,
    started: datetime,
) -> None:
    import yaml

    day = started.date().isoformat()
    versions = client_versions()
    vast_dir = root / "vast" / "captured" / stamp
    vast_dir.mkdir(parents=True, exist_ok=True)
    by_index = {index: (op, value) for index, op, value in checks}
    for index, exchange in enumerate(exchanges):
        parts = urlsplit(exchange.url)
        op = op_of(exchange.method, parts.path)
        stem = f"{index:03d}_{op}"
        doc = exchange_doc(
            exchange.method,
            exchange.url,
            exchange.status,
            exchange.content_type if isinstance(exchange.content_type, str) else None,
            exchange.body,
            source=f"gpuops record vast against {parts.scheme}://{parts.netloc} ({versions})",
            day=day,
            notes=f"Exchange {index + 1} of {len(exchanges)} of rental {captured.name}, kept by "
            "responses' recorder in pass-through mode; scrubbed by gpuops.secrets.scrub (H3); "
            "response headers other than Content-Type left out.",
        )
        path = vast_dir / f"{stem}.yaml"
        path.write_text(
            yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 20),
            encoding="utf-8",
        )
        captured.files.append(path)
        if index in by_index:
            captured.parsed[f"captured/{stamp}/{stem}"] = by_index[index]
    ssh_dir = root / "ssh" / "captured" / stamp
    for step, argv, out in steps:
        ssh_dir.mkdir(parents=True, exist_ok=True)
        doc = {
            "provenance": {
                "kind": "captured",
                "source": f"gpuops record vast: the probe's {step} step over ssh ({versions})",
                "date": started.date(),
                "notes": f"Raw output of one probe step on rental {captured.name}; the whole "
                f"probe's verdict was {captured.verdict}. Scrubbed (H3).",
            },
            "step": step,
            "verdict": captured.verdict,
            "command": str(scrub(argv[-1] if argv else "")),
            "exit_code": out.exit_code,
            "stdout": str(scrub(out.stdout)),
            "stderr": str(scrub(out.stderr)),
        }
        path = ssh_dir / f"{step}.yaml"
        path.write_text(
            yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 20),
            encoding="utf-8",
        )
        captured.files.append(path)


def summary(captured: Captured) -> dict[str, Any]:
    return {
        "name": captured.name,
        "verdict": captured.verdict,
        "destroyed": [f"{o.name}: {o.detail}" for o in captured.destroyed],
        "files": [str(p) for p in captured.files],
        "checked": sorted(captured.parsed),
    }
