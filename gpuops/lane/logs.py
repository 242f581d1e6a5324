"""A lane job's log (`gpuops logs --lane JOB`): the object its startup script keeps in the
bucket, ``jobs/<JOB>/log.txt`` (synced every 30 s, uploaded once more on the way to power-off:
L5, lane/script.py), read through the lane's own GCS adapter. Read-only: nothing here writes.

``--follow`` looks at the object every ``timing.LANE_POLL_S`` (a metadata read; the bytes only
when its size or md5 changed) and prints what it grew by, until the job can write no more: its
VM is TERMINATED (its script uploads the final log before it powers off, L5) or the lane holds
another job. Whether that is so is read *before* the object, so the final upload is printed.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuops import timing
from gpuops.errors import CorruptState, Refused, StillRunning, UsageError
from gpuops.lane import board as b
from gpuops.lane import decide as d
from gpuops.lane.runner import Lane


def log_object(job: str) -> str:
    """Where the job's log lives in the lane's bucket."""
    return f"jobs/{b.check_job(job)}/log.txt"


def last_lines(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines of ``data``, as `tail -n` prints them (a final line end does
    not start another line). Pure."""
    cut = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(lines):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1 :]


def _board_job(lane: Lane) -> tuple[bool, str | None]:
    """(whether the board could be read, the job it names): a missing or corrupt board is
    not this command's to repair (`gpuops lane repair` is); the log is read all the same."""
    try:
        board, _, _ = lane.read()
    except (Refused, CorruptState):
        return False, None
    return True, board.job


def show(
    lane: Lane,
    job: str,
    *,
    lines: int,
    follow: bool,
    write: Callable[[bytes], None],
    say: Callable[[str], None],
) -> None:
    """Print the last ``lines`` lines of the job's log (``write``: bytes as stored); with
    ``follow``, then what it grows by until the job can write no more (``say``: how it ended).
    No log: StillRunning (exit 5) while the board names this job (it has not synced one yet),
    else a UsageError naming the object."""
    name = log_object(job)
    where = f"gs://{lane.config.bucket}/{name}"
    stamp = _stamp(lane, name)
    data = lane.gcs.read(name)
    if data is None:
        known, current = _board_job(lane)
        if known and current == job:
            raise StillRunning(
                f"lane job {job}: no log in {where} yet (its script syncs one every "
                f"{timing.LOG_SYNC_S:g} s once the VM has booted)"
            )
        raise UsageError(f"no lane job {job!r} has a log: {where} does not exist")
    write(last_lines(data, lines))
    at = len(data)
    while follow:
        known, current = _board_job(lane)
        status = lane.gce.get(lane.config.instance).status_raw
        ended = status == d.TERMINATED or (known and current != job)
        now = _stamp(lane, name)
        if now != stamp:
            data = lane.gcs.read(name) or b""
            if len(data) < at:  # replaced by a shorter one: a new attempt's log
                say(f"gpuops logs --lane {job}: the log was started afresh; from its start:")
                at = 0
            write(data[at:])
            at, stamp = len(data), now
        if ended:
            why = f"instance {lane.config.instance} is {status}"
            if status != d.TERMINATED:
                why = f"the lane holds {'another job, ' + current if current else 'no job'}"
            say(f"gpuops logs --lane {job}: the job can write no more ({why})")
            return
        lane.clock.sleep(timing.LANE_POLL_S)


def _stamp(lane: Lane, name: str) -> tuple[int, str | None] | None:
    """The object's size and md5 (None: no such object): what says it changed."""
    return lane.gcs.objects(name).get(name)
