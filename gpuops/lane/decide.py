"""The lane runner's decisions, as pure functions of what was read (decide, then act).

``gpuops.lane.runner`` reads the board, the instance and the bucket, asks these functions
what to do, and does it. Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuops import timing
from gpuops.errors import ExitCode, Refused, UsageError
from gpuops.lane.board import CLAIMED, FREE, RUNNING, STARTING, Board
from gpuops.lane.protocol import MANIFEST_HEADER, STAGES

# GCE statuses (provider-formats.md B.2) in the three groups the runner cares about.
TERMINATED = "TERMINATED"
BOOTING = frozenset({"PROVISIONING", "STAGING", "RUNNING", "PENDING", "REPAIRING"})
STOPPING = frozenset({"STOPPING", "PENDING_STOP", "SUSPENDING", "SUSPENDED"})

# The lane's own figures (docs/rules.md, where the rules come from): about $0.70/h running,
# about $0.83/day disk.
RUNNING_USD_PER_HOUR = 0.70
DISK_USD_PER_DAY = 0.83


class Step(enum.Enum):
    START = "start"  # the instance is TERMINATED and the lane is ours: send start
    CHECK_BOOT = "check-boot"  # a start was sent earlier (maybe by a crashed process): look
    WAIT_STOPPING = "wait-stopping"  # the last job is still powering off: wait, keep the claim
    ALREADY_RUNNING = "already-running"  # our job's boot was already confirmed


def check_holder(board: Board, operator: str, job: str) -> None:
    """Refuse (L3) unless ``operator`` holds the lane for ``job``: asked before the provider."""
    if (
        board.owner != operator
        or board.job != job
        or board.state
        not in (
            CLAIMED,
            STARTING,
            RUNNING,
        )
    ):
        raise Refused(
            "L3",
            f"lane {board.lane} is {board.state} (owner {board.owner!r}, job {board.job!r}); "
            f"claim it for {job!r} before starting",
        )


def start_step(board: Board, operator: str, job: str, instance_status: str) -> Step:
    """What `lane start` does next. Refusals name the rule (L2, L3)."""
    check_holder(board, operator, job)
    if board.state == STARTING:
        return Step.CHECK_BOOT
    if board.state == RUNNING:
        return Step.ALREADY_RUNNING
    if instance_status == TERMINATED:
        return Step.START
    if instance_status in STOPPING:
        return Step.WAIT_STOPPING
    raise Refused(
        "L2",
        f"instance {board.instance} is {instance_status}, not TERMINATED: a boot you did not "
        "start is running; it is not your job and gpuops will not start over it or stop it",
    )


class Boot(enum.Enum):
    OURS = "ours"  # this attempt's boot marker is in the bucket
    WAIT = "wait"  # not yet: poll again
    NOOP = "noop"  # the window passed and no marker: the start did nothing for us (L2)
    NOT_STARTED = "not-started"  # the instance is TERMINATED and no marker: start did nothing


def boot_verdict(marker_seen: bool, waited_s: float, instance_status: str) -> Boot:
    """After a start (or on resuming one): is this attempt's boot ours? (L2)

    ``waited_s`` counts from the attempt's board write, so a resumed process keeps the window.
    A TERMINATED instance without the marker never booted for this attempt (a stockout or a
    start never sent before a crash): try again. A running one without it, past the window,
    is somebody else's boot: the silent no-op of docs/rules.md, L2.
    """
    if marker_seen:
        return Boot.OURS
    if instance_status == TERMINATED:
        return Boot.NOT_STARTED
    if waited_s >= timing.BOOT_MARKER_WINDOW_S:
        return Boot.NOOP
    return Boot.WAIT


def retry_stockout(attempts_this_run: int, max_attempts: int) -> bool:
    """Whether this invocation tries again after a stockout; the claim is kept either way (L7)."""
    return attempts_this_run < max_attempts


def stop_wait_over(waited_s: float) -> bool:
    """Whether a start that has waited ``waited_s`` for a stopping instance to reach TERMINATED
    gives up: loudly, the claim kept, and the instance never stopped or reset by gpuops (L1,
    L7); the next `lane start` waits again."""
    return waited_s >= timing.GCE_OPERATION_TIMEOUT_S


@dataclass(frozen=True)
class Status:
    """The job's status file: ``<stage> <attempt> <reason...>``."""

    stage: str
    attempt: str
    reason: str


def parse_status(text: str) -> Status | None:
    """The status file's one line, or None when it is not one a lane script writes."""
    line = text.strip().split("\n", 1)[0]
    parts = line.split(" ", 2)
    if len(parts) < 2 or parts[0] not in STAGES or not parts[1]:
        return None
    return Status(parts[0], parts[1], parts[2].strip() if len(parts) == 3 else "")


class Verdict(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RUNNING = "running"
    UNKNOWN = "unknown"


def job_verdict(
    status: Status | None, attempt: str | None, instance_status: str, *, missing: Sequence[str]
) -> Verdict:
    """Judged by the status file of *this* attempt and the results in storage, never by a
    watcher's patience (L9).

    ``missing`` is what storage lacks of this attempt's results (``results_missing``): a
    status that says succeeded is a failure while anything is missing. A status written by
    another attempt says nothing about ours. A TERMINATED instance whose status never reached
    an end is unknown (loud), not failed: the evidence may be elsewhere.
    """
    if status is not None and status.attempt == attempt:
        if status.stage == "succeeded":
            return Verdict.FAILED if missing else Verdict.SUCCEEDED
        if status.stage == "failed":
            return Verdict.FAILED
    if instance_status in BOOTING:
        return Verdict.RUNNING
    return Verdict.UNKNOWN


@dataclass(frozen=True)
class StoredResult:
    """One object under the job's ``results/`` as storage lists it: its size, and its md5 in
    hex (None for an object storage keeps no md5 of, such as a composite one)."""

    size: int
    md5_hex: str | None


_MD5 = re.compile(r"[0-9a-f]{32}")
_COUNT = re.compile(r"0|[1-9][0-9]{0,8}")


def results_missing(
    manifest: bytes | None, attempt: str | None, stored: Mapping[str, StoredResult]
) -> list[str]:
    """What storage lacks of the results this attempt's manifest says it uploaded (L9); empty
    when every one is there with its size and md5. ``stored`` is keyed by the name under
    ``results/``. No manifest, another attempt's, or one that does not read is a lack too."""
    if manifest is None:
        return ["no results manifest in storage"]
    lines = manifest.decode("utf-8", "replace").split("\n")
    if lines[-1] == "":
        lines.pop()
    head = lines[0].split(" ") if lines else []
    if len(head) != 3 or head[0] != MANIFEST_HEADER or not _COUNT.fullmatch(head[2]):
        return ["the results manifest has no header line"]
    if head[1] != attempt:
        return [f"the results manifest is attempt {head[1]}'s, not this attempt's"]
    entries = lines[1:]
    problems = []
    if int(head[2]) != len(entries):
        problems.append(f"the manifest counts {head[2]} results but lists {len(entries)}")
    for line in entries:
        parts = line.split(" ", 2)
        if len(parts) != 3 or not _MD5.fullmatch(parts[0]) or not _COUNT.fullmatch(parts[1]):
            problems.append(f"an unreadable manifest line {line[:80]!r}")
            continue
        md5, size, name = parts[0], int(parts[1]), parts[2]
        have = stored.get(name)
        if have is None:
            problems.append(f"results/{name} is not in storage")
        elif have.size != size:
            problems.append(f"results/{name} is {have.size} bytes in storage, not {size}")
        elif have.md5_hex is not None and have.md5_hex != md5:
            problems.append(f"results/{name} in storage is not the file uploaded (md5)")
    return problems


def is_stale(board: Board, now: float) -> bool:
    """A claim held this long without a successful start needs a human (L8)."""
    if board.state not in (CLAIMED, STARTING) or board.started is not None:
        return False
    return board.claimed is not None and now - board.claimed >= timing.STALE_CLAIM_S


def cost_usd(
    running_s: float,
    held_s: float,
    *,
    usd_per_hour: float = RUNNING_USD_PER_HOUR,
    disk_usd_per_day: float = DISK_USD_PER_DAY,
) -> float:
    """Running time at the hourly rate plus the disk for the time the claim was held."""
    return round(running_s / 3600.0 * usd_per_hour + held_s / 86400.0 * disk_usd_per_day, 4)


# --- L12: no state line, no freedom ---------------------------------------------------------
UNKNOWN_OWNER = "unknown"  # a rebuilt claim whose owner no evidence names
HELD_STATES = (CLAIMED, STARTING, RUNNING)


@dataclass(frozen=True)
class Evidence:
    """What can be known of a claim without the board: the instance and the lane's events.

    ``event_*`` describe the latest lane event for this lane (its state as a board event
    wrote it, the operator who wrote it, the job, attempt and board revision) and its age.
    """

    instance_status: str
    metadata_job: str | None = None
    metadata_attempt: str | None = None
    event_state: str | None = None
    event_owner: str | None = None
    event_job: str | None = None
    event_attempt: int = 0
    event_revision: int = 0
    event_age_s: float | None = None
    label: VmClaim | None = None  # the claim the instance's label records (L13)
    journal_unreadable: bool = False  # the claim journal is there but does not read


def claim_signs(ev: Evidence) -> list[str]:
    """Every sign that somebody holds the lane (L12); empty when there is none."""
    signs = []
    if ev.instance_status != TERMINATED:
        signs.append(f"the instance is {ev.instance_status}, not TERMINATED")
    if ev.metadata_job is not None:
        signs.append(f"its metadata names job {ev.metadata_job}")
    if ev.metadata_attempt is not None:
        signs.append(f"its metadata holds attempt {ev.metadata_attempt}")
    if ev.label is not None and ev.label.held:
        signs.append(f"its label holds {_said(ev.label)}")
    if ev.journal_unreadable:
        signs.append("the lane's claim journal is unreadable")
    if ev.event_age_s is not None and ev.event_age_s < timing.STALE_CLAIM_S:
        signs.append(
            f"a lane event {ev.event_age_s:.0f} s ago left it {ev.event_state or 'held'}"
            + (f" for job {ev.event_job} by {ev.event_owner}" if ev.event_job else "")
        )
    return signs


def check_claimable_without_board(ev: Evidence, lane: str) -> None:
    """A lane with no state line may be claimed only when nothing says it is held (L12)."""
    signs = claim_signs(ev)
    if signs:
        raise Refused(
            "L12",
            f"lane {lane} has no state line, so it is unknown, not free, while "
            + "; ".join(signs)
            + ": run `gpuops lane repair` to rebuild its state line from that evidence",
        )


def repaired(lane: str, instance: str, ev: Evidence, now: float) -> Board:
    """The state line rebuilt from the evidence (L12). It is free only when there is no sign
    of a claim at all; otherwise held, by the owner and job the evidence names (or
    ``unknown``), and running while the instance is not TERMINATED."""
    import dataclasses

    from gpuops.lane.board import Board as B

    revision = ev.event_revision + 1
    label = ev.label or VmClaim()
    if not claim_signs(ev) or (
        ev.event_state == FREE
        and ev.instance_status == TERMINATED
        and ev.metadata_job is None
        and ev.metadata_attempt is None
        and not label.held
    ):
        return B(lane, instance, now, revision=revision, epoch=label.epoch)
    held_event = ev.event_state in HELD_STATES
    job = ev.metadata_job or (ev.event_job if held_event else None) or UNKNOWN_OWNER
    same = held_event and ev.event_job == job  # the event is about this job's claim
    owner = (ev.event_owner if same else None) or UNKNOWN_OWNER
    if label.held and (not label.readable or label.token != holder_token(owner, job)):
        owner = UNKNOWN_OWNER  # the VM's own label names another holder: no owner is known
    claimed = now - ev.event_age_s if same and ev.event_age_s is not None else now
    board = B(
        lane,
        instance,
        now,
        state=CLAIMED,
        owner=owner,
        job=job,
        attempt=ev.event_attempt if same else 0,
        claimed=claimed,
        revision=revision,
        epoch=label.epoch,
    )
    if ev.instance_status != TERMINATED:
        boot = (
            ev.metadata_attempt if ev.metadata_attempt and ev.metadata_attempt.isalnum() else None
        )
        board = dataclasses.replace(board, state=RUNNING, started=now, boot=boot or UNKNOWN_OWNER)
    return board


# --- L13: the claim fenced on the VM itself -------------------------------------------------
# The instance label that carries the claim: ``<epoch>-held-<token>`` while a claim is held,
# ``<epoch>-free`` once it is released. Written only by setLabels under the label fingerprint,
# so two claimants on two hosts cannot both move it from the same reading.
CLAIM_LABEL = "gpuops-claim"
_CLAIM_VALUE = re.compile(r"(0|[1-9][0-9]{0,9})-(?:held-([0-9a-f]{8})|free)")


@dataclass(frozen=True)
class VmClaim:
    """The claim the instance's label records: its epoch, whether it is held, and by whom
    (``token``, holder_token's). An unreadable label is held by nobody known (L12)."""

    epoch: int = 0
    held: bool = False
    token: str = ""
    readable: bool = True


def vm_claim(labels: Mapping[str, str]) -> VmClaim:
    """The claim in the instance's labels; no label is epoch 0, free."""
    value = labels.get(CLAIM_LABEL)
    if value is None:
        return VmClaim()
    found = _CLAIM_VALUE.fullmatch(value)
    if found is None:
        return VmClaim(held=True, readable=False)
    token = found.group(2) or ""
    return VmClaim(int(found.group(1)), bool(token), token)


def holder_token(owner: str | None, job: str | None) -> str:
    """Who holds a claim, as a label may carry it (lower-case hex; names may not)."""
    import hashlib

    return hashlib.sha256(f"{owner}\n{job}".encode()).hexdigest()[:8]


def claim_label(epoch: int, token: str | None) -> str:
    """The label value for a claim of ``epoch``: held by ``token``, or free (None)."""
    return f"{epoch}-held-{token}" if token else f"{epoch}-free"


def _said(vm: VmClaim) -> str:
    if not vm.readable:
        return "an unreadable claim"
    return f"claim epoch {vm.epoch} {'held' if vm.held else 'released'}"


def claim_epoch(board: Board, vm: VmClaim, operator: str, job: str) -> int:
    """The epoch a claim of this free board takes (L13): one past both the board's and the
    label's. A label that says a claim is held refuses the claim (the board is stale, rebuilt
    or lost), unless it is this operator's own claim for this job whose board write never
    happened: then that claim's epoch is resumed."""
    if vm.held:
        if vm.readable and vm.token == holder_token(operator, job) and vm.epoch > board.epoch:
            return vm.epoch
        raise Refused(
            "L13",
            f"lane {board.lane}: the board says {board.state}, but instance {board.instance}'s "
            f"label says {_said(vm)}: the board is stale, rebuilt or lost, so it cannot "
            "hand out the VM; run `gpuops lane repair`",
        )
    return max(vm.epoch, board.epoch) + 1


def check_epoch(board: Board, vm: VmClaim) -> None:
    """``install`` and ``start`` act only under the current epoch (L13): the instance's label
    must hold this board's claim (its epoch, its holder). A claim read from a stale, repaired
    or lost board then never takes the VM."""
    if vm.held and vm.readable and vm.epoch == board.epoch:
        if vm.token == holder_token(board.owner, board.job):
            return
    raise Refused(
        "L13",
        f"lane {board.lane}: this claim is epoch {board.epoch} ({board.owner!r}, job "
        f"{board.job!r}), but instance {board.instance}'s label says {_said(vm)}: a claim "
        "from a stale, repaired or lost board cannot take the VM",
    )


def repair_epoch(board: Board, vm: VmClaim) -> int | None:
    """The epoch a repair takes on the instance's label for the claim it rebuilds (L13), or
    None when there is nothing to take: a free board, or a label that already holds a claim
    (the board then carries that claim's epoch). A held board whose label holds nothing (a
    boot gpuops did not start, a released label under live metadata) would otherwise be a
    claim no label fences: a stale board on another host could take the VM under it."""
    if board.state == FREE or vm.held:
        return None
    return max(vm.epoch, board.epoch) + 1


def release_label(board: Board, vm: VmClaim) -> str | None:
    """The label a release writes (this epoch, free), or None when it already says so (a
    release that stopped after the label). Another claim on the label is refused (L13)."""
    if not vm.held and vm.readable and vm.epoch == board.epoch:
        return None
    check_epoch(board, vm)
    return claim_label(board.epoch, None)


# --- the job ended, the VM did not (L1, L12) ------------------------------------------------
def billing_exit(verdict: Verdict) -> ExitCode:
    """`lane board --live` with the billing alarm raised: the job's own end decides it, 6 for
    a failed job (M10), else 5 (its VM still bills; not a failure of the job, L9)."""
    return ExitCode.FAILED if verdict is Verdict.FAILED else ExitCode.UNKNOWN


def billing_alarm(
    verdict: Verdict, instance_status: str, ended_at: float | None, now: float
) -> bool:
    """The job's status ended but its VM still runs past the power-off grace: it bills until a
    human acts (gpuops never stops it, L1)."""
    if verdict not in (Verdict.SUCCEEDED, Verdict.FAILED) or ended_at is None:
        return False
    return instance_status in BOOTING and now - ended_at >= timing.POWEROFF_GRACE_S


# --- the provider-native ceiling (a second layer after the script's own power-off) ----------
def run_ceiling_s(max_hours: float | None, declared_hours: float | None) -> float:
    """``--max-hours`` if given, else the job's declared length, else the documented default;
    in whole seconds. Outside GCE's bounds for maxRunDuration (30 s to 120 days), which GCE
    refuses, it is a usage error naming where the length came from."""
    chosen = max_hours if max_hours is not None else declared_hours
    seconds = timing.DEFAULT_MAX_RUN_S if chosen is None else float(round(chosen * 3600.0))
    if not timing.GCE_MIN_RUN_S <= seconds <= timing.GCE_MAX_RUN_S:
        where = "--max-hours" if max_hours is not None else "the script's `# gpuops: max-hours`"
        raise UsageError(
            f"{where} {chosen:g} is {seconds:.0f} s: GCE's run ceiling (maxRunDuration) must be "
            f"{timing.GCE_MIN_RUN_S:g} s to {timing.GCE_MAX_RUN_S / 86400:g} days"
        )
    return seconds


def check_run_ceiling(scheduling: Mapping[str, Any]) -> None:
    """Refuse (L12) a start on an instance whose provider-native ceiling is not set: a
    ``maxRunDuration`` within GCE's bounds, with ``instanceTerminationAction`` STOP (a
    DELETE there would have GCE delete the lane's VM, L1). ``scheduling`` is wire JSON."""
    duration = scheduling.get("maxRunDuration")
    seconds: float | None = None
    if isinstance(duration, Mapping):
        try:
            seconds = float(str(duration.get("seconds")))
        except ValueError:
            seconds = None
    action = scheduling.get("instanceTerminationAction")
    if (
        seconds is None
        or not timing.GCE_MIN_RUN_S <= seconds <= timing.GCE_MAX_RUN_S
        or action != "STOP"
    ):
        raise Refused(
            "L12",
            f"the instance's run ceiling is not set (maxRunDuration {duration!r}, "
            f"instanceTerminationAction {action!r}): nothing would power it off if its script "
            "never did; run `gpuops lane install` again, which sets it",
        )
