"""Renting a healthy box: the shell that applies the race's decisions (M1, M2, M3, M8, M9, M11, M12).

``Market.rent`` checks the key (M9), returns a live rental as it is (M8), selects offers with
logged propensities (M11), writes each candidate's intent before its create (M3), never retries
a create and reconciles an unclear one by its label (M12), probes each box as it comes up,
keeps the first that passes and destroys every loser with confirmation (M1, M4), and
quarantines real host faults but never our own key's (M2). ``race.decide`` makes every
decision; this module only performs them and reports back.
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

from gpuops import event_ops as ops
from gpuops import event_types as ev
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    GpuopsError,
    Interrupted,
    RateLimited,
    Refused,
    StillRunning,
    Unavailable,
    UnexpectedResponse,
    UsageError,
)
from gpuops.ledger import (
    CREATE_REFUSED,
    BoxState,
    EventSink,
    Ledger,
)
from gpuops.market import race as r
from gpuops.market.ceiling import ceiling_script
from gpuops.market.context import Vast
from gpuops.market.ending import (
    end_record,
    end_records,
    owned_records,
    settle_rental,
    unreadable_records,
)
from gpuops.market.guardian import schedule
from gpuops.market.pacing import Pace
from gpuops.market.quarantine import Quarantine
from gpuops.market.rentals import (
    FAILED,
    LIVE,
    RACING,
    RELEASED,
    RaceInProgress,
    Rental,
    Rentals,
    box_name,
    check_name,
    process_id,
    rental_of,
    request_differs,
    this_host,
)
from gpuops.market.select import Filter, Selection, rented_out, resolve_gpu_name, select
from gpuops.market.teardown import (
    Ending,
    Outcome,
    destroy_box,
    label_for,
)
from gpuops.model import Instance, Offer, Verdict
from gpuops.procs import interrupt_pending, interrupts_held
from gpuops.timestamps import utc_iso

Prober = Callable[[Instance, str], Verdict]  # (instance, ledger record name) -> verdict
PassRates = Callable[[list[Offer]], dict[int, float]]  # machine id -> shrunk pass rate


class RaceEnded(Refused):
    """The rental stopped being this race (its owner ended it: `gpuops destroy`) before a
    create: none is sent, and the race's boxes are ended (M13)."""

    def __init__(self, reason: str) -> None:
        super().__init__("M13", reason)


class BudgetCheck(Protocol):
    """M15 (budgets.py's Budgets): refuses a rental whose worst case would cross a limit."""

    def check_rent(
        self, name: str, usd_per_hr: float, hours: float, instances: Sequence[Instance] | None
    ) -> None: ...


@dataclass(frozen=True)
class _Plan:
    """What a rent decided before writing anything: the request under the market's spelling
    of its GPU, and the offers chosen to race."""

    req: RentRequest
    chosen: Selection[Offer]


@dataclass(frozen=True)
class RentRequest:
    name: str
    gpu_name: str
    hours: float
    race_k: int = 3
    vram_floor_mb: int = 8192
    image: str = "vastai/base-image:@vastai-automatic-tag"
    disk_gb: float = 20.0
    max_creates: int = 0  # 0: 2k + 2
    max_dph: float | None = None  # `--max-dph`: offers dearer per hour are not raced
    # the guardian syncs the job's results this often while it runs; None (a request's own
    # default) or 0: only the copy before the destroy (`gpuops rent` asks timing's
    # RESULTS_SYNC_EVERY_S unless `--sync-every` says otherwise)
    sync_every_s: float | None = None


def gpu_spelling(vast: Vast, requested: str, num_gpus: int | None = None) -> str | None:
    """The market's spelling of a GPU name no rentable offer uses as given (None: no offers
    at all). A name no rentable offer uses in any casing is a typo (UsageError), unless rented
    offers use it: then every one is rented, and that is capacity (CapacityExhausted, exit 4)."""
    known = vast.search_offers(num_gpus=num_gpus)  # the market's names, best offers first
    try:
        return resolve_gpu_name(requested, (o.gpu_name for o in known))
    except UsageError as typo:
        rented = vast.search_offers(gpu_name=requested, rented=True) or vast.search_offers(
            rented=True
        )
        busy = rented_out(requested, (o.gpu_name for o in rented))
        if busy is None:
            raise
        raise busy from typo


def _other_racer(rental: Rental | None, racer: str, operator: str) -> tuple[str, int] | None:
    """(racer, beat) of a race of ``operator``'s that another rent process runs now, or None:
    nothing racing, a race of ours (a rerun restarts it), or someone else's name (refused by
    ``begin_race``, M3)."""
    if rental is None or rental.state != RACING or rental.owner != operator:
        return None
    if rental.racer is None or rental.racer == racer:
        return None
    return rental.racer, rental.beat


class Market:
    """The market's shell: provider, ledger, quarantine and rentals, on one clock."""

    def __init__(
        self,
        vast: Vast,
        ledger: Ledger,
        events: EventSink,
        *,
        probe: Prober,
        public_key: str,
        clock: Clock = SYSTEM,
        rng: random.Random | None = None,
        progress: Callable[[str], None] = lambda line: None,
        pass_rates: PassRates | None = None,
        pace: Pace | None = None,
        host: str | None = None,
        budget: BudgetCheck | None = None,
        create_pacing_s: float = timing.CREATE_PACING_S,
        attested: bool = False,
    ) -> None:
        """``clock``: the market's time and its waits (race polls, destroy confirmation);
        ``pass_rates``: machine id -> shrunk pass rate for these offers (analysis/shrink.py),
        None to rank by price only; ``pace``: the call budget a sweep's threads share with the
        adapter's 429 waits (session.py), None to leave calls unpaced; ``budget``: asked before
        a race's first create (M15), None for no limits; ``create_pacing_s``: the least time
        between two creates (M12: Vast's documented create interval; shorter only for a
        loopback fake whose clock runs faster)."""
        self.vast = vast
        self.ledger = ledger
        self.events = events
        self.probe = probe
        self.public_key = public_key
        self.clock = clock
        self.rng = rng or random.Random()
        self.progress = progress
        self.pass_rates = pass_rates
        self.pace = pace
        self.host = host or this_host()  # whose wall clock this market reads (M17)
        self.budget = budget
        self.create_pacing_s = create_pacing_s
        self.racer = process_id(ledger.operator, self.host)  # this process, when it races (M8)
        self.attested = attested  # the operator's id was attested by the provider (M3)
        self.rentals = Rentals(ledger.store, ledger.operator, attested=attested)
        self.quarantine = Quarantine(ledger.store, events, ledger.operator, clock=clock)

    def on(
        self,
        *,
        clock: Clock | None = None,
        vast: Vast | None = None,
        probe: Prober | None = None,
        events: EventSink | None = None,
    ) -> Market:
        """A new market like this one but for its clock, its provider, its prober or its event
        sink, over the same ledger, store, rng, ranker and pace (this one is left as it is):
        the guardian's, whose waits keep its heartbeat and whose event writes never stop its
        destroy, and a sweep's threads', whose calls are paced. It has a racer id of its own;
        neither of them races."""
        ledger = self.ledger
        if events is not None:
            ledger = Ledger(ledger.store, events, ledger.operator, clock=ledger.clock)
        return Market(
            self.vast if vast is None else vast,
            ledger,
            self.events if events is None else events,
            probe=self.probe if probe is None else probe,
            public_key=self.public_key,
            clock=self.clock if clock is None else clock,
            rng=self.rng,
            progress=self.progress,
            pass_rates=self.pass_rates,
            pace=self.pace,
            host=self.host,
            budget=self.budget,
            create_pacing_s=self.create_pacing_s,
            attested=self.attested,
        )

    # --- rent ----------------------------------------------------------------------------
    def rent(self, req: RentRequest, on_race: Callable[[Rental], None] | None = None) -> Rental:
        """Race for ``req``; ``on_race`` runs once the rental and its deadline are written and
        before any create: the CLI starts the rental's guardian there, so every box the race
        creates has a live owner from its first moment (M13)."""
        check_name(req.name)
        planned: _Plan | None = None
        seen: tuple[str, int] | None = None  # the other racer's (id, beat), as last seen
        seen_since = 0.0
        while True:
            existing = self.rentals.get(req.name)
            if (
                existing is not None
                and existing.state == LIVE
                and existing.owner == self.ledger.operator
                and self._still_live(existing)
            ):
                self._same_request(existing, req)
                self._destroy_losers(existing)
                self.progress(f"{req.name}: already live as instance {existing.instance_id}")
                return existing  # M8: never a second rental for one name
            now = self.clock.wall()
            stale = seen if seen and now - seen_since >= timing.RACER_TTL_S else None
            other = _other_racer(existing, self.racer, self.ledger.operator)
            if other is not None and other != stale:
                # M8: another rent of ours races this name: wait for its box before planning
                # a race of our own (its creates may have taken every offer a search finds)
                seen, seen_since = self._wait_for_racer(req.name, other, seen, seen_since, now)
                continue
            if planned is None:  # refusals that need no rental: nothing written, no owner
                self._check_key()
                self._previous_incarnation_done(existing)
                try:
                    planned = self._plan(req)
                except Unavailable:
                    # M8: a rent of ours that began racing this name while this one searched
                    # may have taken every offer: wait for its box rather than fail beside it
                    again = self.rentals.get(req.name)
                    if _other_racer(again, self.racer, self.ledger.operator) is None:
                        raise
                    continue
                req = planned.req
                now = self.clock.wall()
            deadline = now + req.hours * 3600.0
            try:  # refuses another operator's name (M3) and a race in progress (M8)
                rental = self.rentals.begin_race(
                    req.name,
                    deadline,
                    racer=self.racer,
                    takeover=stale,
                    hours=req.hours,
                    sync_every_s=req.sync_every_s,
                )
                break
            except RaceInProgress as busy:
                racing = (busy.racer, busy.beat)
                seen, seen_since = self._wait_for_racer(req.name, racing, seen, seen_since, now)
        if stale is not None:
            self.progress(f"{req.name}: {stale[0]} stopped racing for it; taking over")
        if on_race is not None:
            try:
                on_race(rental)
            except BaseException:  # no owner could be started: no create is sent (M13)
                with contextlib.suppress(GpuopsError):
                    self.rentals.update(rental.name, expect=RACING, state=FAILED)
                raise
        with self._racing(rental):
            try:
                return self._race(req, planned.chosen, rental, deadline, now)
            except BaseException as exc:  # whatever ended it: its boxes go, the name is free
                self._abandon(rental, exc)
                raise

    def _wait_for_racer(
        self,
        name: str,
        racing: tuple[str, int],
        seen: tuple[str, int] | None,
        seen_since: float,
        now: float,
    ) -> tuple[tuple[str, int], float]:
        """One look at another rent's race of ``name`` (its racer and beat): what the waiter
        remembers next, (racer and beat, when first seen so). A racer whose process is gone
        from this very host is dated a whole RACER_TTL_S back at once (a fact: no need to
        wait, M8); otherwise the waiter says so the first time and sleeps a poll."""
        if self._racer_dead_here(racing[0]) and seen != racing:
            return racing, now - timing.RACER_TTL_S
        if racing != seen:
            if seen is None:
                self.progress(
                    f"{name}: {racing[0]} is racing for it now; waiting for its box "
                    "(M8: one race, one box)"
                )
            seen, seen_since = racing, now
        self.clock.sleep(timing.RACE_POLL_S)
        return seen, seen_since

    def _previous_incarnation_done(self, previous: Rental | None) -> None:
        """M16: a name is raced again only when its previous incarnation, someone else's, has
        nothing left that may bill: no active box record (its guardian is still ending it) and
        none unreadable. Our own earlier races are ended by this race itself."""
        if previous is None or previous.owner == self.ledger.operator:
            return
        if previous.state not in (FAILED, RELEASED):
            return  # racing or live: begin_race refuses it (M3)
        prefix = f"{previous.name}+"
        active = [
            r.name
            for r in self.ledger.records(skip_corrupt=True)
            if r.name.startswith(prefix) and r.active
        ]
        active += unreadable_records(self, previous.name)
        if active:
            raise Refused(
                "M16",
                f"{previous.name!r}: its previous rental, {previous.owner}'s, still has "
                f"{len(active)} box record(s) not yet confirmed gone ({', '.join(active)}); "
                "its guardian or `gpuops sweep` is ending them. Rent it again once "
                "`gpuops boxes --all` shows none, or choose another name",
            )

    def _racer_dead_here(self, racer: str) -> bool:
        """The racer ran on this host and its process is gone (asked of the process itself)."""
        from gpuops.market.guardian import holder_host
        from gpuops.market.spawn import alive

        where = holder_host(racer)
        return where is not None and where[0] == self.host and not alive(where[1])

    def _still_live(self, rental: Rental) -> bool:
        """A live rental is returned only while its kept box is: a rental whose records were
        all released (its `destroy` died between the two writes) is released now, and one
        whose box the provider no longer shows has its records ended first (M4, M8, M13);
        False: race afresh."""
        if rental.instance_id is not None and self.vast.show(rental.instance_id) is None:
            end_records(self, rental.name)  # the provider says gone: confirmed, then released
        settled = settle_rental(self, rental.name)
        return settled is not None and settled.state == LIVE

    @contextlib.contextmanager
    def _racing(self, rental: Rental) -> Iterator[None]:
        """Beat the racer's heartbeat while this race runs, so a concurrent rent of the same
        name waits for it instead of racing too (M8), and takes over only once it stops."""
        stop = threading.Event()

        def beat() -> None:
            while not self.clock.wait(stop, timing.RACER_HEARTBEAT_S):  # on our one clock
                with contextlib.suppress(GpuopsError):
                    if not self.rentals.beat(rental.name, self.racer):
                        return

        worker = threading.Thread(target=beat, name=f"racer-{rental.name}", daemon=True)
        worker.start()
        try:
            yield
        finally:
            stop.set()

    def _plan(self, req: RentRequest) -> _Plan:
        """The offers this rent will race, chosen before anything is written: a misspelt GPU
        (exit 2), no offer passing the filter (exit 4) and a budget's refusal (M15, exit 3) end
        the command with no rental record, no guardian and no create."""
        offers = self.vast.search_offers(gpu_name=req.gpu_name, num_gpus=1)
        if not offers:  # a misspelt GPU is a usage error naming the known ones, not a stockout
            req, offers = self._respelled(req)
        # Vast stops a box at its contract's end: the contract must outlast the deadline
        ends_after = self.clock.wall() + req.hours * 3600.0 + timing.CONTRACT_END_MARGIN_S
        chosen = select(
            offers,
            k=req.race_k,
            rng=self.rng,
            rules=Filter(
                vram_floor_mb=req.vram_floor_mb, max_dph=req.max_dph, contract_ends_after=ends_after
            ),
            quarantined=self.quarantine.machines(),
            pass_rate=self.pass_rates(offers) if self.pass_rates else None,
        )
        self._log_selection(req, chosen)
        if not chosen.picks:
            raise Unavailable(
                f"no {req.gpu_name} offer passes the filter ({len(chosen.removed)} removed, "
                f"{chosen.quarantined} quarantined, {chosen.contract_ended} for a contract "
                f"ending before the deadline); see `gpuops offers --all"
                + (f" --max-dph {req.max_dph:g}`" if req.max_dph is not None else "`")
            )
        if self.budget is not None:  # M15: the dearest candidate for all its hours, kept or not
            worst = max(o.dph_total for o in chosen.candidates)
            self.budget.check_rent(req.name, worst, req.hours, self.vast.list_instances())
        return _Plan(req, chosen)

    def _same_request(self, live: Rental, req: RentRequest) -> None:
        """M8: `rent NAME` of our live rental returns its box only when it asks what the box
        was rented with; anything else is refused, never silently ignored."""
        differs = request_differs(live, req.gpu_name, req.hours, req.sync_every_s)
        if differs:
            raise Refused(
                "M8",
                f"{req.name!r} is already live as instance {live.instance_id}, and this rent "
                f"asks {' and '.join(differs)}: one name, one box. Rerun it as rented to get "
                f"the box back, move its deadline with `gpuops guard {req.name} --hours H`, "
                f"or `gpuops destroy {req.name}` first",
            )

    def _race(
        self,
        req: RentRequest,
        chosen: Selection[Offer],
        rental: Rental,
        deadline: float,
        now: float,
    ) -> Rental:
        self._clean_earlier_races(rental)
        picked_ids = {p.offer.id for p in chosen.picks}
        spares = tuple((o.id, o.machine_id) for o in chosen.candidates if o.id not in picked_ids)
        state = r.Race(
            tuple(
                r.Candidate(i, p.offer.id, p.offer.machine_id) for i, p in enumerate(chosen.picks)
            ),
            spare_offers=spares,
            max_creates=req.max_creates or 2 * req.race_k + 2,
            stop_creating_at=schedule(now, deadline)[0],
            create_pacing_s=self.create_pacing_s,
        )
        offer_by_id = {o.id: o for o in chosen.candidates}
        return self._run(req, rental, state, offer_by_id, deadline)

    def _abandon(self, rental: Rental, why: BaseException) -> list[Outcome]:
        """The race ends without a kept box (a failure, an interrupt): destroy its candidates
        now, with confirmation, and say what was destroyed. A second interrupt leaves the rest
        to the rental's guardian, which ends them by the deadline (M13)."""
        try:
            outcomes = end_records(self, rental.name, race=rental.race)
        except Interrupted:
            self.progress(
                f"{rental.name}: interrupted again: the rest of this race is left to its "
                "guardian, which ends it by the deadline (or `gpuops sweep` after it)"
            )
            raise
        except GpuopsError as exc:
            self.progress(
                f"{rental.name}: could not end this race's boxes now ({exc}); its guardian ends "
                "them by the deadline (or `gpuops sweep` after it)"
            )
            return []
        for outcome in outcomes:
            self.progress(f"{outcome.name}: {outcome.detail}")
        if isinstance(why, Interrupted):
            gone = sum(1 for o in outcomes if o.released)
            self.progress(f"{rental.name}: interrupted: {gone} box(es) of this race ended")
        with contextlib.suppress(GpuopsError):
            self.rentals.update(rental.name, expect=RACING, state=FAILED)
        return outcomes

    def _run(
        self,
        req: RentRequest,
        rental: Rental,
        state: r.Race,
        offers: dict[int, Offer],
        deadline: float,
    ) -> Rental:
        while True:
            actions = r.decide(state, self.clock.wall())
            kept = [c for c in state.candidates if c.phase is r.Phase.KEPT]
            if not actions and kept:
                return self._finish(req, rental, kept[0], offers, deadline)
            if not actions:
                before = state
                state = self._poll(rental, state)
                if state == before:
                    self.clock.sleep(timing.RACE_POLL_S)
                continue
            for action in actions:
                state = self._apply(req, rental, state, action, deadline)

    def _apply(
        self, req: RentRequest, rental: Rental, state: r.Race, action: r.Action, deadline: float
    ) -> r.Race:
        if isinstance(action, r.Create):
            return self._create(req, rental, state, action.slot, deadline)
        if isinstance(action, r.Destroy):
            return self._destroy(rental, state, action)
        if isinstance(action, r.Keep):
            self._say(rental, state, action.slot, "kept", ops.Step.KEPT)
            return r.update(state, action.slot, phase=r.Phase.KEPT)
        if isinstance(action, r.Reconcile):
            return self._look_again(rental, state, action.slot)
        if isinstance(action, r.Replace):
            return r.add_spare(state)
        if isinstance(action, r.Wait):
            self.clock.sleep(action.seconds)
            return state
        self.rentals.update(rental.name, state=FAILED)
        stopped = ev.RentStopped(name=rental.name, reason=action.reason, rental_id=rental.rental_id)
        self.events.append(stopped.KIND, **stopped.to_payload())
        if action.unresolved:
            raise StillRunning(f"{rental.name}: {action.reason}")
        if action.rule:
            raise Refused(action.rule, action.reason)
        raise Unavailable(action.reason)

    def _create(
        self, req: RentRequest, rental: Rental, state: r.Race, slot: int, deadline: float
    ) -> r.Race:
        cand = state.candidates[slot]
        box = box_name(rental.name, rental.race, slot)
        # M13: an interrupt (Ctrl-C, SIGTERM, a closed terminal) never cuts a create in two.
        # One that comes before the create is sent releases the intent, and none is sent; one
        # that comes while it is on the wire waits for its answer and its record (at most the
        # HTTP timeout, and a look-up), so the race's clean-up ends a box it knows by id. Cut
        # off on the wire, the create would be unclear, and its guardian would look for its box
        # by label for half an hour and then leave loudly. A second interrupt is not held.
        with interrupts_held():
            record, _ = self.ledger.record_intent(  # M3, of this incarnation (M16)
                box, "vast", deadline_at=utc_iso(deadline), rental_id=rental.rental_id
            )
            # the intent first, then the check: a `destroy` that ended this rental either sees
            # the intent (and keeps the rental) or is seen here, and no create is sent (M13)
            current = self.rentals.get(rental.name)
            ended = current is None or current.state != RACING or current.racer != self.racer
            stopped = interrupt_pending()  # read once: one may arrive between two reads
            if ended or stopped:
                self.ledger.confirm_gone(box, CREATE_REFUSED)  # no create was sent
                self.ledger.release(box)
                if stopped:
                    return state  # the hold's end raises the interrupt
                raise RaceEnded(
                    f"{rental.name}: the rental was ended while racing for it "
                    f"({'gone' if current is None else current.state}); no further create is sent"
                )
            label = label_for(record.intent_id)
            now = self.clock.wall()
            state = replace(state, last_create_at=now)
            made: str | None = None
            error: Exception | None = None
            try:
                made = self.vast.create(
                    cand.offer_id,
                    label=label,
                    image=req.image,
                    disk_gb=req.disk_gb,
                    onstart=ceiling_script(deadline, self.vast.base_url),  # M14: its own ceiling
                )
            except r.CREATE_ERRORS as exc:
                error = exc
            answer = r.answer_of(error)
            found = self.reconcile(label) if r.looks_first(answer) else None  # M12
            then = r.created(answer, found is not None)
            if then.phase is r.Phase.BOOTING:
                instance_id = made if found is None else found.instance_id
                assert instance_id is not None
                self._log_create(rental, cand, then.logged, instance_id)
                return self._booting(rental, state, slot, box, instance_id, now)
        if then.phase is r.Phase.CREATING:  # unclear, and no look-up found it yet
            self._log_create(rental, cand, then.logged)
            self._say(
                rental,
                state,
                slot,
                "unclear: looking for it by label",
                ops.Step.UNCLEAR,
                outcome=then.logged,
            )
            state = r.update(state, slot, phase=r.Phase.CREATING, created_at=now)
            return r.looked(state, slot, self.clock.wall())
        if then.nothing_made:  # refused outright: the intent is gone (M4 evidence)
            self.ledger.confirm_gone(box, CREATE_REFUSED)
            self.ledger.release(box)
        self._log_create(rental, cand, then.logged)
        if then.stop:
            assert error is not None
            raise error
        self._say(rental, state, slot, then.logged, ops.Step.CREATE_FAILED, outcome=then.logged)
        if then.backoff:
            assert isinstance(error, RateLimited)
            wait = error.retry_after_s or timing.BACKOFF_BASE_S
            self.clock.sleep(min(wait, timing.BACKOFF_MAX_S))
        return r.update(state, slot, phase=r.Phase.CREATE_FAILED, cause=then.logged)

    def _booting(
        self, rental: Rental, state: r.Race, slot: int, box: str, instance_id: str, now: float
    ) -> r.Race:
        self.ledger.mark_live(box, instance_id)
        self._say(rental, state, slot, f"created instance {instance_id}", ops.Step.CREATED)
        return r.update(state, slot, phase=r.Phase.BOOTING, instance_id=instance_id, created_at=now)

    def _look_again(self, rental: Rental, state: r.Race, slot: int) -> r.Race:
        """An unclear create, looked up by its label once more (M12)."""
        record = self.ledger.get(box_name(rental.name, rental.race, slot))
        found = self.reconcile(label_for(record.intent_id)) if record is not None else None
        if found is None:
            return r.looked(state, slot, self.clock.wall())
        cand = state.candidates[slot]
        self._log_create(rental, cand, "reconciled", found)
        box = box_name(rental.name, rental.race, slot)
        return self._booting(rental, state, slot, box, found.instance_id, self.clock.wall())

    def _log_create(
        self, rental: Rental, cand: r.Candidate, outcome: str, made: Instance | str | None = None
    ) -> None:
        """Each create call's outcome, for `gpuops stats` (created, taken, rate-limited, auth,
        unclear, or reconciled: unclear at first, then found by its label)."""
        instance_id = made.instance_id if isinstance(made, Instance) else made
        create = ev.Create(
            name=rental.name,
            offer_id=cand.offer_id,
            machine_id=cand.machine_id,
            outcome=outcome,
            instance_id=instance_id,
            rental_id=rental.rental_id,
        )
        self.events.append(create.KIND, **create.to_payload())

    def reconcile(self, label: str) -> Instance | None:
        """Find the box an unclear create may have made, by its label (M12)."""
        try:
            found = self.vast.list_instances(label=label)
        except (Unavailable, UnexpectedResponse):
            return None
        matching = [i for i in found if i.label == label]
        return matching[0] if matching else None

    def _poll(self, rental: Rental, state: r.Race) -> r.Race:
        """Ask after every booting box; probe together the ones that are up (M1: a race
        reaches a healthy box near the fastest one's time, not the sum of the probes)."""
        up: list[tuple[r.Candidate, Instance]] = []
        for cand in state.candidates:
            if cand.phase is not r.Phase.BOOTING or cand.instance_id is None:
                continue
            try:
                instance = self.vast.show(cand.instance_id)
            except (Unavailable, UnexpectedResponse):
                continue  # ask again next round; the boot timeout bounds the wait
            state, is_up = r.shown(state, cand.slot, instance)
            if is_up and instance is not None:
                self._say(rental, state, cand.slot, "probing", ops.Step.PROBING)
                up.append((cand, instance))
            elif state.candidates[cand.slot].phase is r.Phase.FAILED:
                cause = state.candidates[cand.slot].cause or ""
                self._say(rental, state, cand.slot, cause, ops.Step.BOOT_FAILED, outcome=cause)
        for (cand, _), verdict in zip(up, self._probe_all(rental, up), strict=True):
            probed = ev.Probe(
                name=rental.name,
                offer_id=cand.offer_id,
                machine_id=cand.machine_id,
                instance_id=cand.instance_id,
                verdict=verdict,
                rental_id=rental.rental_id,
            )
            self.events.append(probed.KIND, **probed.to_payload())
            state = r.probed(state, cand.slot, verdict)
            self._say(rental, state, cand.slot, verdict.value, ops.Step.PROBED, verdict=verdict)
        return state

    def _probe_all(self, rental: Rental, up: list[tuple[r.Candidate, Instance]]) -> list[Verdict]:
        """Probe each box that is up, all at once (at most the race's width): an interrupt
        does not wait for them, so the candidates are destroyed at once."""
        boxes = [(instance, box_name(rental.name, rental.race, c.slot)) for c, instance in up]
        if len(boxes) <= 1:
            return [self.probe(instance, box) for instance, box in boxes]
        pool = ThreadPoolExecutor(max_workers=len(boxes), thread_name_prefix="probe")
        try:
            futures = [pool.submit(self.probe, instance, box) for instance, box in boxes]
            return [future.result() for future in futures]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def _destroy(self, rental: Rental, state: r.Race, action: r.Destroy) -> r.Race:
        cand = state.candidates[action.slot]
        if action.quarantine:
            self.quarantine.add(cand.machine_id, action.quarantine)  # M2: host faults only
        box = box_name(rental.name, rental.race, action.slot)
        record = self.ledger.get(box)
        if record is not None and record.state is not BoxState.RELEASED:
            outcome = destroy_box(self.vast, self.ledger, box, clock=self.clock)
            self._say(
                rental, state, action.slot, f"destroyed: {outcome.detail}", ops.Step.DESTROYED
            )
        cause = cand.cause or ("boot-timeout" if cand.phase is r.Phase.BOOTING else "lost race")
        return r.update(state, action.slot, phase=r.Phase.DESTROYED, cause=cause)

    def _finish(
        self,
        req: RentRequest,
        rental: Rental,
        cand: r.Candidate,
        offers: dict[int, Offer],
        deadline: float,
    ) -> Rental:
        offer = offers.get(cand.offer_id)
        live = self.rentals.update(
            rental.name,
            expect=RACING,  # its guardian may have ended the race at the deadline meanwhile
            state=LIVE,
            box=box_name(rental.name, rental.race, cand.slot),
            instance_id=cand.instance_id,
            offer_id=cand.offer_id,
            machine_id=cand.machine_id,
            gpu_name=offer.gpu_name if offer else req.gpu_name,
            dph_total=offer.dph_total if offer else None,
            contract_end_at=offer.end_date if offer else None,
            started_at=self.clock.wall(),
        )
        done = ev.RentDone(
            name=rental.name,
            instance_id=cand.instance_id,
            offer_id=cand.offer_id,
            rental_id=rental.rental_id,
        )
        self.events.append(done.KIND, **done.to_payload())
        return live

    # --- helpers -------------------------------------------------------------------------
    def _check_key(self) -> None:
        """M9: our public key must be registered before any race, or every probe fails on
        auth and innocent hosts get blamed (the 20 September lesson)."""
        keys = self.vast.list_ssh_keys()
        if not any(key.matches(self.public_key) for key in keys):
            raise Refused(
                "M9",
                f"our SSH key is not registered with the account ({len(keys)} keys are); "
                "register it (vastai create ssh-key) before renting",
            )

    def _destroy_losers(self, rental: Rental) -> None:
        """A crash between keeping the winner and destroying the losers leaves losers: finish."""
        for record in self.ledger.records():
            if (
                rental_of(record.name) == rental.name
                and record.name != rental.box
                and record.owner == self.ledger.operator
                and record.state in (BoxState.LIVE, BoxState.DESTROYING)
            ):
                destroy_box(self.vast, self.ledger, record.name, clock=self.clock)

    def _clean_earlier_races(self, rental: Rental) -> None:
        """Candidates of an earlier race (one that crashed or was interrupted) are ended before
        this race creates anything; one whose create is still unresolved stops it (M12)."""
        for record in owned_records(self, rental.name):
            outcome = end_record(self, record)
            if outcome.ending is Ending.UNRESOLVED:
                self.rentals.update(rental.name, expect=RACING, state=FAILED)
                raise StillRunning(
                    f"{outcome.name}: an earlier create of {rental.name!r} is unresolved "
                    f"({outcome.detail}); no other create is sent until it is (M12)"
                )

    def _respelled(self, req: RentRequest) -> tuple[RentRequest, list[Offer]]:
        """The request under the market's own spelling of its GPU, and that spelling's offers."""
        name = gpu_spelling(self.vast, req.gpu_name, num_gpus=1)
        if name is None or name == req.gpu_name:
            return req, []
        return replace(req, gpu_name=name), self.vast.search_offers(gpu_name=name, num_gpus=1)

    def _log_selection(self, req: RentRequest, chosen: Selection[Offer]) -> None:
        """M11: the full ranked candidate set and each pick's propensity."""
        selection = ev.Selection(
            name=req.name,
            gpu_name=req.gpu_name,
            k=req.race_k,
            candidates=tuple(
                ev.Offered(
                    id=o.id,
                    machine_id=o.machine_id,
                    dph_total=o.dph_total,
                    reliability=o.reliability,
                    disk_bw=o.disk_bw,
                    gpu_ram=o.gpu_ram,
                )
                for o in chosen.candidates
            ),
            removed=tuple(ev.Removed(id=x.offer.id, reasons=x.reasons) for x in chosen.removed),
            quarantined=chosen.quarantined,
            picks=tuple(
                ev.Picked(id=p.offer.id, rank=p.rank, propensity=p.propensity, explored=p.explored)
                for p in chosen.picks
            ),
        )
        self.events.append(selection.KIND, **selection.to_payload())

    def _say(
        self,
        rental: Rental,
        state: r.Race,
        slot: int,
        what: str,
        step: ops.Step,
        *,
        outcome: str | None = None,
        verdict: Verdict | None = None,
    ) -> None:
        """One step of a candidate: said on progress (``what``) and logged with what a reader
        decides from (``step``, the create's or boot's ``outcome``, the probe's ``verdict``)."""
        cand = state.candidates[slot]
        line = (
            f"{rental.name} slot {slot}: offer {cand.offer_id} (machine {cand.machine_id}): {what}"
        )
        said = ops.Candidate(
            name=rental.name,
            slot=slot,
            offer_id=cand.offer_id,
            what=what,
            step=step,
            outcome=outcome,
            verdict=verdict,
        )
        self.events.append(said.KIND, **said.to_payload())
        self.progress(line)
