"""`gpuops record vast`: a one-cent rental that captures the provider's raw output (H1, H3).

"They were caught by renting one box for a cent and printing the raw output" (seed 001).
Every HTTP exchange is kept as it came off the wire by an ``ExchangeLog`` observer the adapter
is built with (gpuops/providers/transport.py: requests' public response hook on the adapter's
own session), the SSH probe's raw output is kept step by step, the box is destroyed with
confirmation (M4), and each exchange is written as one recording with provenance
``captured``, the date and the client versions, scrubbed (H3), by ``write_exchanges``: the
one writer ``record vast`` and ``record gce`` share.

Spending: nothing at all without ``yes_spend``; ``max_usd`` (default 0.05) caps the price of
the one box: only offers whose ``dph_total`` for timing.RECORD_HOLD_S stays within it are
visible to the rent, which races one offer (k = 1) under the usual rules.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import UsageError
from gpuops.events import EventLog
from gpuops.market.select import DEFAULT_VRAM_FLOOR_MB
from gpuops.providers.transport import Exchange, ExchangeLog
from gpuops.secrets import scrub

if TYPE_CHECKING:
    from gpuops.settings import Settings

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


def client_versions(names: tuple[str, ...] = ("gpuops", "vastai", "requests")) -> str:
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

    def search_offers(
        self,
        gpu_name: str | None = None,
        num_gpus: int | None = None,
        *,
        rented: bool | None = None,
    ) -> list[Any]:
        found = self._vast.search_offers(gpu_name, num_gpus, rented=rented)
        return [o for o in found if o.dph_total <= self._max_dph]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._vast, name)


def record_vast(
    *,
    settings: Settings,
    operator: str,
    gpu_name: str,
    max_usd: float,
    yes_spend: bool,
    root: Path,
    clock: Clock = SYSTEM,
    progress: Callable[[str], None] = lambda line: None,
) -> Captured:
    max_dph = max_price_per_hour(max_usd, yes_spend)  # before any network call
    from gpuops.market.ending import destroy_rental
    from gpuops.market.rent import RentRequest

    started = datetime.fromtimestamp(clock.wall(), UTC)
    stamp = started.strftime("%Y%m%dT%H%M%S")
    captured = Captured(f"record-{stamp}")
    steps: list[tuple[str, Any, Any]] = []  # (step, argv, StepOutput) in order
    checks: list[tuple[int, str, Any]] = []  # (exchange index, op, parsed answer)
    log = ExchangeLog()
    market, adapter = _recording_market(
        settings, operator, log, max_dph, _capturing_prober(settings, steps, captured), progress
    )

    def kept(op: str, call: Callable[[], Any]) -> Any:
        value = call()
        checks.append((len(log) - 1, op, value))
        return value

    try:
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
    finally:
        _write(captured, list(log.exchanges), checks, steps, root, stamp, started)
    return captured


def _recording_market(
    settings: Settings,
    operator: str,
    log: ExchangeLog,
    max_dph: float,
    probe: Any,
    progress: Callable[[str], None],
) -> tuple[Any, Any]:
    """The market a recording rents through, every collaborator given at construction: the
    adapter built with the exchange log as its observer, the offers capped at ``max_dph``,
    the capturing probe, price-only ranking (this is about formats) and no pacing."""
    from gpuops.ledger import Ledger
    from gpuops.market.rent import Market
    from gpuops.market.session import read_public_key
    from gpuops.providers import vastai_lazy
    from gpuops.providers.vast import VastAdapter, find_api_key

    vastai_lazy.install()
    events = EventLog(settings.events_path, operator)
    adapter = VastAdapter(
        # VAST_API_KEY, else the config file's vast_api_key, else vastai's key files
        api_key=find_api_key(settings.environ, settings.vast_api_key),
        base_url=settings.vast_url,
        events=events,
        observers=(log,),
    )
    market = Market(
        _CappedVast(adapter, max_dph),
        Ledger(settings.open_state(), events, operator),
        events,
        probe=probe,
        public_key=read_public_key(settings.ssh_key),
        progress=progress,
        rng=random.Random(0),
    )
    return market, adapter


def _capturing_prober(
    settings: Settings, steps: list[tuple[str, Any, Any]], captured: Captured
) -> Any:
    """session.ssh_prober's probe, with a runner that keeps each step's raw output."""
    from gpuops.market.probing import probe as probe_box
    from gpuops.market.select import MIN_DISK_MB_PER_S
    from gpuops.model import Verdict
    from gpuops.providers import ssh

    client = settings.ssh()

    def runner(argv: Any, limit: float) -> Any:
        out = client.run(argv, limit)
        steps.append((("gpu", "cuda", "disk", "extra")[min(len(steps), 3)], list(argv), out))
        return out

    def probe(instance: Any, box: str) -> Verdict:
        if instance.ssh_host and instance.ssh_port:
            endpoint = ssh.SshEndpoint(instance.ssh_host, instance.ssh_port)
        elif instance.public_ipaddr and instance.direct_ssh_port:
            endpoint = ssh.SshEndpoint(instance.public_ipaddr, instance.direct_ssh_port)
        else:
            return Verdict.SSH_UNREACHABLE
        result = probe_box(
            endpoint,
            client=client,
            identity_file=settings.identity_file(),
            known_hosts=ssh.known_hosts_path(settings.local_dir, instance.instance_id),
            vram_floor_mb=DEFAULT_VRAM_FLOOR_MB,
            disk_floor_mb_per_s=MIN_DISK_MB_PER_S,
            runner=runner,
        )
        captured.verdict = result.cause.value
        return result.cause

    return probe


def dump_yaml(path: Path, doc: Mapping[str, Any]) -> None:
    """One recording file, as every recording is written."""
    import yaml

    path.write_text(
        yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, width=1 << 20),
        encoding="utf-8",
    )


def write_exchanges(
    exchanges: Sequence[Exchange],
    out: Path,
    *,
    op_of: Callable[[str, str], str],
    tool: str,
    versions: str,
    day: str,
    notes: Callable[[int, int], str],
) -> list[tuple[int, str, Path]]:
    """Each exchange as ``out/NNN_<op>.yaml`` (recordings' format, scrubbed: ``exchange_doc``):
    the one writer of ``record vast`` and ``record gce``. (index, stem, path) per file."""
    if exchanges:
        out.mkdir(parents=True, exist_ok=True)
    written = []
    for index, exchange in enumerate(exchanges):
        parts = urlsplit(exchange.url)
        stem = f"{index:03d}_{op_of(exchange.method, parts.path)}"
        doc = exchange_doc(
            exchange.method,
            exchange.url,
            exchange.status,
            exchange.content_type,
            exchange.body,
            source=f"{tool} against {parts.scheme}://{parts.netloc} ({versions})",
            day=day,
            notes=notes(index, len(exchanges)),
        )
        path = out / f"{stem}.yaml"
        dump_yaml(path, doc)
        written.append((index, stem, path))
    return written


def _write(
    captured: Captured,
    exchanges: list[Exchange],
    checks: list[tuple[int, str, Any]],
    steps: list[tuple[str, Any, Any]],
    root: Path,
    stamp: str,
    started: datetime,
) -> None:
    versions = client_versions()
    by_index = {index: (op, value) for index, op, value in checks}
    for index, stem, path in write_exchanges(
        exchanges,
        root / "vast" / "captured" / stamp,
        op_of=op_of,
        tool="gpuops record vast",
        versions=versions,
        day=started.date().isoformat(),
        notes=lambda i, n: (
            f"Exchange {i + 1} of {n} of rental {captured.name}, kept as it came "
            "off the wire by the adapter's session hook (gpuops/providers/transport.py); scrubbed "
            "by gpuops.secrets.scrub (H3); response headers other than Content-Type left out."
        ),
    ):
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
        dump_yaml(path, doc)
        captured.files.append(path)


def summary(captured: Captured) -> dict[str, Any]:
    return {
        "name": captured.name,
        "verdict": captured.verdict,
        "destroyed": [f"{o.name}: {o.detail}" for o in captured.destroyed],
        "files": [str(p) for p in captured.files],
        "checked": sorted(captured.parsed),
    }
