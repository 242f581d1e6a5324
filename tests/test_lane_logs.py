"""`gpuops logs --lane JOB` (lane/logs.py): the lane job's log object in the bucket
(jobs/JOB/log.txt, which its startup script syncs, L5), read through the real GCS adapter from
FakeGCE; followed until the VM is TERMINATED, after real boots of the template."""

from __future__ import annotations

import os

import pytest

from gpuops import cli, timing
from gpuops.clock import WithSleep
from gpuops.errors import StillRunning, UsageError
from gpuops.lane import logs, script
from gpuops.providers.gcs import GcsAdapter
from tests.lane_world import BASE, World, lane_world

JOB = "validation"
BUCKET = "gpuops-lane-jobs"
LOG = f"jobs/{JOB}/log.txt"


class Shown:
    """What a show wrote (bytes) and said (lines)."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.said: list[str] = []

    def show(self, world: World, lines: int = 100, follow: bool = False, lane: object = None) -> None:
        logs.show(lane or world.lane("bob"), JOB, lines=lines, follow=follow,  # type: ignore[arg-type]
                  write=self.out.extend, say=self.said.append)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "lines", "tail"),
    [
        (b"a\nb\nc\n", 2, b"b\nc\n"),
        (b"a\nb\nc", 2, b"b\nc"),
        (b"a\nb\n", 5, b"a\nb\n"),
        (b"", 3, b""),
        (b"\n\n", 1, b"\n"),
        (b"x\xff\n", 1, b"x\xff\n"),
    ],
)
def test_the_last_lines_are_what_tail_n_prints(data, lines, tail):
    """As `tail -n`: a final line end does not start another line; bytes stay bytes."""
    assert logs.last_lines(data, lines) == tail


def test_the_lane_log_prints_its_last_lines_for_any_operator(tmp_path, monkeypatch):
    """L5's log object, its last N lines, as stored; bob reads it (reading changes nothing)."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.fake.put(LOG, b"boot\nepoch 1\nepoch 2\n")
        shown = Shown()

        shown.show(world, lines=2)

        assert bytes(shown.out) == b"epoch 1\nepoch 2\n" and shown.said == []


def test_a_job_with_no_log_object_is_a_usage_error_naming_the_object(tmp_path, monkeypatch):
    """A lane job the bucket holds no log for, while the lane names another job (or none), is
    exit 2 naming the object gs://BUCKET/jobs/JOB/log.txt."""
    with lane_world(tmp_path, monkeypatch) as world, pytest.raises(UsageError) as refused:
        Shown().show(world)

    assert str(refused.value) == f"no lane job '{JOB}' has a log: gs://{BUCKET}/{LOG} does not exist"


def test_the_claimed_job_with_no_log_yet_is_still_running_exit_5(tmp_path, monkeypatch):
    """The job the board names has not synced a log yet (its VM has not booted): exit 5."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.lane("alice").claim(JOB)
        with pytest.raises(StillRunning) as waiting:
            Shown().show(world)

    assert waiting.value.exit_code == 5
    assert f"lane job {JOB}: no log in gs://{BUCKET}/{LOG} yet" in str(waiting.value)


def test_follow_prints_the_log_as_it_grows_until_the_vm_is_terminated_l5(tmp_path, monkeypatch):
    """L5: following a real boot of the template prints, in order, every byte of the log the
    script uploads, the final upload included (the VM is TERMINATED only after it), then says
    the job can write no more."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=120.0, results=3) as world:
        lane = world.lane("alice")
        lane.claim(JOB)
        lane.install(JOB, script.render(JOB, BUCKET, 'python3 "$WORK/job.py"'))
        lane.start(JOB)
        world.advance(40.0)  # a first sync of the log
        before = world.fake.objects[LOG]
        shown = Shown()

        shown.show(world, lines=1_000_000, follow=True)

        assert world.fake.status == "TERMINATED"
        final = world.fake.objects[LOG]
        assert bytes(shown.out) == final and final.endswith(b"result 3/3\n")
        assert len(before) < len(final)  # it grew while followed: all of it was printed
        assert shown.said == [
            f"gpuops logs --lane {JOB}: the job can write no more (instance gpu-lane is TERMINATED)"
        ]


class SlowBucket(GcsAdapter):
    """The lane's real bucket adapter, on a network where each download takes a sync's time:
    the world moves on (the script may upload, the VM power off) before the bytes arrive."""

    def __init__(self, world: World, plain: GcsAdapter) -> None:
        super().__init__(plain.bucket_name, plain.project, endpoint=BASE)
        self.world = world

    def read(self, name: str) -> bytes | None:
        data = super().read(name)
        self.world.advance(timing.LOG_SYNC_S)
        return data


def test_follow_prints_the_final_upload_even_when_the_vm_powers_off_during_a_read_l5(
    tmp_path, monkeypatch
):
    """L5: whether the VM still runs is read before the log, so a final upload that lands
    (and a power-off that follows it) while an older copy is being downloaded is still
    printed: the follow ends only on a read made after it saw TERMINATED."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=120.0, results=3) as world:
        lane = world.lane("alice")
        lane.claim(JOB)
        lane.install(JOB, script.render(JOB, BUCKET, 'python3 "$WORK/job.py"'))
        lane.start(JOB)
        world.advance(40.0)
        plain = world.lane("bob")
        slow = type(plain)(plain.store, plain.events, "bob", plain.gce,
                           SlowBucket(world, plain.gcs), plain.config, clock=plain.clock)  # type: ignore[arg-type]  # fmt: skip
        shown = Shown()

        shown.show(world, lines=1_000_000, follow=True, lane=slow)

        assert world.fake.status == "TERMINATED"
        assert bytes(shown.out) == world.fake.objects[LOG]
        assert bytes(shown.out).endswith(b"result 3/3\n")


def test_follow_of_a_log_replaced_by_a_shorter_one_starts_again_from_its_start(tmp_path, monkeypatch):
    """A new attempt's log replaces the old one: the follow says so and prints it from the top,
    and goes on until the VM is TERMINATED."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.fake.put(LOG, b"attempt 1: a long line of output\n")
        world.lane("alice").claim(JOB)
        world.fake.status = "RUNNING"  # the VM runs this job (its boot is not modelled here)
        steps = iter([lambda: world.fake.put(LOG, b"attempt 2\n"),
                      lambda: setattr(world.fake, "status", "TERMINATED")])  # fmt: skip

        def sleep(seconds: float) -> None:
            next(steps)()
            world.advance(seconds)

        plain = world.lane("bob")
        lane = type(plain)(plain.store, plain.events, "bob", plain.gce, plain.gcs, plain.config,
                           clock=WithSleep(world.clock, sleep))  # fmt: skip
        shown = Shown()

        shown.show(world, follow=True, lane=lane)

    assert bytes(shown.out) == b"attempt 1: a long line of output\nattempt 2\n"
    assert shown.said == [
        f"gpuops logs --lane {JOB}: the log was started afresh; from its start:",
        f"gpuops logs --lane {JOB}: the job can write no more (instance gpu-lane is TERMINATED)",
    ]


def test_follow_ends_at_once_when_the_lane_holds_no_job_or_another(tmp_path, monkeypatch):
    """A job the lane no longer holds writes no more, whatever the VM does: its log, then the
    end, with no wait."""
    with lane_world(tmp_path, monkeypatch) as world:
        world.fake.put(LOG, b"old run\n")
        world.lane("alice").claim(JOB)
        world.lane("alice").release(JOB)  # the board: free, no job
        world.fake.status = "RUNNING"  # another's VM use: not this job's
        shown = Shown()

        shown.show(world, follow=True)
        world.fake.status = "TERMINATED"

    assert bytes(shown.out) == b"old run\n"
    assert shown.said == [f"gpuops logs --lane {JOB}: the job can write no more (the lane holds no job)"]


def test_logs_lane_on_the_command_line_reads_the_configured_lanes_bucket(tmp_path, monkeypatch, capfdbinary):
    """`gpuops logs --lane JOB --lines 1` through Settings: the lane's bucket, exit 0."""
    for name in list(os.environ):
        if name.startswith("GPUOPS_"):
            monkeypatch.delenv(name)
    with lane_world(tmp_path, monkeypatch) as world:
        s = world.fake.scenario
        for name, value in (("PROJECT", s.project), ("ZONE", s.zone), ("INSTANCE", s.instance),
                            ("BUCKET", s.bucket)):  # fmt: skip
            monkeypatch.setenv(f"GPUOPS_LANE_{name}", value)
        monkeypatch.setenv("GPUOPS_GCE_ENDPOINT", BASE)
        world.fake.put(LOG, b"one\ntwo\n")

        code = cli.main(["--state", str(tmp_path / "state"), "logs", "--lane", JOB, "--lines", "1"])

    assert (code, capfdbinary.readouterr().out) == (0, b"two\n")
