"""Renting a healthy box: the shell that applies the race's decisions (M1, M2, M3, M8, M9, M11, M12).

``Market.rent`` checks the key (M9), returns a live rental as it is (M8), selects offers with
logged propensities (M11), writes each candidate's intent before its create (M3), never retries
a create and reconciles an unclear one by its label (M12), probes each box as it comes up,
keeps the first that passes and destroys every loser with confirmation (M1, M4), and
quarantines real host faults but never our own key's (M2). ``race.decide`` makes every
decision; this module only performs them and reports back.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from gpuops import timing
from gpuops.errors import (
    AuthFailed,
    NotOwned,
    OfferTaken,
    ProviderUnavailable,
    RateLimited,
    Refused,
    Unavailable,
    UnexpectedResponse,
    UsageError,
)
from gpuops.ledger import CREATE_REFUSED, BoxState, EventSink, Ledger, utc_iso
from gpuops.market import race as r
from gpuops.market.probe import Verdict
from gpuops.market.quarantine import Quarantine
from gpuops.market.rentals import (
    FAILED,
    LIVE,
    RELEASED,
    Rental,
    Rentals,
    box_name,
    check_name,
    rental_of,
)
from gpuops.market.select import Filter, Selection, resolve_gpu_name, select
from gpuops.market.teardown import destroy_box, intent_of, label_for
from gpuops.model import Instance, Offer, SshKey


class Vast(Protocol):
    def search_offers(
        self, gpu_name: str | None = None, num_gpus: int | None = None
    ) -> list[Offer]: ...
    def create(
        self, offer_id: int, *, label: str, image: str, disk_gb: float, onstart: str | None = None
    ) -> str: ...
    def show(self, instance_id: str) -> Instance | None: ...
    def list_instances(self, *, label: str | None = None) -> list[Instance]: ...
    def destroy(self, instance_id: str) -> None: ...
    def list_ssh_keys(self) -> list[SshKey]: ...


Prober = Callable[[Instance, str], Verdict]  # (instance, ledger record name) -> verdict


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
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        progress: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.vast = vast
        self.ledger = ledger
        self.events = events
        self.probe = probe
        self.public_key = public_key
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.progress = progress
        self.rentals = Rentals(ledger.store, ledger.operator)
        self.quarantine = Quarantine(ledger.store, events, ledger.operator, clock=clock)
        # machine id -> shrunk pass rate for these offers (analysis/shrink.py); None: price only
        self.pass_rates: Callable[[list[Offer]], dict[int, float]] | None = None

    # --- rent ----------------------------------------------------------------------------
    def rent(self, req: RentRequest) -> Rental:
        check_name(req.name)
        existing = self.rentals.get(req.name)
        if (
            existing is not None
            and existing.state == LIVE
            and existing.owner == self.ledger.operator
        ):
            self._destroy_losers(existing)
            self.progress(f"{req.name}: already live as instance {existing.instance_id}")
            return existing  # M8: never a second rental for one name
        self._check_key()
        rental = self.rentals.begin_race(req.name)  # refuses another operator's name (M3)
        self._clean_earlier_races(rental)
        offers = self.vast.search_offers(gpu_name=req.gpu_name, num_gpus=1)
        if not offers:  # a misspelt GPU is a usage error naming the known ones, not a stockout
            req, offers = self._respelled(req)
        chosen = select(
            offers,
            k=req.race_k,
            rng=self.rng,
            rules=Filter(vram_floor_mb=req.vram_floor_mb),
            quarantined=self.quarantine.machines(),
            pass_rate=self.pass_rates(offers) if self.pass_rates else None,
        )
        self._log_selection(req, chosen)
        if not chosen.picks:
            self.rentals.update(req.name, state=FAILED)
            raise Unavailable(
                f"no {req.gpu_name} offer passes the filter ({len(chosen.removed)} removed, "
                f"{chosen.quarantined} quarantined); see `gpuops offers --all`"
            )
        picked_ids = {p.offer.id for p in chosen.picks}
        spares = tuple((o.id, o.machine_id) for o in chosen.candidates if o.id not in picked_ids)
        state = r.Race(
            tuple(
                r.Candidate(i, p.offer.id, p.offer.machine_id) for i, p in enumerate(chosen.picks)
            ),
            spare_offers=spares,
            max_creates=req.max_creates or 2 * req.race_k + 2,
        )
        offer_by_id = {o.id: o for o in chosen.candidates}
        deadline = self.clock() + req.hours * 3600.0
        return self._run(req, rental, state, offer_by_id, deadline)

    def _run(
        self,
        req: RentRequest,
        rental: Rental,
        state: r.Race,
        offers: dict[int, Offer],
        deadline: float,
    ) -> Rental:
        while True:
            actions = r.decide(state, self.clock())
            kept = [c for c in state.candidates if c.phase is r.Phase.KEPT]
            if not actions and kept:
                return self._finish(req, rental, kept[0], offers, deadline)
            if not actions:
                before = state
                state = self._poll(rental, state)
                if state == before:
                    self.sleep(timing.RACE_POLL_S)
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
            self._say(rental, state, action.slot, "kept")
            return r.update(state, action.slot, phase=r.Phase.KEPT)
        if isinstance(action, r.Replace):
            return r.add_spare(state)
        if isinstance(action, r.Wait):
            self.sleep(action.seconds)
            return state
        self.rentals.update(rental.name, state=FAILED)
        self.events.append("market.rent.stopped", name=rental.name, reason=action.reason)
        if action.rule:
            raise Refused(action.rule, action.reason)
        raise Unavailable(action.reason)

    def _create(
        self, req: RentRequest, rental: Rental, state: r.Race, slot: int, deadline: float
    ) -> r.Race:
        cand = state.candidates[slot]
        box = box_name(rental.name, rental.race, slot)
        record, _ = self.ledger.record_intent(box, "vast", deadline_at=utc_iso(deadline))  # M3
        label = label_for(record.intent_id)
        now = self.clock()
        state = r.Race(state.candidates, now, state.spare_offers, state.max_creates)
        try:
            instance_id = self.vast.create(
                cand.offer_id, label=label, image=req.image, disk_gb=req.disk_gb
            )
        except (OfferTaken, RateLimited) as exc:
            # refused outright: nothing was created, so the intent is gone (M4 evidence)
            self.ledger.confirm_gone(box, CREATE_REFUSED)
            self.ledger.release(box)
            cause = "taken" if isinstance(exc, OfferTaken) else "rate-limited"
            self._log_create(rental, cand, cause)
            self._say(rental, state, slot, cause)
            if isinstance(exc, RateLimited):
                self.sleep(min(exc.retry_after_s or timing.BACKOFF_BASE_S, timing.BACKOFF_MAX_S))
            return r.update(state, slot, phase=r.Phase.CREATE_FAILED, cause=cause)
        except AuthFailed:
            self._log_create(rental, cand, "auth")
            self.ledger.confirm_gone(box, CREATE_REFUSED)
            self.ledger.release(box)
            raise
        except (ProviderUnavailable, UnexpectedResponse):
            found = self._reconcile(label)  # M12: the create may have happened
            self._log_create(rental, cand, "unclear" if found is None else "reconciled", found)
            if found is None:
                self._say(rental, state, slot, "unclear (left for sweep)")
                return r.update(state, slot, phase=r.Phase.CREATE_FAILED, cause="unclear")
            instance_id = found.instance_id
        else:
            self._log_create(rental, cand, "created", instance_id)
        self.ledger.mark_live(box, instance_id)
        self._say(rental, state, slot, f"created instance {instance_id}")
        return r.update(state, slot, phase=r.Phase.BOOTING, instance_id=instance_id, created_at=now)

    def _log_create(
        self, rental: Rental, cand: r.Candidate, outcome: str, made: Instance | str | None = None
    ) -> None:
        """Each create call's outcome, for `gpuops stats` (created, taken, rate-limited, auth,
        unclear, or reconciled: unclear at first, then found by its label)."""
        instance_id = made.instance_id if isinstance(made, Instance) else made
        self.events.append(
            "market.create",
            name=rental.name,
            offer_id=cand.offer_id,
            machine_id=cand.machine_id,
            outcome=outcome,
            instance_id=instance_id,
        )

    def _reconcile(self, label: str) -> Instance | None:
        """Find the box an unclear create may have made, by its label (M12)."""
        try:
            found = self.vast.list_instances(label=label)
        except (Unavailable, UnexpectedResponse):
            return None
        matching = [i for i in found if i.label == label]
        return matching[0] if matching else None

    def _poll(self, rental: Rental, state: r.Race) -> r.Race:
        for cand in state.candidates:
            if cand.phase is not r.Phase.BOOTING or cand.instance_id is None:
                continue
            try:
                instance = self.vast.show(cand.instance_id)
            except (Unavailable, UnexpectedResponse):
                continue  # ask again next round; the boot timeout bounds the wait
            if instance is None:
                state = r.update(state, cand.slot, phase=r.Phase.FAILED, cause="vanished")
            elif instance.actual_status.is_terminal_failure:
                cause = f"boot-failed ({instance.actual_status_raw})"
                state = r.update(state, cand.slot, phase=r.Phase.FAILED, cause=cause)
            elif instance.actual_status.is_running:
                self._say(rental, state, cand.slot, "probing")
                box = box_name(rental.name, rental.race, cand.slot)
                verdict = self.probe(instance, box)
                self.events.append(
                    "market.probe",
                    name=rental.name,
                    offer_id=cand.offer_id,
                    machine_id=cand.machine_id,
                    instance_id=cand.instance_id,
                    verdict=verdict.value,
                )
                phase = r.Phase.PASSED if verdict is Verdict.PASS else r.Phase.FAILED
                state = r.update(state, cand.slot, phase=phase, cause=verdict.value)
            else:
                continue
            self._say(rental, state, cand.slot, state.candidates[cand.slot].cause or "")
        return state

    def _destroy(self, rental: Rental, state: r.Race, action: r.Destroy) -> r.Race:
        cand = state.candidates[action.slot]
        if action.quarantine:
            self.quarantine.add(cand.machine_id, action.quarantine)  # M2: host faults only
        box = box_name(rental.name, rental.race, action.slot)
        record = self.ledger.get(box)
        if record is not None and record.state is not BoxState.RELEASED:
            outcome = destroy_box(self.vast, self.ledger, box, clock=self.clock, sleep=self.sleep)
            self._say(rental, state, action.slot, f"destroyed: {outcome.detail}")
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
            state=LIVE,
            box=box_name(rental.name, rental.race, cand.slot),
            instance_id=cand.instance_id,
            offer_id=cand.offer_id,
            machine_id=cand.machine_id,
            gpu_name=offer.gpu_name if offer else req.gpu_name,
            dph_total=offer.dph_total if offer else None,
            started_at=self.clock(),
            deadline_at=deadline,
        )
        self.events.append(
            "market.rent.done",
            name=rental.name,
            instance_id=cand.instance_id,
            offer_id=cand.offer_id,
        )
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
                destroy_box(self.vast, self.ledger, record.name, clock=self.clock, sleep=self.sleep)

    def _clean_earlier_races(self, rental: Rental) -> None:
        """Candidates of a race that crashed: adopt their boxes by label and destroy them."""
        for record in self.ledger.records():
            if rental_of(record.name) != rental.name or record.owner != self.ledger.operator:
                continue
            if record.state is BoxState.INTENT:
                found = self._reconcile(label_for(record.intent_id))
                if found is None:
                    continue  # unclear: sweep retries the reconciliation later
                self.ledger.mark_live(record.name, found.instance_id)
                record = self.ledger.get(record.name) or record
            if record.state in (BoxState.LIVE, BoxState.DESTROYING):
                destroy_box(self.vast, self.ledger, record.name, clock=self.clock, sleep=self.sleep)

    def _respelled(self, req: RentRequest) -> tuple[RentRequest, list[Offer]]:
        """The request under the market's own spelling of its GPU, and that spelling's offers."""
        known = self.vast.search_offers(num_gpus=1)  # the market's names, best offers first
        try:
            name = resolve_gpu_name(req.gpu_name, (o.gpu_name for o in known))
        except UsageError:
            self.rentals.update(req.name, state=FAILED)
            raise
        if name is None or name == req.gpu_name:
            return req, []
        return replace(req, gpu_name=name), self.vast.search_offers(gpu_name=name, num_gpus=1)

    def _log_selection(self, req: RentRequest, chosen: Selection) -> None:
        """M11: the full ranked candidate set and each pick's propensity."""
        self.events.append(
            "market.selection",
            name=req.name,
            gpu_name=req.gpu_name,
            k=req.race_k,
            candidates=[
                {
                    "id": o.id,
                    "machine_id": o.machine_id,
                    "dph_total": o.dph_total,
                    "reliability": o.reliability,
                    "disk_bw": o.disk_bw,
                    "gpu_ram": o.gpu_ram,
                }
                for o in chosen.candidates
            ],
            removed=[{"id": x.offer.id, "reasons": list(x.reasons)} for x in chosen.removed],
            quarantined=chosen.quarantined,
            picks=[
                {
                    "id": p.offer.id,
                    "rank": p.rank,
                    "propensity": p.propensity,
                    "explored": p.explored,
                }
                for p in chosen.picks
            ],
        )

    def _say(self, rental: Rental, state: r.Race, slot: int, what: str) -> None:
        cand = state.candidates[slot]
        line = (
            f"{rental.name} slot {slot}: offer {cand.offer_id} (machine {cand.machine_id}): {what}"
        )
        self.events.append(
            "market.candidate", name=rental.name, slot=slot, offer_id=cand.offer_id, what=what
        )
        self.progress(line)


@dataclass(frozen=True)
class SweepReport:
    retried: list[str]  # pending destroys retried, with their outcome
    expired: list[str]  # rentals past their deadline, destroyed
    adopted: list[str]  # intents whose box was found by label and taken under the ledger
    unresolved: list[str]  # intents with no box found: a list is no proof, so they stay
    unowned: list[str]  # instances on the account no ledger owns: reported, never touched


# A destroy began and was not finished: the retry list, plus a confirmation whose release a
# crash cut off (M4). _ENDING adds the live boxes `destroy` ends.
_PENDING = (BoxState.DESTROYING, BoxState.GONE_CONFIRMED)
_ENDING = (BoxState.LIVE, *_PENDING)


def destroy_rental(market: Market, name: str) -> list[str]:
    """``gpuops destroy NAME``: refuse unless ours (M3); destroy every box of the rental with
    confirmation (M4); mark the rental released only when all are confirmed gone."""
    rental = market.rentals.get(name)
    if rental is None:
        raise Refused("M3", f"no rental named {name!r}: gpuops cannot prove it owns such a box")
    if rental.owner != market.ledger.operator:
        raise NotOwned(name, rental.owner, market.ledger.operator)
    outcomes, all_gone = [], True
    for record in market.ledger.records():
        if rental_of(record.name) != name or record.owner != market.ledger.operator:
            continue
        if record.state in _ENDING and record.instance_id:
            outcome = destroy_box(
                market.vast, market.ledger, record.name, clock=market.clock, sleep=market.sleep
            )
            outcomes.append(f"{record.name}: {outcome.detail}")
            all_gone = all_gone and outcome.released
        elif record.state is BoxState.INTENT:
            outcomes.append(f"{record.name}: an unresolved intent; `gpuops sweep` reconciles it")
            all_gone = False
    if all_gone:
        market.rentals.update(name, state=RELEASED, ended_at=market.clock())
    return outcomes


def sweep(market: Market) -> SweepReport:
    """Retry pending destroys, destroy expired rentals, adopt intents found by label, and
    report instances no ledger owns (loudly, never touching them)."""
    me = market.ledger.operator
    report = SweepReport([], [], [], [], [])
    for record in market.ledger.records():
        if record.owner != me:
            continue
        if record.state in _PENDING and record.instance_id:
            outcome = destroy_box(
                market.vast, market.ledger, record.name, clock=market.clock, sleep=market.sleep
            )
            report.retried.append(f"{record.name}: {outcome.detail}")
        elif record.state is BoxState.INTENT:
            found = market._reconcile(label_for(record.intent_id))
            if found is None:
                report.unresolved.append(record.name)
                continue
            market.ledger.mark_live(record.name, found.instance_id)
            report.adopted.append(f"{record.name}: instance {found.instance_id}")
            rental = market.rentals.get(rental_of(record.name))
            if rental is None or rental.box != record.name:
                destroy_box(
                    market.vast, market.ledger, record.name, clock=market.clock, sleep=market.sleep
                )
    now = market.clock()
    for rental in market.rentals.all():
        if rental.owner == me and rental.state == LIVE and rental.deadline_at is not None:
            if now >= rental.deadline_at:
                report.expired.extend(destroy_rental(market, rental.name))
    known = {r.intent_id for r in market.ledger.records() if r.active}
    for instance in market.vast.list_instances():
        if intent_of(instance.label) not in known:
            report.unowned.append(
                f"instance {instance.instance_id} label {instance.label!r}: no ledger owns it"
            )
    market.events.append(
        "market.sweep",
        retried=len(report.retried),
        expired=len(report.expired),
        adopted=len(report.adopted),
        unresolved=len(report.unresolved),
        unowned=len(report.unowned),
    )
    return report
