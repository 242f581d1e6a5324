"""The market's value types: a closed status enum with two distinct unknowns, frozen values, and
the probe's verdicts with the one host-fault set (M2)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuops.model import (
    HOST_FAULTS,
    Instance,
    InstanceStatus,
    Offer,
    SshKey,
    StepOutput,
    Verdict,
    is_host_fault,
)

# Every actual_status Vast documents (vastai 1.9.1 SKILL.md, "Instance status values").
WIRE = {
    None: InstanceStatus.PROVISIONING,
    "created": InstanceStatus.CREATED,
    "loading": InstanceStatus.LOADING,
    "running": InstanceStatus.RUNNING,
    "stopped": InstanceStatus.STOPPED,
    "frozen": InstanceStatus.FROZEN,
    "exited": InstanceStatus.EXITED,
    "rebooting": InstanceStatus.REBOOTING,
    "unknown": InstanceStatus.NO_HEARTBEAT,
    "offline": InstanceStatus.OFFLINE,
}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM+IjJ97AMeE89dcToyadVmtlBR6Ujcoy6iaia4CUO7g"


def offer(**changes: object) -> Offer:
    values: dict[str, object] = dict(
        id=18432117,
        machine_id=31218,
        host_id=104522,
        gpu_name="RTX 4090",
        num_gpus=1,
        gpu_ram=24564,
        dph_total=0.3712,
        reliability=0.9964,
        disk_bw=2875.4,
        inet_down=848.9,
        cuda_max_good=12.4,
        geolocation="Texas, US",
        verification="verified",
    )
    values.update(changes)
    return Offer(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(("raw", "member"), list(WIRE.items()))
def test_every_documented_actual_status_maps_to_its_own_member(raw, member):
    """Each documented wire value, null included, has exactly one member."""
    assert InstanceStatus.from_wire(raw) is member


def test_the_enum_is_closed_over_the_documented_statuses_plus_one_unknown():
    """Adding a member without deciding what it means fails here."""
    assert set(InstanceStatus) == set(WIRE.values()) | {InstanceStatus.UNKNOWN}
    assert len(set(WIRE.values())) == len(WIRE)


def test_vast_unknown_is_no_heartbeat_and_never_our_unknown():
    """Vast's "unknown" (no heartbeat) and a string we never saw are two different members."""
    assert InstanceStatus.from_wire("unknown") is InstanceStatus.NO_HEARTBEAT
    assert InstanceStatus.from_wire("migrating") is InstanceStatus.UNKNOWN
    assert InstanceStatus.NO_HEARTBEAT is not InstanceStatus.UNKNOWN
    assert InstanceStatus.UNKNOWN.value not in {raw for raw in WIRE if raw}


@pytest.mark.parametrize(
    "raw", ["migrating", "Running", "RUNNING", "", "provisioning", "unrecognised"]
)
def test_a_string_never_seen_on_the_wire_is_unknown(raw):
    """Case matters and our own names are not wire strings: all of these are UNKNOWN."""
    assert InstanceStatus.from_wire(raw) is InstanceStatus.UNKNOWN


def test_surrounding_whitespace_is_ignored_like_the_sdk_strips_it():
    """vastai strips string values of list rows; a padded "running" is still running."""
    assert InstanceStatus.from_wire(" running\n") is InstanceStatus.RUNNING


@given(st.text())
def test_any_text_maps_to_a_member_without_raising(raw):
    """No provider string can crash the parse; unseen strings are UNKNOWN."""
    member = InstanceStatus.from_wire(raw)
    assert member is WIRE.get(raw.strip(), InstanceStatus.UNKNOWN)


def test_the_poll_trap_is_exactly_exited_no_heartbeat_and_offline():
    """M10: these never reach running (SKILL.md "Poll loop warning"); nothing else is dead."""
    terminal = {member for member in InstanceStatus if member.is_terminal_failure}
    assert terminal == {InstanceStatus.EXITED, InstanceStatus.NO_HEARTBEAT, InstanceStatus.OFFLINE}


def test_an_unrecognised_status_is_neither_dead_nor_booting_nor_running():
    """M10: the core must decide on UNKNOWN explicitly; no helper guesses for it."""
    unknown = InstanceStatus.UNKNOWN
    assert not (unknown.is_terminal_failure or unknown.is_booting or unknown.is_running)


def test_booting_covers_the_way_to_running_and_only_that():
    """Provisioning, created, loading and rebooting are on the way; running is not booting."""
    booting = {member for member in InstanceStatus if member.is_booting}
    assert booting == {
        InstanceStatus.PROVISIONING,
        InstanceStatus.CREATED,
        InstanceStatus.LOADING,
        InstanceStatus.REBOOTING,
    }
    assert [m for m in InstanceStatus if m.is_running] == [InstanceStatus.RUNNING]


def test_offers_compare_and_hash_without_their_raw_body():
    """The raw body rides along for the decision log but never changes identity."""
    a = offer(raw={"id": 18432117, "score": 201.4})
    b = offer(raw={})

    assert a == b
    assert hash(a) == hash(b)
    assert "score" not in repr(a)


def test_values_are_frozen():
    """Value types cannot be changed after parsing."""
    instance = Instance(
        instance_id="1234568",
        label="gpuops:intent-7f3c2a91",
        actual_status=InstanceStatus.RUNNING,
        actual_status_raw="running",
        ssh_host="ssh4.vast.ai",
        ssh_port=30568,
        public_ipaddr="203.0.113.17",
        direct_ssh_port=20000,
        machine_id=31218,
        gpu_name="RTX 4090",
        dph_total=0.3712,
        start_date=1796029925.0,
    )

    for value, name in (
        (offer(), "dph_total"),
        (instance, "actual_status"),
        (SshKey(1, KEY), "id"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, None)


def test_an_ssh_key_matches_on_type_and_material_not_on_its_comment():
    """M9: Vast may keep a different comment or trailing newline; the key is the same."""
    registered = SshKey(40211, KEY + " gpuops@rig")

    assert registered.matches(KEY + " other-comment\n")
    assert registered.matches("  " + KEY)
    assert not registered.matches(KEY[:-4] + "AAAA gpuops@rig")
    assert not registered.matches("ssh-rsa " + KEY.split()[1])
    assert not SshKey(1, "").matches("")


def test_auth_and_reachability_are_never_host_faults_but_may_pass_later():
    """M2: an SSH auth failure is not a host fault; half the SSH failures passed another time."""
    assert not Verdict.SSH_AUTH.host_fault and Verdict.SSH_AUTH.retryable
    assert not Verdict.SSH_UNREACHABLE.host_fault and Verdict.SSH_UNREACHABLE.retryable


def test_the_host_faults_are_exactly_the_hardware_causes():
    """M2: only NO_GPU, LOW_VRAM, SLOW_DISK and CUDA_BROKEN may quarantine a machine."""
    faults = {verdict for verdict in Verdict if verdict.host_fault}

    assert faults == HOST_FAULTS
    assert faults == {Verdict.NO_GPU, Verdict.LOW_VRAM, Verdict.SLOW_DISK, Verdict.CUDA_BROKEN}
    assert not Verdict.UNKNOWN.host_fault and not Verdict.UNKNOWN.retryable


def test_only_the_retryable_verdicts_are_the_two_ssh_troubles_that_pass_later():
    """M2: a changed host key, a pass, a host fault or an unknown is never retried."""
    retried = {verdict for verdict in Verdict if verdict.retryable}

    assert retried == {Verdict.SSH_AUTH, Verdict.SSH_UNREACHABLE}
    assert not retried & HOST_FAULTS


def test_only_real_host_faults_are_quarantinable():
    """M2: the recorded causes of the host faults, and nothing else: ssh-auth (our key) and
    pass never, nor a failure that is no verdict at all ("taken", "boot-timeout")."""
    for cause in ("no-gpu", "low-vram", "slow-disk", "cuda-broken"):
        assert is_host_fault(cause)
    for cause in ("ssh-auth", "ssh-unreachable", "ssh-host-key-changed", "pass", "unknown"):
        assert not is_host_fault(cause)
    for cause in ("taken", "boot-timeout", "vanished", "NO-GPU", "no-gpu ", ""):
        assert not is_host_fault(cause)


def test_a_verdict_is_a_host_fault_exactly_when_its_recorded_cause_is():
    """The enum's property and the recorded cause's test are one set, read two ways."""
    for verdict in Verdict:
        assert verdict.host_fault is is_host_fault(verdict.value), verdict


def test_a_step_output_defaults_to_no_output_and_no_timeout():
    """A step that ran and printed nothing: empty text, not timed out; values, frozen."""
    out = StepOutput(0)

    assert (out.exit_code, out.stdout, out.stderr, out.timed_out) == (0, "", "", False)
    assert StepOutput(None, timed_out=True) == StepOutput(None, "", "", True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.exit_code = 1  # type: ignore[misc]
