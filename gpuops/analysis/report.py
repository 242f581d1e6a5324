"""What the HTML report shows a renter, folded from the typed events (pure; no I/O).

``stats --html`` draws these beside the stats figures (analysis/page.py). Every figure comes
from a typed event (``event_types``), never from an event's prose:

- spend over time: a box bills its offer's ``dph_total`` (from its race's
  ``market.selection``) from its ``market.create`` until its ``ledger.transition`` to
  gone-confirmed, exactly as stats.py's cost; a lane job bills its ``lane.job_end``'s
  ``cost_usd`` evenly over the ``running_s`` before that event. Each span is split over the
  chart's time bins by overlap, so the bins add up to the total. A box not yet confirmed gone
  is counted (``still_billing``), not charted: its end is not known.
- pass rates: shrink.py's own ``MachineCounts`` and ``PassRates`` (the rates `offers` and
  `rent` rank by), per machine (raw and shrunk) and per GPU model (its prior).
- quarantine: each machine's last ``market.quarantine``, in force while ``until`` > ``now``.
- lane jobs: each ``lane.job_end``'s cost, waiting and running time and outcome.
- per-rental timelines: every event of a rental (by ``rental_id``, else its name), in log
  order, with its actor: the part of gpuops that wrote it (``rent``: the race's selection,
  creates and stop, and a box record's intent and live; ``probe``; ``keep``: the race kept a
  box; ``destroy``: a box record's destroying, gone-confirmed and released; ``guardian``:
  ``guard.destroy`` and ``guard.confirmed_gone``; ``sweep``: ``market.sweep.ended``).

Memory is bounded: the billed spans of the boxes (one pair of floats each), the last
``JOBS_KEPT`` lane jobs, and the last ``RENTALS_KEPT`` rentals' timelines of at most
``EVENTS_PER_RENTAL`` events each (the count of those left out is kept).

Nothing here decides anything about money: the figures are for a person to read; M15's
budget is budget.py's, from the provider's own state transitions.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuops import event_types as ev
from gpuops.analysis.shrink import MIN_MACHINES, MachineCounts, PassRates
from gpuops.analysis.stats import CREATE_OK
from gpuops.timestamps import epoch_of

KINDS = frozenset(ev.KINDS)
# bin widths for the time axis, in seconds: the narrowest that gives at most MAX_BINS bins
BIN_WIDTHS = (60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400)
MAX_BINS = 48
JOBS_KEPT = 50
RENTALS_KEPT = 20
EVENTS_PER_RENTAL = 200
MACHINES_SHOWN = 40
ACTORS = ("rent", "probe", "keep", "destroy", "guardian", "sweep")
_RENT_STATES = frozenset({"intent", "live"})


@dataclass(frozen=True)
class Entry:
    """One line of a rental's timeline."""

    ts: str
    actor: str
    kind: str
    what: str


@dataclass
class Timeline:
    key: str
    name: str
    owner: str = ""
    entries: list[Entry] = field(default_factory=list)
    left_out: int = 0


@dataclass
class _Open:
    started: float
    dph_total: float | None


@dataclass
class Report:
    """Fold events with ``add_event(ts, kind, event)``, then ``figures(now)``."""

    first: float | None = None
    last: float | None = None
    spans: list[tuple[float, float, float, str]] = field(default_factory=list)
    unpriced: int = 0  # boxes gone with no known price (their race's selection not in the log)
    open_boxes: dict[str, _Open] = field(default_factory=dict)
    prices: dict[tuple[str, int], float] = field(default_factory=dict)  # (race, offer) -> $/h
    counts: MachineCounts = field(default_factory=MachineCounts)
    quarantine: dict[int, ev.Quarantine] = field(default_factory=dict)
    jobs: list[ev.LaneJobEnd] = field(default_factory=list)
    jobs_total: int = 0
    timelines: OrderedDict[str, Timeline] = field(default_factory=OrderedDict)
    pending: dict[str, Entry] = field(default_factory=dict)  # a race's selection, by name
    skipped: int = 0

    def add_event(self, ts: str, kind: str, event: ev.Event | None) -> None:
        """One typed event; None (a payload that did not decode) or a stamp that is not a UTC
        time is counted in ``skipped``, never fatal."""
        try:
            when = epoch_of(ts)
        except ValueError:
            self.skipped += 1
            return
        if event is None:
            self.skipped += 1
            return
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)
        try:  # a whole number past float range (a dph_total of 10**400): counted, as in stats
            said = _said(event)
            self._spend(when, event)
        except OverflowError:
            self.skipped += 1
            return
        self.counts.add_event(event)
        if isinstance(event, ev.Quarantine):
            self.quarantine[event.machine_id] = event
        elif isinstance(event, ev.LaneJobEnd):
            self.jobs_total += 1
            self.jobs = [*self.jobs[-(JOBS_KEPT - 1) :], event]
        if said is not None:
            self._timeline(ts, kind, event, said)

    # --- spend ---------------------------------------------------------------------------
    def _spend(self, when: float, event: ev.Event) -> None:
        """Raises OverflowError, having changed nothing, for a number past float range."""
        if isinstance(event, ev.Selection):
            prices = {(event.name, c.id): float(c.dph_total) for c in event.candidates}
            self.prices.update(prices)
        elif isinstance(event, ev.Quarantine):
            float(event.until)  # read as a float by figures()
        elif isinstance(event, ev.Create):
            if event.outcome in CREATE_OK and event.instance_id is not None:
                price = self.prices.get((event.name, event.offer_id))
                self.open_boxes[event.instance_id] = _Open(when, price)
        elif isinstance(event, ev.RentDone | ev.RentStopped):
            for key in [k for k in self.prices if k[0] == event.name]:
                del self.prices[key]  # the race is over: its candidates can go
        elif (
            isinstance(event, ev.Transition)
            and event.after == "gone-confirmed"
            and event.instance_id is not None
        ):
            box = self.open_boxes.pop(event.instance_id, None)
            if box is None:
                return
            if box.dph_total is None:
                self.unpriced += 1
                return
            hours = max(0.0, when - box.started) / 3600.0
            self.spans.append(
                (box.started, max(when, box.started), box.dph_total * hours, "market")
            )
        elif isinstance(event, ev.LaneJobEnd):
            figures = [float(event.waiting_s), float(event.running_s), float(event.cost_usd)]
            self.spans.append((when - max(0.0, figures[1]), when, figures[2], "lane"))

    # --- timelines -----------------------------------------------------------------------
    def _timeline(self, ts: str, kind: str, event: ev.Event, said: tuple[str, str]) -> None:
        actor, what = said
        entry = Entry(ts, actor, kind, what)
        if isinstance(event, ev.Selection):  # no rental id yet: it joins the race's rental
            self.pending[event.name] = entry
            return
        name = _rental_name(event)
        rental_id = getattr(event, "rental_id", None)
        key = rental_id if rental_id else f"name:{name}"
        line = self.timelines.get(key)
        if line is None:
            line = self.timelines[key] = Timeline(key, name)
            selection = self.pending.pop(name, None)
            if selection is not None:
                line.entries.append(selection)
            while len(self.timelines) > RENTALS_KEPT:
                self.timelines.popitem(last=False)
        else:
            self.timelines.move_to_end(key)
        if isinstance(event, ev.Transition) and event.owner and not line.owner:
            line.owner = event.owner
        if len(line.entries) < EVENTS_PER_RENTAL:
            line.entries.append(entry)
        else:
            line.left_out += 1

    # --- the figures ---------------------------------------------------------------------
    def figures(self, now: float) -> dict[str, object]:
        rates = PassRates.from_counts(self.counts)
        return {
            "spend": self._spend_figures(),
            "machines": _machines(rates),
            "gpus": _gpus(rates),
            "quarantine": [
                {
                    "machine_id": q.machine_id,
                    "cause": q.cause,
                    "until": float(q.until),
                    "in_force": float(q.until) > now,
                }
                for q in sorted(
                    self.quarantine.values(), key=lambda q: (-float(q.until), q.machine_id)
                )
            ],
            "lane_jobs": [
                {
                    "lane": j.lane,
                    "job": j.job,
                    "outcome": j.outcome,
                    "cost_usd": float(j.cost_usd),
                    "waiting_s": float(j.waiting_s),
                    "running_s": float(j.running_s),
                    "attempts": j.attempts,
                    "stockouts": j.stockouts,
                }
                for j in self.jobs
            ],
            "lane_jobs_total": self.jobs_total,
            "timelines": [
                {
                    "rental": t.key,
                    "name": t.name,
                    "owner": t.owner,
                    "left_out": t.left_out,
                    "events": [e.__dict__ for e in t.entries],
                }
                for t in self.timelines.values()
            ],
            "skipped_events": self.skipped,
        }

    def _spend_figures(self) -> dict[str, object]:
        total = {"market": 0.0, "lane": 0.0}
        for *_, usd, source in self.spans:
            total[source] += usd
        doc: dict[str, object] = {
            "market_usd": round(total["market"], 6),
            "lane_usd": round(total["lane"], 6),
            "still_billing": len(self.open_boxes),
            "unpriced": self.unpriced,
            "bin_s": None,
            "bins": [],
        }
        if not self.spans:
            return doc
        start = min(s[0] for s in self.spans)
        end = max(s[1] for s in self.spans)
        width = _bin_width(end - start)
        if width is None:  # not a span a timeline can show (bins of it would not be finite)
            return doc
        origin = start - start % width
        n = max(
            1, math.ceil((end - origin) / width)
        )  # a span ending on an edge: no empty bin after
        market, lane = [0.0] * n, [0.0] * n
        for lo, hi, usd, source in self.spans:
            into = market if source == "market" else lane
            for i, share in _shares(lo, hi, origin, width, n):
                into[i] += usd * share
        doc["bin_s"] = width
        doc["bins"] = [
            {"start": origin + i * width, "market_usd": market[i], "lane_usd": lane[i]}
            for i in range(n)
        ]
        return doc


def _bin_width(span_s: float) -> float | None:
    """The narrowest of BIN_WIDTHS that cuts ``span_s`` into fewer than MAX_BINS bins; for a
    longer span (a host's clock years off, a bad line's duration), a whole number of the widest
    that still does: never more bins than MAX_BINS, whatever the log says (a span of 10^15 s
    once asked for 400 million bins). None when the span is not finite."""
    if not math.isfinite(span_s):
        return None
    found = next((w for w in BIN_WIDTHS if span_s / w < MAX_BINS), None)
    if found is not None:
        return found
    widest = BIN_WIDTHS[-1]
    return widest * math.ceil(span_s / (widest * (MAX_BINS - 1)))


def _shares(lo: float, hi: float, origin: float, width: float, n: int) -> list[tuple[int, float]]:
    """The bins a span overlaps, each with its share of the span (a zero-length span: all in
    its bin)."""
    first = min(n - 1, int((lo - origin) // width))
    if hi <= lo:
        return [(first, 1.0)]
    last = min(n - 1, int((hi - origin) // width))
    out = []
    for i in range(first, last + 1):
        a, b = max(lo, origin + i * width), min(hi, origin + (i + 1) * width)
        if b > a:
            out.append((i, (b - a) / (hi - lo)))
    return out


def _machines(rates: PassRates) -> dict[str, object]:
    rows = [
        {
            "machine_id": m,
            "gpu_name": rates.gpu.get(m, ""),
            "passes": passes,
            "trials": trials,
            "raw": passes / trials,
            "shrunk": rates.rate(m, ""),
        }
        for m, (passes, trials) in rates.counts.items()
    ]
    rows.sort(key=lambda r: (-int(r["trials"]), int(r["machine_id"])))  # type: ignore[call-overload]
    return {"shown": rows[:MACHINES_SHOWN], "total": len(rows)}


def _gpus(rates: PassRates) -> list[dict[str, object]]:
    out = []
    for model, prior in sorted(rates.priors.items()):
        pairs = [rates.counts[m] for m in rates.counts if rates.gpu.get(m, "") == model]
        passes, trials = sum(p for p, _ in pairs), sum(n for _, n in pairs)
        out.append(
            {
                "gpu_name": model,
                "machines": len(pairs),
                "passes": passes,
                "trials": trials,
                "raw": passes / trials if trials else None,
                "prior_mean": prior.mean,
                "prior_strength": prior.alpha + prior.beta,
                "own_prior": len(pairs) >= MIN_MACHINES,
            }
        )
    return out


def _rental_name(event: ev.Event) -> str:
    name = str(getattr(event, "name", ""))
    if isinstance(event, ev.Transition | ev.SweepEnded):
        return name.split("+", 1)[0]  # a box record's name: RENTAL+GENERATION-INDEX
    return name


def _said(event: ev.Event) -> tuple[str, str] | None:
    """The actor and a line for a person, from the event's typed fields; None: not a rental's."""
    if isinstance(event, ev.Selection):
        return "rent", f"race over {len(event.candidates)} offers, {len(event.picks)} picked"
    if isinstance(event, ev.Create):
        box = f", instance {event.instance_id}" if event.instance_id else ""
        return "rent", f"create on offer {event.offer_id}: {event.outcome}{box}"
    if isinstance(event, ev.Probe):
        return "probe", (
            f"instance {event.instance_id} on machine {event.machine_id}: {event.verdict.value}"
        )
    if isinstance(event, ev.RentDone):
        return "keep", f"kept instance {event.instance_id}"
    if isinstance(event, ev.RentStopped):
        return "rent", f"race stopped: {event.reason}" if event.reason else "race stopped"
    if isinstance(event, ev.Transition):
        actor = "rent" if event.after in _RENT_STATES else "destroy"
        box = f" (instance {event.instance_id})" if event.instance_id else ""
        return actor, f"{event.name}{box}: {event.before or 'new'} -> {event.after}"
    if isinstance(event, ev.GuardDestroy):
        return "guardian", f"destroying at the deadline {event.deadline}"
    if isinstance(event, ev.ConfirmedGone):
        return (
            "guardian",
            f"every box confirmed gone, {float(event.delay_s):+.1f} s from the deadline",
        )
    if isinstance(event, ev.SweepEnded):
        why = "a pending destroy retried" if event.retried else "past its deadline"
        return "sweep", f"{event.name}: {why}, {event.ending}"
    return None


def utc(epoch_s: float) -> str:
    """A time as the report prints it: UTC to the second."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
