"""FakeVast's state: one Vast.ai account (offers, instances, SSH keys, scripted faults, a clock).

Moto-style, this is the model: it knows nothing of HTTP. ``routes.py`` parses a request,
calls one method here under ``lock`` and renders the result with ``wire.py``; a failure the
scenario scripted is raised as a :class:`Fault` and rendered the same way. Both ways of serving
(``inprocess.py`` through ``responses``, ``server.py`` on loopback) share one model, so a test
can assert on ``instances`` and ``calls`` whichever way the client reached it.

Time is the injected clock only. An instance is provisioning (``actual_status`` null) for
``provisioning_s``, then loading for ``loading_s``, then running; a ``dies-after:M`` offer's box
turns exited M minutes after it started running. SSH fates are realised by the fake ssh box
table (fakes/ssh/README.md): :meth:`FakeVast.tick` rewrites the entries of the boxes that changed
(created, destroyed, or due to change status by the clock, kept in a heap), never the whole
table (boxtable.py).
Failures are raised as faults (faults.py).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import heapq
import itertools
import json
import secrets
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

from fakes.scenario import (
    GENERATED_KEY,
    CreatePacing,
    DestroyFailure,
    Fate,
    HostKeyChange,
    LostCreate,
    OfferSpec,
    RateLimitBurst,
    Scenario,
    TeamMember,
    VastScenario,
    recorded_offer,
)
from fakes.ssh import sandbox
from fakes.vast import onstart
from fakes.vast.boxtable import box_entries, sandbox_seed, write_entry, write_table
from fakes.vast.clock import RECORDED_EPOCH, Clock, ExportedClock, FakeClock, ScaledClock
from fakes.vast.faults import Dropped, NoSuchAsk, NoSuchInstance, RateLimit, Unavailable
from fakes.vast.wire import Reply, Request, iso, recorded  # wire: the model's types only
from gpuops.clock import WithSleep

if TYPE_CHECKING:
    import responses

DEFAULT_BASE_URL = "https://console.vast.ai"
MINUTE_S = 60.0
# "Once an instance hits its end date it expires and is automatically stopped. Expired
# instances can not restart while expired. Expired instances may be deleted 48 hours after
# expiration" (vast.ai/docs/introduction/overview, "Rental contracts"): FakeVast deletes an
# expired box this long after its contract's end.
EXPIRED_DELETE_S = 48 * 3600.0
# The first ids handed out: the key id of recordings/vast/ssh_keys_list.yaml, and proxy and
# direct ports in the ranges the recordings show (ssh_port 30568, direct port 20000).
FIRST_KEY_ID = 40211
FIRST_SSH_PORT = 30000
FIRST_DIRECT_PORT = 20000
SSH_PROXY_HOSTS = 9  # ssh1.vast.ai .. ssh9.vast.ai
T = TypeVar("T")


# --- state ---------------------------------------------------------------------------------------
@dataclass
class OfferState:
    spec: OfferSpec
    fate: Fate
    taken_status: int
    held_by: int | None = None  # the instance of ours that rents it
    taken: bool = False  # rented by someone else: a create answered no_such_ask
    contract_end: float | None = None  # fake time its contract ends (None: the row's end_date)

    @property
    def id(self) -> int:
        return self.spec.id

    def row(
        self,
        now: float | None = None,
        epoch: Callable[[float], float] | None = None,
        *,
        bid: bool = False,
    ) -> dict[str, object]:
        """The offer as search answers it: the recorded offer with the scenario's values, its
        derived prices made consistent, and ``duration`` (seconds it stays available) as of
        ``now`` (search_offers.yaml's notes say how each is derived); ``end_date`` is its
        contract's end, and ``duration`` counted, on the clock a client reads (``epoch``: the
        fake's ``wall``). ``bid``:
        priced as a ``type: bid`` search prices it (:func:`bid_priced`)."""
        row = recorded_offer()
        fields = dict(self.spec.fields)
        num_gpus = fields.get("num_gpus", 1)
        row.update(
            num_gpus=num_gpus,
            gpu_total_ram=fields["gpu_ram"] * num_gpus,  # type: ignore[operator]
            dph_base=fields["dph_total"],
            reliability2=fields["reliability"],
        )
        row.update(fields)
        if "driver_version" in fields and "driver_vers" not in fields:  # one driver, two forms
            row["driver_vers"] = driver_vers(fields["driver_version"])
        if "min_bid" not in fields:
            row["min_bid"] = min_bid(row["dph_base"])
        row.update(ask_contract_id=self.id, rented=self.held_by is not None or self.taken)
        _priced(row, explicit=fields)
        if bid:
            bid_priced(row, explicit=fields)
        end = self.contract_end
        if end is not None:
            row["end_date"] = end if epoch is None else epoch(end)
        else:
            end = float(row["end_date"])  # type: ignore[arg-type]
        if now is not None and "duration" not in fields:
            # the seconds left as the client's clock counts them (the real-clock view's too)
            left = end - now if epoch is None else epoch(end) - epoch(now)
            row["duration"] = max(0.0, left)
        return row


def driver_vers(version: object) -> int | None:
    """driver_vers for a driver_version: "550.54.15" -> 550054015, each part zero-padded to
    three digits (the recordings' pairs; search_offers.yaml: 999999999 for "999.99.99")."""
    parts = version.split(".") if isinstance(version, str) else []
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int("".join(p.zfill(3) for p in parts))


def min_bid(dph_base: object) -> object:
    """An offer's ``min_bid`` when the scenario gives none: its ``dph_base`` times the recorded
    offer's ratio of the two (0.21 / 0.36), so an interruptible price sits below the on-demand
    one as in every recorded offer (reconstructed: Vast publishes no such ratio)."""
    if not isinstance(dph_base, int | float) or isinstance(dph_base, bool):
        return recorded_offer()["min_bid"]
    return round(dph_base * _recorded_bid_ratio(), 4)


@functools.cache
def _recorded_bid_ratio() -> float:
    recorded = recorded_offer()
    bid, base = recorded["min_bid"], recorded["dph_base"]
    assert isinstance(bid, float) and isinstance(base, float)
    return bid / base


def bid_priced(row: dict[str, object], explicit: Mapping[str, object]) -> None:
    """A row as a ``type: bid`` search (``vastai search offers --type bid``) prices it: the GPU
    at the offer's ``min_bid`` and the disk as on demand, so ``dph_total`` is ``min_bid`` plus
    the disk price (``dph_total - dph_base`` of the on-demand row), and the price-derived fields
    follow (:func:`_priced`). Sources: vast-ai/vast-cli PR #403 (vastai/SKILL.md, "Interruptible
    (spot) rentals": a bid search exposes ``min_bid``, a create without ``--bid_price`` is
    on-demand at ``dph_total``) and dstackai/gpuhunt PR #242 (a spot offer's price is
    ``min_bid`` plus the disk price). The exact formula is reconstructed, not recorded."""
    total, base, floor = row["dph_total"], row["dph_base"], row["min_bid"]
    if not (
        isinstance(total, int | float)
        and isinstance(base, int | float)
        and isinstance(floor, int | float)
    ):
        return
    row.update(dph_base=floor, dph_total=round(floor + max(0.0, total - base), 6))
    _priced(row, explicit=explicit)


def _priced(row: dict[str, object], explicit: Mapping[str, object]) -> None:
    """Keep the recorded price-derived fields true to this offer's dph_total and dph_base."""
    total, base = row["dph_total"], row["dph_base"]
    if not isinstance(total, int | float) or not isinstance(base, int | float):
        return
    pricing = {
        "gpuCostPerHour": base,
        "diskHour": round(max(0.0, total - base), 6),
        "totalHour": total,
        "discountTotalHour": 0.0,
        "discountedTotalPerHour": total,
    }
    for name in ("search", "instance"):
        if name not in explicit:
            row[name] = dict(pricing)
    for name, numerator in (
        ("dlperf_per_dphtotal", "dlperf"),
        ("flops_per_dphtotal", "total_flops"),
    ):
        value = row.get(numerator)
        if name not in explicit and isinstance(value, int | float) and total > 0:
            row[name] = round(value / total, 4)
    for name in ("dph_total_adj", "discounted_dph_total"):
        if name not in explicit:
            row[name] = total


@dataclass
class InstanceState:
    id: int
    offer_id: int
    offer_row: Mapping[str, Any]
    fate: Fate
    box_gpu: Mapping[str, object] | None
    label: str | None
    image: str
    runtype: str
    onstart: str | None
    disk_gb: float
    env: Mapping[str, object]
    created_at: float
    ssh_host: str
    ssh_port: int
    direct_port: int
    destroyed_at: float | None = None
    # The account's live keys when it was created: what its sshd lets in. Vast applies the
    # account's keys at container creation ("Keys are applied at container creation time",
    # vast-ai/docs examples/migrations/runpod-to-vast.mdx); keys registered later do not reach
    # it (attaching one to a box is not modelled).
    authorized_keys: tuple[str, ...] = ()
    # Its per-instance key (CONTAINER_API_KEY in the container, ``instance_api_key`` in the
    # create's answer: CreateInstanceResponse in vast-ai/vast-cli vastai/data/instance.py). It
    # "can only start, stop, or destroy that specific instance" (docs.vast.ai api-reference/
    # hello-world); FakeVast lets it destroy its own box and refuses it anything else.
    instance_key: str = ""
    # The box of ours that already held its offer when this one was bought: Vast accepts the
    # second purchase and launches both, and "all but one of the conflicting instances will
    # then either fail to fully start or raise an error" that never reaches the client
    # (skypilot-org/skypilot#9117). Such a box loads, then exits instead of running.
    duplicate_of: int | None = None
    # When its contract ends (fake time): the offer's end, locked at rent. Then Vast stops it
    # (actual_status "stopped", never running again) and may delete it EXPIRED_DELETE_S later.
    contract_end: float | None = None


@dataclass
class KeyState:
    id: int
    key: str
    created_at: str
    deleted_at: str | None = None


@dataclass(frozen=True)
class Call:
    """One request the fake answered (``route`` None: unknown route)."""

    route: str | None
    method: str
    path: str
    status: int
    at: float


@dataclass
class _Burst:
    spec: RateLimitBurst
    base: int  # matching calls already counted when the burst was scripted


@dataclass
class _Left(Generic[T]):
    """A scripted fault and how many more times it fires."""

    spec: T
    left: int


@dataclass
class _Counters:
    per_route: dict[str, int] = field(default_factory=dict)
    total: int = 0


class _Listing:
    """The boxes the list reports, by id, until fake time ``until`` (from ``since``)."""

    def __init__(self, boxes: list[InstanceState], until: float, since: float = -1e300) -> None:
        self.boxes = boxes
        self.until = until
        self.since = since
        self.ids = [box.id for box in boxes]
        self.label_counts: dict[str, int] = {}
        for box in boxes:
            self.label_counts[box.label or ""] = self.label_counts.get(box.label or "", 0) + 1

    @functools.cached_property
    def label_counts_json(self) -> str:
        """The label counts as the list's JSON carries them, encoded once per listing."""
        return json.dumps(self.label_counts)

    def after(self, after_id: int | None, count: int) -> list[InstanceState]:
        """Up to ``count`` boxes with an id above ``after_id`` (None: from the first)."""
        start = 0 if after_id is None else bisect.bisect_right(self.ids, after_id)
        return self.boxes[start : start + count]


class FakeVast:
    """One Vast.ai account, scripted by a scenario, on an injected clock."""

    def __init__(
        self,
        scenario: Scenario | VastScenario,
        *,
        clock: Clock | None = None,
        state_dir: Path | None = None,
        generated_key: str | None = None,
        box_clock: ScaledClock | None = None,
    ) -> None:
        """``state_dir``: where the fake ssh box table goes (``boxes.yaml``); None writes none.
        ``generated_key``: the public key the scenario's ``generated`` entries stand for (default
        the recorded one of ssh_keys_list.yaml). ``box_clock``: the world's clock as a box sees
        it; with it (and a ``state_dir``) each box runs its ``onstart`` for real (onstart.py)."""
        start = scenario.start_time if isinstance(scenario, Scenario) else None
        self.scenario = scenario.vast if isinstance(scenario, Scenario) else scenario
        self.clock: Clock = clock or FakeClock(start or RECORDED_EPOCH)
        self.api_key = self.scenario.api_key
        self.box_clock = box_clock
        self._real_view = False  # times rendered on the real clock (real_clock_view)
        self._by_instance_key: dict[str, int] = {}
        self.lock = threading.RLock()
        self.offers: dict[int, OfferState] = {}
        self.instances: dict[int, InstanceState] = {}
        self.keys: list[KeyState] = []
        self.calls: list[Call] = []
        # Called with (route name, request, reply) after each answered request: a test's
        # observer (the contract judge, tests/test_vast_conformance.py), never a behaviour.
        self.taps: list[Callable[[str, Request, Reply], None]] = []
        self._ids = itertools.count(self.scenario.first_instance_id)
        self._key_ids = itertools.count(FIRST_KEY_ID)
        self._counters = _Counters()
        self._bursts: list[_Burst] = []
        # per-endpoint minimum intervals, and when each (route, identity) was last let through
        self._intervals: dict[str, float] = dict(self.scenario.endpoint_intervals)
        self._last_asked: dict[tuple[str, str | None], float] = {}
        self._destroy_failures: list[_Left[DestroyFailure]] = []
        self._lost: list[_Left[LostCreate]] = []
        self._empty_lists_left = self.scenario.empty_list
        self._pacing: CreatePacing | None = self.scenario.create_pacing
        self._last_create_at: float | None = None
        self.box_table = None if state_dir is None else Path(state_dir) / "boxes.yaml"
        self._box_entries: dict[str, object] = {}  # host:port -> the spec last written
        self._changed: set[int] = set()  # boxes created or destroyed since the last tick
        self._due: list[tuple[float, int]] = []  # heap: (when the clock changes it, box id)
        self._listing: _Listing | None = None  # what the list answers, until a box changes
        if self.box_table is not None:
            write_table(self.box_table, {})
        for spec in self.scenario.offers:
            self.add_offer(spec)
        for burst in self.scenario.rate_limits:
            self.add_rate_limit(burst)
        for failure in self.scenario.destroy_failures:
            self.add_destroy_failure(failure)
        for lost in self.scenario.lost_creates:
            self.add_lost_create(lost)
        recorded_key = _recorded_public_key()
        for key, deleted_at in self.scenario.ssh_keys:
            text = (generated_key or recorded_key) if key == GENERATED_KEY else key
            self.keys.append(KeyState(next(self._key_ids), text, self._iso(), deleted_at))
        self._rent_at_start()  # after the keys: the boxes rented before carry them
        self.tick()

    def __repr__(self) -> str:
        return f"FakeVast(offers={len(self.offers)}, instances={len(self.instances)})"

    # --- serving it ------------------------------------------------------------------------------
    def activate(
        self, base_url: str = DEFAULT_BASE_URL, *, mock: responses.RequestsMock | None = None
    ) -> contextlib.AbstractContextManager[responses.RequestsMock]:
        """Answer ``base_url`` in-process through ``responses`` callbacks (inprocess.py). The
        one import back from the model to its serving, kept lazy: serving depends on the model,
        never the model on serving."""
        from fakes.vast.inprocess import activate

        return activate(self, base_url, mock=mock)

    # --- time ------------------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.wall()

    def wall(self, at: float) -> float:
        """The epoch clients read for fake time ``at`` (clock.py): on an ExportedClock the fake
        time itself (gpuops on the exports runs on that clock), except in the real-clock view
        (:meth:`real_clock_view`), where it is the real clock's epoch for it."""
        clock = self.clock
        if self._real_view and isinstance(clock, ExportedClock):
            return clock.real_epoch_of(at)
        return float(clock.epoch_of(at))

    @contextlib.contextmanager
    def real_clock_view(self, on: bool = True) -> Iterator[None]:
        """Render times for an unscaled client while inside (``on``): what the loopback
        server's ``/real-clock`` prefix asks for (routes.REAL_CLOCK). Holds ``lock``."""
        with self.lock:
            before, self._real_view = self._real_view, on
            try:
                yield
            finally:
                self._real_view = before

    def ticking(self) -> WithSleep:
        """The fake's clock as an in-process client runs on it: its time, and a wait that moves
        the fake on (``advance``)."""
        return WithSleep(self.clock, self.advance)

    def advance(self, seconds: float) -> None:
        """Move a FakeClock on, then apply the new time (box table)."""
        if not isinstance(self.clock, FakeClock):
            raise TypeError(f"only a FakeClock is advanced by hand, not {self.clock!r}")
        self.clock.advance(seconds)
        self.tick()

    def status(self, box: InstanceState, at: float | None = None) -> str | None:
        """The ``actual_status`` wire value now (or at fake time ``at``): null, loading,
        running or exited."""
        when = self.now() if at is None else at
        if box.contract_end is not None and when >= box.contract_end:
            return "stopped"  # expired: stopped by Vast at its contract's end
        age_s = when - box.created_at
        boot_s = self.scenario.provisioning_s + self.scenario.loading_s
        if age_s < self.scenario.provisioning_s:
            return None
        if age_s < boot_s:
            return "loading"
        if box.duplicate_of is not None:
            return "exited"  # the later of two purchases of one offer never runs (#9117)
        if box.fate.kind == "dies-after" and age_s >= boot_s + box.fate.minutes * MINUTE_S:
            return "exited"
        return "running"

    def shown_status(self, box: InstanceState) -> str | None:
        """What show says of the box: its status ``show_lag_s`` ago (never before it existed)."""
        return self.status(box, max(box.created_at, self.now() - self.scenario.show_lag_s))

    def _running_at(self, box: InstanceState) -> float:
        return box.created_at + self.scenario.provisioning_s + self.scenario.loading_s

    def _transitions(self, box: InstanceState) -> list[float]:
        """When ``box`` changes status: running starts, loading starts, and its death; and
        when a scripted host key change lands."""
        loading_at = box.created_at + self.scenario.provisioning_s
        running_at = self._running_at(box)
        times = [loading_at, running_at]
        if box.fate.kind == "dies-after":
            times.append(running_at + box.fate.minutes * MINUTE_S)
        times += [running_at + c.after_s for c in self._rekeys(box) if c.after_s is not None]
        if box.contract_end is not None:
            times.append(box.contract_end)
        return times

    def _rekeys(self, box: InstanceState) -> list[HostKeyChange]:
        return [
            c
            for c in self.scenario.host_key_changes
            if c.instance == box.id or (c.instance is None and c.offer == box.offer_id)
        ]

    def host_key(self, box: InstanceState) -> dict[str, object]:
        """Box-table options for a running box's host key (fakes/ssh/README.md): a new seed
        once a timed change landed, or ``rekey`` after so many connections."""
        changed = f"{sandbox_seed(box)}-rekeyed"
        for change in self._rekeys(box):
            after = change.after_connections
            if after is not None:
                return {"rekey": {"after_connections": after, "host_key": changed}}
            if change.after_s is not None and self.now() >= self._running_at(box) + change.after_s:
                return {"host_key": changed}
        return {}

    def visible(self, box: InstanceState, lag_s: float = 0.0) -> bool:
        """Whether show and list still report the box (a destroy lags ``destroy_lag_s``, and
        show ``show_lag_s`` more: pass it as ``lag_s``)."""
        if box.destroyed_at is None:
            return not self.deleted(box, lag_s)
        return self.now() - lag_s < box.destroyed_at + self.scenario.destroy_lag_s

    def deleted(self, box: InstanceState, lag_s: float = 0.0) -> bool:
        """Whether Vast deleted the box, EXPIRED_DELETE_S after its contract ended."""
        end = box.contract_end
        return end is not None and self.now() - lag_s >= end + EXPIRED_DELETE_S

    # --- scripting, for scenarios and tests ----------------------------------------------------
    def add_offer(self, spec: OfferSpec) -> None:
        """A new offer on the market (a scenario's offers are added this way at start)."""
        if spec.id in self.offers:
            raise ValueError(f"offer {spec.id} is already on the market")
        self.offers[spec.id] = OfferState(
            spec, spec.fate, spec.taken_status, contract_end=self._contract_end(spec)
        )

    def _contract_end(self, spec: OfferSpec) -> float:
        """When ``spec``'s contract ends, in fake time: its ``end_date`` as given, else
        ``contract_days`` from now, else as far from now as the recorded offer's end was from
        its own listing (the recorded instance's start, RECORDED_EPOCH)."""
        given = spec.fields.get("end_date")
        if isinstance(given, int | float):
            return float(given)
        if spec.contract_days is not None:
            return self.now() + spec.contract_days * 86400.0
        recorded_end = recorded_offer()["end_date"]
        assert isinstance(recorded_end, int | float)
        return self.now() + (float(recorded_end) - RECORDED_EPOCH)

    def set_fate(self, offer_id: int, fate: str, *, taken_status: int | None = None) -> None:
        offer = self.offers[offer_id]
        offer.fate = Fate.parse(fate)
        if taken_status is not None:
            offer.taken_status = taken_status

    def add_rate_limit(self, burst: RateLimitBurst) -> None:
        """Script a 429 burst; ``after_calls`` counts from now."""
        counted = self._counters.total if burst.route is None else self._route_count(burst.route)
        self._bursts.append(_Burst(burst, counted))

    def add_destroy_failure(self, failure: DestroyFailure) -> None:
        self._destroy_failures.append(_Left(failure, failure.count))

    def add_lost_create(self, lost: LostCreate) -> None:
        self._lost.append(_Left(lost, lost.count))

    def clear_faults(self) -> None:
        """Stop every scripted fault: bursts, failing destroys, lost creates, lists, pacing."""
        self._bursts.clear()
        self._destroy_failures.clear()
        self._lost.clear()
        self._empty_lists_left = 0
        self._pacing = None
        self._intervals = {}

    def answer_lists_empty(self, count: int | None = None) -> None:
        """The next ``count`` list calls (None: all) answer an empty page."""
        self._empty_lists_left = count

    # --- requests --------------------------------------------------------------------------------
    def authorized(self, bearer: str | None) -> bool:
        """The account's key, or a team member's own (a team's instances are every member's)."""
        return bearer == self.api_key or self.member_of_key(bearer) is not None

    def member_of_key(self, bearer: str | None) -> TeamMember | None:
        """The team member whose own key ``bearer`` is (None: the account's key, or no key)."""
        return next((m for m in self.scenario.members if m.api_key == bearer), None)

    def instance_of_key(self, bearer: str | None) -> int | None:
        """The box whose per-instance key ``bearer`` is (None: no box's)."""
        return None if bearer is None else self._by_instance_key.get(bearer)

    def admit(self, route: str, identity: str | None = None) -> None:
        """Count one authorized call on ``route``; raise RateLimit if a burst covers it, or if
        ``identity`` (the request's key) asked ``route`` less than its endpoint interval ago
        (the refused call counts for nothing)."""
        interval = self._intervals.get(route)
        if interval is not None:
            last = self._last_asked.get((route, identity))
            now = self.now()
            if last is not None and now - last < interval:
                raise RateLimit("threshold", threshold=interval)
            self._last_asked[(route, identity)] = now
        self._counters.total += 1
        self._counters.per_route[route] = self._route_count(route) + 1
        for burst in self._bursts:
            spec = burst.spec
            if spec.route not in (None, route):
                continue
            number = self._counters.total if spec.route is None else self._route_count(route)
            if spec.after_calls < number - burst.base <= spec.after_calls + spec.count:
                raise RateLimit(spec.body, spec.retry_after_s)

    def record(self, call: Call) -> None:
        self.calls.append(call)

    def searchable(self) -> list[OfferState]:
        """The offers search looks at: each once, and the scenario's ``duplicate_listings``
        twice (vast-ai/vast-cli#260: search "sometimes returns duplicate machines"); an offer
        whose contract has ended is no longer on the market."""
        now = self.now()
        listed = [o for o in self.offers.values() if o.contract_end is None or o.contract_end > now]
        return listed + [
            self.offers[i] for i in self.scenario.duplicate_listings if self.offers[i] in listed
        ]

    def create(self, offer_id: int, payload: Mapping[str, Any]) -> InstanceState:
        """Rent ``offer_id``. A taken offer raises NoSuchAsk; a lost create raises after the
        box exists, so only reconciling by label finds it (M12)."""
        now = self.now()
        pacing = self._pacing
        last = self._last_create_at
        if pacing is not None and last is not None and now - last < pacing.min_interval_s:
            raise RateLimit(pacing.body)
        self._last_create_at = now
        offer = self.offers.get(offer_id)
        if offer is None:
            raise NoSuchAsk(offer_id, 404)
        if offer.fate.kind == "taken" or offer.taken:
            offer.taken = True
            raise NoSuchAsk(offer_id, offer.taken_status)
        held = offer.held_by
        if held is not None and not self.scenario.duplicate_purchases:
            raise NoSuchAsk(offer_id, 410)
        for entry in self._lost:  # a failure before anything was created
            if entry.spec.offer == offer_id and entry.left > 0 and not entry.spec.creates:
                entry.left -= 1
                self.tick()
                self._lose(offer_id, entry.spec.answer)
        box = self._add_box(offer, payload, now, duplicate_of=held)
        self.tick()
        for entry in self._lost:
            if entry.spec.offer == offer_id and entry.left > 0 and entry.spec.creates:
                entry.left -= 1
                self._lose(offer_id, entry.spec.answer)
        return box

    @staticmethod
    def _lose(offer_id: int, answer: int | str) -> NoReturn:
        if answer == "close":
            raise Dropped(f"create of offer {offer_id} lost: connection closed")
        raise Unavailable(int(answer))

    def _rent_at_start(self) -> None:
        """The scenario's ``instances``: rented before the fake started, running now. Each is
        created as a create would create it, with ``created_at`` one boot earlier."""
        running_at = self.now() - self.scenario.provisioning_s - self.scenario.loading_s
        for rented in self.scenario.instances:
            offer = self.offers[rented.offer]
            if offer.fate.kind == "taken":
                raise ValueError(f"offer {offer.id} is taken: no box of ours can be on it")
            self._add_box(offer, {"label": rented.label}, running_at)

    def _add_box(
        self,
        offer: OfferState,
        payload: Mapping[str, Any],
        at: float,
        duplicate_of: int | None = None,
    ) -> InstanceState:
        """A new box on ``offer``, created at fake time ``at``; its ssh entries due now, its
        status changes on the heap. ``duplicate_of``: the box that already holds the offer
        (a second purchase Vast accepted); the offer stays held by that one."""
        box = self._new_box(offer, payload, at)
        box.duplicate_of = duplicate_of
        self.instances[box.id] = box
        self._by_instance_key[box.instance_key] = box.id
        if self.box_table is not None and self.box_clock is not None and box.onstart:
            onstart.start(
                sandbox.sandbox_dir(self.box_table, sandbox_seed(box)),
                box.onstart,
                instance_id=box.id,
                instance_key=box.instance_key,
                clock=self.box_clock,
            )
        if duplicate_of is None:
            offer.held_by = box.id
        self._changed_box(box)
        if self.box_table is not None:
            for when in self._transitions(box):
                heapq.heappush(self._due, (when, box.id))
        return box

    def _new_box(self, offer: OfferState, payload: Mapping[str, Any], now: float) -> InstanceState:
        number = next(self._ids)
        serial = number - self.scenario.first_instance_id
        env = payload.get("env")
        label = payload.get("label")
        onstart = payload.get("onstart")
        return InstanceState(
            id=number,
            offer_id=offer.id,
            offer_row=offer.row(now, self.wall),
            contract_end=offer.contract_end,
            fate=offer.fate,
            box_gpu=offer.spec.box_gpu,
            label=label if isinstance(label, str) else None,
            image=str(payload.get("image") or "vastai/base-image"),
            runtype=str(payload.get("runtype") or "ssh_direc ssh_proxy"),
            onstart=onstart if isinstance(onstart, str) else None,
            disk_gb=float(payload.get("disk") or 0.0),
            env=env if isinstance(env, dict) else {},
            created_at=now,
            ssh_host=f"ssh{serial % SSH_PROXY_HOSTS + 1}.vast.ai",
            ssh_port=FIRST_SSH_PORT + 2 * serial,
            direct_port=FIRST_DIRECT_PORT + 10 * serial,
            authorized_keys=tuple(k.key for k in self.keys if k.deleted_at is None),
            instance_key=secrets.token_hex(32),
        )

    def label(self, instance_id: int, label: str) -> InstanceState | None:
        """Set a box's label (None: not ours, or gone: the documented 404)."""
        box = self.show(instance_id)
        if box is None or box.destroyed_at is not None:
            return None
        box.label = label
        self._listing = None  # the list's label counts changed
        return box

    def show(self, instance_id: int) -> InstanceState | None:
        """The box as show reports it: ``show_lag_s`` behind, so a destroyed box is still shown
        that long after its destroy lag (its status: :meth:`shown_status`)."""
        box = self.instances.get(instance_id)
        lag_s = self.scenario.show_lag_s
        return box if box is not None and self.visible(box, lag_s) else None

    def listed(self) -> list[InstanceState]:
        """Every box the list reports, by id; empty while the scenario says lists lie; a box
        younger than ``list_lag_s`` is left out (the list is eventually consistent)."""
        return self.listing().boxes

    def listing(self) -> _Listing:
        """What the list reports now (:meth:`listed`, its ids and label counts). Kept until a
        box is created, destroyed or relabelled or the clock changes what is listed, so paging
        5,000 boxes costs one pass over them, not one per page."""
        if self._empty_lists_left is None:
            return _Listing([], float("inf"))
        if self._empty_lists_left > 0:
            self._empty_lists_left -= 1
            return _Listing([], float("inf"))
        now = self.now()
        cached = self._listing
        if cached is not None and cached.since <= now < cached.until:
            return cached
        lag_s, until = self.scenario.list_lag_s, float("inf")
        boxes: list[InstanceState] = []
        for box in self.instances.values():
            if not self.visible(box):
                continue
            if box.destroyed_at is not None:  # listed until its destroy lag is over
                until = min(until, box.destroyed_at + self.scenario.destroy_lag_s)
            elif box.contract_end is not None:  # listed until Vast deletes it, expired
                until = min(until, box.contract_end + EXPIRED_DELETE_S)
            if lag_s != 0 and now - box.created_at < lag_s:
                until = min(until, box.created_at + lag_s)  # listed from then on
                continue
            boxes.append(box)
        boxes.sort(key=lambda b: b.id)
        self._listing = _Listing(boxes, until, since=now)
        return self._listing

    def destroy(self, instance_id: int) -> None:
        box = self.instances.get(instance_id)
        if box is None or box.destroyed_at is not None or self.deleted(box):
            raise NoSuchInstance(instance_id, self.scenario.destroy_gone_error)
        for entry in self._destroy_failures:
            failure = entry.spec
            aimed = failure.instance == instance_id or failure.offer == box.offer_id
            if aimed and entry.left > 0:
                entry.left -= 1
                if failure.status == 429:
                    raise RateLimit("json-error")
                raise Unavailable(failure.status)
        box.destroyed_at = self.now()
        if self.box_table is not None:  # its jobs die with it
            sandbox.stop(sandbox.sandbox_dir(self.box_table, sandbox_seed(box)))
        offer = self.offers.get(box.offer_id)
        if offer is not None and offer.held_by == instance_id:
            offer.held_by = None  # the machine is rentable again
        self._changed_box(box)
        self.tick()

    def ssh_keys(self) -> list[KeyState]:
        return list(self.keys)

    def register_ssh_key(self, key: str) -> KeyState:
        """A new key entry each time, as the create endpoint documents no de-duplication."""
        entry = KeyState(next(self._key_ids), key.strip(), self._iso())
        self.keys.append(entry)
        return entry

    def tick(self) -> None:
        """Apply the clock: rewrite the entries of every box whose ssh fate may have changed
        (created or destroyed since the last tick, or due by the clock), and only those."""
        if self.box_table is None:
            return
        with self.lock:
            now = self.now()
            while self._due and self._due[0][0] <= now:
                self._changed.add(heapq.heappop(self._due)[1])
            if not self._changed:
                return  # nothing can have changed: a request stays O(1) with 5,000 boxes
            changed = sorted(self._changed)
            self._changed.clear()
            for box_id in changed:
                box = self.instances[box_id]
                for key, spec in box_entries([box], self.status, self.host_key).items():
                    if spec != self._box_entries.get(key):  # written only when its fate changed
                        write_entry(self.box_table, key, spec)
                        self._box_entries[key] = spec

    def _changed_box(self, box: InstanceState) -> None:
        """A box was created, destroyed or relabelled: its entries are due, the listing stale."""
        self._changed.add(box.id)
        self._listing = None

    # --- helpers ---------------------------------------------------------------------------------
    def _route_count(self, route: str) -> int:
        return self._counters.per_route.get(route, 0)

    def _iso(self) -> str:
        return iso(self.now())

    def boxes(self) -> Iterator[InstanceState]:
        """Every box not destroyed (the truth, whatever the list answers)."""
        return (
            b for b in self.instances.values() if b.destroyed_at is None and not self.deleted(b)
        )


def _recorded_public_key() -> str:
    return str(recorded("ssh_keys_list")[0]["key"])
