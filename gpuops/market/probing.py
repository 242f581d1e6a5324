"""The probe loop: run the probe's steps on a box over ssh, in order, and judge them (M1, M2).

market/probe.py decides (pure: a transcript's verdict); providers/ssh.py is the transport (an
argv, one ssh run). This is the shell between them: each step of ``probe.PROBE_STEPS`` is one
ssh call bounded by SSH_COMMAND_TIMEOUT_S, the whole probe by PROBE_TIMEOUT_S on the given
``Clock``, and the first failing step ends it (an ssh failure, a timeout or a host fault). A
step the whole-probe budget no longer covers is not run: it is SSH_UNREACHABLE "timed out",
never a host fault (M2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from gpuops import timing
from gpuops.clock import SYSTEM, Clock
from gpuops.market.probe import PROBE_STEPS, ProbeResult, Transcript, first_failure, judge
from gpuops.model import StepOutput
from gpuops.providers.ssh import SshClient, SshEndpoint

# Runs one step: the argv and the seconds it may take (``SshClient.run``, or a test's).
Runner = Callable[[Sequence[str], float], StepOutput]


def probe(
    endpoint: SshEndpoint,
    *,
    client: SshClient,
    identity_file: Path,
    known_hosts: Path,
    vram_floor_mb: int,
    disk_floor_mb_per_s: float,
    runner: Runner | None = None,
    clock: Clock = SYSTEM,
) -> ProbeResult:
    """Probe one box on its real hardware: GPU, VRAM floor, CUDA, disk throughput (M1).

    ``runner`` runs each step (None: ``client.run``); ``clock``'s monotonic time bounds the
    whole probe.
    """
    run = client.run if runner is None else runner
    deadline = clock.monotonic() + timing.PROBE_TIMEOUT_S
    steps: dict[str, StepOutput] = {}
    for name, command in PROBE_STEPS:
        left_s = deadline - clock.monotonic()
        if left_s <= 0:
            steps[name] = StepOutput(None, timed_out=True)  # the whole-probe budget is spent
        else:
            argv = client.argv(
                endpoint, command, identity_file=identity_file, known_hosts=known_hosts
            )
            steps[name] = run(argv, min(timing.SSH_COMMAND_TIMEOUT_S, left_s))
        failed = first_failure(
            Transcript(**steps),
            vram_floor_mb=vram_floor_mb,
            disk_floor_mb_per_s=disk_floor_mb_per_s,
        )
        if failed is not None:
            return failed
    return judge(
        Transcript(**steps), vram_floor_mb=vram_floor_mb, disk_floor_mb_per_s=disk_floor_mb_per_s
    )
