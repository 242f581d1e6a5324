"""`gpuops demo`: the story so far, told against a throwaway local store.

What exists today is the foundation: the state store, the ownership ledger, the event log
and the rules. The demo walks one box's ownership record through its whole lifecycle with
two operators, shows the refusals the ledger makes, and exits 0 only if no record is left
active. There is no provider yet: the demo says plainly where a provider's answer stands in.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from gpuops import timing
from gpuops.errors import Refused, UsageError
from gpuops.events import EventLog, read_events
from gpuops.ledger import GONE_BY_SHOW, Ledger
from gpuops.store import open_store

DEMO_SEED = 2026
DEMO_TIME_SCALE = 120.0  # fake seconds per real second in the demo's market
EXPORT_LINES = 6  # `gpuops fakes serve` prints this many export lines first


def run_demo(state_url: str | None, operator: str, as_json: bool) -> int:
    """Run the story; the return value is the exit code (0 only if nothing is left active)."""
    if state_url is not None:
        _check_fresh(state_url)
    with tempfile.TemporaryDirectory(prefix="gpuops-demo-") as scratch:
        root = state_url or str(Path(scratch) / "state")
        ledger_code = _story(root, operator, as_json)
        market_code = _market_story(root, operator, Path(scratch), as_json)
        return ledger_code or market_code


def _check_fresh(state_url: str) -> None:
    """The demo writes records and events of its own: never into state that holds anything."""
    if state_url.startswith("s3://"):
        raise UsageError("the demo runs on a local directory only; omit --state or give a new one")
    path = Path(state_url.removeprefix("file://")).expanduser()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(
            f"the demo needs a new or empty state directory, and {path} is not; "
            "omit --state to use a throwaway one"
        )


def _story(state_url: str, operator: str, as_json: bool) -> int:
    store = open_store(state_url)
    events_path = Path(scratch_events(state_url))
    other = "bob@demo" if operator != "bob@demo" else "carol@demo"
    me = Ledger(store, EventLog(events_path, operator), operator)
    them = Ledger(store, EventLog(events_path, other), other)
    steps: list[dict[str, Any]] = []

    def say(step: str, outcome: str, **detail: Any) -> None:
        steps.append({"step": step, "outcome": outcome, **detail})
        if not as_json:
            print(f"  {step:<58} {outcome}")

    def refused(step: str, action: Any) -> None:
        try:
            action()
        except Refused as exc:
            say(step, f"refused ({exc.rule})", reason=str(exc))
            return
        say(step, "NOT REFUSED: this is a bug")
        raise AssertionError(f"{step} was not refused")

    if not as_json:
        print(f"gpuops demo: state store {store.url}, event log {events_path}")
        print(f"operators: {operator} (owner) and {other} (a second operator)\n")

    rec, _ = me.record_intent("demo-box", "stand-in", deadline_at=None)
    say(f"{operator} records the intent before any create", rec.state.value, intent=rec.intent_id)
    again, created = me.record_intent("demo-box", "stand-in")
    say("asking again for the same name returns the same record", f"created={created}")
    refused(f"{other} asks for the name demo-box", lambda: them.record_intent("demo-box", "x"))
    rec = me.mark_live("demo-box", "standin-1001")
    say("the create answered: instance standin-1001 is ours", rec.state.value)
    refused(f"{other} tries to destroy {operator}'s box", lambda: them.begin_destroy("demo-box"))
    refused(f"{operator} tries to release a box still live", lambda: me.release("demo-box"))
    rec = me.begin_destroy("demo-box")
    say("destroy begins: the record goes on the retry list first", rec.state.value)
    rec = me.destroy_failed("demo-box", "HTTP 503 (a stand-in for the provider's answer)")
    say("the destroy call fails", f"{rec.state.value}, attempt {rec.destroy_attempts}")
    restarted = Ledger(open_store(state_url), EventLog(events_path, other), other)
    pending = [r.name for r in restarted.retry_list()]
    say("a fresh process (another operator) sees the retry list", ", ".join(pending))
    refused(f"{operator} tries to release before gone is confirmed", lambda: me.release("demo-box"))
    rec = me.confirm_gone("demo-box", GONE_BY_SHOW)
    say("the retry succeeds and the stand-in says the box is gone", rec.state.value)
    rec = me.release("demo-box")
    say("ownership released", rec.state.value)

    leaked = [
        r.name
        for r in Ledger(store, EventLog(events_path, operator), operator).records()
        if r.active
    ]
    logged = sum(1 for _ in read_events(events_path))
    say("records still active (must be none)", ", ".join(leaked) or "none")
    say("event log lines, every one complete JSON", str(logged))
    if as_json:
        json.dump({"steps": steps, "leaked": leaked, "events": logged}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\nrules (gpuops rules):")
        from gpuops.cli import main as cli

        cli(["rules"])
    return 0 if not leaked else 1


def _market_story(state_url: str, operator: str, scratch: Path, as_json: bool) -> int:
    """Rent, list, refuse, destroy and sweep against `gpuops fakes serve` in another process."""
    import os
    import subprocess

    import yaml

    from fakes.scenario import DEFAULT_SCENARIO
    from gpuops.market.rent import RentRequest, destroy_rental, sweep
    from gpuops.market.session import open_market

    def say(line: str) -> None:
        if not as_json:
            print(line, flush=True)

    doc = yaml.safe_load(Path(DEFAULT_SCENARIO).read_text(encoding="utf-8"))
    doc["time_scale"] = DEMO_TIME_SCALE  # boots in well under a second of wall time
    scenario = scratch / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(doc), encoding="utf-8")
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuops",
            "fakes",
            "serve",
            f"--scenario={scenario}",
            f"--state-dir={scratch / 'fakes'}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    saved = dict(os.environ)
    try:
        assert serve.stdout is not None
        for _ in range(EXPORT_LINES):
            name, _, value = serve.stdout.readline().strip().removeprefix("export ").partition("=")
            os.environ[name] = value
        os.environ["GPUOPS_EVENTS"] = str(Path(state_url) / "events.jsonl")
        say(f"\nthe market, against `gpuops fakes serve` at {os.environ['VAST_URL']}:")
        # a seeded selector: the demo tells the same story every time (exploration included)
        market = open_market(
            state_url, operator, vram_floor_mb=8192, progress=say, rng=random.Random(DEMO_SEED)
        )
        ask = RentRequest("demo-gpu", "RTX 4090", timing.DEMO_RENTAL_S / 3600.0, race_k=3)
        rental = market.rent(ask)
        say(f"  rented demo-gpu: instance {rental.instance_id}, ${rental.dph_total}/h")
        again = market.rent(ask)
        say(f"  renting again returns the same box (M8): instance {again.instance_id}")
        for outcome in destroy_rental(market, "demo-gpu"):
            say(f"  destroy: {outcome.name}: {outcome.detail}")
        report = sweep(market)
        leaked = [r.name for r in market.ledger.records() if r.active]
        still = [i for i in (rental.instance_id,) if i and market.vast.show(i) is not None]
        say(
            f"  sweep: {len(report.unowned)} unowned, {len(report.retried)} retried; "
            f"records still active: {', '.join(leaked) or 'none'}; boxes still alive: "
            f"{', '.join(still) or 'none'}"
        )
        return 0 if not leaked and not still and again.instance_id == rental.instance_id else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
        serve.terminate()
        serve.wait(timeout=timing.HTTP_TIMEOUT_S)


def scratch_events(state_url: str) -> str:
    """The demo keeps its event log beside its (local, fresh) store."""
    return str(Path(state_url.removeprefix("file://")) / "events.jsonl")
