"""The Vast.ai adapter: the vastai SDK's ``vastai.api`` layer under our retry policy.

Why it is shaped this way:

- **One transport, and we own every retry.** The SDK's public API functions are kept, but
  they are handed ``vast_client.SessionClient``, which sends each request once through the
  ``requests.Session`` this adapter owns (the SDK's ``VastClient`` builds a session of its own
  per call inside a private method, with its own retry loop; it is not used). ``observers``
  given at construction see every exchange on that session (``gpuops record vast``). Reads,
  and the idempotent destroy, are retried here with ``backoff_s`` and the provider's
  ``Retry-After``. **A create is sent exactly once** (M12): a retried create can rent
  a second paid box, so an unclear create is left for the caller to reconcile by its label.
- **One parse, one translation.** Every 2xx body is decoded and parsed in the "parsing"
  section below into ``gpuops.model`` values; the SDK's own return values are not used (its
  post-processing raises bare KeyErrors on drifted rows). Every failure, HTTP or transport,
  becomes a ``gpuops.errors`` exception in ``translate_error`` and nowhere else.
- **Lazy.** ``import vastai`` costs over a second; it happens inside the first call, never at
  import, so ``gpuops --help`` does not pay it. ``requests`` is imported the same way. The key
  and the base URL are constructor arguments: the adapter reads no environment
  (``find_api_key`` reads a given one, and vastai's key files, for the CLI's session).
- **Observable, never leaky.** Each HTTP exchange is one ``vast.call`` event (op, method,
  path without query, status, duration, attempt). The API key lives only in the client's
  Authorization header: it is never logged, never put in an error, never in ``repr`` (H3).

Shapes follow ``recordings/vast/`` (H1), each file with its provenance.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from gpuops import event_ops as ops
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    AuthFailed,
    GpuopsError,
    OfferTaken,
    ProviderError,
    ProviderUnavailable,
    RateLimited,
    SearchQuotaExceeded,
    StateError,
    UnexpectedResponse,
    UsageError,
)
from gpuops.event_base import Kinded, write
from gpuops.events import EventLog
from gpuops.model import Instance, InstanceStatus, KeyHolder, Offer, SshKey
from gpuops.providers.transport import Observer, new_session
from gpuops.providers.vast_client import SessionClient
from gpuops.secrets import scrub

__all__ = [
    "DEFAULT_URL",
    "READ_ATTEMPTS",
    "VastAdapter",
    "backoff_s",
    "find_api_key",
    "translate_error",
]

PROVIDER = "vast"
DEFAULT_URL = "https://console.vast.ai"
# A read is tried at most this many times in all (1 + 3 retries): worst case 1+2+4 s of backoff.
READ_ATTEMPTS = 4
# The v1 instance list serves at most 25 rows a page (show_instances_v1.yaml).
LIST_PAGE_LIMIT = 25
# create_instance.yaml x-input-validation: label max_length 256.
LABEL_MAX_CHARS = 256
# "onstart field is limited to 4048 characters" (openapi Key Quirks in vast-ai/vast-cli).
ONSTART_MAX_CHARS = 4048
# Destroying an instance that is already gone: documented as not_found (destroy_instance.yaml),
# no_such_instance per label_instance.yaml and third-party clients. Both mean gone.
GONE_ERRORS = frozenset({"no_such_instance", "not_found"})
_INSTANCE_ID = re.compile(r"[0-9]+")
_PUBLIC_KEY = re.compile(r"(ssh-|ecdsa-|sk-)[A-Za-z0-9@.\-]+ [A-Za-z0-9+/=]+")

T = TypeVar("T")


def backoff_s(attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (0-based): doubling, capped.

    ``BACKOFF_BASE_S * 2**attempt``, never above ``BACKOFF_MAX_S``. Pure.
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, not {attempt}")
    return min(timing.BACKOFF_MAX_S, timing.BACKOFF_BASE_S * 2.0 ** min(attempt, 64))


# --- the adapter --------------------------------------------------------------------------------
class VastAdapter:
    """Vast.ai through the ``vastai`` package, one method per provider call gpuops makes."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        events: EventLog | None = None,
        clock: Clock = SYSTEM,
        read_attempts: int = READ_ATTEMPTS,
        observers: Sequence[Observer] = (),
    ) -> None:
        """``api_key``: required (``find_api_key`` reads it from an environment and vastai's
        key files). ``base_url``: else console.vast.ai (a loopback fake is just another base
        URL). ``clock``: its ``sleep`` is the backoff's only way to wait (the CLI's waits in the
        shared call budget; tests pass a recorder or a fake's clock and never sleep), its
        ``monotonic`` times each exchange. ``observers`` see every response on the adapter's one session (transport.py)."""
        self.base_url = _checked_url(base_url or DEFAULT_URL)
        self._api_key = _resolve_api_key(api_key, {})
        if read_attempts < 1:
            raise UsageError(f"read_attempts must be at least 1, not {read_attempts}")
        self._events = events
        self._clock = clock
        self._read_attempts = read_attempts
        self._observers = tuple(observers)
        self._session: Any = None

    def __repr__(self) -> str:
        return f"VastAdapter(base_url={self.base_url!r})"  # never the key (H3)

    # --- reads: retried ------------------------------------------------------------------------
    def search_offers(
        self,
        gpu_name: str | None = None,
        num_gpus: int | None = None,
        limit: int = 32,
        *,
        min_reliability: float | None = None,
        min_disk_bw: float | None = None,
        max_dph_total: float | None = None,
        rented: bool | None = None,
    ) -> list[Offer]:
        """Rentable on-demand offers, best score first (the SDK's default filters and order).
        ``rented=True`` lists the offers rented now instead (Vast's ``rented`` filter, whose
        default is false): a GPU whose every offer is rented is capacity, not a typo.

        ``gpu_name`` is Vast's spelling with spaces ("RTX 4090"); ``min_disk_bw`` in MB/s,
        ``max_dph_total`` in $/hour. A search-quota 429 raises SearchQuotaExceeded at once.
        """
        if limit < 1:
            raise UsageError(f"limit must be at least 1, not {limit}")
        query: dict[str, object] = {}
        for name, op, value in (
            ("gpu_name", "eq", gpu_name),
            ("num_gpus", "eq", num_gpus),
            ("reliability", "gte", min_reliability),
            ("disk_bw", "gte", min_disk_bw),
            ("dph_total", "lte", max_dph_total),
            ("rented", "eq", rented),
        ):
            if value is not None:
                query[name] = {op: value}

        def call(client: Any) -> None:
            _vastai("offers").search_offers(client, query=query, limit=limit)

        return self._parsed("search_offers", self._exchange("search_offers", call), _parse_offers)

    def show(self, instance_id: str) -> Instance | None:
        """The instance, or None when Vast answers ``{"instances": null}``: the box is gone.

        A row whose ``id`` is not ``instance_id`` is an UnexpectedResponse, never a
        confirmation about another box (M4).
        """
        number = _instance_number(instance_id)

        def call(client: Any) -> None:
            _vastai("instances").show_instance(client, number)

        reply = self._exchange("show", call)
        found = self._parsed("show", reply, _parse_show)
        if found is not None and found.instance_id != str(number):
            raise _unexpected("show", f"asked for {number}, got {found.instance_id}", reply)
        return found

    def list_instances(self, *, label: str | None = None) -> list[Instance]:
        """Every instance of the account (optionally only those labelled ``label``), paging
        the v1 list through ``next_token``; each page is retried on its own."""
        params: dict[str, object] = {
            "select_filters": {} if label is None else {"label": {"eq": label}},
            "order_by": [{"col": "id", "dir": "asc"}],
            "limit": LIST_PAGE_LIMIT,
        }
        found: list[Instance] = []
        seen: set[str] = set()
        while True:
            page_params = dict(params)

            def call(client: Any, page_params: dict[str, object] = page_params) -> None:
                _vastai("instances").show_instances_v1(client, page_params)

            reply = self._exchange("list_instances", call)
            rows, token = self._parsed("list_instances", reply, _parse_page)
            found.extend(rows)
            if token is None:
                return found
            if token in seen:
                raise _unexpected("list_instances", f"next_token {token!r} repeats", reply)
            seen.add(token)
            params["after_token"] = token

    def list_ssh_keys(self) -> list[SshKey]:
        """The account's SSH keys (M9). Keys with a ``deleted_at`` are left out: they no longer
        open any box, so counting them would let a race start with an unusable key."""

        def call(client: Any) -> None:
            _vastai("keys").show_ssh_keys(client)

        return self._parsed("list_ssh_keys", self._exchange("list_ssh_keys", call), _parse_keys)

    def current_user(self) -> KeyHolder:
        """Whose key this is (``GET /users/current``, which needs Vast's ``user_read``): the
        user's id and, where the answer names one, their username. Vast's answer also carries
        the key itself; it is parsed here and kept nowhere (H3)."""

        def call(client: Any) -> None:
            _vastai("billing").show_user(client)

        return self._parsed("current_user", self._exchange("current_user", call), _parse_user)

    # --- writes --------------------------------------------------------------------------------
    def create(
        self, offer_id: int, *, label: str, image: str, disk_gb: float, onstart: str | None = None
    ) -> str:
        """Rent ``offer_id``; the new instance id (Vast's ``new_contract``). Sent exactly once.

        Never retried, by us or by the SDK (M12): a retry could rent a second paid box.
        Clear refusals: OfferTaken (``no_such_ask``), AuthFailed, SearchQuotaExceeded.
        Unclear outcomes, where a box may exist: ProviderUnavailable (5xx, lost connection,
        timeout) and UnexpectedResponse on a 2xx; RateLimited most likely created nothing,
        but only a reconcile by ``label`` proves it. ``cancel_unavail`` is sent true: an
        offer that cannot start now fails with 410 instead of becoming a stopped box.
        """
        _check_create(offer_id, label, image, disk_gb, onstart)

        def call(client: Any) -> None:
            _vastai("instances").create_instance(
                client,
                offer_id,
                image=image,
                disk=disk_gb,
                label=label,
                onstart_cmd=onstart,
                ssh=True,
                direct=True,
                cancel_unavail=True,
            )

        reply = self._exchange("create", call, retry=False, offer_id=offer_id)
        return self._parsed("create", reply, _parse_new_contract)

    def destroy(self, instance_id: str) -> None:
        """Destroy the instance; returns once Vast accepted it or says it is already gone.

        Retried like a read: destroying twice is harmless, and a retry whose first attempt
        landed gets 404 ``no_such_instance``/``not_found``, which means gone. Any other 404 is
        an UnexpectedResponse. Returning is not confirmation (M4): ask ``show`` for the box.
        """
        number = _instance_number(instance_id)

        def call(client: Any) -> None:
            _vastai("instances").destroy_instance(client, number)

        reply = self._exchange("destroy", call, gone_on_404=True)
        if reply.status != 404:  # a 404 reaches here only with an error that means gone
            self._parsed("destroy", reply, _parse_destroyed)

    def register_ssh_key(self, public_key: str) -> SshKey:
        """Register an OpenSSH public key with the account (M9). Sent once: not idempotent.

        A private key is refused before anything is sent (H3).
        """
        key = public_key.strip()
        if "PRIVATE KEY" in key:
            raise UsageError("that is a private key; only the .pub half is ever sent (H3)")
        if not _PUBLIC_KEY.match(key):
            raise UsageError("not an OpenSSH public key (expected 'ssh-ed25519 AAAA... comment')")

        def call(client: Any) -> None:
            _vastai("keys").create_ssh_key(client, key)

        reply = self._exchange("register_ssh_key", call, retry=False)
        registered = self._parsed("register_ssh_key", reply, _parse_registered)
        if not registered.matches(key):
            raise _unexpected("register_ssh_key", "the registered key is not the one sent", reply)
        return registered

    # --- one exchange, with our retry policy ---------------------------------------------------
    def _exchange(
        self,
        op: str,
        call: Callable[[Any], None],
        *,
        retry: bool = True,
        offer_id: int | None = None,
        gone_on_404: bool = False,
    ) -> _Reply:
        attempts = self._read_attempts if retry else 1
        for attempt in range(attempts):
            try:
                return self._once(op, call, attempt, offer_id, gone_on_404)
            except (RateLimited, ProviderUnavailable) as err:
                wait = _retry_wait(err, attempt, attempts)
                if wait is None:
                    raise
                self._log(ops.VastRetry(op=op, attempt=attempt, wait_s=wait, reason=str(err)))
                self._clock.sleep(wait)
        raise AssertionError  # unreachable: _retry_wait gives up on the last attempt

    def _once(
        self,
        op: str,
        call: Callable[[Any], None],
        attempt: int,
        offer_id: int | None,
        gone_on_404: bool,
    ) -> _Reply:
        import requests

        client = self._client(op, attempt)
        try:
            call(client)
        except requests.HTTPError as exc:
            response = exc.response
            if response is None:
                raise ProviderError(PROVIDER, f"{op}: an HTTP error without a response") from exc
            if not (gone_on_404 and response.status_code == 404 and _is_gone(response.text)):
                raise translate_error(
                    response.status_code, response.text, response.headers, offer_id=offer_id
                ) from exc
            # else a 404 that means gone: the SDK kept it as last_response, returned below
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise translate_error(None, cause=exc) from exc
        except requests.JSONDecodeError:
            pass  # the SDK could not read the body; the parser below names what is wrong
        except requests.RequestException as exc:  # a bad URL, too many redirects: not transient
            raise ProviderError(PROVIDER, f"{op}: {type(exc).__name__}: {exc}") from exc
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError):
            if client.last_response is None:
                raise  # not about a body: a bug here or in the SDK, shown as it is
            # else the SDK tripped over a drifted body; the parser below names what is wrong
        response = client.last_response
        if response is None:
            raise ProviderError(PROVIDER, f"{op}: the SDK returned without sending a request")
        return _Reply(response.status_code, response.text)

    def _client(self, op: str, attempt: int) -> Any:
        """A client per attempt over the adapter's one session (the attempt is in its events)."""

        def observe(
            method: str, url: str, status: int | None, duration: float, exc: BaseException | None
        ) -> None:
            self._log(
                ops.VastCall(
                    op=op,
                    method=method,
                    path=urlsplit(url).path,
                    status=status,
                    duration_s=round(duration, 6),
                    attempt=attempt,
                    error=None if exc is None else type(exc).__name__,
                )
            )

        if self._session is None:
            self._session = new_session(self._observers)
        return SessionClient(
            self._session,
            api_key=self._api_key,
            server_url=self.base_url,
            user_agent=_user_agent(),
            timeout_s=timing.HTTP_TIMEOUT_S,
            observe=observe,
            clock=self._clock,
        )

    def _parsed(self, op: str, reply: _Reply, parse: Callable[[object], T]) -> T:
        try:
            doc = json.loads(reply.body)
        except (ValueError, RecursionError):
            raise _unexpected(op, "the body is not JSON", reply) from None
        try:
            return parse(doc)
        except _Drift as drift:
            raise _unexpected(op, str(drift), reply) from None

    def _log(self, event: Kinded) -> None:
        """Append to the event log, if any. The log is an audit trail, not the truth (events.py):
        a disk that refuses a line must not lose a provider's answer, least of all a create's
        instance id, so a failed write is a loud warning rather than an exception mid-call."""
        if self._events is None:
            return
        try:
            write(self._events, event)
        except StateError as exc:
            warnings.warn(f"{event.KIND} not written to the event log: {exc}", RuntimeWarning, 2)


@dataclass(frozen=True)
class _Reply:
    status: int
    body: str


def _retry_wait(
    err: RateLimited | ProviderUnavailable, attempt: int, attempts: int
) -> float | None:
    """Seconds before the next attempt, or None to give up and raise ``err``."""
    if attempt + 1 >= attempts or isinstance(err, SearchQuotaExceeded):
        return None  # the quota resets at UTC midnight: retrying only burns requests
    if isinstance(err, RateLimited) and err.retry_after_s is not None:
        # Honour the provider's hint; one longer than we would ever back off goes to the caller.
        return err.retry_after_s if err.retry_after_s <= timing.BACKOFF_MAX_S else None
    return backoff_s(attempt)


def _vastai(module: str) -> Any:
    """``vastai.api.<module>``, imported on first use: ``import vastai`` costs over a second."""
    return importlib.import_module(f"vastai.api.{module}")


@functools.cache
def _user_agent() -> str:
    """The SDK's own User-Agent (``vastai-sdk/<version>``), as its VastClient sends it."""
    return f"vastai-sdk/{importlib.import_module('vastai.utils').VERSION}"


# --- translating failures: the one place ---------------------------------------------------------
def translate_error(
    status: int | None,
    body: str = "",
    headers: Mapping[str, str] | None = None,
    *,
    offer_id: int | None = None,
    cause: BaseException | None = None,
) -> GpuopsError:
    """The gpuops error for a failed Vast exchange (``status`` None: no answer at all).

    429 ``search_quota_exceeded`` -> SearchQuotaExceeded; other 429 (plain text or JSON) ->
    RateLimited with ``Retry-After`` seconds when given; ``no_such_ask`` in error or msg with
    400/404/410 on a create -> OfferTaken; 401/403 or ``auth_error`` -> AuthFailed; 5xx or no
    answer -> ProviderUnavailable; anything else -> UnexpectedResponse. Bodies are scrubbed.
    """
    text = str(scrub(body))
    if status is None:
        reason = "no answer" if cause is None else f"{type(cause).__name__}: {cause}"
        return ProviderUnavailable(PROVIDER, str(scrub(reason)))
    doc = _json_object(body)
    error = _wire_text(doc, "error")
    if doc is None:  # plain text, e.g. a 429's "API requests too frequent"
        message = " ".join(text.split())[:200]
    else:  # the docs: "some return only msg or message"
        message = _wire_text(doc, "msg") or _wire_text(doc, "message") or _wire_text(doc, "detail")
    found = _header(headers, "x-ratelimit-reset")
    if status == 429 and error == "search_quota_exceeded":
        reset = f"; it resets at {_epoch_text(found)}" if found else ""
        return SearchQuotaExceeded(PROVIDER, f"search quota exceeded{reset}", body=text)
    if status == 429:
        wait = _seconds(_header(headers, "retry-after"))
        return RateLimited(PROVIDER, message or "HTTP 429", body=text, retry_after_s=wait)
    if offer_id is not None and status in (400, 404, 410) and "no_such_ask" in error + message:
        return OfferTaken(PROVIDER, offer_id, status, text)
    if status in (401, 403) or error == "auth_error":
        return AuthFailed(PROVIDER, f"credentials refused (HTTP {status}): {message}", status, text)
    if status >= 500:
        return ProviderUnavailable(PROVIDER, f"HTTP {status} {message}".strip(), status, text)
    return UnexpectedResponse(PROVIDER, f"HTTP {status} {error} {message}".strip(), status, text)


def _unexpected(op: str, problem: str, reply: _Reply) -> UnexpectedResponse:
    text = str(scrub(reply.body))
    start = text[:120]
    return UnexpectedResponse(
        PROVIDER, f"{op}: {problem} (body starts {start!r})", reply.status, text
    )


def _json_object(body: str) -> Mapping[str, object] | None:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _is_gone(body: str) -> bool:
    """A 404 on DELETE whose error says the instance does not exist (any other 404 is not)."""
    return _wire_text(_json_object(body), "error") in GONE_ERRORS


def _wire_text(doc: Mapping[str, object] | None, name: str) -> str:
    value = None if doc is None else doc.get(name)
    return value if isinstance(value, str) else ""


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """The value of header ``name`` (given in lower case), whatever case the server used."""
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return value
    return None


def _seconds(value: str | None) -> float | None:
    """Retry-After as seconds; the HTTP-date form is not honoured (None: use our backoff)."""
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _epoch_text(value: str) -> str:
    try:
        return f"{datetime.fromtimestamp(int(value), UTC):%Y-%m-%d %H:%M} UTC"
    except (ValueError, OverflowError, OSError):
        return repr(value)


# --- parsing: every body becomes model values here, and only here ---------------------------------
_SHOWN_CHARS = 40  # of a drifted value in the message


class _Drift(Exception):
    """A body whose shape differs from the recordings; becomes an UnexpectedResponse."""


def _parse_offers(doc: object) -> list[Offer]:
    offers = _object(doc, "body").get("offers")
    if not isinstance(offers, list):
        raise _Drift(f"field 'offers' is {_kind(offers)}, expected a list")
    return [_parse_offer(row, f"offers[{i}]") for i, row in enumerate(offers)]


def _parse_offer(row: object, where: str) -> Offer:
    doc = _object(row, where)
    reliability = _opt_num(doc, "reliability2", where)
    return Offer(
        id=_int(doc, "id", where),
        machine_id=_int(doc, "machine_id", where),
        host_id=_int(doc, "host_id", where),
        gpu_name=_str(doc, "gpu_name", where),
        num_gpus=_int(doc, "num_gpus", where),
        gpu_ram=_int(doc, "gpu_ram", where),
        dph_total=_num(doc, "dph_total", where),
        reliability=_opt_num(doc, "reliability", where) if reliability is None else reliability,
        disk_bw=_opt_num(doc, "disk_bw", where),
        inet_down=_opt_num(doc, "inet_down", where),
        cuda_max_good=_cuda(doc, where),
        geolocation=_opt_str(doc, "geolocation", where),
        verification=_opt_str(doc, "verification", where),
        end_date=_opt_num(doc, "end_date", where),
        raw=dict(doc),
    )


def _parse_show(doc: object) -> Instance | None:
    body = _object(doc, "body")
    if "instances" not in body:
        raise _Drift("field 'instances' is missing")
    row = body["instances"]
    return None if row is None else _parse_instance(row, "instances")


def _parse_page(doc: object) -> tuple[list[Instance], str | None]:
    body = _object(doc, "body")
    rows = body.get("instances")
    if rows is not None and not isinstance(rows, list):
        raise _Drift(f"field 'instances' is {_kind(rows)}, expected a list")
    parsed = [_parse_instance(row, f"instances[{i}]") for i, row in enumerate(rows or [])]
    return parsed, _opt_str(body, "next_token", "body") or None


def _parse_instance(row: object, where: str) -> Instance:
    doc = _object(row, where)
    if "actual_status" not in doc:  # null means provisioning; absent means we cannot tell
        raise _Drift(f"{where}: field 'actual_status' is missing")
    raw_status = _opt_str(doc, "actual_status", where)
    ssh_host = _opt_str(doc, "ssh_host", where)
    public_ipaddr = _opt_str(doc, "public_ipaddr", where)
    return Instance(
        instance_id=str(_int(doc, "id", where)),
        label=_opt_str(doc, "label", where),
        actual_status=InstanceStatus.from_wire(raw_status),
        actual_status_raw=raw_status,
        ssh_host=None if ssh_host is None else ssh_host.strip(),
        ssh_port=_opt_int(doc, "ssh_port", where),
        public_ipaddr=None if public_ipaddr is None else public_ipaddr.strip(),
        direct_ssh_port=_direct_ssh_port(doc.get("ports"), where),
        machine_id=_opt_int(doc, "machine_id", where),
        gpu_name=_opt_str(doc, "gpu_name", where),
        dph_total=_opt_num(doc, "dph_total", where),
        start_date=_opt_num(doc, "start_date", where),
    )


def _direct_ssh_port(ports: object, where: str) -> int | None:
    """``ports["22/tcp"][0]["HostPort"]`` (a string of digits) when Vast maps port 22.

    ``ports`` is absent or null before running (show_instances_v1.yaml) and documented as a
    list of ints in show_instance.yaml: neither maps port 22, so both are None, not drift.
    """
    if not isinstance(ports, dict) or ports.get("22/tcp") is None:
        return None
    name = f'{where}.ports["22/tcp"][0].HostPort'
    bindings = ports["22/tcp"]
    first = bindings[0] if isinstance(bindings, list) and bindings else None
    value = first.get("HostPort") if isinstance(first, dict) else None
    text = str(value)  # of JSON values, only a string or an int can print as digits
    if not text.isdigit():
        raise _Drift(f"field {name} is {_kind(value)}, expected a port number")
    return int(text)


def _parse_new_contract(doc: object) -> str:
    body = _object(doc, "body")
    if body.get("success") is False:
        raise _Drift("success is false on a 2xx")
    return str(_int(body, "new_contract", "body"))


def _parse_destroyed(doc: object) -> None:
    if _object(doc, "body").get("success") is False:
        raise _Drift("success is false on a 2xx: the destroy was not accepted")


def _parse_keys(doc: object) -> list[SshKey]:
    if not isinstance(doc, list):
        raise _Drift(f"the body is {_kind(doc)}, expected a list of keys")
    keys = []
    for i, row in enumerate(doc):
        where = f"[{i}]"
        entry = _object(row, where)
        if entry.get("deleted_at") is None:
            keys.append(SshKey(id=_int(entry, "id", where), public_key=_str(entry, "key", where)))
    return keys


def _parse_user(doc: object) -> KeyHolder:
    body = _object(doc, "body")
    return KeyHolder(user_id=_int(body, "id", "body"), username=_opt_str(body, "username", "body"))


def _parse_registered(doc: object) -> SshKey:
    body = _object(doc, "body")
    key = _object(body.get("key"), "key")
    return SshKey(id=_int(key, "id", "key"), public_key=_str(key, "public_key", "key"))


# --- field readers: a missing or mistyped field names itself -------------------------------------
def _object(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise _Drift(f"{where} is {_kind(value)}, expected an object")
    return value


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), f"a {type(value).__name__}")


def _shown(value: object) -> str:
    """A value for a drift message, cut short: a number can be hundreds of digits long."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text)} chars)"


def _missing(doc: Mapping[str, object], name: str, where: str) -> _Drift:
    return _Drift(f"{where}: field {name!r} is {'null' if name in doc else 'missing'}")


def _opt_int(doc: Mapping[str, object], name: str, where: str) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Drift(f"{where}: field {name!r} is {_kind(value)} {_shown(value)}, expected an integer")


def _int(doc: Mapping[str, object], name: str, where: str) -> int:
    value = _opt_int(doc, name, where)
    if value is None:
        raise _missing(doc, name, where)
    return value


def _opt_num(doc: Mapping[str, object], name: str, where: str) -> float | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not _finite(value):
        raise _Drift(
            f"{where}: field {name!r} is {_kind(value)} {_shown(value)}, expected a number"
        )
    return float(value)


def _finite(value: float) -> bool:
    """Whether a JSON number is a finite float: an integer beyond float range (10**400) is not."""
    return -sys.float_info.max <= value <= sys.float_info.max


def _num(doc: Mapping[str, object], name: str, where: str) -> float:
    value = _opt_num(doc, name, where)
    if value is None:
        raise _missing(doc, name, where)
    return value


def _opt_str(doc: Mapping[str, object], name: str, where: str) -> str | None:
    value = doc.get(name)
    if value is not None and not isinstance(value, str):
        raise _Drift(f"{where}: field {name!r} is {_kind(value)}, expected a string")
    return value


def _str(doc: Mapping[str, object], name: str, where: str) -> str:
    value = _opt_str(doc, name, where)
    if value is None:
        raise _missing(doc, name, where)
    return value


def _cuda(doc: Mapping[str, object], where: str) -> float | None:
    """A number in the offer docs; vastai's data/instance.py types it as a string, so a numeric
    string is read too."""
    value = doc.get("cuda_max_good")
    if not isinstance(value, str):
        return _opt_num(doc, "cuda_max_good", where)
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise _Drift(f"{where}: field 'cuda_max_good' is {value!r}, expected a number")
    return number


# --- configuration and arguments ------------------------------------------------------------------
def _checked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"the Vast base URL {url!r} must be http(s)://host[:port]")
    return url.rstrip("/")


def find_api_key(env: Mapping[str, str], configured: str | None = None) -> str:
    """``configured`` (Settings.vast_api_key: VAST_API_KEY, else the config file's), else
    VAST_API_KEY in ``env``, else vastai's own key files under its HOME/XDG_CONFIG_HOME (the
    caller passes the environment: no adapter reads os.environ)."""
    return _resolve_api_key(configured, env)


def _resolve_api_key(api_key: str | None, env: Mapping[str, str]) -> str:
    """Explicit, else VAST_API_KEY, else vastai's own key files (vastai/_base.py's order)."""
    for candidate in (api_key, env.get("VAST_API_KEY")):
        if candidate and candidate.strip():
            return candidate.strip()
    home = env.get("HOME")
    config = env.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else None)
    files = [Path(config, "vastai", "vast_api_key")] if config else []
    files += [Path(home, ".vast_api_key")] if home else []
    for path in files:
        try:
            key = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if key:
            return key
    raise UsageError(
        "no Vast.ai API key found; set VAST_API_KEY, or write it to ~/.config/vastai/vast_api_key"
    )


def _instance_number(instance_id: str) -> int:
    if not isinstance(instance_id, str) or not _INSTANCE_ID.fullmatch(instance_id):
        raise UsageError(f"a Vast instance id is a string of digits, not {instance_id!r}")
    return int(instance_id)


def _check_create(
    offer_id: int, label: str, image: str, disk_gb: float, onstart: str | None
) -> None:
    if isinstance(offer_id, bool) or not isinstance(offer_id, int) or offer_id < 1:
        raise UsageError(f"offer_id must be a positive integer, not {offer_id!r}")
    if not label or len(label) > LABEL_MAX_CHARS:
        raise UsageError(f"a label (ownership, M3) is required: 1-{LABEL_MAX_CHARS} characters")
    if not image:
        raise UsageError("an image is required")
    if not disk_gb > 0:
        raise UsageError(f"disk_gb must be positive, not {disk_gb!r}")
    if onstart is not None and len(onstart) > ONSTART_MAX_CHARS:
        raise UsageError(f"onstart is {len(onstart)} chars; Vast allows {ONSTART_MAX_CHARS}")
