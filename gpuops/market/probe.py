"""Probe verdicts: what the raw output of the probe steps says about a box (M1, M2). Pure; no I/O.

A probe runs three remote commands over ssh, in order: ``gpu`` (nvidia-smi), ``cuda`` (a
cuInit check through ctypes) and ``disk`` (dd). :func:`judge` reads each step's exit code,
stdout and stderr, exactly as the ssh client returned them, and names the first failure.
Every pattern below is taken from a recording in ``recordings/ssh/`` (rule H1); output that
matches none of them is ``UNKNOWN`` with the raw text kept, never a guess.

The verdicts (``Verdict``, which of them are host faults and which may pass later) and a
step's output (``StepOutput``) are the model's (gpuops/model.py): this module decides which
verdict a transcript earns. Why the causes are split this way (M2): an SSH auth failure or an
unreachable box is not a host fault (about half of them passed at another time), so neither may
quarantine a machine; NO_GPU, LOW_VRAM, SLOW_DISK and CUDA_BROKEN are host faults. A changed
host key has its own cause, SSH_HOST_KEY_CHANGED: it is a refusal, never retried and never
counted as "our key is bad" (DESIGN §4: a changed host key is a refusal, not a retry).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from gpuops.errors import UsageError
from gpuops.model import StepOutput, Verdict

# --- the remote commands (each is one argument to ssh, run by the box's login shell) --------

# One CSV line per GPU: "NAME, MiB, DRIVER" (provider-formats C.2).
GPU_COMMAND = (
    "nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits"
)

# CUDA usable = the driver's own libcuda.so.1 initialises and every device takes a context and
# a 1 MiB allocation. ctypes needs only python3, no PyTorch on the box; `nvidia-smi -q` would
# read NVML only and pass on a box whose CUDA user-space library is missing or mismatched.
# The script prints exactly one line that starts with a fixed token; it holds no single quote.
_CUDA_SCRIPT = """
import ctypes, sys
def say(line):
    print(line)
    sys.stdout.flush()
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    say("GPUOPS_CUDA_FAIL step=dlopen error=%s" % exc)
    sys.exit(1)
def check(step, code):
    if code != 0:
        name = ctypes.c_char_p()
        cu.cuGetErrorName(code, ctypes.byref(name))
        text = (name.value or b"?").decode()
        say("GPUOPS_CUDA_FAIL step=%s code=%d name=%s" % (step, code, text))
        sys.exit(1)
check("cuInit", cu.cuInit(0))
count = ctypes.c_int(0)
check("cuDeviceGetCount", cu.cuDeviceGetCount(ctypes.byref(count)))
if count.value < 1:
    say("GPUOPS_CUDA_FAIL step=cuDeviceGetCount code=0 name=no_devices")
    sys.exit(1)
for index in range(count.value):
    dev = ctypes.c_int(0)
    ctx = ctypes.c_void_p()
    ptr = ctypes.c_uint64(0)
    check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), index))
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    check("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)))
    check("cuMemFree", cu.cuMemFree_v2(ptr))
    check("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease(dev))
say("GPUOPS_CUDA_OK devices=%d" % count.value)
"""
CUDA_COMMAND = f"python3 -c '{_CUDA_SCRIPT}'"
CUDA_OK_TOKEN = "GPUOPS_CUDA_OK"
CUDA_FAIL_TOKEN = "GPUOPS_CUDA_FAIL"

# 1 GiB written with one flush at the end (provider-formats C.3: the realistic recipe). LC_ALL=C
# keeps dd's summary in the C locale: a "1,1 GB" style decimal comma never reaches the parser.
# The exit status is dd's, not rm's.
DISK_BYTES = 1024 * 1024 * 1024
DISK_COMMAND = (
    'f=.gpuops-probe-dd.$$; LC_ALL=C dd if=/dev/zero of="$f" bs=1M count=1024 conv=fdatasync; '
    'rc=$?; rm -f "$f"; exit $rc'
)

# The steps in the order they run; the first failure decides and later steps are skipped.
PROBE_STEPS: tuple[tuple[str, str], ...] = (
    ("gpu", GPU_COMMAND),
    ("cuda", CUDA_COMMAND),
    ("disk", DISK_COMMAND),
)
STEP_NAMES = tuple(name for name, _ in PROBE_STEPS)


@dataclass(frozen=True)
class Transcript:
    """The raw output of each probe step that ran; a step that did not run is None."""

    gpu: StepOutput | None = None
    cuda: StepOutput | None = None
    disk: StepOutput | None = None

    def step(self, name: str) -> StepOutput | None:
        if name not in STEP_NAMES:
            raise UsageError(f"unknown probe step {name!r}; steps are {', '.join(STEP_NAMES)}")
        value: StepOutput | None = getattr(self, name)
        return value

    @classmethod
    def from_mapping(cls, steps: Mapping[str, Mapping[str, object]]) -> Transcript:
        """Build from ``{step: {exit_code, stdout, stderr, timed_out}}`` (a recording's shape)."""
        unknown = set(steps) - set(STEP_NAMES)
        if unknown:
            raise UsageError(f"unknown probe steps {sorted(unknown)}; known: {STEP_NAMES}")
        return cls(**{name: _step_from(name, raw) for name, raw in steps.items()})


def _step_from(name: str, raw: Mapping[str, object]) -> StepOutput:
    code, out, err = raw.get("exit_code"), raw.get("stdout", ""), raw.get("stderr", "")
    timed_out = raw.get("timed_out", False)
    if not (code is None or (isinstance(code, int) and not isinstance(code, bool))):
        raise UsageError(f"step {name}: exit_code must be an integer or null, not {code!r}")
    if not isinstance(out, str) or not isinstance(err, str) or not isinstance(timed_out, bool):
        raise UsageError(f"step {name}: stdout/stderr must be text and timed_out a boolean")
    if code is None and not timed_out:
        raise UsageError(f"step {name}: exit_code is null but the step did not time out")
    return StepOutput(code, out, err, timed_out)


@dataclass(frozen=True)
class ProbeResult:
    """The verdict on one box, what was measured before it, and the raw text it rests on."""

    cause: Verdict
    detail: str
    step: str | None = None
    gpu_name: str | None = None
    gpu_count: int = 0
    vram_mb: int | None = None
    driver_version: str | None = None
    disk_mb_per_s: float | None = None
    raw: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.cause is Verdict.PASS


# --- OpenSSH's own failures: ssh exits 255 and says why on stderr (provider-formats C) ------
# Each pattern is a whole stderr line, as recorded in recordings/ssh/openssh-*.yaml.

# Lines a working connection may print: the Vast pre-auth banner (A.8) and accept-new's notice.
# They say nothing about the box; "If authentication fails" must never read as an auth failure.
_NOISE = (
    re.compile(r"Welcome to vast\.ai\. If authentication fails, .*"),
    re.compile(r"Have fun!"),
    re.compile(r"Warning: Permanently added .* to the list of known hosts\."),
)
_HOST_KEY = (
    re.compile(r"Host key for \S+ has changed and you have requested strict checking\."),
    re.compile(r"Host key verification failed\."),
)
_AUTH = (
    re.compile(r"\S+: Permission denied \([\w,-]+\)\."),
    re.compile(r"Received disconnect from .*: Too many authentication failures.*"),
)
_UNREACHABLE = (
    re.compile(r"ssh: connect to host \S+ port \S+: .+"),
    re.compile(r"ssh: Could not resolve hostname \S+: .+"),
    re.compile(r"kex_exchange_identification: .+"),
    re.compile(r"Connection closed by \S+ port \d+"),
    re.compile(r"Connection reset by \S+ port \d+"),
    re.compile(r"Connection timed out during banner exchange"),
    re.compile(r"Connection to \S+ port \d+ timed out"),
    re.compile(r"Connection to \S+ closed by remote host\."),
)
# First match wins: a refused host key outranks everything printed beside it.
_SSH_FAILURES = (
    (Verdict.SSH_HOST_KEY_CHANGED, _HOST_KEY),
    (Verdict.SSH_AUTH, _AUTH),
    (Verdict.SSH_UNREACHABLE, _UNREACHABLE),
)
_SSH_FAILED = 255

# --- the remote commands' own output -----------------------------------------------------
_NO_DRIVER = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
_NO_DEVICES = "No devices were found"
_CUDA_OK = re.compile(CUDA_OK_TOKEN + r" devices=(\d+)")
# GNU dd, C locale: "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.5 s, 2.1 GB/s"; also
# "0 bytes copied, 3.1419e-05 s, 0.0 kB/s". The rounded rate is ignored: bytes / seconds.
_DD_SUMMARY = re.compile(r"(\d+) bytes (?:\([^)]*\) )?copied, (\d+(?:\.\d+)?(?:e[-+]?\d+)?) s, .+")
_BYTES_PER_MB = 1_000_000
_EXCERPT_CHARS = 1500

_Decided = tuple[Verdict, str]


@dataclass
class _Facts:
    """What the steps so far measured; copied into the ProbeResult."""

    gpu_name: str | None = None
    gpu_count: int = 0
    vram_mb: int | None = None
    driver_version: str | None = None
    disk_mb_per_s: float | None = None
    cuda_devices: int = 0


def _lines(text: str) -> list[str]:
    """Non-blank lines without CR (OpenSSH ends its own lines with CRLF) and without noise."""
    stripped = (line.strip() for line in text.split("\n"))
    return [s for s in stripped if s and not any(p.fullmatch(s) for p in _NOISE)]


def _first(*texts: str) -> str:
    for text in texts:
        lines = _lines(text)
        if lines:
            return lines[0]
    return "no output"


def _ssh_failure(out: StepOutput) -> _Decided | None:
    """Timeouts and exit 255 belong to the ssh transport, never to the remote command (C.2)."""
    if out.timed_out or out.exit_code is None:
        return Verdict.SSH_UNREACHABLE, "timed out"
    if out.exit_code != _SSH_FAILED:
        return None
    lines = _lines(out.stderr)
    for verdict, patterns in _SSH_FAILURES:
        for line in lines:
            if any(p.fullmatch(line) for p in patterns):
                return verdict, line
    if not lines and not out.stdout.strip():
        # LogLevel=ERROR hides OpenSSH's INFO-level "Connection closed by HOST port N" (logdie):
        # a silent 255 is a dropped connection (recordings/ssh/openssh-closed-silent.yaml).
        return Verdict.SSH_UNREACHABLE, "ssh exited 255 without a message (connection dropped)"
    return Verdict.UNKNOWN, f"exit 255 with unrecognised output: {_first(out.stderr, out.stdout)}"


def transport_verdict(out: StepOutput) -> Verdict | None:
    """What the ssh transport itself said of one run outside a probe (a refused host key,
    our key refused, no route, an unclear 255), or None when the remote command ran."""
    found = _ssh_failure(out)
    return None if found is None else found[0]


def _read_gpu(out: StepOutput, facts: _Facts, vram_floor_mb: int) -> _Decided | None:
    code, text = out.exit_code, out.stdout + out.stderr
    if code == 9 or _NO_DRIVER in text:
        return Verdict.NO_GPU, f"nvidia-smi cannot talk to the NVIDIA driver (exit {code})"
    if code == 6 and _NO_DEVICES in text:
        return Verdict.NO_GPU, f"nvidia-smi: {_NO_DEVICES} (exit 6)"
    if code == 127:
        return Verdict.NO_GPU, f"nvidia-smi is not installed: {_first(out.stderr)}"
    if code != 0:
        return Verdict.UNKNOWN, f"nvidia-smi exited {code}: {_first(out.stdout, out.stderr)}"
    rows = _lines(out.stdout)
    if not rows:
        return Verdict.UNKNOWN, "nvidia-smi exited 0 and listed no GPU"
    names: list[str] = []
    sizes: list[int] = []
    for row in rows:
        parts = [part.strip() for part in row.rsplit(", ", 2)]
        if len(parts) != 3:
            return Verdict.UNKNOWN, f"unreadable nvidia-smi line {row!r}"
        memory = parts[1].removesuffix(" MiB")
        if not (memory.isascii() and memory.isdigit()):
            return Verdict.UNKNOWN, f"{parts[0]} reports memory.total {parts[1]!r}"
        names.append(parts[0])
        sizes.append(int(memory))
        facts.driver_version = facts.driver_version or parts[2]
    facts.gpu_name = " / ".join(dict.fromkeys(names))
    facts.gpu_count, facts.vram_mb = len(rows), min(sizes)
    if facts.vram_mb < vram_floor_mb:
        return Verdict.LOW_VRAM, (
            f"{facts.gpu_count}x {facts.gpu_name}: {facts.vram_mb} MiB, "
            f"below the {vram_floor_mb} MiB floor"
        )
    return None


def _read_cuda(out: StepOutput, facts: _Facts) -> _Decided | None:
    lines = _lines(out.stdout)
    failed = next((line for line in lines if line.startswith(CUDA_FAIL_TOKEN)), None)
    if failed is not None:
        return Verdict.CUDA_BROKEN, failed
    passed = next((m for line in lines if (m := _CUDA_OK.fullmatch(line))), None)
    if out.exit_code == 0 and passed is not None:
        facts.cuda_devices = int(passed[1])
        return None
    if out.exit_code == 127:
        return Verdict.UNKNOWN, f"the CUDA check needs python3 on the box: {_first(out.stderr)}"
    return Verdict.UNKNOWN, (
        f"the CUDA check exited {out.exit_code} without a verdict line: "
        f"{_first(out.stderr, out.stdout)}"
    )


def _read_disk(out: StepOutput, facts: _Facts, floor_mb_per_s: float) -> _Decided | None:
    lines = _lines(out.stderr)
    summaries = [m for line in lines if (m := _DD_SUMMARY.fullmatch(line))]
    if out.exit_code != 0:
        errors = [line for line in lines if line.startswith("dd: ")]
        first = (errors or lines or ["no output"])[0]
        return Verdict.UNKNOWN, f"dd exited {out.exit_code}: {first}"
    if not summaries:
        return Verdict.UNKNOWN, f"dd printed no summary line: {_first(out.stderr, out.stdout)}"
    summary = summaries[-1]
    written, seconds = int(summary[1]), float(summary[2])
    if written <= 0 or seconds <= 0:
        return Verdict.UNKNOWN, f"dd's summary gives no rate: {summary[0]}"
    facts.disk_mb_per_s = written / seconds / _BYTES_PER_MB
    if facts.disk_mb_per_s < floor_mb_per_s:
        return Verdict.SLOW_DISK, (
            f"disk writes {facts.disk_mb_per_s:.1f} MB/s ({written} bytes in {summary[2]} s), "
            f"below the {floor_mb_per_s:g} MB/s floor"
        )
    return None


def _excerpt(name: str, out: StepOutput) -> str:
    state = "timed out" if out.timed_out else f"exit {out.exit_code}"
    return (
        f"{name}: {state}\n--- stdout\n{out.stdout[-_EXCERPT_CHARS:]}"
        f"\n--- stderr\n{out.stderr[-_EXCERPT_CHARS:]}"
    )


def _walk(
    transcript: Transcript, vram_floor_mb: int, disk_floor_mb_per_s: float, *, partial: bool
) -> ProbeResult | None:
    if vram_floor_mb < 0 or disk_floor_mb_per_s < 0:
        raise UsageError("the VRAM and disk floors must not be negative")
    facts, raw = _Facts(), list[str]()

    def result(cause: Verdict, detail: str, step: str | None) -> ProbeResult:
        return ProbeResult(
            cause, detail, step, facts.gpu_name, facts.gpu_count, facts.vram_mb,
            facts.driver_version, facts.disk_mb_per_s, tuple(raw),
        )  # fmt: skip

    for name in STEP_NAMES:
        out = transcript.step(name)
        if out is None:
            missing = f"the {name} step did not run"
            return None if partial else result(Verdict.UNKNOWN, missing, name)
        raw.append(_excerpt(name, out))
        decided = _ssh_failure(out)
        if decided is None and name == "gpu":
            decided = _read_gpu(out, facts, vram_floor_mb)
        elif decided is None and name == "cuda":
            decided = _read_cuda(out, facts)
        elif decided is None:
            decided = _read_disk(out, facts, disk_floor_mb_per_s)
        if decided is not None:
            return result(*decided, name)
    if partial:
        return None
    return result(
        Verdict.PASS,
        f"{facts.gpu_count}x {facts.gpu_name} ({facts.vram_mb} MiB), CUDA on "
        f"{facts.cuda_devices} devices, disk {facts.disk_mb_per_s:.1f} MB/s",
        None,
    )


def judge(transcript: Transcript, *, vram_floor_mb: int, disk_floor_mb_per_s: float) -> ProbeResult:
    """The verdict on a box from its probe transcript: the first failing step decides (M1).

    A step that did not run, with no failure before it, is UNKNOWN: never a pass.
    """
    decided = _walk(transcript, vram_floor_mb, disk_floor_mb_per_s, partial=False)
    assert decided is not None  # a complete walk always decides
    return decided


def first_failure(
    transcript: Transcript, *, vram_floor_mb: int, disk_floor_mb_per_s: float
) -> ProbeResult | None:
    """The failure among the steps that ran so far, or None: the probe stops at the first."""
    return _walk(transcript, vram_floor_mb, disk_floor_mb_per_s, partial=True)
