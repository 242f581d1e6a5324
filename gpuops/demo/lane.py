"""The demo's first act: the lane, one shared GCE VM, against FakeGCE in this process.

FakeGCE serves on loopback with its own fake clock; its boots run the installed startup script
for real (fakes/gce/boot.py). gpuops' real ``Lane`` drives it through the real adapters, and
every wait the lane makes moves the fake clock (``FakeGCE.advance``), so a two-minute job
takes a second or two. Each row's evidence is read from the fake: what the instance is doing,
what is in its metadata and its bucket, which boot processes still run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops import timing
from gpuops.clock import SYSTEM, WithSleep
from gpuops.errors import GpuopsError, JobFailed, Refused
from gpuops.settings import exported

if TYPE_CHECKING:
    from gpuops.demo.story import Story
    from gpuops.lane.runner import Lane

JOB = "portraits"
TYPO = "portrait"  # one letter short: the 6 November typo (L4)
BROKEN_JOB = "validation"
BROKEN_IMPORT = "torchvision_v0_broken"  # the fake VM image's broken library (L6)
NOOP_JOB = "retouch"
THIRD_PARTY_JOB = "nightly-batch"  # started by a third operator's own tooling, not gpuops
JOB_COMMAND = 'python3 "$WORK/job.py"'  # the fake VM image's workload (fakes/gce/boot.py)
INPUTS = ("ref-1.png", "ref-2.png", "ref-3.png")
# fake seconds (the fake clock): a job runs forty seconds; the third operator's batch runs
# just long enough that our boot marker's window (timing.BOOT_MARKER_WINDOW_S) passes first
JOB_RUNTIME_FAKE = 40.0
THIRD_PARTY_RUNTIME_FAKE = 330.0


def lane_act(story: Story, scratch: Path, state_url: str, operator: str, other: str) -> None:
    """Claim, refuse a typo, ride out stockouts, refuse a second operator, watch to done,
    release; a failing job that powers its VM off; a start that was a silent no-op."""
    from fakes.gce import FakeGCE, LaneScenario
    from fakes.gce.server import serve_http
    from fakes.vast.clock import FakeClock

    bucket = "gpuops-lane-jobs"
    scenario = LaneScenario(
        bucket=bucket,
        starts=("stockout", "stockout-plain"),
        job_runtime_s=JOB_RUNTIME_FAKE,
        results=6,
        broken_imports=(BROKEN_IMPORT,),
        staged=tuple(f"jobs/{JOB}/inputs/{name}" for name in INPUTS),
    )
    clock = FakeClock()
    fake = FakeGCE(scenario, clock)
    server = serve_http(fake, ticker=False, boot_root=scratch / "lane-boots")
    try:
        # google-cloud-storage reads its own variable from the process (and so, until it is
        # handed the endpoint, does the GCS adapter): set only while the act runs
        with exported({"STORAGE_EMULATOR_HOST": server.url}):
            world = _World(fake, clock, server.url, state_url, scratch / "lane-events.jsonl")
            _story(story, world, operator, other, bucket)
    finally:
        server.close()  # kills every boot's processes
        left = _running_boots(fake)
        story.check(
            "lane",
            "The fake VM's boot processes end with the lane act",
            "nothing is left running",
            "",
            "no boot process still running" if not left else f"{len(left)} boot(s) still running",
            not left,
        )


class _World:
    """The fake and a Lane per operator over it, on the fake's clock."""

    def __init__(self, fake: Any, clock: Any, url: str, state_url: str, events: Path) -> None:
        self.fake, self.clock, self.url = fake, clock, url
        self.state_url, self.events = state_url, events
        self.boots = 0

    def lane(self, operator: str) -> Lane:
        from gpuops.events import EventLog
        from gpuops.lane.runner import Lane, LaneConfig
        from gpuops.providers.gce import GceAdapter
        from gpuops.providers.gcs import GcsAdapter
        from gpuops.store import open_store

        s = self.fake.scenario
        log = EventLog(self.events, operator, clock=self.clock)
        gce = GceAdapter(
            s.project, s.zone, events=log, endpoint=self.url,
            clock=WithSleep(self.clock, self.fake.advance),
        )  # fmt: skip
        return Lane(
            open_store(self.state_url),
            log,
            operator,
            gce,
            GcsAdapter(s.bucket, s.project, endpoint=self.url),
            LaneConfig(s.instance, s.bucket),
            clock=WithSleep(self.clock, self.fake.advance),
            progress=lambda line: None,  # the demo tells the story in its own words
        )

    def settle(self) -> None:
        """Let the fake world run until the VM is off (its script powers it off)."""
        for _ in range(int(3 * THIRD_PARTY_RUNTIME_FAKE / timing.DEMO_SETTLE_STEP_S)):
            if self.fake.status == "TERMINATED":
                return
            self.fake.advance(timing.DEMO_SETTLE_STEP_S)

    def billing(self) -> str:
        return "off (not billing)" if self.fake.status == "TERMINATED" else self.status()

    def status(self) -> str:
        """The VM's state as GCE names it, in a sentence's case."""
        return str(self.fake.status).lower()


def _story(story: Story, world: _World, me: str, other: str, bucket: str) -> None:
    from gpuops.lane import script

    fake = world.fake
    mine, theirs = world.lane(me), world.lane(other)
    story.heading("Act 1: the lane, one shared GPU VM on Google Compute Engine")
    story.say(
        "Two people share one GPU VM. gpuops has no stop and no delete: each job's own script "
        "powers the VM off when it ends. The VM here is a local stand-in whose boots run the "
        "installed startup script for real."
    )

    board = mine.claim(JOB)
    story.check(
        "lane",
        f"You claim the lane for the job '{JOB}'",
        "one machine-readable state line says who holds the lane",
        "L3",
        f"the board's state line says {board.state} by you for '{board.job}'",
        board.state == "claimed" and board.owner == me,
    )

    before = dict(fake.metadata)
    typo = script.render(TYPO, bucket, JOB_COMMAND, inputs=INPUTS)
    rule = _refused(lambda: mine.install(JOB, typo))
    story.check(
        "lane",
        f"You install a startup script whose job name is misspelt ('{TYPO}')",
        "the script's job name must equal the claimed job; refused before anything boots",
        "L4",
        "the VM's metadata is unchanged and it is still off"
        if fake.metadata == before and fake.status == "TERMINATED"
        else "the VM's metadata changed",
        rule == "L4" and fake.metadata == before,
        refused_by=rule,
    )

    mine.install(JOB, script.render(JOB, bucket, JOB_COMMAND, inputs=INPUTS))
    story.say("You install the corrected script and start the job; the region has no GPUs...")
    board = mine.start(JOB)
    story.check(
        "lane",
        f"The first two starts stock out; the third boots (attempt {board.attempt})",
        "a stockout retry keeps the claim; nobody can take the lane between attempts",
        "L7",
        f"the VM is {world.status()}; the board kept your claim through "
        f"{board.stockouts} stockouts",
        board.stockouts == 2 and board.owner == me and fake.status == "RUNNING",
    )

    rule = _refused(lambda: theirs.claim("their-job"))
    board, _, _ = mine.read()
    story.check(
        "lane",
        f"Another person ({other}) tries to claim the lane while your job runs",
        "only the state line decides who holds the lane; a held lane is refused",
        "L3",
        f"the board still names you; the VM is {world.status()} your boot",
        rule == "L3" and board.owner == me,
        refused_by=rule,
    )

    verdict = mine.watch(JOB)
    world.settle()  # watch returns once the VM stops; the fake finishes powering it off
    status = (fake.objects.get(f"jobs/{JOB}/status") or b"").decode(errors="replace").split()
    results = [n for n in fake.objects if n.startswith(f"jobs/{JOB}/results/")]
    story.check(
        "lane",
        f"`lane watch` follows '{JOB}' to the end",
        "success is judged from the job's own status file, never from a watcher",
        "L9",
        f"status file says {status[0] if status else 'nothing'}; {len(results)} results in "
        f"the bucket; the VM is {world.billing()}",
        verdict.value == "succeeded" and fake.status == "TERMINATED" and len(results) == 6,
    )
    board = mine.release(JOB)
    story.check(
        "lane",
        "You release the lane",
        "only the claimant releases, and only once the VM is off",
        "L1",
        f"the board says {board.state}; the VM is {world.billing()}",
        board.state == "free" and fake.status == "TERMINATED",
    )

    story.say(
        f"Next, a job whose script imports a broken library ('{BROKEN_JOB}'): its preflight "
        "gate fails in seconds, and its script powers the VM off by itself."
    )
    mine.claim(BROKEN_JOB)
    mine.install(
        BROKEN_JOB,
        script.render(BROKEN_JOB, bucket, JOB_COMMAND, imports=("torch", BROKEN_IMPORT)),
    )
    mine.start(BROKEN_JOB)
    failed = False
    try:
        mine.watch(BROKEN_JOB)
    except JobFailed:
        failed = True
    world.settle()
    status = (fake.objects.get(f"jobs/{BROKEN_JOB}/status") or b"").decode(errors="replace")
    story.check(
        "lane",
        "A failing job ends itself and powers its VM off",
        "preflight gates run before expensive work; the script powers off on every path",
        "L6",
        f"status file says '{status.split(' ', 2)[0]}' at preflight; the VM is {world.billing()}",
        failed and status.startswith("failed") and fake.status == "TERMINATED",
    )
    mine.release(BROKEN_JOB)

    story.say(
        f"Last, '{NOOP_JOB}': just before your start lands, a third person boots the VM with "
        "their own tooling. The start answers 'done' and does nothing for you."
    )
    mine.claim(NOOP_JOB)
    mine.install(NOOP_JOB, script.render(NOOP_JOB, bucket, JOB_COMMAND))
    real_start = fake.start

    def raced_start() -> Any:  # the world, not gpuops: someone else's boot begins first
        fake.start = real_start
        fake.foreign_start(THIRD_PARTY_JOB, runtime_s=THIRD_PARTY_RUNTIME_FAKE)
        return real_start()

    fake.start = raced_start
    rule = _refused(lambda: mine.start(NOOP_JOB, max_attempts=1))
    fake.start = real_start
    board, _, _ = mine.read()
    theirs_ran = fake.metadata.get(script.JOB_KEY) is None and fake.status != "TERMINATED"
    story.check(
        "lane",
        "Your start was a silent no-op on someone else's boot, and it is flagged",
        "prove the boot is yours (this attempt's marker); a no-op is loud, nothing is stopped",
        "L2",
        "your boot marker never appeared; the other person's boot kept running "
        f"(the VM is {world.status()}); your claim is kept",
        rule == "L2" and board.owner == me and board.job == NOOP_JOB and theirs_ran,
        refused_by=rule,
    )
    world.settle()
    other_done = (fake.objects.get(f"jobs/{THIRD_PARTY_JOB}/status") or b"").startswith(
        b"succeeded"
    )
    mine.release(NOOP_JOB)
    story.check(
        "lane",
        "The other person's batch finishes untouched; you release",
        "no stop, no delete: a boot gpuops did not start is never stopped",
        "L1",
        f"their batch {'succeeded' if other_done else 'did not finish'}; no stop or delete "
        f"call was ever made; the VM is {world.billing()}",
        other_done and fake.status == "TERMINATED" and not _stopped(fake),
    )


def _refused(action: Any) -> str | None:
    """The rule a refusal names, or None when the action was not refused."""
    try:
        action()
    except Refused as exc:
        return exc.rule
    except GpuopsError:
        return None
    return None


def _stopped(fake: Any) -> bool:
    """Whether anything ever asked the fake to stop, suspend or delete the VM."""
    calls = getattr(fake, "calls", [])
    return any(word in str(call) for call in calls for word in ("stop", "suspend", "delete"))


def _running_boots(fake: Any) -> list[int]:
    """The boots with a process still alive, once the kills FakeGCE sent have landed."""
    ends = SYSTEM.monotonic() + timing.DEMO_STEP_WAIT_S  # real processes: real time
    while True:
        left = [
            b.number
            for b in fake.processes.values()
            if any(state != "Z" for _, state, _ in b.processes().values())
        ]
        if not left or SYSTEM.monotonic() >= ends:
            return left
        SYSTEM.sleep(timing.DEMO_POLL_S)
