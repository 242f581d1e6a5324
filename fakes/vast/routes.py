"""FakeVast's URL table and request handling: parse, call the model, render (wire.py).

:func:`dispatch` is the one entry both servings use. Order of checks, as Vast's own: the
route must exist (else :class:`UnknownRoute`, loud, with every known route), the bearer key
must be the scenario's (else auth_401), a scripted 429 burst may answer before anything
happens, then the model acts. Every answered request is one ``Call`` on ``model.calls``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fakes.scenario import ROUTE_NAMES
from fakes.vast import wire
from fakes.vast.faults import Dropped, Fault, NoSuchAsk, NoSuchInstance, RateLimit, Unavailable
from fakes.vast.model import Call, FakeVast
from fakes.vast.query import InvalidQuery, matches, ordered
from fakes.vast.wire import Reply, Request

Handler = Callable[[FakeVast, Request, Mapping[str, str]], Reply]
# The v1 list serves at most this many rows a page (show_instances_v1.yaml; vastai sends 25).
PAGE_LIMIT = 25
# Search body keys that shape the answer rather than filter offers (vastai/api/offers.py).
SEARCH_META = frozenset({"order", "type", "limit", "allocated_storage", "disable_bundling"})
SEARCH_ALIASES: dict[str, Callable[[Mapping[str, object]], object]] = {
    "verified": lambda row: row.get("verification") == "verified",  # a filter key, not a field
}
DEFAULT_ORDER = [["score", "desc"]]


class UnknownRoute(AssertionError):
    """A request FakeVast has no route for: a test or client bug, never a provider answer."""

    def __init__(self, method: str, path: str) -> None:
        self.method, self.path, self.known = method, path, known_routes()
        listed = "\n  ".join(self.known)
        super().__init__(f"FakeVast has no route {method} {path}; known routes:\n  {listed}")


class _BadRequest(Exception):
    """A request no Vast client sends; answered with the fake's own loud 400."""


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    template: str  # "{id}" is a run of digits
    handler: Handler

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(re.escape(self.template).replace(r"\{id\}", "(?P<id>[0-9]+)"))

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


def _json_body(request: Request) -> dict[str, Any]:
    try:
        doc = request.json()
    except ValueError as exc:
        raise _BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise _BadRequest(f"the body must be a JSON object, not {type(doc).__name__}")
    return doc


def _search(model: FakeVast, request: Request, _: Mapping[str, str]) -> Reply:
    query = _json_body(request)
    filters = {k: v for k, v in query.items() if k not in SEARCH_META}
    rows = [offer.row() for offer in model.searchable()]
    rows = [row for row in rows if matches(row, filters, SEARCH_ALIASES)]
    rows = [dict(row) for row in ordered(rows, query.get("order", DEFAULT_ORDER))]
    limit = query.get("limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _BadRequest(f"limit must be a positive integer, not {limit!r}")
        rows = rows[:limit]
    return wire.offers(rows)


def _create(model: FakeVast, request: Request, params: Mapping[str, str]) -> Reply:
    box = model.create(int(params["id"]), _json_body(request))
    return wire.created(box.id)


def _show(model: FakeVast, _: Request, params: Mapping[str, str]) -> Reply:
    box = model.show(int(params["id"]))
    return wire.show(None if box is None else wire.instance_row(box, model.status(box)))


def _destroy(model: FakeVast, _: Request, params: Mapping[str, str]) -> Reply:
    model.destroy(int(params["id"]))
    return wire.destroyed()


def _query_json(request: Request, name: str, default: object) -> Any:
    if name not in request.query:
        return default
    try:
        return json.loads(request.query[name])
    except ValueError:
        raise _BadRequest(f"query parameter {name} is not JSON: {request.query[name]!r}") from None


def next_token(last_id: int) -> str:
    """The cursor after ``last_id``: base64 of {"values": {"id": N}} (list_instances_page1)."""
    return base64.b64encode(json.dumps({"values": {"id": last_id}}).encode()).decode()


def _after_id(token: str) -> int:
    try:
        doc = json.loads(base64.b64decode(token, validate=True))
        after = doc["values"]["id"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise _BadRequest(f"after_token {token!r} is not a token this list handed out") from None
    if not isinstance(after, int):
        raise _BadRequest(f"after_token {token!r} does not carry an instance id")
    return after


def _list(model: FakeVast, request: Request, _: Mapping[str, str]) -> Reply:
    filters = _query_json(request, "select_filters", {})
    order_by = _query_json(request, "order_by", [{"col": "id", "dir": "asc"}])
    limit = _query_json(request, "limit", PAGE_LIMIT)
    if not isinstance(filters, dict):
        raise _BadRequest(f"select_filters must be an object, not {filters!r}")
    if order_by != [{"col": "id", "dir": "asc"}]:
        raise _BadRequest(f"FakeVast lists by id ascending only, not {order_by!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise _BadRequest(f"limit must be a positive integer, not {limit!r}")
    boxes = model.listed()
    counts: dict[str, int] = {}
    for box in boxes:
        counts[box.label or ""] = counts.get(box.label or "", 0) + 1
    after = _after_id(request.query["after_token"]) if "after_token" in request.query else None
    size = min(limit, PAGE_LIMIT)
    if filters:
        rows = [wire.instance_row(box, model.status(box)) for box in boxes]
        rows = [row for row in rows if matches(row, filters, {})]
        total = len(rows)
        rows = [row for row in rows if after is None or int(str(row["id"])) > after]
    else:  # render only the page (and one more, to know there is more): 1,000 boxes stay fast
        total = len(boxes)
        later = [box for box in boxes if after is None or box.id > after][: size + 1]
        rows = [wire.instance_row(box, model.status(box)) for box in later]
    shown, more = rows[:size], len(rows) > size
    token = next_token(int(str(shown[-1]["id"]))) if more else None
    return wire.page(shown, total=total, label_counts=counts, next_token=token)


def _ssh_keys(model: FakeVast, _: Request, __: Mapping[str, str]) -> Reply:
    return wire.ssh_keys(model.ssh_keys())


def _register_ssh_key(model: FakeVast, request: Request, _: Mapping[str, str]) -> Reply:
    key = _json_body(request).get("ssh_key")
    if not isinstance(key, str) or not key.strip():
        return wire.no_ssh_key()
    return wire.ssh_key_registered(model.register_ssh_key(key))


ROUTES = (
    Route("search", "POST", "/api/v0/bundles/", _search),
    Route("create", "PUT", "/api/v0/asks/{id}/", _create),
    Route("show", "GET", "/api/v0/instances/{id}/", _show),
    Route("destroy", "DELETE", "/api/v0/instances/{id}/", _destroy),
    Route("list", "GET", "/api/v1/instances/", _list),
    Route("ssh_keys", "GET", "/api/v0/ssh/", _ssh_keys),
    Route("register_ssh_key", "POST", "/api/v0/ssh/", _register_ssh_key),
)
assert tuple(sorted(r.name for r in ROUTES)) == tuple(sorted(ROUTE_NAMES)), "scenario.ROUTE_NAMES"


def known_routes() -> list[str]:
    return [str(route) for route in ROUTES]


def match(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    for route in ROUTES:
        found = route.pattern.fullmatch(path)
        if found is not None and route.method == method.upper():
            return route, found.groupdict()
    return None


def dispatch(model: FakeVast, request: Request) -> Reply:
    """Answer one request; raises UnknownRoute for a route FakeVast does not have."""
    found = match(request.method, request.path)
    with model.lock:
        now = model.now()
        if found is None:
            model.record(Call(None, request.method, request.path, 404, now))
            raise UnknownRoute(request.method, request.path)
        route, params = found
        model.tick()
        reply = _answer(model, route, params, request)
        model.record(Call(route.name, request.method, request.path, reply.status, now))
        return reply


def _answer(model: FakeVast, route: Route, params: Mapping[str, str], request: Request) -> Reply:
    if not model.authorized(bearer(request)):
        return wire.unauthorized()
    try:
        model.admit(route.name)
        return route.handler(model, request, params)
    except Fault as fault:
        return _render(model, fault)
    except InvalidQuery as exc:
        return wire.invalid_query(str(exc))
    except _BadRequest as exc:
        return wire.bad_request(str(exc))


def bearer(request: Request) -> str | None:
    """The key a request carries: ``Authorization: Bearer KEY`` or ``?api_key=`` (A.1)."""
    header = request.headers.get("authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    return request.query.get("api_key")


def _render(model: FakeVast, fault: Fault) -> Reply:
    if isinstance(fault, RateLimit):
        return wire.rate_limited(fault.body, now=model.now(), retry_after_s=fault.retry_after_s)
    if isinstance(fault, Unavailable):
        return wire.unavailable(fault.status)
    if isinstance(fault, Dropped):
        return wire.dropped()
    if isinstance(fault, NoSuchAsk):
        return wire.no_such_ask(fault.offer_id, fault.status)
    if isinstance(fault, NoSuchInstance):
        return wire.gone(fault.instance_id, fault.error)
    raise TypeError(f"no rendering for fault {fault!r}")
