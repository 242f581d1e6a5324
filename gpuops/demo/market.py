"""The demo's second act: the market (Vast.ai), against FakeVast and the fake ssh on loopback.

FakeVast serves in this process on the scaled clock it exports, and gpuops, in this process and
in every one the act starts, runs on that same clock (GPUOPS_TIME_SCALE, GPUOPS_TIME_ORIGIN): a
box boots in a second, a lease lives two; the fake
`ssh` program replays recorded probe output per box and runs every other command for real in
the box's sandbox, so the job really runs under tmux and the guardian really copies its
results. gpuops acts through its real paths: the market library for the race, `gpuops run`,
`gpuops watch` and `gpuops rent` as processes, and the detached guardian `rent` starts. Every
row's evidence is the fake's own record of which boxes still bill.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from gpuops import event_ops as ops
from gpuops import event_types as ev
from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.event_base import Kinded
from gpuops.model import Verdict
from gpuops.settings import Settings, exported

if TYPE_CHECKING:
    from gpuops.demo.story import Story

NAME = "training-run"
SECOND = "second-try"
GPU = "RTX 4090"
SEED = 2026  # the race picks the same offers every time (its exploration is seeded)
TIME_SCALE = 30.0  # the world's seconds per real second: a box boots in one, a lease lives two
RESULT = "results/summary.txt"
JOB = "mkdir -p results && echo 'loss 0.031 after 3 epochs' > results/summary.txt && sleep 600"
INTERRUPT_AFTER_BOXES = 2  # Ctrl-C once the second race has this many boxes billing
_E = TypeVar("_E", bound=Kinded)


def _offer(
    offer_id: int, machine: int, where: str, usd: float, fate: str, **more: Any
) -> dict[str, Any]:
    return {
        "id": offer_id, "machine_id": machine, "host_id": machine + 60000, "gpu_name": GPU,
        "gpu_ram": 24564, "dph_total": usd, "reliability": 0.995, "disk_bw": 2400.0,
        "geolocation": where, "fate": fate, **more,
    }  # fmt: skip


def scenario_doc() -> dict[str, Any]:
    """The demo's market: the three cheapest offers fail three ways, the next is healthy."""
    return {
        "time_scale": TIME_SCALE,
        "vast": {
            "boot": {"provisioning_s": 10, "loading_s": 20},
            "ssh_keys": ["generated"],
            "offers": [
                _offer(18436001, 30774, "Ohio, US", 0.3190, "taken"),
                _offer(18437120, 32005, "Bavaria, DE", 0.3301, "ssh-auth"),
                _offer(18439515, 29963, "Utah, US", 0.3412, "slow-disk"),
                _offer(18432117, 31218, "Texas, US", 0.3712, "healthy"),
                _offer(18438842, 28841, "Ontario, CA", 0.3850, "healthy"),
                _offer(18439007, 33410, "Oregon, US", 0.3990, "healthy"),
                _offer(18443610, 35117, "Nevada, US", 0.4050, "healthy"),
            ],
            "faults": {},
        },
    }


class _Fakes:
    """FakeVast on loopback, its box table and throwaway key, and the environment that finds
    them: the act's Settings are built from it, and its child processes get it."""

    def __init__(
        self, scratch: Path, state_url: str, operator: str, base: Mapping[str, str]
    ) -> None:
        from fakes.scenario import load_scenario
        from fakes.serve import FAKE_SSH, throwaway_key
        from fakes.vast import FakeVast, serve_http
        from fakes.vast.clock import ExportedClock

        self.dir = scratch / "market-fakes"
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = scratch / "market-scenario.yaml"
        path.write_text(yaml.safe_dump(scenario_doc()), encoding="utf-8")
        scenario = load_scenario(path)
        key = throwaway_key(self.dir)
        self.clock = ExportedClock(scenario.time_scale)  # the act's one clock, gpuops' too
        self.model = FakeVast(
            scenario,
            clock=self.clock,
            state_dir=self.dir,
            generated_key=key.read_text(encoding="utf-8").strip(),
        )
        self.server = serve_http(self.model)
        self.results = scratch / "results"
        self.events = Path(state_url.removeprefix("file://")) / "events.jsonl"
        self.env = {
            "VAST_URL": self.server.url,
            "VAST_API_KEY": self.model.api_key,
            "GPUOPS_SSH": str(FAKE_SSH),
            "GPUOPS_FAKE_SSH_BOXES": str(self.model.box_table),
            "GPUOPS_FAKE_SSH_PYTHON": sys.executable,
            "GPUOPS_SSH_KEY": str(key),
            "GPUOPS_STATE": state_url,
            "GPUOPS_OPERATOR": operator,
            "GPUOPS_RESULTS": str(self.results),
            "GPUOPS_EVENTS": str(self.events),
            # its children read no config file, as its own Settings (below) read none: a
            # person's file must not send the demo's alarms or results anywhere real
            "GPUOPS_CONFIG": os.devnull,
            **self.clock.exports(),
        }
        self.settings = Settings.from_environ({**base, **self.env}, {"state": state_url})

    def close(self) -> None:
        from fakes.ssh.sandbox import stop_all

        self.server.close()
        if self.model.box_table is not None:
            stop_all(self.model.box_table)  # the fake boxes' jobs end with the fake world

    # --- the fake's own record ----------------------------------------------------------------
    def billing(self) -> list[Any]:
        """Every box the fake has not destroyed: what still bills, whatever gpuops says."""
        with self.model.lock:
            return list(self.model.boxes())

    def boxes(self) -> list[Any]:
        with self.model.lock:
            return list(self.model.instances.values())

    def where(self, offer_id: int) -> str:
        offer = self.model.offers.get(offer_id)
        if offer is None:
            return "an offer"
        row: dict[str, Any] = offer.row()
        return f"the {row.get('geolocation')} offer at ${float(row['dph_total']):.3f}/h"

    # --- gpuops as a person runs it -------------------------------------------------------------
    def gpuops(self, *args: str, **popen: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuops", *args],
            env=self.settings.child_environ(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )

    def events_of(self, cls: type[_E], name: str) -> list[_E]:
        """The events of ``cls``'s kind about rental ``name``, read through their type (a line
        that does not decode as one is no such event)."""
        from gpuops.event_types import decode
        from gpuops.events import read_events

        if not self.events.exists():
            return []
        typed = (
            decode(cls.KIND, e["payload"])
            for e in read_events(self.events)
            if e["kind"] == cls.KIND
        )
        return [e for e in typed if isinstance(e, cls) and getattr(e, "name", None) == name]


def _wait_for(
    check: Callable[[], Any],
    limit_s: float = timing.DEMO_STEP_WAIT_S,
    tell: Callable[[float], None] | None = None,
    clock: Clock = SYSTEM,
) -> Any:
    """Poll ``check`` until it is truthy (returned) or ``limit_s`` passes (falsy); ``tell``
    hears the seconds waited every half PROGRESS_EVERY_S, so a long wait is never silent."""
    started = clock.monotonic()
    ends, told = started + limit_s, started
    while True:
        found = check()
        now = clock.monotonic()
        if found or now >= ends:
            return found
        if tell is not None and now - told >= timing.PROGRESS_EVERY_S / 2:
            tell(now - started)
            told = now
        clock.sleep(timing.DEMO_POLL_S)


def market_act(
    story: Story, scratch: Path, state_url: str, operator: str, settings: Settings
) -> None:
    story.heading("Act 2: the market, rented GPU boxes on Vast.ai")
    story.say(
        "Boxes are rented only once a probe on the box itself says it is healthy, destroyed "
        "only when gpuops can prove they are yours, and ended at a deadline by a guardian "
        "process that outlives your terminal. Vast.ai here is a local stand-in."
    )
    fakes = _Fakes(scratch, state_url, operator, settings.environ)
    try:
        # the ssh adapter and the fake ssh program it starts still read their variables from
        # the process (GPUOPS_SSH, the box table): set only while the act runs
        with exported(fakes.env):
            _story(story, fakes, operator)
    finally:
        fakes.close()


def _story(story: Story, fakes: _Fakes, operator: str) -> None:
    from gpuops.analysis.learned import ranker
    from gpuops.market.rent import RentRequest
    from gpuops.market.session import open_market
    from gpuops.market.spawn import ensure_guardian
    from gpuops.market.sweep import sweep
    from gpuops.procs import interrupts_raised

    # on the fake's clock (the settings carry its exports): every deadline, wait and pacing
    # (M12: Vast's create interval) is the world's, as in every process the act starts
    market = open_market(
        fakes.settings,
        operator,
        vram_floor_mb=8192,
        rng=random.Random(SEED),
        rank=ranker,  # as `gpuops rent` ranks: price per healthy box, learned from the log
    )
    guarded: dict[str, Any] = {}

    def on_race(racing: Any) -> None:  # what `gpuops rent` does: the guardian first (M13)
        guarded.update(
            ensure_guardian(racing, fakes.settings, market.ledger.store, market.clock.wall(),
                            market.host, market.ledger.operator)
        )  # fmt: skip

    hours = timing.DEMO_RENTAL_S * TIME_SCALE / 3600.0
    story.say(
        f"You rent a box for {hours * 60:g} minutes ({timing.DEMO_RENTAL_S:g} s here: the "
        f"stand-in's clock, and gpuops' with it, runs {TIME_SCALE:g} times faster). gpuops "
        "starts its guardian, "
        "then races the three cheapest offers that pass its filter..."
    )
    with interrupts_raised():
        rental = market.rent(RentRequest(NAME, GPU, hours, race_k=3), on_race=on_race)
    _tell_race(story, fakes, NAME)
    boxes = fakes.boxes()
    kept = [b for b in boxes if str(b.id) == str(rental.instance_id)]
    losers = [b for b in boxes if str(b.id) != str(rental.instance_id)]
    faults = _faults(fakes.events_of(ops.Candidate, NAME))
    story.check(
        "market",
        "A race of three: one offer taken, one refusing our SSH key, one with a slow disk; "
        "a spare that probes healthy is kept",
        "rent a box only once a probe on it passes",
        "M1",
        f"{len(boxes)} boxes were created; the fake bills only the kept one, "
        f"{fakes.where(kept[0].offer_id) if kept else 'none'}",
        faults == {"taken", Verdict.SSH_AUTH, Verdict.SLOW_DISK}
        and [b.id for b in fakes.billing()] == [b.id for b in kept]
        and len(kept) == 1,
    )
    story.check(
        "market",
        "The losing boxes are destroyed and confirmed gone before rent returns",
        "release a box only once the provider confirms it gone",
        "M4",
        f"the fake shows {sum(1 for b in losers if b.destroyed_at is not None)} of "
        f"{len(losers)} losing boxes destroyed",
        bool(losers) and all(b.destroyed_at is not None for b in losers),
    )
    quarantined = market.quarantine.machines()
    slow = [b.offer_row.get("machine_id") for b in losers if b.fate.kind == "slow-disk"]
    right = len(quarantined) == 1 and bool(slow) and slow[0] in quarantined
    story.check(
        "market",
        "The slow-disk machine is quarantined; the SSH failure is not held against its host",
        "quarantine failing machines for a time; auth failures are ours",
        "M2",
        f"gpuops' quarantine holds {len(quarantined)} machine: "
        + ("the slow-disk one" if right else "not just the slow-disk one"),
        right,
    )

    run = fakes.gpuops("run", NAME, "--", JOB)
    out, err = run.communicate(timeout=timing.DEMO_STEP_WAIT_S)
    watch = fakes.gpuops("--json", "watch", NAME, "--once")
    wout, _ = watch.communicate(timeout=timing.DEMO_STEP_WAIT_S)
    state = _json_field(wout, "state")
    story.check(
        "market",
        "`gpuops run` starts a job under tmux on the box; `gpuops watch` sees it running",
        "dead is a fact, stalled only a judgment; a live job is never called dead",
        "M10",
        f"run exited {run.returncode}; watch says {state or 'nothing'}",
        run.returncode == 0 and state == "running",
    )

    second = _interrupted_race(story, fakes)

    story.say(
        "Now nobody touches the first box. Its guardian copies the results off a quarter of "
        "the rental before the deadline, then destroys the box..."
    )
    world = fakes.clock
    deadline = rental.deadline_at or world.wall()  # the rental's deadline, on the world's clock

    def waiting(waited_s: float) -> None:
        left = (deadline - world.wall()) / TIME_SCALE  # in the real seconds the story counts
        when = f"{left:.0f} s before its deadline" if left > 0 else "past its deadline"
        story.say(f"  ... {waited_s:.0f} s: the guardian still holds the box, {when}")

    stuck_after: list[int] = []  # its "not confirmed gone" reports, counted at the deadline

    def settled() -> bool:
        """The guardian said it exits, or, past the deadline, a destroy it retried after the
        deadline failed again: its own report, not a timeout, ends the wait then."""
        if fakes.events_of(ops.GuardExit, NAME):
            return True
        if world.wall() < deadline:
            return False
        if not stuck_after:
            stuck_after.append(len(fakes.events_of(ops.GuardDestroyPending, NAME)))
        return _stuck()

    def _stuck() -> bool:
        """A "not confirmed gone" report came after the count taken at the deadline."""
        pending = len(fakes.events_of(ops.GuardDestroyPending, NAME))
        return bool(stuck_after) and pending > stuck_after[0]

    _wait_for(settled, tell=waiting)
    exits = fakes.events_of(ops.GuardExit, NAME)
    if exits:  # it said it exits: let the process end (the reaper names one that does not)
        _wait_for(lambda: not _guardians_alive(fakes, NAME))
    gone = fakes.events_of(ev.ConfirmedGone, NAME)
    # under this rental's own incarnation (M16): NAME/<rental id>/
    found = sorted((fakes.results / NAME).glob(f"*/{Path(RESULT).name}"))
    text = found[0].read_text(encoding="utf-8").strip() if found else ""
    billing = [b for b in fakes.billing() if kept and b.id == kept[0].id]
    delay = gone[0].delay_s if gone else None
    late = (
        "at an unconfirmed time"
        if delay is None
        else f"{-delay:.1f} s before the deadline"
        if delay <= 0
        else f"{delay:.1f} s after the deadline"
    )
    story.check(
        "market",
        "At the deadline the guardian copied the results and destroyed the box",
        "a billing ceiling that outlives the laptop; a guardian exits 0 only once the box is gone",
        "M5, M7",
        f"results on disk: '{text or 'missing'}'; the fake no longer bills the box "
        f"(destroyed {late}); guardian exit code {exits[0].code if exits else 'none yet'}"
        if not billing
        else "the fake STILL BILLS the box after its deadline"
        + (", and the guardian's destroy, retried after it, failed again" if _stuck() else ""),
        not billing and bool(text) and bool(exits) and exits[0].code == 0,
    )

    guard: list[ops.GuardExit] = _wait_for(lambda: fakes.events_of(ops.GuardExit, SECOND))
    if guard:
        _wait_for(lambda: not _guardians_alive(fakes, SECOND))
    story.check(
        "market",
        "The interrupted rental's guardian sees its race ended and exits",
        "a guardian exits 0 only once every box of its rental is confirmed gone",
        "M7",
        f"guardian exit code {guard[0].code if guard else 'none: still running'}; the fake "
        f"bills {sum(1 for b in fakes.billing() if b.id in second)} of that race's boxes",
        bool(guard) and guard[0].code == 0,
    )

    report = sweep(market)
    left = fakes.billing()
    story.check(
        "market",
        "`gpuops sweep` finds nothing to end and nothing it does not own",
        "no billed box without a live owner",
        "M13",
        f"sweep: {len(report.unowned)} unowned, {len(report.retried)} retried, "
        f"{len(report.expired)} expired; the fake bills {len(left)} boxes",
        not left and not report.unowned and not report.retried and not report.expired,
    )


def _tell_race(story: Story, fakes: _Fakes, name: str) -> None:
    """Each raced offer's fate, in plain words, from the race's own log."""
    fates: dict[int, list[str]] = {}
    for event in fakes.events_of(ops.Candidate, name):
        fates.setdefault(event.offer_id, []).append(_fate(event))
    for offer_id, whats in fates.items():
        story.say(f"  {fakes.where(offer_id)}: {_plain(whats)}")


def _faults(steps: list[ops.Candidate]) -> set[str | Verdict]:
    """The race's faults M1 is judged on, from the typed steps: a create taken by someone
    else, and each probe verdict that failed."""
    taken = {"taken" for s in steps if s.step is ops.Step.CREATE_FAILED and s.outcome == "taken"}
    failed = {s.verdict for s in steps if s.verdict is not None and s.verdict is not Verdict.PASS}
    return taken | failed


def _fate(step: ops.Candidate) -> str:
    """The word _PLAIN tells a step by: the probe's verdict, the create's outcome, or kept."""
    if step.verdict is not None:
        return step.verdict.value
    if step.step is ops.Step.CREATE_FAILED and step.outcome is not None:
        return step.outcome
    return step.step.value


_PLAIN = {
    "taken": "taken by someone else before the create landed; nothing to pay for",
    "ssh-auth": "created, but it refused our SSH key; destroyed",
    "slow-disk": "created, but its disk is far slower than advertised; destroyed, machine "
    "quarantined",
    "pass": "created and probed healthy: GPU, CUDA and disk all checked",
    "kept": "kept",
}


def _plain(whats: list[str]) -> str:
    said = [_PLAIN[w] for w in whats if w in _PLAIN and w != "kept"]
    if "kept" in whats:
        said.append("kept")
    return "; ".join(dict.fromkeys(said)) or "raced"


def _interrupted_race(story: Story, fakes: _Fakes) -> set[int]:
    """`gpuops rent` as a process, interrupted mid-race; the ids of the boxes it created."""
    before = {b.id for b in fakes.boxes()}
    story.say("You start a second rental and press Ctrl-C while its race is creating boxes...")
    # its guardian ends it soon regardless
    hours = f"{timing.DEMO_RENTAL_S / 2 * TIME_SCALE / 3600.0:.6f}"
    rent = fakes.gpuops("rent", SECOND, "--gpu", GPU, "--hours", hours, "--race", "3")

    def raced() -> list[Any]:
        made = [b for b in fakes.boxes() if b.id not in before]
        return made if len(made) >= INTERRUPT_AFTER_BOXES or rent.poll() is not None else []

    made = _wait_for(raced)
    if rent.poll() is None:
        rent.send_signal(signal.SIGINT)
    try:
        rent.communicate(timeout=timing.DEMO_STEP_WAIT_S)
    except subprocess.TimeoutExpired:
        rent.kill()
        rent.communicate()
    made = [b for b in fakes.boxes() if b.id not in before]
    alive = [b for b in made if b.destroyed_at is None]
    story.check(
        "market",
        f"Ctrl-C during a race: rent exits {rent.returncode} after ending that race's boxes",
        "no billed box without a live owner: an interrupted race destroys what it created",
        "M13",
        f"the race had created {len(made)} boxes; the fake shows "
        f"{len(made) - len(alive)} of them destroyed",
        rent.returncode == 130 and bool(made) and not alive,
    )
    return {b.id for b in made}


def _guardians_alive(fakes: _Fakes, name: str) -> bool:
    """Whether a guardian of ``name`` (by the pid it logged at start) is still running."""
    for event in fakes.events_of(ops.GuardStart, name):
        try:
            state = Path(f"/proc/{event.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if state not in ("Z", "X"):
            return True
    return False


def _json_field(text: str, field: str) -> str | None:
    import json

    try:
        value = json.loads(text).get(field)
    except (ValueError, AttributeError):
        return None
    return None if value is None else str(value)
