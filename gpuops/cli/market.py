"""Printing for the market commands (offers, rent, boxes, destroy, sweep); no decisions here.

`--json` keeps the provider's field names (gpu_name, dph_total, actual_status) and calls the
provider's instance id `instance_id` (DESIGN §3).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuops.clock import Clock
from gpuops.errors import ExitCode
from gpuops.output import out, print_json
from gpuops.settings import Settings

if TYPE_CHECKING:  # types only: `boxes` imports no market at run time
    from gpuops.listing import Listing
    from gpuops.market.rent import Market
    from gpuops.market.rentals import Rental
    from gpuops.market.session import Rank
    from gpuops.market.teardown import Outcome
    from gpuops.model import Offer


def run_market(
    args: argparse.Namespace,
    settings: Settings,
    operator: str,
    as_json: bool,
    *,
    attested: bool = False,
) -> int:
    """The market's commands; ``attested``: the operator's id was attested by the provider
    (identity.py), recorded on the rentals `rent` races for (M3)."""

    def progress(line: str) -> None:
        # rent's progress goes to stderr even with --json: what an interrupt destroyed, or
        # whose race a second rent waits for, must reach the person at the terminal
        if args.command == "rent":
            print(line, file=sys.stderr, flush=True)
        elif not as_json:
            print(line, flush=True)

    if args.command == "boxes":  # the store alone: no provider key, no market imported
        from gpuops.listing import state_view

        view = state_view(settings, operator)
        if _boxes(view, args, as_json):
            _archive_in_background(settings, operator)
        return _name_corrupt(view, ExitCode.OK)
    from gpuops.market.session import open_market

    if args.command == "destroy":
        return destroy_command(args.name, settings, operator, as_json)
    need_key = args.command == "rent"
    vram_mb = int(getattr(args, "vram_gb", 8.0) * 1024)
    market = open_market(
        settings,
        operator,
        vram_floor_mb=vram_mb,
        progress=progress,
        need_key=need_key,
        attested=attested,
        rank=_rank_for(args.command),
    )
    code = _market_command(market, args, vram_mb, as_json, settings)
    return _name_corrupt(market, code)


def _rank_for(command: str) -> Rank | None:
    """What ranks the offers of a command that ranks them (offers, rent): price per healthy
    box, learned from the log (the index in the store); the other commands rank nothing."""
    if command not in ("offers", "rent"):
        return None
    from gpuops.analysis.learned import ranker

    return ranker


def _name_corrupt(market: Listing, code: int) -> int:
    """A corrupt record (rental, box record, lease) blocks only itself: the others were
    served; it is named, with a way to repair it, and a command that otherwise succeeded
    exits 1 so nobody misses it."""
    from gpuops.market.rentals import rental_of

    unreadable = {**market.rentals.corrupt, **market.ledger.corrupt}
    for key, exc in sorted(unreadable.items()):
        kind, _, name = key.rpartition("/")
        first = (
            f"`gpuops destroy {rental_of(name)}` ends every box its instance claim names, "
            "confirmed gone, without reading or replacing it; then "
            if kind == "ledger/boxes"
            else ""
        )
        print(
            f"gpuops: skipped the unreadable {_KINDS.get(kind, kind)} {name!r}: {exc}. "
            f"Repair: {first}restore it from a backup or move the file aside (gpuops never "
            "replaces or removes it)",
            file=sys.stderr,
        )
    return code if code or not unreadable else ExitCode.ERROR


_KINDS = {"market/rentals": "rental", "ledger/boxes": "box record", "market/leases": "lease"}


def _market_command(
    market: Market, args: argparse.Namespace, vram_mb: int, as_json: bool, settings: Settings
) -> int:
    if args.command == "offers":
        return _offers(market, args, vram_mb, as_json)
    if args.command == "rent":
        return _rent(market, args, vram_mb, as_json, settings)
    from gpuops.market.sweep import SWEEP_WORKERS, sweep
    from gpuops.market.teardown import exit_code

    report = sweep(market, workers=SWEEP_WORKERS, pace=market.pace)
    payload: dict[str, list[Any]] = {
        "retried": [_outcome(o) for o in report.retried],
        "expired": [_outcome(o) for o in report.expired],
        "unresolved": [_outcome(o) for o in report.unresolved],
        "unowned": report.unowned,
    }
    text = [f"{field}: {len(items)}" for field, items in payload.items()]
    text += [f"  {o.name}: {o.detail}" for o in [*report.retried, *report.expired]]
    text += [f"UNOWNED (not touched): {line}" for line in report.unowned]
    out(as_json, payload, text)
    if report.unowned:
        print(
            f"gpuops: {len(report.unowned)} instance(s) on the account no ledger owns; "
            "they were not touched",
            file=sys.stderr,
        )
    from gpuops import alarms as a  # O1: what sweep found is heard, and what is pending retried
    from gpuops import timing

    alarms = a.open_alarms(
        settings, market.ledger.store, market.events, operator=market.ledger.operator
    )
    unreadable = [*market.ledger.corrupt, *market.rentals.corrupt]
    found = [
        a.sweep_found(a.AlarmKind.SWEEP_UNOWNED, report.unowned),
        a.sweep_found(a.AlarmKind.SWEEP_UNRESOLVED, [o.name for o in report.unresolved]),
        a.sweep_found(a.AlarmKind.SWEEP_UNREADABLE, unreadable),
    ]
    for alarm in found:
        if alarm is not None:
            alarms.raise_alarm(alarm)
    alarms.retry()
    alarms.flush(timing.ALARM_FLUSH_S)  # what a cron sweep found goes out before it exits
    return exit_code([*report.retried, *report.expired])


def destroy_command(
    name: str,
    settings: Settings,
    operator: str,
    as_json: bool,
    *,
    say: Callable[[str], None] | None = None,
    clock: Clock | None = None,
) -> int:
    """`gpuops destroy NAME` on ``clock`` (None: the command's, settings.clock()): every wait
    (a retried 503, the confirmation that the box is gone) says so on stderr at least every
    timing.PROGRESS_EVERY_S; stdout carries only the result, so --json stays clean."""
    from gpuops.market.ending import destroy_rental
    from gpuops.market.session import open_market
    from gpuops.market.teardown import exit_code
    from gpuops.progress import paced

    tell = say or _stderr
    clock = settings.clock() if clock is None else clock
    started = clock.monotonic()

    def waited() -> str:
        return f"{clock.monotonic() - started:.0f} s so far"

    def retrying(_: float, next_s: float) -> str:
        return (
            f"gpuops destroy {name}: the provider did not answer; asking again in "
            f"{next_s:.0f} s ({waited()})"
        )

    def confirming(_: float, next_s: float) -> str:
        return (
            f"gpuops destroy {name}: waiting for the provider to confirm the box gone; "
            f"asking again in {next_s:.0f} s ({waited()})"
        )

    market = open_market(
        settings,
        operator,
        need_key=False,
        clock=clock,
        waits=paced(clock, tell, confirming),
        retry_waits=paced(clock, tell, retrying),
    )
    outcomes = destroy_rental(market, name)
    lines = [f"{o.name}: {o.detail}" for o in outcomes] or [f"{name}: nothing to end"]
    out(as_json, {"name": name, "outcomes": [_outcome(o) for o in outcomes]}, lines)
    code = exit_code(outcomes)  # M13: from the outcomes' types, never from their text
    return _name_corrupt(market, code)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _outcome(outcome: Outcome) -> dict[str, Any]:
    return {"name": outcome.name, "ending": outcome.ending.value, "detail": outcome.detail}


def _say_skipped(market: Market) -> int:
    """How many event lines the pass rates left out (0 without a ranker), said on stderr."""
    from gpuops.analysis.learned import skipped_line

    skipped = int(getattr(market.pass_rates, "skipped", 0))
    line = skipped_line(skipped)
    if line is not None:
        _stderr(line)
    return skipped


def _offers(market: Market, args: argparse.Namespace, vram_mb: int, as_json: bool) -> int:
    import random

    from gpuops import timing
    from gpuops.market.offer_query import failed_terms, parse_query
    from gpuops.market.rent import gpu_spelling
    from gpuops.market.select import Filter, select

    terms = parse_query(args.filter or ())
    offers = market.vast.search_offers(gpu_name=args.gpu)
    if args.gpu and not offers:  # a misspelt GPU is named as such, never shown as "0 offers"
        known = gpu_spelling(market.vast, args.gpu)
        if known is not None and known != args.gpu:
            offers = market.vast.search_offers(gpu_name=known)
    rates = market.pass_rates(offers) if market.pass_rates else {}
    trials = dict(getattr(market.pass_rates, "trials", {}))
    chosen = select(
        offers,
        k=1,
        rng=random.Random(0),
        rules=Filter(  # an offer whose contract ends within the margin serves no rental
            vram_floor_mb=vram_mb,
            max_dph=args.max_dph,
            contract_ends_after=market.clock.wall() + timing.CONTRACT_END_MARGIN_S,
        ),
        quarantined=market.quarantine.machines(),
        explore_rate=0.0,
        pass_rate=rates,
    )

    def row(offer: Offer) -> dict[str, Any]:
        return {
            **_offer_row(offer),
            "pass_rate": rates.get(offer.machine_id),
            "pass_trials": trials.get(offer.machine_id),
        }

    rows = []
    removed = [{**row(x.offer), "removed": [*x.reasons, *failed_terms(x.offer, terms)]}
               for x in chosen.removed]  # fmt: skip
    for offer in chosen.candidates:
        failed = failed_terms(offer, terms)
        if failed:
            removed.append({**row(offer), "removed": failed})
        else:
            rows.append(row(offer))
    skipped = _say_skipped(market)
    if as_json:
        payload: dict[str, Any] = {
            "offers": rows,
            "quarantined": chosen.quarantined,
            "contract_ended": chosen.contract_ended,
            "skipped_events": skipped,
            "filter": [term.text for term in terms],
            "max_dph": args.max_dph,
        }
        if args.all:
            payload["removed"] = removed
        print_json(payload)
        return ExitCode.OK
    if rows or (args.all and removed):
        print(_OFFERS_HEADER)
    for line in rows:
        print(_offer_line(line))
    print(
        f"{_count(len(rows), 'offer')} {'passes' if len(rows) == 1 else 'pass'} the filter; "
        f"{len(removed)} removed ({chosen.quarantined} quarantined)"
        f"{'' if args.all or not removed else '; --all shows them'}"
    )
    if chosen.contract_ended:
        margin_h = timing.CONTRACT_END_MARGIN_S / 3600.0
        print(f"{chosen.contract_ended} left out for their contract end (within {margin_h:g} h)")
    if args.all:
        for line in removed:
            print(f"{_offer_line(line)}  REMOVED: {', '.join(line['removed'])}")
    if rows or (args.all and removed):
        print(PASS_MEANING)
    return ExitCode.OK


# What the PASS column means, printed under the table (docs/cli.md says the same).
PASS_MEANING = (
    "PASS (n): the chance a box on that machine passes gpuops' health probe: this team's n "
    "probes of it,\nshrunk toward its GPU model's rate (n 0: the model's rate alone). Ranked by "
    "$/HOUR / PASS, the expected price of a healthy box."
)


def _count(n: int, noun: str) -> str:
    """``1 offer``, ``2 offers``, ``0 offers``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _sync_every(args: argparse.Namespace) -> float:
    """`--sync-every MINUTES` in seconds; absent: timing.py's default."""
    from gpuops import timing
    from gpuops.market.sync_plan import sync_every_s

    if args.sync_every is None:
        return timing.RESULTS_SYNC_EVERY_S
    return sync_every_s(args.sync_every)


def _sync_said(every_s: float | None) -> str:
    if not every_s:
        return "results copied off once, before the deadline (--sync-every 0)"
    return f"results synced every {every_s / 60:g} min while the job runs, and before the deadline"


def _rent(
    market: Market, args: argparse.Namespace, vram_mb: int, as_json: bool, settings: Settings
) -> int:
    from gpuops.market.rent import RentRequest

    guarded: dict[str, Any] = {}

    def on_race(racing: Rental) -> None:
        """M13: the rental's guardian runs before the first create, so every box the race
        makes has an owner that ends it by the deadline, wherever this process dies."""
        if not args.no_guard:
            guarded.update(_guarded(market, racing, settings))

    request = RentRequest(
        name=args.name,
        gpu_name=args.gpu,
        hours=args.hours,
        race_k=args.race,
        vram_floor_mb=vram_mb,
        image=args.image,
        disk_gb=args.disk_gb,
        max_dph=args.max_dph,
        sync_every_s=_sync_every(args),
    )
    from gpuops.procs import interrupts_raised

    with interrupts_raised():
        rental = market.rent(request, on_race=on_race)
    _say_skipped(market)
    row = dataclasses.asdict(rental)
    lines = [
        f"{rental.name}: live as instance {rental.instance_id} "
        f"({rental.gpu_name}, {_usd(rental.dph_total, 4)}/h)",
        f"{rental.name}: deadline {_when(rental.deadline_at)}",
    ]
    if not args.no_guard:  # syncs are the guardian's: none without one
        lines.append(f"{rental.name}: " + _sync_said(rental.sync_every_s))
    if args.no_guard:
        row["guardian"] = None
        lines.append(
            f"{rental.name}: NO guardian (--no-guard): nothing destroys it at the deadline"
        )
    else:
        row["guardian"] = guarded or _guarded(market, rental, settings)
        lines.append(f"{rental.name}: {row['guardian']['detail']}")
    out(as_json, row, lines)
    return ExitCode.OK


def _boxes(market: Listing, args: argparse.Namespace, as_json: bool) -> bool:
    """Print the boxes; True when some of what was read is history `compact` would move
    (listing.py builds what is shown)."""
    from gpuops.listing import boxes_view

    view = boxes_view(market, everyone=args.all)
    spend = view.spend
    if as_json:
        print_json(
            {
                "rentals": view.rows,
                "pending_destroys": view.pending,
                "candidates": view.candidates,
                **spend,
            }
        )
    else:
        _print_boxes(view.rows, view.pending, view.candidates)
        print(
            f"burn {_usd(spend['burn_usd_per_hr'], 4)}/h (live boxes and the lane); spent "
            f"{_usd(spend['spent_today_usd'], 2)} today, {_usd(spend['spent_month_usd'], 2)} "
            f"this month; projected next 24 h {_usd(spend['projected_24h_usd'], 2)}"
        )
    return view.compactable


def _archive_in_background(settings: Settings, operator: str) -> None:
    """`gpuops compact` started detached (archive.py), and said on stderr."""
    from gpuops.archive import compact_in_background

    started = compact_in_background(settings, operator)
    if started is not None:
        pid, log = started
        print(
            "gpuops: history that ended over a week ago is being archived in the background "
            f"(pid {pid}, log {log}); `boxes --all` still shows it",
            file=sys.stderr,
        )


def _print_boxes(
    rows: list[dict[str, Any]], pending: list[dict[str, Any]], candidates: list[dict[str, Any]]
) -> None:
    if rows:
        print(_BOXES_HEADER)
    for row in rows:
        print(
            f"{row['name']:<20} {row['state']:<9} {_text(row['instance_id']):<11} "
            f"{_usd(row['dph_total'], 4):>9} {_usd(row['spend_usd'], 4):>9}  "
            f"{_when(row['deadline_at']) if row['state'] in ('live', 'racing') else '-':<42}  "
            f"{row['owner']} ({'attested' if row['attested'] else 'declared'})"
            + (f"  guard {row['guard']}" if row["state"] == "live" else "")
            + (f"  sync {row['sync']}" if row["state"] == "live" else "")
            + (f" (last sync FAILED: {row['sync_error']})" if row["sync_error"] else "")
            + _results_of(row)
            + (
                f"  EXPIRED: its contract ended {_when(row['contract_end_at'])}; Vast stopped "
                "the box and may delete it 48 h later"
                if row["expired"]
                else ""
            )
        )
    if rows:
        print(_total_line(rows))
    for record in candidates:
        print(
            f"CANDIDATE {record['name']} ({record['state']}) instance "
            f"{record['instance_id'] or 'not known yet'}"
        )
    for record in pending:
        print(
            f"PENDING DESTROY {record['name']} instance {record['instance_id']}: "
            f"{record['last_error']}"
        )
    if not rows and not pending and not candidates:
        print("no boxes")


def _total_line(rows: list[dict[str, Any]]) -> str:
    """The listing's total: what the live rentals burn per hour and what the rentals shown
    have spent (history included)."""
    live = [r for r in rows if r["state"] == "live" and r["dph_total"] is not None]
    burn = sum(r["dph_total"] for r in live)
    spent = sum(r["spend_usd"] or 0.0 for r in rows)
    label = f"TOTAL ({_count(len(rows), 'rental')}, {len(live)} live)"
    return f"{label:<42} {_usd(burn, 4):>9} {_usd(spent, 4):>9}"


def _results_of(row: dict[str, Any]) -> str:
    """How the rental's results copy ended, as its guardian recorded it on the rental (M17):
    "results delivered (where)", "results MISSING (why)", "results none (why)"; nothing while
    no copy has ended."""
    if row["results"] is None:
        return ""
    said = "MISSING" if row["results"] == "missing" else row["results"]
    return f"  results {said} ({row['results_detail']})"


_BOXES_HEADER = (
    f"{'NAME':<20} {'STATE':<9} {'INSTANCE':<11} {'$/HOUR':>9} {'SPENT $':>9}  "
    f"{'DEADLINE (local / UTC)':<42}  OWNER"
)


def _text(value: object) -> str:
    """A value for a person: '-' where it is unknown, never 'None'."""
    return "-" if value is None else str(value)


def _usd(value: float | None, places: int) -> str:
    return "-" if value is None else f"${value:.{places}f}"


def _when(epoch_s: float | None) -> str:
    """A deadline in local time and UTC, to the second; '-' when there is none."""
    if epoch_s is None:
        return "-"
    from datetime import UTC, datetime

    local = datetime.fromtimestamp(epoch_s).astimezone()
    utc = datetime.fromtimestamp(epoch_s, UTC)
    if local.utcoffset() == utc.utcoffset():  # the reader's zone is UTC: said once
        return f"{utc:%Y-%m-%d %H:%M:%S} UTC"
    return f"{local:%Y-%m-%d %H:%M:%S %Z} / {utc:%H:%M:%S} UTC"


def _offer_row(offer: Offer) -> dict[str, Any]:
    return {
        "id": offer.id,
        "machine_id": offer.machine_id,
        "gpu_name": offer.gpu_name,
        "num_gpus": offer.num_gpus,
        "gpu_ram": offer.gpu_ram,
        "dph_total": offer.dph_total,
        "reliability": offer.reliability,
        "disk_bw": offer.disk_bw,
        "inet_down": offer.inet_down,
        "geolocation": offer.geolocation,
        "cuda_max_good": offer.cuda_max_good,
        "verification": offer.verification,
    }


_OFFERS_HEADER = (
    f"{'ID':>10}  {'GPU':<18} {'VRAM GB':>7} {'$/HOUR':>8} {'RELIAB':>7} {'PASS (n)':>10} "
    f"{'DISK MB/s':>9} {'CUDA':>5}  LOCATION"
)


def _offer_line(row: dict[str, Any]) -> str:
    gpus = f"{row['num_gpus']}x {row['gpu_name']}" if row["num_gpus"] != 1 else row["gpu_name"]
    rate, trials = row.get("pass_rate"), row.get("pass_trials")
    passed = "-" if rate is None else f"{rate:.2f} ({_text(trials)})"
    reliability = "-" if row["reliability"] is None else f"{row['reliability']:.4f}"
    disk = "-" if row["disk_bw"] is None else f"{row['disk_bw']:.0f}"
    cuda = "-" if row["cuda_max_good"] is None else f"{row['cuda_max_good']:g}"
    return (
        f"{row['id']:>10}  {gpus:<18} {row['gpu_ram'] / 1024:>7.1f} "
        f"{_usd(row['dph_total'], 4):>8} {reliability:>7} {passed:>10} {disk:>9} {cuda:>5}  "
        f"{_text(row['geolocation'])}"
    )


def _guarded(market: Market, rental: Rental, settings: Settings) -> dict[str, Any]:
    """The rental's guardian (market/spawn.py), as `rent` shows it."""
    from gpuops.market.spawn import ensure_guardian

    return ensure_guardian(
        rental, settings, market.ledger.store, market.clock.wall(), market.host,
        market.ledger.operator,
    )  # fmt: skip
