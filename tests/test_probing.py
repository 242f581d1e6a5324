"""The probe loop (gpuops/market/probing.py): the probe's steps in order over an ssh client,
bounded per step and as a whole on a Clock, stopping at the first failure (M1, M2, M6).

The box answers from recordings/ssh/ (fakes/ssh/replay.py), step by step, through a runner that
moves a FakeClock as the step takes time: nothing here starts a process or waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fakes.ssh import replay
from fakes.vast.clock import FakeClock
from gpuops import timing
from gpuops.market.probe import CUDA_COMMAND, DISK_COMMAND, GPU_COMMAND
from gpuops.market.probing import probe
from gpuops.model import StepOutput, Verdict
from gpuops.providers.ssh import SshClient, SshEndpoint

FLOORS = {"vram_floor_mb": 40000, "disk_floor_mb_per_s": 500.0}
ENDPOINT = SshEndpoint("ssh4.vast.ai", 2201)
IDENTITY = Path("/keys/id_ed25519")
KNOWN_HOSTS = Path("/state/ssh/known_hosts/31337")
HEALTHY = {
    GPU_COMMAND: "nvidia-smi-h100x8",
    CUDA_COMMAND: "cuda-check-ok",
    DISK_COMMAND: "dd-1gib-fast",
}


def recorded(name: str) -> StepOutput:
    rec = replay.load(name)
    return StepOutput(rec.exit_code, rec.stdout, rec.stderr)


class Box:
    """A box that answers each probe command with its recording, ``takes_s`` seconds later on
    ``clock``; it keeps every argv and time limit it was given."""

    def __init__(self, clock: FakeClock, answers: dict[str, str], takes_s: Sequence[float] = ()):
        self.clock, self.answers, self.takes_s = clock, answers, list(takes_s)
        self.argvs: list[list[str]] = []
        self.limits: list[float] = []

    def run(self, argv: Sequence[str], timeout_s: float) -> StepOutput:
        self.argvs.append(list(argv))
        self.limits.append(timeout_s)
        if self.takes_s:
            self.clock.advance(self.takes_s.pop(0))
        return recorded(self.answers[argv[-1]])


@dataclass(frozen=True)
class BoxClient(SshClient):
    """The real client's argv, its runs answered by a Box instead of an ssh process."""

    box: Box | None = field(default=None, compare=False)

    def run(self, argv: Sequence[str], timeout_s: float) -> StepOutput:
        assert self.box is not None
        return self.box.run(argv, timeout_s)


# A client whose runs would fail loudly: with a runner given, the client only builds the argv.
NO_SSH = SshClient("/nonexistent/ssh", {})


def probed(box: Box, clock: FakeClock, *, runner: bool = False):
    return probe(
        ENDPOINT,
        client=NO_SSH if runner else BoxClient("/nonexistent/ssh", {}, box),
        identity_file=IDENTITY,
        known_hosts=KNOWN_HOSTS,
        runner=box.run if runner else None,
        clock=clock,
        **FLOORS,  # type: ignore[arg-type]
    )


def test_a_healthy_box_runs_each_step_once_in_order_on_the_clients_argv():
    """M1: gpu, cuda, disk, each over the client's own argv (our key, the box's known_hosts),
    each bounded by SSH_COMMAND_TIMEOUT_S; the three pass."""
    clock = FakeClock()
    box = Box(clock, HEALTHY)

    result = probed(box, clock)

    assert result.passed and result.cause is Verdict.PASS
    assert box.argvs == [
        NO_SSH.argv(ENDPOINT, command, identity_file=IDENTITY, known_hosts=KNOWN_HOSTS)
        for command in (GPU_COMMAND, CUDA_COMMAND, DISK_COMMAND)
    ]
    assert box.limits == [timing.SSH_COMMAND_TIMEOUT_S] * 3


def test_a_runner_given_runs_the_steps_instead_of_the_client():
    """``runner`` replaces ``client.run`` (record's capture keeps each step through one)."""
    clock = FakeClock()
    box = Box(clock, HEALTHY)

    result = probed(box, clock, runner=True)

    assert result.passed and len(box.argvs) == 3


def test_the_whole_probe_is_bounded_by_the_probe_timeout_on_its_clock():
    """M6: the last steps get what is left of PROBE_TIMEOUT_S, then none: 'timed out'."""
    clock = FakeClock()
    box = Box(clock, HEALTHY, takes_s=[timing.PROBE_TIMEOUT_S - 1.0, 1.0])

    result = probed(box, clock)

    assert box.limits == [timing.SSH_COMMAND_TIMEOUT_S, 1.0]
    assert (result.cause, result.detail, result.step) == (
        Verdict.SSH_UNREACHABLE,
        "timed out",
        "disk",
    )
    assert result.raw[-1].startswith("disk: timed out\n")


def test_a_step_with_no_time_left_is_not_run_and_one_with_a_little_is():
    """M6: the budget spent to the second runs nothing more; half a second left is given."""
    clock = FakeClock()
    spent = Box(clock, HEALTHY, takes_s=[timing.PROBE_TIMEOUT_S])

    result = probed(spent, clock)

    assert len(spent.argvs) == 1 and (result.step, result.detail) == ("cuda", "timed out")
    late = Box(clock, HEALTHY, takes_s=[timing.PROBE_TIMEOUT_S - 0.5, 0.0, 0.0])
    assert probed(late, clock).passed
    assert late.limits == [timing.SSH_COMMAND_TIMEOUT_S, 0.5, 0.5]


@pytest.mark.parametrize(
    ("failing", "name", "cause", "ran"),
    [
        (GPU_COMMAND, "openssh-auth-publickey", Verdict.SSH_AUTH, 1),
        (GPU_COMMAND, "nvidia-smi-no-devices", Verdict.NO_GPU, 1),
        (CUDA_COMMAND, "cuda-check-no-device", Verdict.CUDA_BROKEN, 2),
        (DISK_COMMAND, "dd-1mib-throttled", Verdict.SLOW_DISK, 3),
    ],
)
def test_the_first_failing_step_ends_the_probe(failing, name, cause, ran):
    """M1: no disk test on a box without a GPU, nothing after an SSH failure."""
    clock = FakeClock()
    box = Box(clock, {**HEALTHY, failing: name})

    result = probed(box, clock)

    assert result.cause is cause and len(box.argvs) == ran
    assert result.step == ("gpu", "cuda", "disk")[ran - 1]


def test_the_probe_reads_only_the_clock_it_is_given():
    """One clock: a probe on a clock far from the system's is bounded by that clock's time."""
    clock = FakeClock(start=0.0)
    box = Box(clock, HEALTHY, takes_s=[timing.PROBE_TIMEOUT_S + 1.0])

    result = probed(box, clock)

    assert (result.step, result.detail) == ("cuda", "timed out") and len(box.argvs) == 1
