"""The SSH adapter on the real subprocess path, against the fake ssh program (M1, M2, H3): its\nargv and runs, and the probe loop (market/probing.py) through them."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from fakes.ssh import hostkeys
from fakes.ssh.boxes import TableState
from gpuops import timing
from gpuops.errors import UsageError
from gpuops.market.probe import CUDA_COMMAND, DISK_COMMAND, Transcript, judge
from gpuops.market.probing import probe
from gpuops.model import StepOutput, Verdict
from gpuops.providers import ssh
from gpuops.providers.ssh import SshEndpoint, known_hosts_path, run_command, ssh_argv
from gpuops.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
FAKE_SSH = ROOT / "fakes" / "ssh" / "ssh"
FLOORS = {"vram_floor_mb": 40000, "disk_floor_mb_per_s": 500.0}
HOST = "ssh4.vast.ai"
# The one real timeout a test waits out: the fake "hang" box never answers.
SHORT_TIMEOUT_S = 0.3


class FakeBoxes:
    """The fake ssh program's box table in tmp_path, and a probe helper against it."""

    def __init__(self, tmp_path: Path) -> None:
        self.table = tmp_path / "boxes.yaml"
        self.state_dir = tmp_path / "state"
        self.identity = tmp_path / "id_ed25519"
        self.identity.write_text("not a real key\n")
        self.write({})

    def write(self, boxes: dict[str, object]) -> None:
        self.table.write_text(yaml.safe_dump({"boxes": boxes}))

    def calls(self) -> list[dict[str, object]]:
        return TableState(self.table).read_calls()

    def known_hosts(self, box_id: str) -> Path:
        return known_hosts_path(self.state_dir, box_id)

    def probe(self, port: int, box_id: str | None = None, **kwargs: object):
        return probe(
            SshEndpoint(HOST, port),
            client=client(),
            identity_file=self.identity,
            known_hosts=self.known_hosts(box_id or f"box{port}"),
            **{**FLOORS, **kwargs},  # type: ignore[arg-type]
        )


def client() -> ssh.SshClient:
    """The ssh client a command would get from this process's environment (set by the test)."""
    return Settings.from_environ().ssh()


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    """GPUOPS_SSH points at fakes/ssh/ssh, with an empty box table in tmp_path."""
    monkeypatch.setenv("GPUOPS_SSH", str(FAKE_SSH))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_PYTHON", sys.executable)
    boxes = FakeBoxes(tmp_path)
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(boxes.table))
    return boxes


@pytest.mark.parametrize(
    ("fate", "cause"),
    [
        ("healthy", Verdict.PASS),
        ("ssh-auth", Verdict.SSH_AUTH),
        ("unreachable", Verdict.SSH_UNREACHABLE),
        ("host-key-changed", Verdict.SSH_HOST_KEY_CHANGED),
        ("no-gpu", Verdict.NO_GPU),
        ("low-vram", Verdict.LOW_VRAM),
        ("cuda-broken", Verdict.CUDA_BROKEN),
        ("slow-disk", Verdict.SLOW_DISK),
        ("replay:openssh-kex-reset", Verdict.SSH_UNREACHABLE),
        ("replay:nvidia-smi-not-installed", Verdict.NO_GPU),
    ],
)
def test_each_fate_of_a_fake_box_gets_its_cause_through_real_ssh_argv(fake_ssh, fate, cause):
    """M1: a probe over the subprocess path names the fate the box was given."""
    fake_ssh.write({f"{HOST}:2001": fate})

    result = fake_ssh.probe(2001)

    assert result.cause is cause, result.detail


def test_the_argv_is_batch_mode_with_timing_timeouts_and_a_per_box_known_hosts(fake_ssh):
    """M6/security: BatchMode, ConnectTimeout from timing.py, accept-new, the box's own file."""
    fake_ssh.write({f"{HOST}:2002": "healthy"})

    fake_ssh.probe(2002, box_id="31337")

    argvs = [call["argv"] for call in fake_ssh.calls()]
    assert len(argvs) == 3
    kh = fake_ssh.state_dir / "ssh" / "known_hosts" / "31337"
    for argv in argvs:
        options = {argv[i + 1] for i, flag in enumerate(argv) if flag == "-o"}
        assert {
            "BatchMode=yes",
            f"ConnectTimeout={int(timing.SSH_CONNECT_TIMEOUT_S)}",
            "StrictHostKeyChecking=accept-new",
            f"UserKnownHostsFile={kh}",
            "LogLevel=ERROR",
        } <= options
        assert argv[argv.index("-p") + 1] == "2002"
        assert argv[argv.index("-i") + 1] == str(fake_ssh.identity)
        assert argv[-2:-1] == [f"root@{HOST}"] and argv[-3] == "--"


def test_each_step_is_bounded_by_the_ssh_command_timeout(fake_ssh):
    """M6: every ssh call gets SSH_COMMAND_TIMEOUT_S while the probe budget allows it."""
    fake_ssh.write({f"{HOST}:2003": "healthy"})
    seen: list[float] = []

    def runner(argv, timeout_s):
        seen.append(timeout_s)
        return run_command(argv, timeout_s, os.environ)

    result = fake_ssh.probe(2003, runner=runner)

    assert result.passed
    assert seen == [timing.SSH_COMMAND_TIMEOUT_S] * 3


def test_the_probe_stops_at_the_first_failure(fake_ssh):
    """M1: no disk test on a box without a GPU, nothing after an SSH failure."""
    fake_ssh.write({f"{HOST}:2005": "no-gpu", f"{HOST}:2006": "ssh-auth"})

    fake_ssh.probe(2005)
    fake_ssh.probe(2006)

    assert [call["box"] for call in fake_ssh.calls()] == [f"{HOST}:2005", f"{HOST}:2006"]


def test_a_transient_auth_failure_passes_on_a_later_attempt(fake_ssh):
    """M2: an auth failure is not a host fault; the same box passes once its key lands."""
    fake_ssh.write({f"{HOST}:2007": "ssh-auth-transient:2"})

    first, second, third = (fake_ssh.probe(2007) for _ in range(3))

    assert [first.cause, second.cause] == [Verdict.SSH_AUTH, Verdict.SSH_AUTH]
    assert not first.cause.host_fault
    assert third.passed


def test_a_changed_host_key_is_refused_and_stays_refused(fake_ssh):
    """Security bar: the key pinned on first contact stays; a new key is refused, not retried."""
    fake_ssh.write({f"{HOST}:2008": {"fate": "healthy", "host_key": "first"}})
    assert fake_ssh.probe(2008).passed
    pinned = fake_ssh.known_hosts("box2008").read_text()
    fake_ssh.write({f"{HOST}:2008": {"fate": "healthy", "host_key": "rebuilt"}})

    again, once_more = fake_ssh.probe(2008), fake_ssh.probe(2008)

    assert again.cause is once_more.cause is Verdict.SSH_HOST_KEY_CHANGED
    assert f"Host key for [{HOST}]:2008 has changed" in again.detail
    assert fake_ssh.known_hosts("box2008").read_text() == pinned
    assert hostkeys.fingerprint(hostkeys.public_key("rebuilt")) in again.raw[0]


def test_a_reused_proxy_port_is_no_changed_key_when_each_box_has_its_own_file(fake_ssh):
    """Vast reuses proxy host:port pairs across instances: pinning is per box, not per port."""
    fake_ssh.write({f"{HOST}:2009": {"fate": "healthy", "host_key": "instance-1"}})
    assert fake_ssh.probe(2009, box_id="1001").passed
    fake_ssh.write({f"{HOST}:2009": {"fate": "healthy", "host_key": "instance-2"}})

    result = fake_ssh.probe(2009, box_id="1002")

    assert result.passed


def test_a_known_hosts_file_is_private_and_belongs_to_one_box(tmp_path):
    """DESIGN §4: state is 0700/0600; a box id that could escape the folder is refused."""
    path = known_hosts_path(tmp_path, "12345678")

    assert path == tmp_path / "ssh" / "known_hosts" / "12345678"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with pytest.raises(UsageError, match="box id"):
        known_hosts_path(tmp_path, "../../etc")


def test_a_hung_command_times_out_as_unreachable_and_is_killed(fake_ssh):
    """M2: a subprocess timeout is SSH_UNREACHABLE 'timed out', and the ssh process is gone."""
    fake_ssh.write({f"{HOST}:2010": "hang"})
    seen: list[list[str]] = []

    def runner(argv, timeout_s):
        seen.append(list(argv))
        return run_command(argv, SHORT_TIMEOUT_S, os.environ)

    result = fake_ssh.probe(2010, runner=runner)

    assert (result.cause, result.detail, result.step) == (
        Verdict.SSH_UNREACHABLE,
        "timed out",
        "gpu",
    )
    assert len(seen) == 1
    assert _processes_mentioning(str(fake_ssh.known_hosts("box2010"))) == []


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if entry.name.isdigit() and text.encode() in cmdline:
            found.append(int(entry.name))
    return found


def test_the_ssh_child_never_sees_api_keys_or_tokens(fake_ssh, monkeypatch):
    """H3: API keys stay out of the ssh child's environment and argv."""
    monkeypatch.setenv("VAST_API_KEY", "sk-live-do-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    fake_ssh.write({f"{HOST}:2011": "healthy"})

    fake_ssh.probe(2011)

    for call in fake_ssh.calls():
        assert call["secret_env"] == []
        assert "sk-live-do-not-leak" not in " ".join(call["argv"])  # type: ignore[arg-type]
    assert ssh.child_env({"SSH_AUTH_SOCK": "x", "GH_TOKEN": "y"}) == {"SSH_AUTH_SOCK": "x"}


def test_the_fake_is_loud_about_a_box_it_does_not_know(fake_ssh):
    """Loud fakes: an unknown box is UNKNOWN with the list of known boxes, never a pass."""
    fake_ssh.write({f"{HOST}:2012": "healthy"})

    result = fake_ssh.probe(2099)

    assert result.cause is Verdict.UNKNOWN
    assert "fake-ssh: no box at ssh4.vast.ai:2099; known: ssh4.vast.ai:2012" in result.detail


def test_a_command_that_is_not_a_probe_step_runs_for_real_in_the_box_sandbox(fake_ssh):
    """The fake box runs any other command under sh in its own sandbox $HOME, after connect
    and auth; a box that refuses auth runs nothing."""
    fake_ssh.write({f"{HOST}:2013": "healthy", f"{HOST}:2014": "ssh-auth"})
    kh = fake_ssh.known_hosts("x")
    script = 'echo "$HOME" > where; printf made; echo oops >&2; exit 3'

    ok = client().run(
        client().argv(
            SshEndpoint(HOST, 2013), script, identity_file=fake_ssh.identity, known_hosts=kh
        ),
        timing.SSH_COMMAND_TIMEOUT_S,
    )
    refused = client().run(
        client().argv(
            SshEndpoint(HOST, 2014), script, identity_file=fake_ssh.identity, known_hosts=kh
        ),
        timing.SSH_COMMAND_TIMEOUT_S,
    )

    home = fake_ssh.table.parent / "sandboxes" / f"{HOST}_2013".replace(":", "_")
    assert ok == StepOutput(3, "made", "oops\n")
    assert (home / "where").read_text().strip() == str(home)
    assert refused.exit_code == 255 and "Permission denied (publickey)" in refused.stderr
    assert not (fake_ssh.table.parent / "sandboxes" / f"{HOST}_2014").exists()


def test_a_gpu_from_the_box_table_is_what_nvidia_smi_lists(fake_ssh):
    """The table's GPU model and VRAM are rendered in nvidia-smi's CSV form (C.2)."""
    gpu = {"name": "NVIDIA L40S", "vram_mb": 46068, "count": 4}
    fake_ssh.write({f"{HOST}:2015": {"fate": "healthy", "gpu": gpu}})

    result = fake_ssh.probe(2015)

    assert result.passed
    assert (result.gpu_name, result.gpu_count, result.vram_mb) == ("NVIDIA L40S", 4, 46068)


def test_a_missing_ssh_program_is_a_usage_error(monkeypatch, tmp_path):
    """A bad GPUOPS_SSH is our set-up's fault, never a verdict on the box."""
    monkeypatch.setenv("GPUOPS_SSH", str(tmp_path / "no-such-ssh"))

    with pytest.raises(UsageError, match="GPUOPS_SSH"):
        probe(
            SshEndpoint(HOST, 22),
            client=client(),
            identity_file=tmp_path / "k",
            known_hosts=tmp_path / "kh",
            **FLOORS,
        )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "port", "user"),
    [
        ("-oProxyCommand=touch_x", 22, "root"),
        (HOST, 0, "root"),
        (HOST, 22, "-l"),
        ("a b", 22, "root"),
    ],
)
def test_an_endpoint_ssh_would_read_as_an_option_is_refused(host, port, user):
    """A provider-supplied host or user starting with '-' never reaches ssh's argv."""
    with pytest.raises(UsageError):
        SshEndpoint(host, port, user)


@pytest.mark.parametrize("name", ["with space", "percent%d", "~tilde"])
def test_a_path_ssh_would_reinterpret_is_refused(tmp_path, name):
    """ssh splits UserKnownHostsFile on spaces and expands % and ~: it would pin elsewhere."""
    with pytest.raises(UsageError, match="reinterpret"):
        ssh_argv(
            SshEndpoint(HOST, 22),
            "true",
            identity_file=tmp_path / "k",
            known_hosts=tmp_path / name,
            program="ssh",
        )


def test_the_disk_step_exits_with_dds_status_and_leaves_no_file(tmp_path):
    """provider-formats C.3: the probe reports dd's own exit code and removes its test file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_dd = bin_dir / "dd"
    fake_dd.write_text(
        '#!/bin/sh\nfor a; do case $a in of=*) : > "${a#of=}";; esac; done\n'
        'echo "dd: error writing: No space left on device" >&2\nexit 1\n'
    )
    fake_dd.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    done = subprocess.run(
        ["sh", "-c", DISK_COMMAND], cwd=tmp_path, env=env, capture_output=True, text=True
    )

    assert done.returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


@pytest.fixture(scope="module")
def stub_libcuda(tmp_path_factory):
    """fakes/ssh/libcuda_stub.c built as libcuda.so.1; skipped where no C compiler exists."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stub CUDA driver")
    out = tmp_path_factory.mktemp("libcuda")
    source = ROOT / "fakes" / "ssh" / "libcuda_stub.c"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(out / "libcuda.so.1"), str(source)], check=True
    )
    return out


@pytest.mark.parametrize(
    ("env", "cause", "line"),
    [
        ({"FAKE_CUDA_DEVICES": "8"}, Verdict.PASS, "GPUOPS_CUDA_OK devices=8"),
        (
            {"FAKE_CUDA_INIT": "100"},
            Verdict.CUDA_BROKEN,
            "step=cuInit code=100 name=CUDA_ERROR_NO_DEVICE",
        ),
        (
            {"FAKE_CUDA_ALLOC": "2"},
            Verdict.CUDA_BROKEN,
            "step=cuMemAlloc code=2 name=CUDA_ERROR_OUT_OF_MEMORY",
        ),
        ({"FAKE_CUDA_DEVICES": "0"}, Verdict.CUDA_BROKEN, "name=no_devices"),
    ],
)
def test_the_cuda_check_program_judges_a_stub_driver(stub_libcuda, env, cause, line):
    """M1: the CUDA step's own program, run for real against a stub libcuda.so.1, says why."""
    python_dir = str(Path(sys.executable).parent)
    full_env = {
        **os.environ,
        **env,
        "LD_LIBRARY_PATH": str(stub_libcuda),
        "PATH": f"{python_dir}:{os.environ['PATH']}",
    }
    done = subprocess.run(["sh", "-c", CUDA_COMMAND], env=full_env, capture_output=True, text=True)
    transcript = Transcript(
        gpu=StepOutput(0, "NVIDIA H100 80GB HBM3, 81559, 550.90.07\n"),
        cuda=StepOutput(done.returncode, done.stdout, done.stderr),
        disk=StepOutput(0, "", "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.5 s, 2.1 GB/s\n"),
    )

    result = judge(transcript, **FLOORS)  # type: ignore[arg-type]

    assert result.cause is cause, done.stderr
    assert line in done.stdout


def test_a_signal_while_the_ssh_starts_never_leaves_the_child_running(monkeypatch):
    """A follow's Ctrl-C or SIGTERM raises from its handler on the main thread; arriving while
    the ssh child is being started (after the fork, before Popen returns), it must not leave
    the child running with nobody holding it: spawn ends the child's group, then re-raises."""
    main = threading.get_ident()
    made: list[subprocess.Popen[bytes]] = []

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    class Interrupted(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)
            signal.pthread_kill(main, signal.SIGUSR1)  # the child exists: now the signal
            time.sleep(0.2)  # where a handler on this thread would raise, inside Popen

    before = signal.signal(signal.SIGUSR1, stop)
    monkeypatch.setattr(ssh.subprocess, "Popen", Interrupted)
    try:
        with pytest.raises(Stop):
            ssh.spawn(["sleep", "30"], {"PATH": os.environ["PATH"]})
    finally:
        signal.signal(signal.SIGUSR1, before)
    (child,) = made
    assert child.returncode is not None  # killed and reaped before the exception went on
    assert not Path(f"/proc/{child.pid}").exists()
