"""Scenario files: what the fakes serve, loaded from YAML and validated (format: docs/fakes.md).

A scenario is the whole script of a fake world: Vast.ai offers and each one's fate, the SSH
keys registered at start, and the faults to inject (429 bursts, failing destroys, lost create
responses, an instance list that answers empty). Every problem is a :class:`ScenarioError`
naming the file and the field (``offers[2].fate``), so a typo never becomes a silent default.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from gpuops.errors import UsageError

DEFAULT_SCENARIO = Path(__file__).resolve().parent / "scenarios" / "default.yaml"

# Vast's routes as the fake names them (fakes/vast/routes.py); a fault can target one.
ROUTE_NAMES = (
    "search", "create", "show", "list", "destroy", "label", "user", "ssh_keys", "register_ssh_key",
)  # fmt: skip
RATE_LIMIT_BODIES = ("plain", "json", "json-error", "search-quota")
TAKEN_STATUSES = (400, 404, 410)
GONE_ERRORS = ("no_such_instance", "not_found")
GENERATED_KEY = "generated"
# Fates whose name is the whole spec; two more take a number (see Fate.parse).
SIMPLE_FATES = (
    "healthy",
    "taken",
    "ssh-auth",
    "unreachable",
    "host-key-changed",
    "slow-disk",
    "no-gpu",
    "low-vram",
    "cuda-broken",
)
_TRANSIENT = re.compile(r"ssh-auth-transient:([0-9]+)")
_DIES = re.compile(r"dies-after:([0-9]+(?:\.[0-9]+)?)")
# Fields every scenario offer must give; any other field of the recorded offer may be added.
REQUIRED_OFFER_FIELDS = ("id", "machine_id", "gpu_name", "gpu_ram", "dph_total", "reliability")
OFFER_CONTROL_FIELDS = ("fate", "taken_status", "box_gpu", "contract_days")
# Recorded offer fields the fake owns: the id's twin and whether one of our boxes holds it.
OFFER_STATE_FIELDS = ("ask_contract_id", "rented")


class ScenarioError(UsageError):
    """A scenario that cannot be served; the message names the file and the field."""


@dataclass(frozen=True)
class Fate:
    """What renting an offer leads to. ``count``: ssh-auth-transient:N; ``minutes``: dies-after."""

    kind: str
    count: int = 0
    minutes: float = 0.0

    @classmethod
    def parse(cls, text: object, where: str = "fate") -> Fate:
        if isinstance(text, str):
            if text in SIMPLE_FATES:
                return cls(text)
            if (m := _TRANSIENT.fullmatch(text)) and int(m[1]) >= 1:
                return cls("ssh-auth-transient", count=int(m[1]))
            if (m := _DIES.fullmatch(text)) and float(m[1]) > 0:
                return cls("dies-after", minutes=float(m[1]))
        known = [*SIMPLE_FATES, "ssh-auth-transient:N (N >= 1)", "dies-after:MINUTES (> 0)"]
        raise ScenarioError(f"{where}: {text!r} is not a fate; known: {', '.join(known)}")

    def __str__(self) -> str:
        if self.kind == "ssh-auth-transient":
            return f"{self.kind}:{self.count}"
        if self.kind == "dies-after":
            return f"{self.kind}:{self.minutes:g}"
        return self.kind

    @property
    def box_fate(self) -> str:
        """The fake ssh box-table fate of a running box (fakes/ssh/README.md)."""
        return "healthy" if self.kind in ("dies-after", "taken") else str(self)


@dataclass(frozen=True)
class OfferSpec:
    """One offer: ``fields`` are wire fields of the recorded offer (id, gpu_name, ...)."""

    id: int
    fate: Fate
    fields: Mapping[str, object]
    taken_status: int = 410
    box_gpu: Mapping[str, object] | None = None
    # Days from when the offer joins the market to its contract's end (its ``end_date``);
    # None: ``end_date`` as given, or the recorded offer's distance from its own listing.
    contract_days: float | None = None


@dataclass(frozen=True)
class RateLimitBurst:
    """Matching calls number ``after_calls + 1`` to ``after_calls + count`` answer 429."""

    count: int
    after_calls: int = 0
    body: str = "plain"
    route: str | None = None  # None: every route counts
    retry_after_s: float | None = None


@dataclass(frozen=True)
class DestroyFailure:
    """Destroys of the box rented from ``offer`` (or instance ``instance``) fail ``count`` times."""

    count: int
    offer: int | None = None
    instance: int | None = None
    status: int = 503


@dataclass(frozen=True)
class LostCreate:
    """The box is created, then the answer is lost: ``answer`` 502/503/504, or "close".
    ``creates: false``: the same answer, but nothing was created (the failure came first)."""

    offer: int
    answer: int | str = 503
    count: int = 1
    creates: bool = True


@dataclass(frozen=True)
class CreatePacing:
    """Creates closer together than ``min_interval_s`` (fake clock) answer 429."""

    min_interval_s: float
    body: str = "json"


@dataclass(frozen=True)
class HostKeyChange:
    """The box rented from ``offer`` (or instance ``instance``) presents a new host key: ``after_s``
    seconds after it first runs, or once ``after_connections`` connections have seen the first."""

    offer: int | None = None
    instance: int | None = None
    after_s: float | None = None
    after_connections: int | None = None


@dataclass(frozen=True)
class RentedBox:
    """A box already rented from ``offer`` when the fake starts, running, labelled ``label``
    (an account with thousands of instances, set up without thousands of creates)."""

    offer: int
    label: str | None = None


# Vast's permission categories of a scoped API key (vast-ai/docs api-reference/permissions.mdx).
PERMISSION_CATEGORIES = (
    "instance_read", "instance_write", "user_read", "user_write", "billing_read",
    "billing_write", "machine_read", "machine_write", "misc", "team_read", "team_write",
)  # fmt: skip


@dataclass(frozen=True)
class TeamMember:
    """A member of the account's team with an API key of their own: Vast answers
    ``/users/current/`` for that key with this member (its ``id``, ``username``, ``email``),
    and, as on a Vast team, the key reaches every instance of the team (instances are shared)."""

    username: str
    api_key: str
    id: int
    email: str
    permissions: tuple[str, ...] | None = None  # the key's categories; None: every one


@dataclass(frozen=True)
class VastScenario:
    api_key: str = "fake-vast-key"
    provisioning_s: float = 10.0
    loading_s: float = 20.0
    first_instance_id: int = 1234568
    destroy_gone_error: str = "no_such_instance"
    destroy_lag_s: float = 0.0
    list_lag_s: float = 0.0  # the list leaves out a box younger than this (eventual consistency)
    show_lag_s: float = 0.0  # show answers a box as it was this many seconds ago
    ssh_keys: tuple[tuple[str, str | None], ...] = ((GENERATED_KEY, None),)  # (key, deleted_at)
    offers: tuple[OfferSpec, ...] = ()
    rate_limits: tuple[RateLimitBurst, ...] = ()
    destroy_failures: tuple[DestroyFailure, ...] = ()
    lost_creates: tuple[LostCreate, ...] = ()
    empty_list: int | None = 0  # list calls answered empty: a count, or None for every call
    create_pacing: CreatePacing | None = None
    host_key_changes: tuple[HostKeyChange, ...] = ()
    instances: tuple[RentedBox, ...] = ()  # rented before the fake started, in this order
    # Vast accepts a second purchase of an offer one of our boxes already holds and launches
    # both; the later box never comes up (skypilot-org/skypilot#9117). False: refused, 410.
    duplicate_purchases: bool = False
    # Offers search lists twice, as Vast's search "sometimes returns duplicate machines"
    # (vast-ai/vast-cli#260).
    duplicate_listings: tuple[int, ...] = ()
    members: tuple[TeamMember, ...] = ()  # team members with keys of their own
    # Vast's per-endpoint rate limits: a minimum interval (fake seconds) between two requests to
    # one route by one identity (the key); closer is a 429 "API requests too frequent: endpoint
    # threshold=T" with no Retry-After (docs.vast.ai/api-reference/rate-limits-and-errors). The
    # refused request counts for nothing. Empty: none. ``contract`` in a scenario file: each
    # route's x-rate-limit from recordings/contracts/vast-openapi.yaml (endpoint_intervals()).
    endpoint_intervals: tuple[tuple[str, float], ...] = ()


def contract_intervals() -> tuple[tuple[str, float], ...]:
    """Each route's documented minimum interval: vast-cli's x-rate-limit ``threshold`` (per
    request; read as seconds, as the 429 names it and the docs advise retrying after it), or
    ``requests`` per ``minute`` as 60/requests (search: 10 a minute per IP, 6 s)."""
    import yaml

    path = Path(__file__).resolve().parents[1] / "recordings" / "contracts" / "vast-openapi.yaml"
    ops = yaml.safe_load(path.read_text(encoding="utf-8"))["operations"]
    out: list[tuple[str, float]] = []
    for name, op in ops.items():
        limit = op.get("rate_limit") or {}
        if "threshold" in limit:
            out.append((name, float(limit["threshold"])))
        elif limit.get("per") == "minute" and limit.get("requests"):
            out.append((name, 60.0 / float(limit["requests"])))
    return tuple(out)


@dataclass(frozen=True)
class Scenario:
    vast: VastScenario = field(default_factory=VastScenario)
    time_scale: float = 1.0  # loopback mode: fake seconds per real second
    start_time: float | None = None  # epoch seconds of the fake clock at start
    source: str = "<scenario>"
    lane: object = None  # the lane section, validated by fakes.gce.scenario.parse_lane


def load_scenario(path: Path | str) -> Scenario:
    """The scenario in ``path`` (YAML); anything malformed is a ScenarioError naming the field."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ScenarioError(f"cannot read scenario {path}: {exc}") from exc
    return parse_scenario(doc, source=str(path))


def parse_scenario(doc: object, source: str = "<scenario>") -> Scenario:
    """A Scenario from an already-parsed document (a mapping)."""
    top = _Reader(doc, source, "")
    top.only("time_scale", "start_time", "vast", "lane")
    lane = doc.get("lane") if isinstance(doc, Mapping) else None
    if lane is not None:
        from fakes.gce.scenario import parse_lane

        parse_lane(lane, source)  # fail at load, naming the field
    return Scenario(
        lane=lane,
        vast=_parse_vast(top.section("vast")),
        time_scale=top.number("time_scale", 1.0, positive=True),
        start_time=top.optional_number("start_time"),
        source=source,
    )


def parse_offer(doc: object, source: str = "<offer>") -> OfferSpec:
    """One offer, as in ``vast.offers`` (for tests and state machines that add offers later)."""
    return _parse_offer(_Reader(doc, source, "offer"))


def _parse_vast(r: _Reader) -> VastScenario:
    r.only(
        "api_key", "boot", "first_instance_id", "destroy_gone_error", "destroy_lag_s",
        "list_lag_s", "show_lag_s", "ssh_keys", "offers", "faults", "instances",
        "duplicate_purchases", "members", "endpoint_intervals",
    )  # fmt: skip
    d = VastScenario()
    boot = r.section("boot")
    boot.only("provisioning_s", "loading_s")
    offers = tuple(_parse_offer(item) for item in r.items("offers"))
    ids = [offer.id for offer in offers]
    for index, offer_id in enumerate(ids):
        if offer_id in ids[:index]:
            r.fail(f"offers[{index}].id", f"offer id {offer_id} appears twice")
    api_key = r.text("api_key", d.api_key)
    if any(c.isspace() or not c.isprintable() for c in api_key):
        r.fail("api_key", "must contain no whitespace")
    faults = r.section("faults")
    faults.only(
        "rate_limits", "destroy_failures", "lost_creates", "empty_list", "create_pacing",
        "host_key_changes", "duplicate_listings",
    )  # fmt: skip
    duplicates = r.raw("duplicate_purchases", d.duplicate_purchases)
    if not isinstance(duplicates, bool):
        r.fail("duplicate_purchases", f"{duplicates!r} is not true or false")
    listed_twice = faults.raw("duplicate_listings", [])
    if not isinstance(listed_twice, list):
        faults.fail("duplicate_listings", f"{listed_twice!r} is not a list of offer ids")
    for index, offer_id in enumerate(listed_twice):
        if offer_id not in ids:
            faults.fail(f"duplicate_listings[{index}]", f"no offer {offer_id!r}")
    scenario = VastScenario(
        api_key=api_key,
        provisioning_s=boot.number("provisioning_s", d.provisioning_s, minimum=0),
        loading_s=boot.number("loading_s", d.loading_s, minimum=0),
        first_instance_id=r.integer("first_instance_id", d.first_instance_id, minimum=1),
        destroy_gone_error=r.choice("destroy_gone_error", GONE_ERRORS, d.destroy_gone_error),
        destroy_lag_s=r.number("destroy_lag_s", d.destroy_lag_s, minimum=0),
        list_lag_s=r.number("list_lag_s", d.list_lag_s, minimum=0),
        show_lag_s=r.number("show_lag_s", d.show_lag_s, minimum=0),
        ssh_keys=tuple(
            item.key_entry() for item in r.items("ssh_keys", [GENERATED_KEY], strings_as="key")
        ),
        offers=offers,
        rate_limits=tuple(_parse_burst(item) for item in faults.items("rate_limits")),
        destroy_failures=tuple(_parse_destroy(item) for item in faults.items("destroy_failures")),
        lost_creates=tuple(_parse_lost(item) for item in faults.items("lost_creates")),
        empty_list=_parse_empty_list(faults),
        create_pacing=_parse_pacing(faults.optional_section("create_pacing")),
        host_key_changes=tuple(_parse_rekey(item) for item in faults.items("host_key_changes")),
        instances=tuple(_parse_rented(item) for item in r.items("instances")),
        duplicate_purchases=duplicates,
        duplicate_listings=tuple(int(offer_id) for offer_id in listed_twice),
        members=tuple(_parse_member(i, item) for i, item in enumerate(r.items("members"))),
        endpoint_intervals=_parse_intervals(r),
    )
    keys, names = [api_key], []
    for index, member in enumerate(scenario.members):
        if member.api_key in keys:
            r.fail(f"members[{index}].api_key", "is another key's too: each key is one holder's")
        if member.username in names:
            r.fail(f"members[{index}].username", f"{member.username!r} appears twice")
        keys.append(member.api_key)
        names.append(member.username)
    rented: set[int] = set()
    for index, box in enumerate(scenario.instances):
        if box.offer not in ids:
            r.fail(f"instances[{index}].offer", f"no offer {box.offer}")
        if box.offer in rented:
            r.fail(f"instances[{index}].offer", f"offer {box.offer} is already rented above")
        rented.add(box.offer)
    for index, failure in enumerate(scenario.destroy_failures):
        if failure.offer is not None and failure.offer not in ids:
            faults.fail(f"destroy_failures[{index}].offer", f"no offer {failure.offer}")
    for index, change in enumerate(scenario.host_key_changes):
        if change.offer is not None and change.offer not in ids:
            faults.fail(f"host_key_changes[{index}].offer", f"no offer {change.offer}")
    for index, lost in enumerate(scenario.lost_creates):
        if lost.offer not in ids:
            faults.fail(f"lost_creates[{index}].offer", f"no offer {lost.offer}")
    return scenario


def _parse_member(index: int, r: _Reader) -> TeamMember:
    r.only("username", "api_key", "id", "email", "permissions")
    r.require("username")
    r.require("api_key")
    username, api_key = r.text("username", ""), r.text("api_key", "")
    for name, value in (("username", username), ("api_key", api_key)):
        if not value or any(c.isspace() or not c.isprintable() for c in value):
            r.fail(name, "must be a non-empty string with no whitespace")
    permissions = r.raw("permissions", None)
    if permissions is not None:
        if not isinstance(permissions, list):
            r.fail("permissions", f"expected a list of categories, found {_kind(permissions)}")
        for category in permissions:
            if category not in PERMISSION_CATEGORIES:
                r.fail(
                    "permissions", f"{category!r} is not one of {', '.join(PERMISSION_CATEGORIES)}"
                )
        permissions = tuple(permissions)
    return TeamMember(
        username=username,
        api_key=api_key,
        id=r.integer("id", 101 + index, minimum=1),
        email=r.text("email", f"{username}@example.com"),
        permissions=permissions,
    )


def _parse_rented(r: _Reader) -> RentedBox:
    r.only("offer", "label")
    r.require("offer")
    label = r.raw("label", None)
    if label is not None and not isinstance(label, str):
        r.fail("label", f"{label!r} is not a string")
    return RentedBox(offer=r.integer("offer", 0, minimum=1), label=label)


def _parse_offer(r: _Reader) -> OfferSpec:
    template = recorded_offer()
    r.only(*(f for f in template if f not in OFFER_STATE_FIELDS), *OFFER_CONTROL_FIELDS)
    for name in (*REQUIRED_OFFER_FIELDS, "disk_bw"):
        r.require(name)
    fields = {name: r.like(name, template[name]) for name in r.names() if name in template}
    for name in ("id", "machine_id", "gpu_ram"):
        fields[name] = r.integer(name, 0, minimum=1)
    fields["dph_total"] = r.number("dph_total", 0.0, minimum=0)
    for name in ("reliability", "disk_bw"):  # null is allowed: the offer leaves the field out
        if fields[name] is not None:
            fields[name] = r.number(name, 0.0, minimum=0)
    reliability = fields["reliability"]
    if isinstance(reliability, float) and reliability > 1:
        r.fail("reliability", f"{reliability:g} is not within 0..1")
    taken_status = r.integer("taken_status", 410)
    if taken_status not in TAKEN_STATUSES:
        r.fail("taken_status", f"{taken_status} is not one of {TAKEN_STATUSES}")
    return OfferSpec(
        id=r.integer("id", 0),
        fate=Fate.parse(r.raw("fate", "healthy"), f"scenario {r.source}: {r.name('fate')}"),
        fields=fields,
        taken_status=taken_status,
        box_gpu=_parse_box_gpu(r.optional_section("box_gpu")),
        contract_days=_parse_contract_days(r, fields),
    )


def _parse_contract_days(r: _Reader, fields: Mapping[str, object]) -> float | None:
    """``contract_days``, positive, and never with an ``end_date`` of its own."""
    if not r.has("contract_days"):
        return None
    if "end_date" in fields:
        r.fail("contract_days", "give either 'contract_days' or 'end_date', not both")
    return r.number("contract_days", 0.0, positive=True)


def _parse_box_gpu(r: _Reader | None) -> Mapping[str, object] | None:
    """What the box's nvidia-smi lists (the fake ssh box table's ``gpu`` option)."""
    if r is None:
        return None
    r.only("name", "vram_mb", "driver", "count")
    r.require("name")
    r.require("vram_mb")
    gpu: dict[str, object] = {"name": r.text("name", ""), "vram_mb": r.integer("vram_mb", 0, 1)}
    if r.has("driver"):
        gpu["driver"] = r.text("driver", "")
    if r.has("count"):
        gpu["count"] = r.integer("count", 1, minimum=1)
    return gpu


def _parse_burst(r: _Reader) -> RateLimitBurst:
    r.only("after_calls", "count", "body", "route", "retry_after_s")
    r.require("count")
    route = r.raw("route", None)
    if route is not None and route not in ROUTE_NAMES:
        r.fail("route", f"{route!r} is not a route; known: {', '.join(ROUTE_NAMES)}")
    return RateLimitBurst(
        count=r.integer("count", 1, minimum=1),
        after_calls=r.integer("after_calls", 0, minimum=0),
        body=r.choice("body", RATE_LIMIT_BODIES, "plain"),
        route=None if route is None else str(route),
        retry_after_s=r.optional_number("retry_after_s", minimum=0),
    )


def _parse_destroy(r: _Reader) -> DestroyFailure:
    r.only("offer", "instance", "count", "status")
    r.require("count")
    if r.has("offer") == r.has("instance"):
        r.fail("offer", "give exactly one of 'offer' or 'instance'")
    status = r.integer("status", 503)
    if status != 429 and not 500 <= status <= 599:
        r.fail("status", f"{status} is not 429 or a 5xx")
    return DestroyFailure(
        count=r.integer("count", 1, minimum=1),
        offer=r.integer("offer", 0, minimum=1) if r.has("offer") else None,
        instance=r.integer("instance", 0, minimum=1) if r.has("instance") else None,
        status=status,
    )


def _parse_rekey(r: _Reader) -> HostKeyChange:
    r.only("offer", "instance", "after_s", "after_connections")
    if r.has("offer") == r.has("instance"):
        r.fail("offer", "give exactly one of 'offer' or 'instance'")
    if r.has("after_s") == r.has("after_connections"):
        r.fail("after_s", "give exactly one of 'after_s' or 'after_connections'")
    return HostKeyChange(
        offer=r.integer("offer", 0, minimum=1) if r.has("offer") else None,
        instance=r.integer("instance", 0, minimum=1) if r.has("instance") else None,
        after_s=r.optional_number("after_s", minimum=0),
        after_connections=(
            r.integer("after_connections", 0, minimum=1) if r.has("after_connections") else None
        ),
    )


def _parse_lost(r: _Reader) -> LostCreate:
    r.only("offer", "answer", "count", "creates")
    r.require("offer")
    answer = r.raw("answer", 503)
    if answer not in (502, 503, 504, "close") or isinstance(answer, bool):
        r.fail("answer", f"{answer!r} is not 502, 503, 504 or close")
    creates = r.raw("creates", True)
    if not isinstance(creates, bool):
        r.fail("creates", f"{creates!r} is not true or false")
    return LostCreate(
        offer=r.integer("offer", 0, minimum=1),
        answer=answer,
        count=r.integer("count", 1, minimum=1),
        creates=creates,
    )


def _parse_empty_list(faults: _Reader) -> int | None:
    value = faults.raw("empty_list", False)
    if value is True:
        return None
    if value is False:
        return 0
    section = faults.section("empty_list")
    section.only("count")
    section.require("count")
    return section.integer("count", 1, minimum=1)


def _parse_intervals(r: _Reader) -> tuple[tuple[str, float], ...]:
    raw = r.raw("endpoint_intervals", {})
    if raw == "contract":
        return contract_intervals()
    if not isinstance(raw, Mapping):
        r.fail("endpoint_intervals", f"{raw!r} is not 'contract' or a mapping of route to seconds")
    out: list[tuple[str, float]] = []
    for route, seconds in raw.items():
        if route not in ROUTE_NAMES:
            r.fail(
                "endpoint_intervals", f"{route!r} is not a route; known: {', '.join(ROUTE_NAMES)}"
            )
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            r.fail(f"endpoint_intervals.{route}", f"{seconds!r} is not a number of seconds >= 0")
        out.append((str(route), float(seconds)))
    return tuple(out)


def _parse_pacing(r: _Reader | None) -> CreatePacing | None:
    if r is None:
        return None
    r.only("min_interval_s", "body")
    r.require("min_interval_s")
    interval = r.number("min_interval_s", 0.0, positive=True)
    return CreatePacing(interval, r.choice("body", RATE_LIMIT_BODIES, "json"))


@functools.cache
def _recorded_offer() -> tuple[tuple[str, object], ...]:
    from gpuops.providers import load_recording

    row = json.loads(load_recording("vast", "search_offers").body)["offers"][0]
    return tuple(row.items())


def recorded_offer() -> dict[str, object]:
    """The first offer of recordings/vast/search_offers.yaml: the fields a scenario offer has."""
    return dict(_recorded_offer())


# --- reading one mapping, naming every problem by its path ------------------------------------
class _Reader:
    """One mapping of the document, at ``path`` (``vast.offers[2]``) in ``source``."""

    def __init__(self, doc: object, source: str, path: str) -> None:
        self.source, self.path = source, path
        if not isinstance(doc, Mapping) or not all(isinstance(k, str) for k in doc):
            self.fail(None, f"expected a mapping with text keys, found {_kind(doc)}")
        self.doc: Mapping[str, object] = doc

    def name(self, key: str | None) -> str:
        return ".".join(p for p in (self.path, key) if p) or "(top level)"

    def fail(self, key: str | None, problem: str) -> NoReturn:
        raise ScenarioError(f"scenario {self.source}: {self.name(key)}: {problem}")

    def names(self) -> list[str]:
        return list(self.doc)

    def has(self, key: str) -> bool:
        return key in self.doc

    def only(self, *allowed: str) -> None:
        for key in self.doc:
            if key not in allowed:
                self.fail(key, f"unknown field; known here: {', '.join(sorted(allowed))}")

    def require(self, key: str) -> None:
        if key not in self.doc:
            self.fail(key, "is required")

    def raw(self, key: str, default: object) -> object:
        return self.doc.get(key, default)

    def section(self, key: str) -> _Reader:
        """A nested mapping; absent or null reads as empty."""
        return self.optional_section(key) or _Reader({}, self.source, self.name(key))

    def optional_section(self, key: str) -> _Reader | None:
        value = self.doc.get(key)
        return None if value is None else _Reader(value, self.source, self.name(key))

    def items(
        self, key: str, default: list[object] | None = None, *, strings_as: str | None = None
    ) -> list[_Reader]:
        """A list of mappings; with ``strings_as``, a bare string is ``{strings_as: it}``."""
        value = self.doc.get(key, [] if default is None else default)
        if not isinstance(value, list):
            self.fail(key, f"expected a list, found {_kind(value)}")
        found = []
        for index, item in enumerate(value):
            if strings_as is not None and isinstance(item, str):
                item = {strings_as: item}
            found.append(_Reader(item, self.source, f"{self.name(key)}[{index}]"))
        return found

    def number(
        self, key: str, default: float, *, minimum: float | None = None, positive: bool = False
    ) -> float:
        number = self.optional_number(key, minimum=minimum, positive=positive)
        if number is None:
            if key in self.doc:
                self.fail(key, "must be a number, not null")
            return default
        return number

    def optional_number(
        self, key: str, *, minimum: float | None = None, positive: bool = False
    ) -> float | None:
        value = self.doc.get(key)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            self.fail(key, f"{value!r} is not a finite number")
        if positive and value <= 0:
            self.fail(key, f"{value:g} must be positive")
        if minimum is not None and value < minimum:
            self.fail(key, f"{value:g} must be at least {minimum:g}")
        return float(value)

    def integer(self, key: str, default: int, minimum: int | None = None) -> int:
        value = self.doc.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"{value!r} is not an integer")
        if minimum is not None and value < minimum:
            self.fail(key, f"{value} must be at least {minimum}")
        return value

    def text(self, key: str, default: str) -> str:
        value = self.doc.get(key, default)
        if not isinstance(value, str) or not value:
            self.fail(key, f"{value!r} is not a non-empty string")
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.doc.get(key, default)
        if not isinstance(value, str) or value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def like(self, key: str, recorded: object) -> object:
        """A wire field, of the same JSON kind as the recorded offer's value (null allowed)."""
        value = self.doc[key]
        if recorded is None or value is None:
            return value
        numeric = isinstance(recorded, int | float) and not isinstance(recorded, bool)
        if numeric:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            ok = type(value) is type(recorded)
        if not ok:
            self.fail(key, f"{value!r} is {_kind(value)}; the recorded offer has {_kind(recorded)}")
        return value

    def key_entry(self) -> tuple[str, str | None]:
        """An ssh_keys entry: a public key (or "generated"), optionally with deleted_at."""
        self.only("key", "deleted_at")
        self.require("key")
        key = self.text("key", "")
        if key != GENERATED_KEY and not _PUBLIC_KEY.match(key):
            self.fail("key", f"{key[:40]!r} is neither 'generated' nor an OpenSSH public key")
        deleted = self.doc.get("deleted_at")
        if deleted is not None and not isinstance(deleted, str):
            self.fail("deleted_at", "must be a timestamp string like 2026-09-21T08:30:00Z")
        return key, deleted


_PUBLIC_KEY = re.compile(r"(ssh-|ecdsa-|sk-)[A-Za-z0-9@.\-]+ [A-Za-z0-9+/=]+")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    names = {list: "a list", str: "a string", bool: "a boolean"}
    return names.get(type(value), f"a {type(value).__name__}")
