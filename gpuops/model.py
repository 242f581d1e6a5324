"""Frozen value types and closed enums of the market (Vast.ai), in the provider's own field names.

Also the probe's vocabulary every floor shares: a box's ``Verdict`` (which causes are the host's
fault, which may pass at another time), ``HOST_FAULTS`` and ``is_host_fault`` (the one set the
race, the quarantine and the log's figures read), and ``StepOutput`` (what one remote command
gave back, as the ssh transport returns it). The probe (market/probe.py) decides verdicts; the
event types, the analysis and the adapters only name them, so they import them from here.

Nothing here does I/O or reads a dict from the wire: ``gpuops.providers.vast`` parses raw JSON
into these types in one place and everything above it sees only these. Numbers are the
provider's, untouched, in its units: ``gpu_ram`` MB, ``disk_bw`` MB/s, ``dph_total`` $/hour,
``reliability`` 0..1, ``start_date`` epoch seconds (recordings/vast/search_offers.yaml's provenance);
``inet_down`` as Vast reports it (its unit is not stated in the sources we hold).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Verdict(enum.Enum):
    """Why a probe passed or failed; a closed set with an explicit UNKNOWN.

    Why the causes are split this way (M2): an SSH auth failure or an unreachable box is not a
    host fault (about half of them passed at another time), so neither may quarantine a
    machine; NO_GPU, LOW_VRAM, SLOW_DISK and CUDA_BROKEN are host faults. A changed host key
    is a refusal: never retried, never a host fault.
    """

    PASS = "pass"
    SSH_AUTH = "ssh-auth"
    SSH_UNREACHABLE = "ssh-unreachable"
    SSH_HOST_KEY_CHANGED = "ssh-host-key-changed"
    NO_GPU = "no-gpu"
    LOW_VRAM = "low-vram"
    SLOW_DISK = "slow-disk"
    CUDA_BROKEN = "cuda-broken"
    UNKNOWN = "unknown"

    @property
    def host_fault(self) -> bool:
        """The machine itself failed: quarantine it (M2). SSH trouble never is."""
        return self in HOST_FAULTS

    @property
    def retryable(self) -> bool:
        """The same box may pass at another time (M2: half the SSH failures did)."""
        return self in _RETRYABLE


# The verdicts that are the host's fault (M2), the one set: SSH trouble is never one (auth is
# our key, and half the unreachable hosts passed later).
HOST_FAULTS = frozenset({Verdict.NO_GPU, Verdict.LOW_VRAM, Verdict.SLOW_DISK, Verdict.CUDA_BROKEN})
_HOST_FAULT_CAUSES = frozenset(verdict.value for verdict in HOST_FAULTS)
_RETRYABLE = frozenset({Verdict.SSH_AUTH, Verdict.SSH_UNREACHABLE})


def is_host_fault(cause: str) -> bool:
    """Whether a recorded cause (a verdict's value, or another reason a candidate failed, such
    as "taken" or "boot-timeout") says the host is bad: not our key, not a pass."""
    return cause in _HOST_FAULT_CAUSES


@dataclass(frozen=True)
class StepOutput:
    """What one remote command gave back: ``exit_code`` is None only when it timed out."""

    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False


class InstanceStatus(enum.Enum):
    """Vast's ``actual_status``, closed, with an explicit UNKNOWN for strings never seen.

    Two "unknowns" that must never be confused (vastai 1.9.1 SKILL.md, "Instance status
    values"; openapi show_instance.yaml in vast-ai/vast-cli):

    - ``NO_HEARTBEAT`` is Vast's own status literally called ``"unknown"``: the host has sent no
      recent heartbeat. It is a documented, *terminal* state of the poll trap.
    - ``UNKNOWN`` is a string gpuops has never seen. Its raw text stays on
      ``Instance.actual_status_raw`` and the core must decide on it explicitly; it is *not*
      treated as dead (a fact) nor as booting (a guess). Its value, ``"unrecognised"``, is never
      a Vast wire string, so the two can never collide.

    ``PROVISIONING`` is the JSON ``null`` Vast sends while the contract is being provisioned.
    Values are the wire strings where Vast has one.
    """

    PROVISIONING = "provisioning"
    CREATED = "created"
    LOADING = "loading"
    RUNNING = "running"
    STOPPED = "stopped"
    FROZEN = "frozen"
    EXITED = "exited"
    REBOOTING = "rebooting"
    NO_HEARTBEAT = "unknown"
    OFFLINE = "offline"
    UNKNOWN = "unrecognised"

    @classmethod
    def from_wire(cls, raw: str | None) -> InstanceStatus:
        """The member for a wire ``actual_status``: null is PROVISIONING, unseen is UNKNOWN."""
        if raw is None:
            return cls.PROVISIONING
        member = _BY_WIRE.get(raw.strip())
        return cls.UNKNOWN if member is None else member

    @property
    def is_terminal_failure(self) -> bool:
        """The poll trap: from exited, Vast's "unknown" or offline a box never reaches running.

        Vast's own advice is "destroy and retry" (SKILL.md; combine_api_yamls.py Key Quirks).
        UNKNOWN (a string we never saw) is deliberately *not* here: dead is a fact (M10).
        """
        return self in _TERMINAL_FAILURES

    @property
    def is_booting(self) -> bool:
        """On the documented way to running: provisioning, created, loading, rebooting."""
        return self in _BOOTING

    @property
    def is_running(self) -> bool:
        """Running: the container executes and GPU charges apply."""
        return self is InstanceStatus.RUNNING


_BY_WIRE = {
    member.value: member
    for member in InstanceStatus
    if member not in (InstanceStatus.PROVISIONING, InstanceStatus.UNKNOWN)
}
_TERMINAL_FAILURES = frozenset(
    {InstanceStatus.EXITED, InstanceStatus.NO_HEARTBEAT, InstanceStatus.OFFLINE}
)
_BOOTING = frozenset(
    {
        InstanceStatus.PROVISIONING,
        InstanceStatus.CREATED,
        InstanceStatus.LOADING,
        InstanceStatus.REBOOTING,
    }
)


@dataclass(frozen=True)
class Offer:
    """One rentable offer from a search (``POST /api/v0/bundles/``).

    ``id`` is what a create rents (``PUT /api/v0/asks/{id}/``). ``reliability`` is Vast's
    ``reliability2`` when the body has it, else ``reliability``. Fields that are ``None`` were
    absent or null in the body (vastai's own ``data/offer.py`` marks them optional): a selector
    must treat a missing filter field as failing that filter, never as passing it.
    ``end_date`` is when its contract ends (epoch seconds), None when the body does not say.
    ``raw`` is the offer exactly as received, for the decision log (M11); it takes no part in
    equality, hashing or repr.
    """

    id: int
    machine_id: int
    host_id: int
    gpu_name: str
    num_gpus: int
    gpu_ram: int
    dph_total: float
    reliability: float | None
    disk_bw: float | None
    inet_down: float | None
    cuda_max_good: float | None
    geolocation: str | None
    verification: str | None
    # When the offer's contract ends (epoch s; null or absent: not said): the rental's end is
    # locked at rent, and at this date Vast stops the box ("Once an instance hits its end date
    # it expires and is automatically stopped", vast.ai/docs/introduction/overview).
    end_date: float | None = None
    raw: dict[str, object] = field(default_factory=dict, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class Instance:
    """One instance (a rented box) as ``show`` or the v1 list reports it.

    ``instance_id`` is Vast's integer ``id`` as a string (the CLI's ``--json`` calls it
    ``instance_id``). ``actual_status_raw`` is the wire string, or None for null; it is kept
    for every status so an UNKNOWN can be reported verbatim. ``direct_ssh_port`` is
    ``ports["22/tcp"][0]["HostPort"]`` when Vast lists it (only on running instances);
    ``ssh_host``/``ssh_port`` is the proxy endpoint.
    """

    instance_id: str
    label: str | None
    actual_status: InstanceStatus
    actual_status_raw: str | None
    ssh_host: str | None
    ssh_port: int | None
    public_ipaddr: str | None
    direct_ssh_port: int | None
    machine_id: int | None
    gpu_name: str | None
    dph_total: float | None
    start_date: float | None


@dataclass(frozen=True)
class KeyHolder:
    """Whose API key a call was made with, as the provider answers it: the user's id, and
    their username where the answer names one (a team member's own key does; the shared
    account key's answer, as recorded, does not)."""

    user_id: int
    username: str | None = None


@dataclass(frozen=True)
class SshKey:
    """An SSH public key registered with the account (M9)."""

    id: int
    public_key: str

    def matches(self, public_key: str) -> bool:
        """Same key type and key material; the trailing comment and whitespace do not count."""
        return _key_material(self.public_key) == _key_material(public_key) != ()


def _key_material(public_key: str) -> tuple[str, ...]:
    return tuple(public_key.split()[:2])
