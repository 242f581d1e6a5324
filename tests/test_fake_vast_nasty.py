"""FakeVast's nastier scenario fields, each judged on the fake itself: an eventually consistent
list (``list_lag_s``), a lagging show (``show_lag_s``), a host key that changes during a box's
life (``faults.host_key_changes``), and a destroy that cuts an ssh command in flight.

gpuops under each is judged in tests/test_nasty_providers.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fakes.scenario import HostKeyChange, ScenarioError, parse_scenario
from fakes.ssh import hostkeys, replay, sandbox
from fakes.ssh.boxes import load_table, write_identity
from fakes.vast import FakeClock, FakeVast
from fakes.vast.wire import recorded
from gpuops import timing
from gpuops.market.probing import probe
from gpuops.market.select import Filter
from gpuops.model import InstanceStatus, Verdict
from gpuops.providers.ssh import SshEndpoint, known_hosts_path, ssh_argv
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings
from gpuops.clock import SYSTEM, WithSleep

ROOT = Path(__file__).resolve().parent.parent
FAKE_SSH = ROOT / "fakes" / "ssh" / "ssh"
BASE = "https://console.vast.ai"
KEY = "fake-key-T1"
BOOT_S = 30.0
FLOORS = {"vram_floor_mb": Filter().vram_floor_mb, "disk_floor_mb_per_s": 500.0}


def offer(offer_id: int) -> dict[str, object]:
    return {
        "id": offer_id,
        "machine_id": 50000 + offer_id,
        "gpu_name": "RTX 4090",
        "gpu_ram": 24564,
        "dph_total": 0.30 + offer_id / 1000,
        "reliability": 0.995,
        "disk_bw": 2500.0,
    }


def scenario(**vast: object) -> dict[str, object]:
    return {
        "vast": {
            "api_key": KEY,
            "boot": {"provisioning_s": 10, "loading_s": 20},
            "offers": [offer(1), offer(2)],
            **vast,
        }
    }


@pytest.fixture
def make(tmp_path):
    def build(doc: dict[str, object]) -> FakeVast:
        return FakeVast(parse_scenario(doc), clock=FakeClock(), state_dir=tmp_path / "state")

    return build


@pytest.fixture
def vast() -> VastAdapter:
    return VastAdapter(api_key=KEY, base_url=BASE, clock=WithSleep(SYSTEM, lambda s: None))


@pytest.fixture
def fake_ssh(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUOPS_SSH", str(FAKE_SSH))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_PYTHON", sys.executable)
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(tmp_path / "state" / "boxes.yaml"))
    identity = tmp_path / "id_ed25519"
    write_identity(identity, recorded("ssh_keys_list")[0]["key"])  # the default account key
    yield identity
    sandbox.stop_all(tmp_path / "state" / "boxes.yaml")


def rent(vast: VastAdapter, offer_id: int = 1, label: str = "gpuops:intent-aa11") -> str:
    return vast.create(offer_id, label=label, image="pytorch/pytorch", disk_gb=20.0)


# --- an eventually consistent list, a lagging show ----------------------------------------------
def test_the_list_leaves_out_a_box_younger_than_list_lag_while_show_finds_it(make, vast):
    """list_lag_s: the newest box is missing from the list (by label too) until it is that old."""
    fake = make(scenario(list_lag_s=12))
    with fake.activate(BASE):
        older = rent(vast, 1, "gpuops:old")
        fake.advance(20.0)
        newest = rent(vast, 2, "gpuops:new")
        fake.advance(11.0)
        early = [i.instance_id for i in vast.list_instances()]
        early_by_label = vast.list_instances(label="gpuops:new")
        shown = vast.show(newest)
        fake.advance(1.0)
        later = [i.instance_id for i in vast.list_instances(label="gpuops:new")]

    assert early == [older] and early_by_label == []
    assert shown is not None and shown.label == "gpuops:new"
    assert later == [newest]


def test_show_answers_the_state_show_lag_seconds_old_and_the_gone_box_that_long(make, vast):
    """show_lag_s: show reports the previous state: loading after running began, and a
    destroyed box still there for show_lag_s; the list does not lag."""
    fake = make(scenario(show_lag_s=8))
    with fake.activate(BASE):
        box = rent(vast)
        fake.advance(BOOT_S)
        still_loading = vast.show(box)
        fake.advance(8.0)
        running = vast.show(box)
        vast.destroy(box)
        listed = vast.list_instances()
        fake.advance(7.9)
        lagging = vast.show(box)
        fake.advance(0.1)
        gone = vast.show(box)

    assert still_loading is not None and still_loading.actual_status is InstanceStatus.LOADING
    assert running is not None and running.actual_status is InstanceStatus.RUNNING
    assert listed == []
    assert lagging is not None and lagging.actual_status is InstanceStatus.RUNNING
    assert gone is None


def test_a_new_box_under_show_lag_is_shown_provisioning_never_missing(make, vast):
    """show_lag_s never hides a box that exists: before its lag it is shown as just created."""
    fake = make(scenario(show_lag_s=60))
    with fake.activate(BASE):
        box = rent(vast)
        fake.advance(BOOT_S)
        shown = vast.show(box)

    assert shown is not None and shown.actual_status is InstanceStatus.PROVISIONING


# --- a host key that changes during the box's life ----------------------------------------------
def _probe(fake: FakeVast, vast: VastAdapter, box_id: str, identity: Path, state: Path):
    with fake.activate(BASE):
        box = vast.show(box_id)
    assert box is not None
    return probe(
        SshEndpoint(box.ssh_host, box.ssh_port),
        client=Settings.from_environ().ssh(),
        identity_file=identity,
        known_hosts=known_hosts_path(state, box_id),
        **FLOORS,
    )


def test_a_timed_host_key_change_gives_the_running_box_a_new_key(make, vast, fake_ssh, tmp_path):
    """host_key_changes after_s: the key pinned on first contact is refused once the change
    lands, with OpenSSH's own block naming the new key's fingerprint."""
    fake = make(scenario(faults={"host_key_changes": [{"offer": 1, "after_s": 600}]}))
    with fake.activate(BASE):
        box_id = rent(vast)
        fake.advance(BOOT_S)
    before = _probe(fake, vast, box_id, fake_ssh, tmp_path / "gpuops")
    fake.advance(599.0)
    still = _probe(fake, vast, box_id, fake_ssh, tmp_path / "gpuops")
    fake.advance(1.0)
    after = _probe(fake, vast, box_id, fake_ssh, tmp_path / "gpuops")

    assert before.passed and still.passed
    assert after.cause is Verdict.SSH_HOST_KEY_CHANGED
    new_key = hostkeys.public_key(f"vast-{box_id}-rekeyed")
    assert hostkeys.fingerprint(new_key) in after.raw[0]


def test_a_host_key_change_after_n_connections_changes_it_mid_probe(make, vast, fake_ssh, tmp_path):
    """host_key_changes after_connections: 1: the probe's first step pins the first key, the
    second sees another and is refused; the box's sandbox stays the same box's."""
    fake = make(scenario(faults={"host_key_changes": [{"offer": 1, "after_connections": 1}]}))
    with fake.activate(BASE):
        box_id = rent(vast)
        fake.advance(BOOT_S)

    result = _probe(fake, vast, box_id, fake_ssh, tmp_path / "gpuops")

    assert result.cause is Verdict.SSH_HOST_KEY_CHANGED and result.step == "cuda"
    table = load_table(fake.box_table)
    assert {b.sandbox for b in table.values()} == {f"vast-{box_id}"}


def test_a_host_key_change_aimed_at_one_instance_leaves_the_others_alone(make, vast):
    """host_key_changes names an offer or an instance; only that box's entry gets it."""
    fake = make(scenario(faults={"host_key_changes": [{"instance": 1234569, "after_s": 0}]}))
    with fake.activate(BASE):
        first, second = rent(vast, 1), rent(vast, 2)
        fake.advance(BOOT_S)

    seeds = {b.host_key for b in load_table(fake.box_table).values()}
    assert (first, second) == ("1234568", "1234569")
    assert seeds == {"vast-1234568", "vast-1234569-rekeyed"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"after_s": 5}, r"host_key_changes\[0\]\.offer: give exactly one of 'offer' or"),
        ({"offer": 1}, r"host_key_changes\[0\]\.after_s: give exactly one of 'after_s' or"),
        ({"offer": 9, "after_s": 5}, r"host_key_changes\[0\]\.offer: no offer 9"),
        ({"offer": 1, "after_connections": 0}, r"after_connections: 0 must be at least 1"),
        ({"offer": 1, "after_s": -1}, r"after_s: -1 must be at least 0"),
    ],
)
def test_a_bad_host_key_change_is_refused_naming_the_field(change, message):
    """A typo in a host key change is a ScenarioError naming its path."""
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(scenario(faults={"host_key_changes": [change]}), source="bad.yaml")


@pytest.mark.parametrize(("name", "value"), [("list_lag_s", -1), ("show_lag_s", "soon")])
def test_a_bad_lag_is_refused_naming_the_field(name, value):
    """list_lag_s and show_lag_s are non-negative numbers."""
    with pytest.raises(ScenarioError, match=rf"vast\.{name}"):
        parse_scenario(scenario(**{name: value}), source="bad.yaml")


def test_the_new_fields_parse_to_their_values():
    """The lags and host key changes reach the model as written."""
    parsed = parse_scenario(
        scenario(
            list_lag_s=3,
            show_lag_s=4,
            faults={"host_key_changes": [{"offer": 2, "after_connections": 2}]},
        )
    ).vast

    assert (parsed.list_lag_s, parsed.show_lag_s) == (3.0, 4.0)
    assert parsed.host_key_changes == (HostKeyChange(offer=2, after_connections=2),)


# --- a destroy cuts an ssh command in flight ----------------------------------------------------
def test_a_destroy_cuts_a_running_ssh_command_as_openssh_ends_when_the_remote_goes(
    make, vast, fake_ssh, tmp_path
):
    """The command in flight is killed, the client prints OpenSSH's captured remote-closed line
    and exits 255; a new connection then fails to connect."""
    fake = make(scenario())
    with fake.activate(BASE):
        box_id = rent(vast)
        fake.advance(BOOT_S)
        box = vast.show(box_id)
    assert box is not None
    known = known_hosts_path(tmp_path / "gpuops", box_id)
    endpoint = SshEndpoint(box.ssh_host, box.ssh_port)
    argv = ssh_argv(
        endpoint, "echo started; echo $$ > pid; exec sleep 600", identity_file=fake_ssh,
        known_hosts=known, program=str(FAKE_SSH),
    )  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"started\n"
        with fake.activate(BASE):
            vast.destroy(box_id)
        out, err = proc.communicate(timeout=timing.SSH_COMMAND_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    box_dir = sandbox.sandbox_dir(fake.box_table, f"vast-{box_id}")
    sleeper = int((box_dir / "pid").read_text())
    again = subprocess.run(
        ssh_argv(
            endpoint, "echo hello", identity_file=fake_ssh, known_hosts=known, program=str(FAKE_SSH)
        ),
        capture_output=True,
        check=False,
    )

    recorded = replay.load("openssh-remote-closed")
    assert proc.returncode == recorded.exit_code == 255
    assert err.decode() == f"Connection to {box.ssh_host} closed by remote host.\r\n"
    assert not Path(f"/proc/{sleeper}").exists()
    assert again.returncode == 255 and b"Connection timed out" in again.stderr
    assert again.stdout == b""


def test_a_command_that_ends_before_the_destroy_keeps_its_exit_code(make, vast, fake_ssh, tmp_path):
    """Only a command in flight is cut: one that ended first keeps its own exit code."""
    fake = make(scenario())
    with fake.activate(BASE):
        box_id = rent(vast)
        fake.advance(BOOT_S)
        box = vast.show(box_id)
    assert box is not None
    known = known_hosts_path(tmp_path / "gpuops", box_id)
    argv = ssh_argv(
        SshEndpoint(box.ssh_host, box.ssh_port), "echo done; exit 3", identity_file=fake_ssh,
        known_hosts=known, program=str(FAKE_SSH),
    )  # fmt: skip

    done = subprocess.run(argv, capture_output=True, check=False)

    assert (done.returncode, done.stdout, done.stderr) == (3, b"done\n", b"")
