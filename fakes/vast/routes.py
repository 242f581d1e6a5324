"""FakeVast's URL table and request handling: parse, call the model, render (wire.py).

:func:`dispatch` is the one entry both servings use. Order of checks, as Vast's own: the
route must exist (else :class:`UnknownRoute`, loud, with every known route), the bearer key
must be the scenario's (else auth_401), a scripted 429 burst may answer before anything
happens, then the model acts. Every answered request is one ``Call`` on ``model.calls``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from fakes import seam
from fakes.scenario import ROUTE_NAMES
from fakes.vast import contract, wire
from fakes.vast.faults import Dropped, Fault, NoSuchAsk, NoSuchInstance, RateLimit, Unavailable
from fakes.vast.model import Call, FakeVast, InstanceState, driver_vers
from fakes.vast.query import InvalidQuery, matches, ordered
from fakes.vast.wire import Reply, Request

Handler = Callable[[FakeVast, Request, Mapping[str, str]], Reply]
# The path prefix of FakeVast's real-clock view: every route under it answers as without it,
# with its times (start_date, end_date, an instance's duration) on the real clock, for a client
# that is not on the exported scaled clock (the vastai CLI, SkyPilot: VAST_URL=<url>/real-clock).
REAL_CLOCK = "/real-clock"
# The v1 list serves at most this many rows a page (show_instances_v1.yaml; vastai sends 25).
PAGE_LIMIT = 25
# Search body keys that shape the answer rather than filter offers (vastai/api/offers.py).
SEARCH_META = frozenset({"order", "type", "limit", "allocated_storage", "disable_bundling"})
# The search types FakeVast prices: vastai's default "on-demand" (the contract's "ondemand"
# spelled as the client sends it, vast-client.yaml) and "bid" (`--type bid`, interruptible).
SEARCH_TYPES = frozenset({"on-demand", "ondemand", "bid"})
# Search keys that are not a row field of the same meaning (search_offers.yaml in vast-cli's
# openapi: `verified`, `datacenter`; `geolocation` is matched as "two letter country code").
SEARCH_ALIASES: dict[str, Callable[[Mapping[str, object]], object]] = {
    "verified": lambda row: row.get("verification") == "verified",
    # An assumption, said in docs/fakes.md: hosting_type 1 is a datacenter host (show_instance.yaml
    # documents hosting_type only as "Hosting type code", example 1).
    "datacenter": lambda row: row.get("hosting_type") == 1,
    "geolocation": lambda row: country_code(row.get("geolocation")),
    # "Host machine Ubuntu OS version (alias for os_version)" (search_offers.yaml).
    "ubuntu_version": lambda row: row.get("os_version"),
}
# The v1 list: "Computed fields (e.g. dph_total, num_gpus) are not filterable and return 400"
# (show_instances_v1.yaml). Only the two named are known; any other field filters.
COMPUTED_LIST_FIELDS = frozenset({"dph_total", "num_gpus"})
# "Values <= 0 are treated as 5" (show_instances_v1.yaml, limit).
NONPOSITIVE_LIMIT = 5
LABEL_MAX_CHARS = 1024  # label_instance.yaml x-input-validation
DEFAULT_ORDER = [["score", "desc"]]
# Vast's published contract (recordings/contracts/): what a create or key register may carry.
CONTRACT = contract.load()
# The filters Vast applies when a search leaves them out: search_offers.yaml's `default`s
# (verified, rentable: true; rented: false, so the caller's own rented offers are not listed).
SEARCH_DEFAULTS: dict[str, object] = {
    name: spec["default"]
    for name, spec in CONTRACT.operations["search"]["request"]["fields"].items()
    if spec.get("type") == "filter" and "default" in spec
}


class UnknownRoute(seam.UnknownRoute):
    """A request FakeVast has no route for: a test or client bug, never a provider answer."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__("FakeVast", method, path, known_routes())


class _BadRequest(Exception):
    """A request no Vast client sends; answered with the fake's own loud 400."""


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    template: str  # "{id}" is a run of digits
    handler: Handler

    @functools.cached_property  # every request is matched against every route until one fits
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


def country_code(geolocation: object) -> str | None:
    """The two-letter country code a Vast geolocation ends in ("Texas, US" -> "US")."""
    if not isinstance(geolocation, str):
        return None
    code = geolocation.rsplit(",", 1)[-1].strip()
    return code if len(code) == 2 and code.isalpha() else None


def _numeric(condition: object) -> bool:
    """Whether a filter's operands are numbers (the CLI's form of a driver version)."""
    if not isinstance(condition, Mapping):
        return False
    operands = [w for v in condition.values() for w in (v if isinstance(v, list) else [v])]
    return any(isinstance(w, int | float) and not isinstance(w, bool) for w in operands)


def _search(model: FakeVast, request: Request, _: Mapping[str, str]) -> Reply:
    """Offers passing the query's filters and, where it leaves them out, Vast's own defaults
    (SEARCH_DEFAULTS); a numeric driver_version filter compares driver numbers. ``type: bid``
    prices each offer for an interruptible rental (model.bid_priced) before filters and order
    see it; ``reserved`` is the fake's loud 400 (not modelled)."""
    query = _json_body(request)
    filters = {k: v for k, v in query.items() if k not in SEARCH_META}
    for name, default in SEARCH_DEFAULTS.items():
        filters.setdefault(name, default)
    aliases = dict(SEARCH_ALIASES)
    if _numeric(filters.get("driver_version")):
        # the CLI's "550.54.15" -> 550054015 (vastai 1.9.1 vastai/api/query.py numeric_version)
        aliases["driver_version"] = lambda row: driver_vers(row.get("driver_version"))
    kind = query.get("type", "on-demand")
    if kind not in SEARCH_TYPES:
        raise _BadRequest(
            f"FakeVast models search type 'on-demand' and 'bid' (interruptible pricing), not "
            f"{kind!r} (reserved pricing is not modelled)"
        )
    now = model.now()
    bid = kind == "bid"
    rows = [offer.row(now, model.wall, bid=bid) for offer in model.searchable()]
    rows = [row for row in rows if matches(row, filters, aliases)]
    rows = [dict(row) for row in ordered(rows, query.get("order", DEFAULT_ORDER))]
    limit = query.get("limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise _BadRequest(f"limit must be a positive integer, not {limit!r}")
        rows = rows[:limit]
    return wire.offers(rows)


def _refusals(name: str, request: Request, body: Mapping[str, Any]) -> list[str]:
    """What Vast's published contract refuses in this request body (contract.py), each
    without the operation's prefix: "label: 300 characters, the limit is 256"."""
    found = CONTRACT.request_breaches(name, method=request.method, path=request.path, body=body)
    return [text.removeprefix(f"{name} request").lstrip(".: ") for text in found]


def _create(model: FakeVast, request: Request, params: Mapping[str, str]) -> Reply:
    """A create the contract refuses (limits, required image, unknown fields, runtype) is
    create_instance.yaml's 400 invalid_args, before the offer is looked at; a bid (``price``
    set: an interruptible rental, not modelled) is the fake's loud 400; else the model rents
    the offer on demand."""
    body = _json_body(request)
    refused = _refusals("create", request, body)
    if refused:
        return wire.invalid_args(int(params["id"]), "; ".join(refused))
    if body.get("price") is not None:
        raise _BadRequest(
            f"FakeVast does not model interruptible rentals: this create bids price "
            f"{body['price']!r} (vastai --bid_price). Send no price (null) for Vast's documented "
            "default, an on-demand rental billed at the offer's dph_total"
        )
    box = model.create(int(params["id"]), body)
    return wire.created(box.id, box.instance_key)


def _row(model: FakeVast, box: InstanceState, *, shown: bool = False) -> dict[str, object]:
    """The box's row now (``shown``: with the status show reports, show_lag_s behind);
    ``start_date`` on the wall clock, anchored when serving began."""
    start = model.wall(box.created_at)
    age_s = model.wall(model.now()) - start
    status = model.shown_status(box) if shown else model.status(box)
    row = wire.instance_row(box, status, start_date=start, age_s=age_s)
    if box.contract_end is not None:  # the rental's end, locked at rent: its offer's end_date
        row["end_date"] = model.wall(box.contract_end)
    if status == "stopped":
        row["cur_state"] = "stopped"  # expired: the host stopped it (vast.ai docs, overview)
    return row


def _show(model: FakeVast, _: Request, params: Mapping[str, str]) -> Reply:
    box = model.show(int(params["id"]))
    return wire.show(None if box is None else _row(model, box, shown=True))


def _manage(model: FakeVast, request: Request, params: Mapping[str, str]) -> Reply:
    """PUT /instances/{id}/: a label ({"label": ...}); start/stop ({"state"}) is not modelled."""
    body = _json_body(request)
    instance_id = int(params["id"])
    if set(body) != {"label"}:
        raise _BadRequest(
            f"FakeVast models only {{'label': ...}} on PUT /api/v0/instances/{{id}}/, "
            f"not {sorted(body)} (start, stop and the rest are not modelled)"
        )
    label = body["label"]
    if not isinstance(label, str):
        raise _BadRequest(f"label must be a string, not {label!r}")
    if len(label) > LABEL_MAX_CHARS:
        return wire.label_too_long()
    if model.label(instance_id, label) is None:
        return wire.label_gone(instance_id)
    return wire.labelled(instance_id, label)


def _current_user(model: FakeVast, request: Request, __: Mapping[str, str]) -> Reply:
    member = model.member_of_key(bearer(request))
    if member is not None:  # the member behind their own key
        return wire.current_member(member.id, member.username, member.email)
    live = [key.key for key in model.ssh_keys() if key.deleted_at is None]
    return wire.current_user(live[0] if live else None)


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
    columns = _query_json(request, "select_cols", ["*"])
    if not isinstance(filters, dict):
        raise _BadRequest(f"select_filters must be an object, not {filters!r}")
    for name in filters:
        if name in COMPUTED_LIST_FIELDS:
            raise InvalidQuery(f"{name} is not a valid search key")
    if order_by != [{"col": "id", "dir": "asc"}]:
        raise _BadRequest(f"FakeVast lists by id ascending only, not {order_by!r}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise _BadRequest(f"limit must be an integer, not {limit!r}")
    if limit < 1:
        limit = NONPOSITIVE_LIMIT
    if not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)):
        raise _BadRequest(f"select_cols must be a JSON array of column names, not {columns!r}")
    listing = model.listing()
    counts = listing.label_counts_json
    after = _after_id(request.query["after_token"]) if "after_token" in request.query else None
    size = min(limit, PAGE_LIMIT)
    if filters:
        rows = [_row(model, box) for box in listing.boxes]
        rows = [row for row in rows if matches(row, filters, {})]
        total = len(rows)
        rows = [row for row in rows if after is None or int(str(row["id"])) > after]
    else:  # render only the page (and one more, to know there is more): a page of 5,000 boxes
        total = len(listing.boxes)  # costs a bisect and 26 rows
        rows = [_row(model, box) for box in listing.after(after, size + 1)]
    shown, more = rows[:size], len(rows) > size
    token = next_token(int(str(shown[-1]["id"]))) if more else None
    if "*" not in columns:  # "Unknown column names are returned as null" (show_instances_v1)
        shown = [{name: row.get(name) for name in columns} for row in shown]
    return wire.page(shown, total=total, label_counts=counts, next_token=token)


def _ssh_keys(model: FakeVast, _: Request, __: Mapping[str, str]) -> Reply:
    return wire.ssh_keys(model.ssh_keys())


def _register_ssh_key(model: FakeVast, request: Request, _: Mapping[str, str]) -> Reply:
    """No key: the documented 400 no_ssh_key; a body the contract refuses (not an SSH public
    key, x-input-validation; a field it lacks): the same 400, naming what was refused."""
    body = _json_body(request)
    key = body.get("ssh_key")
    if not isinstance(key, str) or not key.strip():
        return wire.no_ssh_key()
    refused = _refusals("register_ssh_key", request, body)
    if refused:
        return wire.no_ssh_key("; ".join(refused))
    return wire.ssh_key_registered(model.register_ssh_key(key))


ROUTES = (
    Route("search", "POST", "/api/v0/bundles/", _search),
    Route("create", "PUT", "/api/v0/asks/{id}/", _create),
    Route("show", "GET", "/api/v0/instances/{id}/", _show),
    Route("destroy", "DELETE", "/api/v0/instances/{id}/", _destroy),
    Route("label", "PUT", "/api/v0/instances/{id}/", _manage),
    Route("user", "GET", "/api/v0/users/current/", _current_user),
    Route("user", "GET", "/api/v0/users/current", _current_user),  # vastai 1.9.1's spelling
    Route("list", "GET", "/api/v1/instances/", _list),
    Route("ssh_keys", "GET", "/api/v0/ssh/", _ssh_keys),
    Route("register_ssh_key", "POST", "/api/v0/ssh/", _register_ssh_key),
)
assert {r.name for r in ROUTES} == set(ROUTE_NAMES), "scenario.ROUTE_NAMES"


ROUTER = seam.Router("FakeVast", ROUTES)


def known_routes() -> list[str]:
    return ROUTER.known()


def match(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    return ROUTER.find(method, path)


def real_clock(request: Request) -> Request | None:
    """The request without its REAL_CLOCK prefix, or None when it has none."""
    path = request.path
    if path != REAL_CLOCK and not path.startswith(REAL_CLOCK + "/"):
        return None
    return replace(request, path=path.removeprefix(REAL_CLOCK) or "/")


def dispatch(model: FakeVast, request: Request) -> Reply:
    """Answer one request; raises UnknownRoute for a route FakeVast does not have. Under the
    REAL_CLOCK prefix, the same route with its times on the real clock."""
    unscaled = real_clock(request)
    if unscaled is not None:
        with model.real_clock_view():
            return dispatch(model, unscaled)
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
        for tap in model.taps:
            tap(route.name, request, reply)
        return reply


# The permission category each route needs (vast-ai/docs api-reference/permissions.mdx: its
# endpoint reference by category; label is Manage Instance, the ssh key list Show SSH Keys).
CATEGORY = {
    "search": "misc",
    "create": "instance_write",
    "show": "instance_read",
    "destroy": "instance_write",
    "label": "instance_write",
    "list": "instance_read",
    "user": "user_read",
    "ssh_keys": "user_read",
    "register_ssh_key": "user_write",
}
assert set(CATEGORY) == set(ROUTE_NAMES), "a permission category for every route"


def _answer(model: FakeVast, route: Route, params: Mapping[str, str], request: Request) -> Reply:
    key = bearer(request)
    if not model.authorized(key):
        own = model.instance_of_key(key)  # a box's own key destroys that box, and nothing else
        if own is None or route.name != "destroy" or params.get("id") != str(own):
            return wire.unauthorized()
    member = model.member_of_key(key)
    if member is not None and member.permissions is not None:
        if CATEGORY[route.name] not in member.permissions:  # a scoped key, outside its scope
            return wire.unauthorized()
    try:
        model.admit(route.name, key)
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
        return wire.rate_limited(
            fault.body,
            now=model.now(),
            retry_after_s=fault.retry_after_s,
            threshold=fault.threshold,
        )
    if isinstance(fault, Unavailable):
        return wire.unavailable(fault.status)
    if isinstance(fault, Dropped):
        return wire.dropped()
    if isinstance(fault, NoSuchAsk):
        return wire.no_such_ask(fault.offer_id, fault.status)
    if isinstance(fault, NoSuchInstance):
        return wire.gone(fault.instance_id, fault.error)
    raise TypeError(f"no rendering for fault {fault!r}")
