"""Probe verdicts from raw recorded output (M1, M2, H1): gpuops/market/probe.py, no I/O."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fakes.ssh import replay
from gpuops.errors import UsageError
from gpuops.market.probe import (
    CUDA_COMMAND,
    DISK_COMMAND,
    GPU_COMMAND,
    PROBE_STEPS,
    Transcript,
    first_failure,
    judge,
)
from gpuops.model import StepOutput, Verdict

# The floors every recording's `expect` is judged with (recordings/ssh/README.md).
FLOORS = {"vram_floor_mb": 40000, "disk_floor_mb_per_s": 500.0}
RECORDINGS = Path(__file__).resolve().parent.parent / "recordings" / "ssh"
BANNER = (
    "Welcome to vast.ai. If authentication fails, try again after a few seconds, "
    "and double check your ssh key.\nHave fun!\n"
)
PINNED_NOTICE = (
    "Warning: Permanently added '[ssh4.vast.ai]:12345' (ED25519) to the list of known hosts.\r\n"
)


def output(name: str) -> StepOutput:
    rec = replay.load(name)
    return StepOutput(rec.exit_code, rec.stdout, rec.stderr)


def healthy() -> dict[str, StepOutput]:
    return {
        "gpu": output("nvidia-smi-h100x8"),
        "cuda": output("cuda-check-ok"),
        "disk": output("dd-1gib-fast"),
    }


def with_step(step: str, out: StepOutput) -> Transcript:
    return Transcript(**{**healthy(), step: out})


def placed(name: str) -> Transcript:
    """A healthy transcript with this recording in its step (OpenSSH's own at the first)."""
    rec = replay.load(name)
    return with_step("gpu" if rec.step == "connect" else rec.step, output(name))


ALL = replay.names()
CONNECT = [name for name in ALL if replay.load(name).step == "connect"]


def test_there_is_a_recording_for_every_cause():
    """H1: every verdict the judge can give is shown on at least one recording."""
    expected = {replay.load(name).expect for name in ALL}

    assert expected == {verdict.value for verdict in Verdict}


@pytest.mark.parametrize("name", ALL)
def test_every_recording_is_judged_as_it_says(name):
    """M1/H1: each recorded raw output gets the cause its file names, under the test floors."""
    result = judge(placed(name), **FLOORS)

    assert result.cause.value == replay.load(name).expect, result.detail


@pytest.mark.parametrize("name", ALL)
def test_every_recording_carries_honest_provenance_and_no_secret(name):
    """H1/H3: provenance kind, source and date on every file; no private key material."""
    text = (RECORDINGS / f"{name}.yaml").read_text()

    rec = replay.load(name)

    assert rec.kind in {"public", "reconstructed", "captured"}
    assert "PRIVATE KEY" not in text and "api_key" not in text.lower()


@pytest.mark.parametrize("name", CONNECT)
@pytest.mark.parametrize("step", ["cuda", "disk"])
def test_an_ssh_failure_decides_the_same_at_any_step(name, step):
    """M2: OpenSSH's own failure means the same whether it hits the first step or a later one."""
    result = judge(with_step(step, output(name)), **FLOORS)

    assert result.cause.value == replay.load(name).expect
    assert result.step == step


@pytest.mark.fault(
    "a box's SSH host key changed",
    handled="a refusal, never a retry",
)
def test_a_changed_host_key_is_a_refusal_never_a_retry():
    """Security bar: a changed host key is its own cause, neither retried nor a host fault."""
    result = judge(placed("openssh-host-key-changed"), **FLOORS)

    assert result.cause is Verdict.SSH_HOST_KEY_CHANGED
    assert not result.cause.retryable and not result.cause.host_fault
    assert "has changed" in result.detail


def test_the_vast_banner_alone_never_reads_as_an_auth_failure():
    """M2: 'If authentication fails' in the banner is noise, not a verdict."""
    gpu = dataclasses.replace(output("nvidia-smi-h100x8"), stderr=BANNER + PINNED_NOTICE)

    result = judge(with_step("gpu", gpu), **FLOORS)

    assert result.cause is Verdict.PASS


noise_lines = st.lists(
    st.sampled_from([*BANNER.splitlines(keepends=True), PINNED_NOTICE]), max_size=4
)


@given(name=st.sampled_from(ALL), noise=noise_lines, at=st.integers(0, 40))
def test_banner_noise_anywhere_never_changes_a_verdict(name, noise, at):
    """M2: banner and known-hosts notices between any two stderr lines leave cause and detail."""
    before = judge(placed(name), **FLOORS)
    rec = replay.load(name)
    lines = rec.stderr.splitlines(keepends=True)
    at = min(at, len(lines))
    noisy = "".join(lines[:at]) + "".join(noise) + "".join(lines[at:])

    step = "gpu" if rec.step == "connect" else rec.step
    after = judge(with_step(step, StepOutput(rec.exit_code, rec.stdout, noisy)), **FLOORS)

    assert (after.cause, after.detail) == (before.cause, before.detail)


@given(name=st.sampled_from(ALL))
def test_line_endings_never_change_a_verdict(name):
    """OpenSSH ends its own lines with CRLF and banners with LF: either reads the same."""
    rec = replay.load(name)
    lf = StepOutput(rec.exit_code, rec.stdout, rec.stderr.replace("\r\n", "\n"))
    crlf = StepOutput(rec.exit_code, rec.stdout, lf.stderr.replace("\n", "\r\n"))
    step = "gpu" if rec.step == "connect" else rec.step

    assert (
        judge(with_step(step, lf), **FLOORS).cause == judge(with_step(step, crlf), **FLOORS).cause
    )


def dd_summary(written: int, seconds: str) -> StepOutput:
    records = f"{written // 1048576}+0 records in\n{written // 1048576}+0 records out\n"
    line = f"{written} bytes (x GB, y GiB) copied, {seconds} s, 9.9 GB/s\n"
    return StepOutput(0, "", records + line)


@given(
    written=st.integers(1, 2**40),
    seconds=st.floats(1e-6, 1e4, allow_nan=False).map(lambda s: f"{s:.6g}"),
    floor=st.floats(1.0, 1e5, allow_nan=False),
)
@pytest.mark.fault(
    "a box whose disk is slower than advertised",
    handled="the probe measures it: below the floor is a slow-disk verdict, whatever the listing said (M1)",
)
def test_any_dd_rate_below_the_floor_is_slow_disk_and_any_other_passes(written, seconds, floor):
    """M1: the rate is bytes over seconds from dd's summary, never its rounded rate text."""
    rate = written / float(seconds) / 1e6

    result = judge(
        with_step("disk", dd_summary(written, seconds)), vram_floor_mb=0, disk_floor_mb_per_s=floor
    )

    assert result.cause is (Verdict.SLOW_DISK if rate < floor else Verdict.PASS)
    assert result.disk_mb_per_s == pytest.approx(rate)


@pytest.mark.parametrize(
    "line",
    [
        "4096 bytes (4.1 kB, 4.0 KiB) copied, 4.1748e-05 s, 98.1 MB/s",
        "1048576 bytes (1.0 MB, 1.0 MiB) copied, 2.50694 s, 418 kB/s",
        "268435456 bytes (268 MB, 256 MiB) copied, 0.0102655 s, 26.1 GB/s",
        "1073741824 bytes (1.1 GB) copied, 2.5 s, 429 MB/s",
    ],
)
def test_dd_summaries_in_every_unit_and_e_notation_are_read(line):
    """provider-formats C.3: kB/s, MB/s, GB/s and seconds like 4.1748e-05 all parse."""
    written, seconds = line.split(" bytes ")[0], line.split("copied, ")[1].split(" s,")[0]

    result = judge(
        with_step("disk", StepOutput(0, "", line + "\n")), vram_floor_mb=0, disk_floor_mb_per_s=0
    )

    assert result.cause is Verdict.PASS
    assert result.disk_mb_per_s == pytest.approx(int(written) / float(seconds) / 1e6)


def test_a_localised_dd_summary_is_unknown_never_a_guess():
    """The probe forces LC_ALL=C; a decimal comma that slips through is not read as a rate."""
    out = StepOutput(0, "", "1073741824 Bytes (1,1 GB, 1,0 GiB) kopiert, 0,5 s, 2,1 GB/s\n")

    result = judge(with_step("disk", out), **FLOORS)

    assert result.cause is Verdict.UNKNOWN
    assert "LC_ALL=C dd" in DISK_COMMAND


gpu_rows = st.lists(
    st.tuples(
        st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1)
        .map(str.strip)
        .filter(bool),
        st.integers(1, 200_000),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


@given(rows=gpu_rows, floor=st.integers(0, 200_000))
def test_vram_is_the_smallest_gpu_and_low_vram_is_below_the_floor(rows, floor):
    """M1: every GPU of a box must meet the VRAM floor; ' MiB' suffixes are accepted."""
    csv = "".join(f"{n}, {m}{' MiB' if unit else ''}, 550.90.07\n" for n, m, unit in rows)

    result = judge(with_step("gpu", StepOutput(0, csv)), vram_floor_mb=floor, disk_floor_mb_per_s=0)

    smallest = min(m for _, m, _ in rows)
    assert result.vram_mb == smallest and result.gpu_count == len(rows)
    assert result.cause is (Verdict.LOW_VRAM if smallest < floor else Verdict.PASS)


@pytest.mark.parametrize("memory", ["[N/A]", "", "80GB", "memory.total [MiB]"])
def test_a_memory_size_that_is_not_a_number_is_unknown(memory):
    """Unified-memory parts print [N/A]: the floor cannot be checked, so no pass and no guess."""
    out = StepOutput(0, f"NVIDIA GH200 480GB, {memory}, 550.90.07\n")

    result = judge(with_step("gpu", out), **FLOORS)

    assert result.cause is Verdict.UNKNOWN


def test_mixed_gpus_are_named_once_each_in_order():
    """A heterogeneous box reports each model once, the smallest VRAM decides."""
    csv = "NVIDIA H100 80GB HBM3, 81559, 550.90.07\nNVIDIA L40S, 46068, 550.90.07\n" * 2

    result = judge(with_step("gpu", StepOutput(0, csv)), **FLOORS)

    assert result.gpu_name == "NVIDIA H100 80GB HBM3 / NVIDIA L40S"
    assert (result.gpu_count, result.vram_mb, result.cause) == (4, 46068, Verdict.PASS)


@pytest.mark.parametrize("code", [2, 4, 15, 255])
def test_an_nvidia_smi_exit_code_outside_the_recorded_ones_is_unknown(code):
    """Only exits 9, 6 (No devices) and 127 are recorded as 'no GPU'; others keep their raw."""
    out = StepOutput(code, "Unable to determine the device handle\n")

    result = judge(with_step("gpu", out), **FLOORS)

    assert result.cause is Verdict.UNKNOWN
    assert result.raw and "Unable to determine" in result.raw[0]


def test_a_timed_out_step_is_unreachable_timed_out():
    """M2: a timeout is an SSH failure, never a host fault."""
    result = judge(with_step("disk", StepOutput(None, timed_out=True)), **FLOORS)

    assert (result.cause, result.detail, result.step) == (
        Verdict.SSH_UNREACHABLE,
        "timed out",
        "disk",
    )


def test_a_silent_exit_255_is_a_dropped_connection():
    """LogLevel=ERROR hides 'Connection closed by ...' (openssh-closed-silent.yaml)."""
    result = judge(with_step("cuda", StepOutput(255)), **FLOORS)

    assert result.cause is Verdict.SSH_UNREACHABLE


def test_exit_255_with_text_nobody_recorded_is_unknown_and_keeps_the_raw():
    """UNKNOWN is explicit: the text is kept for a human, never classified by a guess."""
    out = StepOutput(255, "", "ssh: something new happened\r\n")

    result = judge(with_step("gpu", out), **FLOORS)

    assert result.cause is Verdict.UNKNOWN
    assert "something new happened" in result.detail and "something new" in result.raw[0]


def test_a_step_that_did_not_run_is_never_a_pass():
    """M1: a box passes only when every step ran and passed."""
    result = judge(
        Transcript(gpu=output("nvidia-smi-h100x8"), cuda=output("cuda-check-ok")), **FLOORS
    )

    assert (result.cause, result.step) == (Verdict.UNKNOWN, "disk")


def test_first_failure_is_none_while_every_step_so_far_passed():
    """The probe stops at the first failure and goes on while there is none."""
    so_far = Transcript(gpu=output("nvidia-smi-h100x8"))
    failed = Transcript(gpu=output("nvidia-smi-driver-unreachable"))

    assert first_failure(so_far, **FLOORS) is None
    assert first_failure(failed, **FLOORS).cause is Verdict.NO_GPU  # type: ignore[union-attr]


def test_a_result_keeps_what_was_measured_before_the_failure():
    """A slow disk still reports the GPU it found, for stats and the per-GPU prior."""
    result = judge(placed("dd-1gib-overlay-disk"), **FLOORS)

    assert result.cause is Verdict.SLOW_DISK
    assert (result.gpu_name, result.gpu_count, result.vram_mb) == (
        "NVIDIA H100 80GB HBM3",
        8,
        81559,
    )
    assert result.disk_mb_per_s == pytest.approx(1073741824 / 2.32847 / 1e6)
    assert len(result.raw) == 3 and not result.passed


def test_a_pass_reports_every_measurement():
    """M1: the winner's GPU, VRAM, driver and disk rate travel with its verdict."""
    result = judge(Transcript(**healthy()), **FLOORS)

    assert result.passed and result.step is None
    assert (result.gpu_count, result.vram_mb, result.driver_version) == (8, 81559, "550.90.07")
    assert result.disk_mb_per_s == pytest.approx(2147.483648)


def test_transcripts_from_a_mapping_refuse_unknown_steps_and_bad_types():
    """Bad input names what was wrong."""
    with pytest.raises(UsageError, match="unknown probe steps"):
        Transcript.from_mapping({"network": {"exit_code": 0}})
    with pytest.raises(UsageError, match="exit_code"):
        Transcript.from_mapping({"gpu": {"exit_code": "0"}})
    with pytest.raises(UsageError, match="did not time out"):
        Transcript.from_mapping({"gpu": {"exit_code": None}})

    built = Transcript.from_mapping({"disk": {"exit_code": None, "timed_out": True}})

    assert built.disk == StepOutput(None, timed_out=True)


def test_negative_floors_are_refused():
    """A floor below zero is a caller's bug, not a pass."""
    with pytest.raises(UsageError, match="floors"):
        judge(Transcript(**healthy()), vram_floor_mb=-1, disk_floor_mb_per_s=0)


def test_the_probe_runs_the_documented_commands_in_order():
    """provider-formats C.2/C.3: the exact nvidia-smi query, dd with one flush in the C locale."""
    assert [name for name, _ in PROBE_STEPS] == ["gpu", "cuda", "disk"]
    assert GPU_COMMAND == (
        "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits"
    )
    assert "bs=1M count=1024 conv=fdatasync" in DISK_COMMAND and "exit $rc" in DISK_COMMAND
    assert CUDA_COMMAND.startswith("python3 -c '") and CUDA_COMMAND.count("'") == 2
    assert 'ctypes.CDLL("libcuda.so.1")' in CUDA_COMMAND


# --- exact details: each verdict says what it rests on, word for word ------------------------
NO_NVML = "Failed to initialize NVML: Unknown Error\n"
DD_NO_SPACE = "dd: error writing '.gpuops-probe-dd.7': No space left on device\n"
HEALTHY_PASS = "8x NVIDIA H100 80GB HBM3 (81559 MiB), CUDA on 8 devices, disk 2147.5 MB/s"


@pytest.mark.parametrize(
    ("step", "out", "cause", "detail"),
    [
        ("gpu", StepOutput(None), Verdict.SSH_UNREACHABLE, "timed out"),
        ("gpu", StepOutput(0, timed_out=True), Verdict.SSH_UNREACHABLE, "timed out"),
        (
            "gpu",
            StepOutput(255),
            Verdict.SSH_UNREACHABLE,
            "ssh exited 255 without a message (connection dropped)",
        ),
        (
            "gpu",
            StepOutput(255, "remote said this\n"),
            Verdict.UNKNOWN,
            "exit 255 with unrecognised output: remote said this",
        ),
        (
            "gpu",
            StepOutput(9),
            Verdict.NO_GPU,
            "nvidia-smi cannot talk to the NVIDIA driver (exit 9)",
        ),
        ("gpu", StepOutput(6), Verdict.UNKNOWN, "nvidia-smi exited 6: no output"),
        ("gpu", StepOutput(127), Verdict.NO_GPU, "nvidia-smi is not installed: no output"),
        (
            "gpu",
            StepOutput(2, "", NO_NVML),
            Verdict.UNKNOWN,
            "nvidia-smi exited 2: Failed to initialize NVML: Unknown Error",
        ),
        (
            "gpu",
            StepOutput(2, "Unable to determine the device handle\n", NO_NVML),
            Verdict.UNKNOWN,
            "nvidia-smi exited 2: Unable to determine the device handle",
        ),
        ("gpu", StepOutput(0), Verdict.UNKNOWN, "nvidia-smi exited 0 and listed no GPU"),
        (
            "gpu",
            StepOutput(0, "NVIDIA GH200 480GB, [N/A], 550.90.07\n"),
            Verdict.UNKNOWN,
            "NVIDIA GH200 480GB reports memory.total '[N/A]'",
        ),
        (
            "gpu",
            StepOutput(0, "NVIDIA L4, 23034, 550.90.07\n"),
            Verdict.LOW_VRAM,
            "1x NVIDIA L4: 23034 MiB, below the 40000 MiB floor",
        ),
        (
            "cuda",
            StepOutput(1, "GPUOPS_CUDA_OK devices=8\n"),
            Verdict.UNKNOWN,
            "the CUDA check exited 1 without a verdict line: GPUOPS_CUDA_OK devices=8",
        ),
        (
            "cuda",
            StepOutput(0),
            Verdict.UNKNOWN,
            "the CUDA check exited 0 without a verdict line: no output",
        ),
        (
            "cuda",
            StepOutput(1, "stdout line\n", "stderr line\n"),
            Verdict.UNKNOWN,
            "the CUDA check exited 1 without a verdict line: stderr line",
        ),
        (
            "cuda",
            StepOutput(1, "stdout line\n"),
            Verdict.UNKNOWN,
            "the CUDA check exited 1 without a verdict line: stdout line",
        ),
        (
            "cuda",
            StepOutput(127, "", "bash: python3: command not found\n"),
            Verdict.UNKNOWN,
            "the CUDA check needs python3 on the box: bash: python3: command not found",
        ),
        (
            "disk",
            StepOutput(1, "", "1+0 records in\n" + DD_NO_SPACE),
            Verdict.UNKNOWN,
            "dd exited 1: " + DD_NO_SPACE.strip(),
        ),
        (
            "disk",
            StepOutput(1, "", "something odd\n"),
            Verdict.UNKNOWN,
            "dd exited 1: something odd",
        ),
        ("disk", StepOutput(1), Verdict.UNKNOWN, "dd exited 1: no output"),
        (
            "disk",
            StepOutput(0, "stdout words\n"),
            Verdict.UNKNOWN,
            "dd printed no summary line: stdout words",
        ),
        (
            "disk",
            StepOutput(0, "stdout words\n", "dd: weird\n"),
            Verdict.UNKNOWN,
            "dd printed no summary line: dd: weird",
        ),
        (
            "disk",
            StepOutput(0, "", "1024 bytes copied, 0 s, 0.0 kB/s\n"),
            Verdict.UNKNOWN,
            "dd's summary gives no rate: 1024 bytes copied, 0 s, 0.0 kB/s",
        ),
        (
            "disk",
            output("dd-1gib-overlay-disk"),
            Verdict.SLOW_DISK,
            "disk writes 461.1 MB/s (1073741824 bytes in 2.32847 s), below the 500 MB/s floor",
        ),
    ],
)
def test_each_verdict_names_the_line_it_rests_on_word_for_word(step, out, cause, detail):
    """UNKNOWN and every failure carry the exact line a human needs, or say 'no output'."""
    result = judge(with_step(step, out), **FLOORS)

    assert (result.cause, result.detail, result.step) == (cause, detail, step)


def test_a_pass_detail_states_every_measurement_exactly():
    """M1: the pass line names GPU count and model, VRAM, CUDA devices and disk rate."""
    result = judge(Transcript(**healthy()), **FLOORS)

    assert (result.cause, result.detail) == (Verdict.PASS, HEALTHY_PASS)


def test_vram_exactly_at_the_floor_passes():
    """M1: the floor is a minimum: a GPU with exactly that much memory meets it."""
    gpu = StepOutput(0, "NVIDIA A100-SXM4-40GB, 40000, 550.90.07\n")

    result = judge(with_step("gpu", gpu), **FLOORS)

    assert (result.cause, result.vram_mb) == (Verdict.PASS, 40000)


def test_a_gpu_name_with_a_comma_is_read_from_the_right():
    """nvidia-smi's CSV does not quote names: only the last two fields are split off."""
    gpu = StepOutput(0, "NVIDIA H100, PCIe, 81559, 550.90.07\n")

    result = judge(with_step("gpu", gpu), **FLOORS)

    assert result.cause is Verdict.PASS
    assert (result.gpu_name, result.vram_mb, result.driver_version) == (
        "NVIDIA H100, PCIe",
        81559,
        "550.90.07",
    )


def test_exit_9_alone_is_no_gpu_and_so_is_the_driver_message_alone():
    """provider-formats C.2: either sign of a missing driver decides NO_GPU on its own."""
    by_code = judge(with_step("gpu", StepOutput(9, "", "")), **FLOORS)
    by_text = judge(with_step("gpu", output("nvidia-smi-driver-unreachable")), **FLOORS)
    text_only = dataclasses.replace(output("nvidia-smi-driver-unreachable"), exit_code=1)

    assert by_code.cause is by_text.cause is Verdict.NO_GPU
    assert judge(with_step("gpu", text_only), **FLOORS).detail == (
        "nvidia-smi cannot talk to the NVIDIA driver (exit 1)"
    )


def test_the_raw_excerpt_names_each_step_and_how_it_ended():
    """M1: the raw kept for a human says step, exit or timeout, then stdout and stderr."""
    timed = StepOutput(None, "partial\n", "dd: still writing\n", timed_out=True)

    result = judge(with_step("disk", timed), **FLOORS)

    assert len(result.raw) == 3
    assert result.raw[0].startswith("gpu: exit 0\n--- stdout\nNVIDIA H100 80GB HBM3, 81559")
    assert result.raw[2] == (
        "disk: timed out\n--- stdout\npartial\n\n--- stderr\ndd: still writing\n"
    )


def test_a_step_that_did_not_run_says_which_in_its_detail():
    """M1: the missing step is named, so nobody mistakes it for a box fault."""
    result = judge(
        Transcript(gpu=output("nvidia-smi-h100x8"), cuda=output("cuda-check-ok")), **FLOORS
    )

    assert (result.cause, result.detail) == (Verdict.UNKNOWN, "the disk step did not run")


def test_a_negative_floor_is_refused_with_its_reason():
    """The refusal says what was wrong, exactly."""
    with pytest.raises(UsageError) as caught:
        judge(Transcript(**healthy()), vram_floor_mb=0, disk_floor_mb_per_s=-0.5)

    assert str(caught.value) == "the VRAM and disk floors must not be negative"


def test_asking_a_transcript_for_an_unknown_step_names_the_known_ones():
    """Transcript.step refuses a name outside gpu, cuda, disk and lists them."""
    with pytest.raises(UsageError) as caught:
        Transcript().step("network")

    assert str(caught.value) == "unknown probe step 'network'; steps are gpu, cuda, disk"


def test_a_transcript_from_a_mapping_keeps_every_field_exactly():
    """A recording's {exit_code, stdout, stderr, timed_out} become the same StepOutput."""
    built = Transcript.from_mapping(
        {
            "gpu": {"exit_code": 0, "stdout": "out", "stderr": "err"},
            "cuda": {"exit_code": 3},
            "disk": {"exit_code": None, "stdout": "o", "stderr": "e", "timed_out": True},
        }
    )

    assert built == Transcript(
        gpu=StepOutput(0, "out", "err", False),
        cuda=StepOutput(3, "", "", False),
        disk=StepOutput(None, "o", "e", True),
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"exit_code": True}, "step cuda: exit_code must be an integer or null, not True"),
        (
            {"exit_code": 0, "stdout": 1},
            "step cuda: stdout/stderr must be text and timed_out a boolean",
        ),
        (
            {"exit_code": 0, "stderr": b"x"},
            "step cuda: stdout/stderr must be text and timed_out a boolean",
        ),
        (
            {"exit_code": 0, "timed_out": "no"},
            "step cuda: stdout/stderr must be text and timed_out a boolean",
        ),
        ({"exit_code": None}, "step cuda: exit_code is null but the step did not time out"),
    ],
)
def test_each_bad_field_of_a_mapped_step_is_refused_by_name(raw, message):
    """A mistyped step names the step and the field; a bool is not an exit code."""
    with pytest.raises(UsageError) as caught:
        Transcript.from_mapping({"cuda": raw})

    assert str(caught.value) == message


def test_the_transport_verdict_outside_a_probe_names_what_ssh_said_or_nothing():
    """Security bar, M2: `run` reads the same judgment as the probe: a changed host key from
    OpenSSH's own recording; None when the remote command itself ran (any exit of its own)."""
    from gpuops.market.probe import transport_verdict

    assert transport_verdict(output("openssh-host-key-changed")) is Verdict.SSH_HOST_KEY_CHANGED
    assert transport_verdict(StepOutput(0, "ok")) is None
    assert transport_verdict(StepOutput(3, "", "boom")) is None
    assert transport_verdict(StepOutput(None, timed_out=True)) is Verdict.SSH_UNREACHABLE
