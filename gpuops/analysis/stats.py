"""The stats figures, folded from the event log one event at a time (M11).

Pure: ``Stats.add(ts, kind, payload)`` for each event (or ``add_event`` with the typed event a
scan decoded), then ``Stats.report()``. Every payload is read through ``event_types``: one that
does not decode (a wrong type, a missing field, a
verdict outside ``model.Verdict``) is counted under ``malformed_events`` and skipped, never
fatal; ``skipped_events`` is their total. Memory is
bounded by what is open at once (races in progress, boxes not yet confirmed gone) and by the
number of distinct machines, never by the number of events.

Where each figure comes from:
- create calls and their causes: ``market.create`` (outcome: created, reconciled, taken,
  rate-limited, auth, unclear); rentals: ``market.rent.done``.
- probe verdicts: ``market.probe``; a machine "failed on SSH and passed at another time" when
  one machine id has both an SSH verdict and a pass anywhere in the log.
- inside versus outside the default filter: the probed offer's reliability and disk bandwidth,
  from the race's ``market.selection`` candidates, judged against select.py's default filter.
  The host failure rate is host-fault verdicts over all probes in the group.
- cost: a box bills from its ``market.create`` to its ``ledger.transition`` to gone-confirmed,
  at the offer's ``dph_total`` from the selection. A box is a failure when its probe failed or
  it never came up; a healthy loser is racing overhead; the kept box is the rental.
- the guardian: ``guard.confirmed_gone`` (delay_s after the deadline; the guardian's contract).
- the lane: ``lane.start`` and ``lane.job_end`` (the lane runner's contract).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpuops import event_types as ev
from gpuops import timestamps
from gpuops.market.select import MIN_DISK_MB_PER_S, MIN_RELIABILITY
from gpuops.model import HOST_FAULTS, Verdict

KINDS = frozenset(
    kind.KIND
    for kind in (
        ev.Selection,
        ev.Create,
        ev.Probe,
        ev.RentDone,
        ev.RentStopped,
        ev.Quarantine,
        ev.Transition,
        ev.ConfirmedGone,
        ev.LaneStart,
        ev.LaneJobEnd,
    )
)
# Only the gone-confirmed transitions matter here, and transitions are the log's commonest line.
NEEDLES = {ev.Transition.KIND: b'"after":"gone-confirmed"'}
CREATE_OK = frozenset({"created", "reconciled"})
SSH_VERDICTS = frozenset({Verdict.SSH_AUTH, Verdict.SSH_UNREACHABLE, Verdict.SSH_HOST_KEY_CHANGED})
SECONDS_PER_HOUR = 3600.0
GUARD_BUCKETS = (-600.0, -60.0, 0.0, 60.0, 600.0)  # upper edges of the lateness histogram
LANE_JOBS_KEPT = 20  # the last jobs listed one by one; the rest only in the totals


@dataclass(frozen=True)
class OfferFacts:
    dph_total: float | None
    in_filter: bool | None  # None: the offer left a field out


@dataclass
class Box:
    started: str
    dph_total: float | None
    verdict: Verdict | None = None
    kept: bool = False


def in_default_filter(reliability: object, disk_bw: object) -> bool | None:
    """Whether an offer passes the seed's default filter (reliability, disk bandwidth)."""
    if not isinstance(reliability, int | float) or not isinstance(disk_bw, int | float):
        return None
    return reliability >= MIN_RELIABILITY and disk_bw >= MIN_DISK_MB_PER_S


def hours_between(start: str, end: str) -> float:
    """Hours from one event's stamp to another's; ValueError (counted, never fatal) for a stamp
    that is not ISO-8601 or has no UTC offset (the one parser: gpuops/timestamps.py)."""
    seconds = timestamps.epoch_of(end) - timestamps.epoch_of(start)
    return max(0.0, seconds) / SECONDS_PER_HOUR


def rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@dataclass
class Stats:
    first_ts: str | None = None
    last_ts: str | None = None
    selections: int = 0
    explored_picks: int = 0
    picks: int = 0
    creates: Counter[str] = field(default_factory=Counter)
    rentals: int = 0
    stopped: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    quarantines: int = 0
    ssh_failed: set[int] = field(default_factory=set)
    passed: set[int] = field(default_factory=set)
    filter_probes: Counter[str] = field(default_factory=Counter)
    filter_faults: Counter[str] = field(default_factory=Counter)
    races: dict[str, dict[int, ev.Offered]] = field(default_factory=dict)  # candidates by id
    boxes: dict[str, Box] = field(default_factory=dict)
    cost_usd: Counter[str] = field(default_factory=Counter)
    box_count: Counter[str] = field(default_factory=Counter)
    guard_firings: int = 0
    guard_late: int = 0
    guard_lateness_sum: float = 0.0
    guard_lateness_max: float | None = None
    guard_lateness_min: float | None = None
    guard_hist: list[int] = field(default_factory=lambda: [0] * (len(GUARD_BUCKETS) + 1))
    lane_starts: Counter[str] = field(default_factory=Counter)
    lane_totals: Counter[str] = field(default_factory=Counter)
    lane_outcomes: Counter[str] = field(default_factory=Counter)
    lane_jobs: list[dict[str, object]] = field(default_factory=list)
    malformed: Counter[str] = field(default_factory=Counter)

    def add(self, ts: str, kind: str, payload: dict[str, object]) -> None:
        """Fold one event in from its payload (``add_event`` of its decoding)."""
        self.add_event(ts, kind, ev.decode(kind, payload))

    def add_event(self, ts: str, kind: str, event: ev.Event | None) -> None:
        """Fold one typed event in; None, a payload that did not decode as its kind, is counted,
        not fatal (so is a stamp that is not ISO-8601 with a UTC offset, found when a box's hours are
        computed, and a whole number too large for a float, such as a dph_total of 10**400)."""
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts
        if event is None:
            self.malformed[kind] += 1
            return
        handler = _HANDLERS.get(type(event))
        if handler is None:  # a typed kind these figures do not read (the report's: guard.destroy)
            return
        try:
            handler(self, ts, event)  # type: ignore[operator]
        except (ValueError, OverflowError):  # a stamp not ISO-8601, a number past float range
            self.malformed[kind] += 1

    # --- the market ----------------------------------------------------------------------
    def _selection(self, ts: str, e: ev.Selection) -> None:
        # a new race replaces the last; the first candidate of an id is the one (as listed)
        self.races[e.name] = {c.id: c for c in reversed(e.candidates)}
        self.selections += 1
        self.picks += len(e.picks)
        self.explored_picks += sum(1 for pick in e.picks if pick.explored)

    def _facts(self, name: str, offer_id: int) -> OfferFacts | None:
        race = self.races.get(name)
        c = race.get(offer_id) if race is not None else None
        if c is None:
            return None
        return OfferFacts(c.dph_total, in_default_filter(c.reliability, c.disk_bw))

    def _create(self, ts: str, e: ev.Create) -> None:
        self.creates[e.outcome] += 1
        if e.outcome in CREATE_OK and e.instance_id is not None:
            facts = self._facts(e.name, e.offer_id)
            self.boxes[e.instance_id] = Box(ts, facts.dph_total if facts else None)

    def _probe(self, ts: str, e: ev.Probe) -> None:
        self.verdicts[e.verdict.value] += 1
        if e.verdict in SSH_VERDICTS:
            self.ssh_failed.add(e.machine_id)
        elif e.verdict is Verdict.PASS:
            self.passed.add(e.machine_id)
        facts = self._facts(e.name, e.offer_id)
        group = _group(facts.in_filter if facts else None)
        self.filter_probes[group] += 1
        self.filter_faults[group] += e.verdict.host_fault
        box = self.boxes.get(str(e.instance_id))
        if box is not None:
            box.verdict = e.verdict

    def _rent_done(self, ts: str, e: ev.RentDone) -> None:
        self.rentals += 1
        box = self.boxes.get(str(e.instance_id))
        if box is not None:
            box.kept = True
        self.races.pop(e.name, None)  # the race is over: its candidates can go

    def _rent_stopped(self, ts: str, e: ev.RentStopped) -> None:
        self.stopped += 1
        self.races.pop(e.name, None)

    def _quarantine(self, ts: str, e: ev.Quarantine) -> None:
        self.quarantines += 1

    def _transition(self, ts: str, e: ev.Transition) -> None:
        if e.after != "gone-confirmed" or e.instance_id is None:
            return
        box = self.boxes.pop(e.instance_id, None)
        if box is None:
            return
        kind = _box_kind(box)
        self.box_count[kind] += 1
        if box.dph_total is not None:
            self.cost_usd[kind] += box.dph_total * hours_between(box.started, ts)  # type: ignore[assignment]  # a Counter of dollars

    # --- the guardian and the lane ---------------------------------------------------------
    def _guard(self, ts: str, e: ev.ConfirmedGone) -> None:
        late = float(e.delay_s)
        self.guard_firings += 1
        self.guard_late += late > 0
        self.guard_lateness_sum += late
        self.guard_lateness_max = (
            late if self.guard_lateness_max is None else max(self.guard_lateness_max, late)
        )
        self.guard_lateness_min = (
            late if self.guard_lateness_min is None else min(self.guard_lateness_min, late)
        )
        self.guard_hist[sum(1 for edge in GUARD_BUCKETS if late > edge)] += 1

    def _lane_start(self, ts: str, e: ev.LaneStart) -> None:
        self.lane_starts[e.outcome] += 1

    def _lane_job_end(self, ts: str, e: ev.LaneJobEnd) -> None:
        row: dict[str, Any] = {
            "lane": e.lane,
            "job": e.job,
            "attempts": e.attempts,
            "stockouts": e.stockouts,
            "waiting": float(e.waiting_s),
            "running": float(e.running_s),
            "cost_usd": float(e.cost_usd),
            "outcome": e.outcome,
        }
        for name in ("attempts", "stockouts", "waiting", "running", "cost_usd"):
            self.lane_totals[name] += row[name]
        self.lane_totals["jobs"] += 1
        self.lane_outcomes[row["outcome"]] += 1
        self.lane_jobs = [*self.lane_jobs[-(LANE_JOBS_KEPT - 1) :], row]

    # --- the figures -----------------------------------------------------------------------
    def report(self) -> dict[str, object]:
        calls = sum(self.creates.values())
        failed = calls - sum(self.creates[o] for o in CREATE_OK)
        other = failed - self.creates["taken"] - self.creates["rate-limited"]
        probes = sum(self.verdicts.values())
        ssh = sum(self.verdicts[v.value] for v in SSH_VERDICTS)
        faults = sum(self.verdicts[v.value] for v in HOST_FAULTS)
        jobs = self.lane_totals["jobs"]
        open_boxes = Counter(_box_kind(b) for b in self.boxes.values())
        return {
            "span": {"first": self.first_ts, "last": self.last_ts},
            "market": {
                "selections": self.selections,
                "picks": self.picks,
                "explored_picks": self.explored_picks,
                "explore_share": rate(self.explored_picks, self.picks),
                "create_calls": calls,
                "rentals": self.rentals,
                "races_stopped": self.stopped,
                "create_outcomes": dict(sorted(self.creates.items())),
                "create_failure_rate": rate(failed, calls),
                "create_failure_rate_by_cause": {
                    "taken": rate(self.creates["taken"], calls),
                    "rate-limited": rate(self.creates["rate-limited"], calls),
                    "other": rate(other, calls),
                },
                "probe_verdicts": probes,
                "verdicts": dict(sorted(self.verdicts.items())),
                "ssh_failure_rate": rate(ssh, probes),
                "host_fault_rate": rate(faults, probes),
                "machines_failed_ssh": len(self.ssh_failed),
                "machines_failed_ssh_passed_other_time": len(self.ssh_failed & self.passed),
                "host_failure_rate_by_filter": {
                    group: {
                        "probes": self.filter_probes[group],
                        "host_faults": self.filter_faults[group],
                        "rate": rate(self.filter_faults[group], self.filter_probes[group]),
                    }
                    for group in ("inside", "outside", "unknown")
                },
                "quarantines": self.quarantines,
                "boxes_confirmed_gone": dict(sorted(self.box_count.items())),
                "cost_usd": {k: round(v, 6) for k, v in sorted(self.cost_usd.items())},
                "failure_cost_usd": round(self.cost_usd["failed"], 6),
                "boxes_not_confirmed_gone": dict(sorted(open_boxes.items())),
            },
            "guardian": {
                "firings": self.guard_firings,
                "late": self.guard_late,
                "delay_s_mean": (
                    self.guard_lateness_sum / self.guard_firings if self.guard_firings else None
                ),
                "delay_s_min": self.guard_lateness_min,
                "delay_s_max": self.guard_lateness_max,
                "delay_histogram": {
                    "upper_edges_s": list(GUARD_BUCKETS),
                    "counts": list(self.guard_hist),
                },
            },
            "lane": {
                "starts": dict(sorted(self.lane_starts.items())),
                "jobs": jobs,
                "outcomes": dict(sorted(self.lane_outcomes.items())),
                "attempts_per_job": _per(self.lane_totals["attempts"], jobs),
                "stockouts_per_job": _per(self.lane_totals["stockouts"], jobs),
                "waiting_s_per_job": _per(self.lane_totals["waiting"], jobs),
                "running_s_per_job": _per(self.lane_totals["running"], jobs),
                "cost_usd_per_job": _per(self.lane_totals["cost_usd"], jobs),
                "cost_usd_total": round(float(self.lane_totals["cost_usd"]), 6),
                "last_jobs": list(self.lane_jobs),
            },
            "malformed_events": dict(sorted(self.malformed.items())),
            "skipped_events": sum(self.malformed.values()),
        }


def _box_kind(box: Box) -> str:
    if box.kept:
        return "rental"
    if box.verdict is Verdict.PASS:
        return "lost-race"
    return "failed"  # failed its probe, never came up, or vanished


def _group(in_filter: bool | None) -> str:
    return "unknown" if in_filter is None else ("inside" if in_filter else "outside")


def _per(total: float, jobs: float) -> float | None:
    return round(total / jobs, 6) if jobs else None


_HANDLERS = {
    ev.Selection: Stats._selection,
    ev.Create: Stats._create,
    ev.Probe: Stats._probe,
    ev.RentDone: Stats._rent_done,
    ev.RentStopped: Stats._rent_stopped,
    ev.Quarantine: Stats._quarantine,
    ev.Transition: Stats._transition,
    ev.ConfirmedGone: Stats._guard,
    ev.LaneStart: Stats._lane_start,
    ev.LaneJobEnd: Stats._lane_job_end,
}
