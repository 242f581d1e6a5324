"""`gpuops check`: what must hold before real money is spent, one line each, ok or what is wrong
and how to fix it.

The checks, each a function of what it needs (tests give them fakes made to break each one):

* **config** (only when a config file was read): nobody else may write it (it names the ssh
  program, the state, where results go), and nobody else may read it when it holds a secret
  (``vast_api_key``, ``notify``'s URLs); the fix is ``chmod 600``.
* **store**: reachable, and it honours conditional writes. A self-test on a key of its own
  (``check/<nonce>``): a second create-if-absent must be refused, a put or a delete at a
  version that is no longer current must be refused, the current one accepted. S3-compatible
  stores exist that accept every write whatever its precondition; on one, every compare-and-
  swap in gpuops (the ledger, the leases, the lane's board) is a blind overwrite.
* **state policy** (``s3://`` state only): the bucket's policy requires conditional writes on
  the state's prefix, as docs/s3-state.md sets it: a Deny of every ``s3:PutObject`` there, to
  every principal, when ``s3:if-none-match`` and ``s3:if-match`` are both null. Without it an
  old or careless client overwrites a record unconditionally; a Deny on one key alone refuses
  gpuops' own compare-and-swap too.
* **vast key**: the Vast API answers with our key (the account's SSH keys are read).
* **key scope**: what the key may do, as far as Vast says: it does not (its key list carries no
  permissions), so the line says so and where the recipe for a narrower key is.
* **ssh key**: our SSH public key is registered with the account (M9): without it every probe
  fails on auth and innocent hosts look guilty.
* **clock**: this host's clock against the provider's ``Date`` header on that same call,
  within timing.CHECK_CLOCK_TOLERANCE_S (every deadline is this host's wall clock, M5).
* **results**: the results destination (GPUOPS_RESULTS) takes a delivery.
* **notify**: every GPUOPS_NOTIFY endpoint takes a test notification (O1); none set is a
  failure too: an alarm nobody hears is a log line.

When a lane is configured (any GPUOPS_LANE_* variable set; some but not all is a configuration
fault naming the missing ones), three more:

* **lane vm**: the instance exists and is TERMINATED, or is accounted for: the board holds a
  started claim (starting or running) and the instance's own claim label is that claim's
  (L13). A VM running with no such claim bills with nobody's job, and gpuops never stops it
  (L1): a person must find whose it is.
* **lane ceiling**: GCE's own run ceiling is set (``scheduling.maxRunDuration`` within its
  bounds, with ``instanceTerminationAction`` STOP; decide.py's check_run_ceiling, L12), as
  `gpuops lane install` sets it; without it `lane start` is refused.
* **lane bucket**: the lane's GCS bucket takes a write, reads it back and deletes it (a probe
  object of its own, ``gpuops-check/<nonce>``).

The exit code is by type, worst first: 3 when a safety rule's precondition fails (a store that
ignores preconditions, our key not registered, a lane VM nobody accounts for, no run ceiling),
2 when something is configured wrong (a key, credentials refused, a path, a URL, a lane name or
bucket that does not exist, a bucket we may not write), 4 when something could not be
reached; 0 when every line is ok.
"""

from __future__ import annotations

import secrets
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuops.clock import SYSTEM, Clock
from gpuops.errors import (
    AlreadyExists,
    AuthFailed,
    CorruptState,
    GpuopsError,
    ProviderError,
    Refused,
    StateError,
    StoreForbidden,
    StoreMissing,
    Unavailable,
    UsageError,
    VersionConflict,
)
from gpuops.store.base import Store

if TYPE_CHECKING:
    from gpuops.lane.board import Board
    from gpuops.providers.gce import LaneInstance
    from gpuops.settings import ConfigFile, Settings

REFUSED, CONFIG, UNREACHABLE = 3, 2, 4
_WORST_FIRST = (REFUSED, CONFIG, UNREACHABLE)


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str  # ok: what was seen; else what is wrong and how to fix it
    code: int = 0  # when not ok: REFUSED, CONFIG or UNREACHABLE


def exit_code(findings: Sequence[Finding]) -> int:
    """0 when every check is ok, else the worst failure's type (3, then 2, then 4)."""
    failed = {f.code for f in findings if not f.ok}
    return next((code for code in _WORST_FIRST if code in failed), 0)


def _unreachable(check: str, what: str, exc: Exception, fix: str) -> Finding:
    return Finding(check, False, f"{what}: {type(exc).__name__}: {exc}; {fix}", UNREACHABLE)


# --- the config file -------------------------------------------------------------------------
def check_config(config: ConfigFile | None) -> Finding | None:
    """The config file's permissions; None when no file was read (no line)."""
    if config is None:
        return None
    keys = ", ".join(config.keys) or "no keys"
    if config.mode is None:  # /dev/null, a pipe: nothing on disk for another user to read
        return Finding("config", True, f"{config.path} (not a regular file): {keys}")
    mode, fix = f"mode {config.mode:04o}", f"chmod 600 {config.path}"
    if config.mode & 0o022:
        return Finding(
            "config",
            False,
            f"{config.path} is writable by others ({mode}): whoever can write it chooses the "
            f"ssh program, the state and where results go; {fix}",
            CONFIG,
        )
    secrets_held = config.secret_keys()
    if secrets_held and config.mode & 0o044:
        return Finding(
            "config",
            False,
            f"{config.path} holds {', '.join(secrets_held)} and is readable by others "
            f"({mode}); {fix}",
            CONFIG,
        )
    return Finding("config", True, f"{config.path} ({mode}): {keys}")


# --- the store -------------------------------------------------------------------------------
def check_store(store: Store) -> Finding:
    """The compare-and-swap self-test, on a key of its own, removed after."""
    key = f"check/{secrets.token_hex(8)}"
    try:
        first = store.create(key, b"1")
        wrong = _refused(
            lambda: store.create(key, b"2"), AlreadyExists, "a second create-if-absent"
        )
        if wrong is None:
            store.put(key, b"3", first)
        wrong = wrong or _refused(
            lambda: store.put(key, b"4", first), VersionConflict, "a put at a stale version"
        )
        wrong = wrong or _refused(
            lambda: store.delete(key, first), VersionConflict, "a delete at a stale version"
        )
        found = store.get(key)
        if wrong is None and (found is None or found.data != b"3"):
            wrong = "a put at the current version that reads back another value"
        if found is not None:
            store.delete(key, found.version)
    except (Unavailable, OSError) as exc:
        return _unreachable(
            "store",
            f"cannot reach {store.url}",
            exc,
            "check GPUOPS_STATE, the network and the credentials",
        )
    except StateError as exc:
        return Finding("store", False, f"{store.url} refused the self-test: {exc}", REFUSED)
    if wrong is not None:
        return Finding(
            "store",
            False,
            f"{store.url} does not honour conditional writes: {wrong} was accepted. Every "
            "compare-and-swap would be a blind overwrite (M3, M4, L3): use a store that "
            "enforces If-Match / If-None-Match (AWS S3, MinIO, a local directory)",
            REFUSED,
        )
    return Finding("store", True, f"{store.url} is reachable and honours conditional writes")


# --- the state bucket's policy ----------------------------------------------------------------
POLICY_DOC = "docs/s3-state.md"
_NULL_KEYS = ("s3:if-match", "s3:if-none-match")  # the condition keys, lower-case, sorted
_EVERYONE = ("*", {"AWS": "*"})


def check_state_policy(store: Store) -> Finding | None:
    """Whether the ``s3://`` state's bucket policy requires conditional writes on its prefix;
    None for a store with no bucket policy to read (a local directory: no line)."""
    read = getattr(store, "bucket_policy", None)
    if read is None:
        return None
    bucket, prefix = store.bucket, store.prefix  # type: ignore[attr-defined]
    target = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
    fix = (
        f"set the bucket policy of {POLICY_DOC} (Deny s3:PutObject on {target} when "
        "s3:if-none-match and s3:if-match are both null)"
    )
    try:
        policy = read()
    except (StoreForbidden, StoreMissing) as exc:
        return Finding("state policy", False, f"{exc}; ask the bucket's owner to check it, or "
                       f"grant s3:GetBucketPolicy; {fix}", CONFIG)  # fmt: skip
    except Unavailable as exc:
        return _unreachable("state policy", f"cannot read the policy of {bucket}", exc, fix)
    gap = "has no bucket policy" if policy is None else policy_gap(policy, target)
    if gap is not None:
        return Finding(
            "state policy",
            False,
            f"{bucket} {gap}: any client that may write {store.url} can overwrite a record "
            f"unconditionally (M3, M4); {fix}",
            CONFIG,
        )
    return Finding("state policy", True, f"{bucket}'s policy refuses unconditional writes to "
                   f"{target}")  # fmt: skip


def policy_gap(policy: str, target: str) -> str | None:
    """None when the policy denies, to every principal, each ``s3:PutObject`` on ``target``
    (``arn:aws:s3:::BUCKET/PREFIX/*``) that carries neither If-None-Match nor If-Match, and
    denies nothing gpuops writes there; else what it lacks, in words."""
    import json

    try:
        doc = json.loads(policy)
    except ValueError:
        return "has a bucket policy that is not JSON"
    statements = doc.get("Statement") if isinstance(doc, dict) else None
    found = [_denied_without(statement, target) for statement in _listed(statements or [])]
    single = next((keys[0] for keys in found if keys is not None and len(keys) == 1), None)
    if single is not None:
        return (
            f"denies every s3:PutObject on {target} without {single}, gpuops' own "
            "compare-and-swap among them (a create carries If-None-Match, a change "
            "If-Match): deny only when both are null"
        )
    if _NULL_KEYS in found:
        return None
    return f"has no statement denying an unconditional s3:PutObject on {target} to every principal"


def _denied_without(statement: object, target: str) -> tuple[str, ...] | None:
    """The conditional-write keys whose absence makes ``statement`` deny every principal's
    ``s3:PutObject`` on ``target``, sorted; None when it is no such Deny (another effect,
    principal, action, resource, or a condition beyond Null on those keys)."""
    if not isinstance(statement, dict) or statement.get("Effect") != "Deny":
        return None
    if statement.get("Principal") not in _EVERYONE:
        return None
    actions = [a.lower() for a in _listed(statement.get("Action")) if isinstance(a, str)]
    if not any(_glob(action, "s3:putobject") for action in actions):  # actions: any case
        return None
    resources = [r for r in _listed(statement.get("Resource")) if isinstance(r, str)]
    if not any(_glob(resource, target) for resource in resources):
        return None
    condition = statement.get("Condition")
    if not isinstance(condition, dict) or list(condition) != ["Null"]:
        return None
    nulls = condition["Null"]
    if not isinstance(nulls, dict):
        return None
    keys = tuple(sorted(key.lower() for key in nulls))
    if not set(keys) <= set(_NULL_KEYS) or any(str(v).lower() != "true" for v in nulls.values()):
        return None
    return keys


def _listed(value: object) -> list[object]:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, text: str) -> bool:
    """An IAM wildcard match of ``text``: ``*`` any run of characters, ``?`` any one."""
    import re

    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch("".join(parts), text) is not None


def _refused(act: Callable[[], object], refusal: type[Exception], what: str) -> str | None:
    """None when ``act`` raised ``refusal`` as it must; else what was wrongly accepted."""
    try:
        act()
    except refusal:
        return None
    return what


# --- the provider ----------------------------------------------------------------------------
def check_vast(vast: object, public_key: str | Finding | None) -> list[Finding]:
    """The key works (the account's SSH keys are read) and ours is among them (M9).
    ``public_key``: our key's text; a Finding when its file could not be read (that line
    stands for the SSH key's, whatever Vast says); None: not checked."""
    try:
        keys = vast.list_ssh_keys()  # type: ignore[attr-defined]
    except AuthFailed as exc:
        return [
            Finding("vast key", False, f"Vast refused our key: {exc}; set VAST_API_KEY (or "
                    "`vastai set api-key`) to a key of this account", CONFIG),
            _unread_or(public_key, "not checked: the Vast key does not work", CONFIG),
        ]  # fmt: skip
    except (Unavailable, GpuopsError) as exc:
        fix = "check VAST_URL and the network; try again"
        return [
            _unreachable("vast key", "the Vast API did not answer", exc, fix),
            _unread_or(public_key, "not checked: the Vast API did not answer", UNREACHABLE),
        ]
    lines = [Finding("vast key", True, f"the Vast API answers our key ({len(keys)} SSH key(s))")]
    if public_key is None:
        return lines
    if isinstance(public_key, Finding):
        return [*lines, public_key]
    if any(key.matches(public_key) for key in keys):
        return [*lines, Finding("ssh key", True, "our SSH public key is registered (M9)")]
    return [
        *lines,
        Finding(
            "ssh key",
            False,
            "our SSH public key (GPUOPS_SSH_KEY) is not registered with the account: every "
            "probe would fail on auth (M9); `gpuops rent` registers it, or add it in the "
            "console",
            REFUSED,
        ),
    ]


KEY_SCOPE = Finding(
    "key scope",
    True,
    "not known: Vast does not tell a key what it may do (its list of API keys carries no "
    "permissions), so gpuops cannot name a key broader than its use needs. A guardian host "
    "needs only instance_read and instance_write: docs/threat-model.md has the recipe",
)


def _unread_or(public_key: str | Finding | None, detail: str, code: int) -> Finding:
    """The unreadable key's own line, else the SSH key's `not checked` line."""
    if isinstance(public_key, Finding):
        return public_key
    return Finding("ssh key", False, detail, code)


# --- results and notifications ----------------------------------------------------------------
def check_results(results: object, where: str) -> Finding:
    """A one-file delivery to the results destination."""
    with tempfile.TemporaryDirectory(prefix="gpuops-check-") as scratch:
        tarball = Path(scratch) / "results.tar.gz"
        probe = Path(scratch) / "gpuops-check.txt"
        probe.write_text("gpuops check\n")
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(probe, arcname="gpuops-check.txt")
        try:
            delivered = results.deliver("gpuops-check", tarball)  # type: ignore[attr-defined]
        except Unavailable as exc:
            return _unreachable("results", f"cannot reach {where}", exc, "check GPUOPS_RESULTS")
        except (OSError, GpuopsError) as exc:
            return Finding(
                "results",
                False,
                f"{where} does not take results: {type(exc).__name__}: {exc}; point "
                "GPUOPS_RESULTS at a writable directory or s3://bucket/prefix",
                CONFIG,
            )
    return Finding("results", True, f"{where} takes results ({delivered}/gpuops-check.txt)")


def check_notify(endpoints: Sequence[object]) -> list[Finding]:
    """A test notification to every endpoint (O1); none configured is a failure."""
    from gpuops.alarms import Alarm, AlarmKind

    if not endpoints:
        return [
            Finding("notify", False, "GPUOPS_NOTIFY is not set: alarms would be event-log "
                    "lines nobody hears (O1); set it to an apprise URL (json://, ntfy://, "
                    "mailto://, slack://...)", CONFIG)
        ]  # fmt: skip
    test = Alarm(
        AlarmKind.GUARDIAN_EXIT,
        "check.notify",
        "gpuops check: a test notification",
        "If you read this, gpuops alarms reach you (O1).",
    )
    lines = []
    for endpoint in endpoints:
        error = endpoint.send(test)  # type: ignore[attr-defined]
        name = f"notify {endpoint.id}"  # type: ignore[attr-defined]
        if error is None:
            lines.append(Finding(name, True, "a test notification was delivered"))
        elif error.startswith("apprise does not know"):
            lines.append(Finding(name, False, f"{error}: fix the URL in GPUOPS_NOTIFY", CONFIG))
        else:
            lines.append(
                Finding(name, False, f"{error}; check the endpoint and its URL", UNREACHABLE)
            )
    return lines


NO_DATE = Finding("clock", False, "the provider's answer had no Date header to compare this "
                  "host's clock with; run `gpuops check` again", UNREACHABLE)  # fmt: skip


def check_clock(date: str | None, here_s: float) -> Finding:
    """This host's wall clock (``here_s``, read as the answer arrived) against the provider's
    ``Date`` header on that answer."""
    from email.utils import parsedate_to_datetime

    from gpuops import timing

    if not date:
        return NO_DATE
    try:
        theirs = parsedate_to_datetime(date).timestamp()
    except (TypeError, ValueError):
        return Finding(
            "clock", False, f"the provider's Date {date!r} is not an HTTP date", UNREACHABLE
        )
    off_s = here_s - theirs
    if abs(off_s) <= timing.CHECK_CLOCK_TOLERANCE_S:
        return Finding("clock", True, f"this host's clock is {off_s:+.0f} s from the provider's")
    return Finding(
        "clock",
        False,
        f"this host's clock is {off_s:+.0f} s from the provider's Date: every deadline is "
        f"read on it (M5); more than {timing.CHECK_CLOCK_TOLERANCE_S:.0f} s off: set it by "
        "NTP (timedatectl set-ntp true, or chrony)",
        CONFIG,
    )


# --- the lane --------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaneParts:
    """What the lane's checks read: the GCE adapter (``get``), the GCS adapter (``write``,
    ``read``, ``delete_object``), the names, and the board (None when there is none; it may
    raise CorruptState, or Unavailable when the store cannot be read)."""

    gce: Any
    gcs: Any
    where: str  # projects/P/zones/Z/instances/I, for the lines
    instance: str
    bucket: str
    read_board: Callable[[], Board | None]


def check_lane(lane: LaneParts) -> list[Finding]:
    """The lane VM, its run ceiling and the lane bucket (each line ok or what to do)."""
    try:
        inst = lane.gce.get(lane.instance)
    except GpuopsError as exc:
        vm = _unread_vm(lane.where, exc)
        not_checked = f"not checked: {lane.where} could not be read"
        return [vm, Finding("lane ceiling", False, not_checked, vm.code), check_bucket(lane)]
    return [check_lane_vm(inst, lane.read_board), check_ceiling(inst), check_bucket(lane)]


def _unread_vm(where: str, exc: GpuopsError) -> Finding:
    if isinstance(exc, AuthFailed):
        return Finding("lane vm", False, f"GCE refused our credentials for {where}: {exc}; "
                       "run `gcloud auth application-default login` or point "
                       "GOOGLE_APPLICATION_CREDENTIALS at a key that may read it", CONFIG)  # fmt: skip
    if isinstance(exc, ProviderError) and exc.status == 404:
        return Finding("lane vm", False, f"{where} does not exist: check GPUOPS_LANE_PROJECT, "
                       "GPUOPS_LANE_ZONE and GPUOPS_LANE_INSTANCE (gpuops never creates the "
                       "lane's VM)", CONFIG)  # fmt: skip
    fix = "check GPUOPS_GCE_ENDPOINT (unset for real GCE) and the network; try again"
    return _unreachable("lane vm", f"GCE did not answer for {where}", exc, fix)


def check_lane_vm(inst: LaneInstance, read_board: Callable[[], Board | None]) -> Finding:
    """TERMINATED, or running under the board's started claim with the VM's own label holding
    it (L13); anything else bills with nobody's job (L1: gpuops never stops it). The board is
    read only for a VM that is not TERMINATED."""
    from gpuops.lane import board as b
    from gpuops.lane import decide as d

    status = inst.status_raw
    if status == "TERMINATED":
        return Finding("lane vm", True, f"{inst.name} is TERMINATED: nothing runs on it")
    try:
        board = read_board()
    except CorruptState as exc:
        return Finding("lane vm", False, f"{inst.name} is {status} and the lane board has no "
                       f"readable state line ({exc.reason}), so nobody's claim accounts for "
                       "it (L12): run `gpuops lane repair`, which rebuilds the line from the "
                       "VM and the claim journal", REFUSED)  # fmt: skip
    except (StateError, Unavailable, OSError) as exc:
        return _unreachable("lane vm", f"{inst.name} is {status}, and the lane board could "
                            "not be read to account for it", exc, "see the store line")  # fmt: skip
    if board is None or board.state not in (b.STARTING, b.RUNNING):
        held = "the lane has no board" if board is None else f"the board says {board.state}"
        return Finding(
            "lane vm",
            False,
            f"{inst.name} is {status} but {held}: no started claim accounts for it, so it "
            "bills with nobody's job. gpuops never stops it (L1): find whose it is (the "
            "console's instance page, its serial output), let it finish or have its owner "
            "power it off, and run `gpuops lane repair` if the board is wrong",
            REFUSED,
        )
    try:
        d.check_epoch(board, d.vm_claim(inst.labels))
    except Refused as exc:
        return Finding("lane vm", False, f"{inst.name} is {status}, but not under the board's "
                       f"claim: {exc}; it may be billing with nobody's job (L1: gpuops never "
                       "stops it): find whose it is", REFUSED)  # fmt: skip
    return Finding("lane vm", True, f"{inst.name} is {status} for {board.owner}'s job "
                   f"{board.job} (the board's claim, epoch {board.epoch}, on its label)")  # fmt: skip


def check_ceiling(inst: LaneInstance) -> Finding:
    """GCE's own run ceiling, as `lane start` demands it (decide.check_run_ceiling, L12)."""
    from gpuops.lane import decide as d

    try:
        d.check_run_ceiling(inst.scheduling)
    except Refused as exc:
        return Finding("lane ceiling", False, f"{inst.name}: {exc}", REFUSED)
    seconds = float(inst.scheduling["maxRunDuration"]["seconds"])
    return Finding("lane ceiling", True, f"{inst.name} has maxRunDuration {seconds:.0f} s "
                   f"({seconds / 3600:g} h) with STOP: GCE powers it off if its script never "
                   "does")  # fmt: skip


def check_bucket(lane: LaneParts) -> Finding:
    """A probe object of its own written to the lane bucket, read back, then deleted."""
    name = f"gpuops-check/{secrets.token_hex(8)}"
    data = f"gpuops check {name}\n".encode()
    where = f"gs://{lane.bucket}"
    step = "write"
    try:
        lane.gcs.write(name, data)
        step = "read back"
        back = lane.gcs.read(name)
        step = "delete"
        lane.gcs.delete_object(name)
    except AuthFailed as exc:
        return Finding("lane bucket", False, f"{where} refused the {step} of {name}: {exc}; "
                       "grant the lane's account roles/storage.objectAdmin on the bucket (its "
                       "script writes and overwrites its status and log, the runner reads them)",
                       CONFIG)  # fmt: skip
    except ProviderError as exc:
        if exc.status == 404:
            return Finding("lane bucket", False, f"{where} does not exist (the {step} of "
                           f"{name}: {exc}): check GPUOPS_LANE_BUCKET", CONFIG)  # fmt: skip
        return _unreachable("lane bucket", f"the {step} of {where}/{name} failed", exc,
                            "try again; check the bucket in the console")  # fmt: skip
    except GpuopsError as exc:
        fix = "check STORAGE_EMULATOR_HOST (unset for real GCS) and the network; try again"
        return _unreachable("lane bucket", f"the {step} of {where}/{name} failed", exc, fix)
    if back != data:
        return Finding("lane bucket", False, f"{where} did not give back what was written to "
                       f"{name}: the runner could not trust a status or a result there",
                       REFUSED)  # fmt: skip
    return Finding("lane bucket", True, f"{where} takes a write, reads it back and deletes it")


def run_checks(
    store: Store,
    vast: object,
    public_key: str | Finding | None,
    results: object,
    results_where: str,
    endpoints: Sequence[object],
    dates: Sequence[tuple[str | None, float]] | None = None,
    lane: LaneParts | Finding | None = None,
) -> list[Finding]:
    """Every check; ``dates``: the (Date header, this host's wall clock) of each answer the
    Vast calls got, filled by an observer on the adapter (None: the clock is not checked);
    ``lane``: the lane's parts, a Finding when its configuration is incomplete, None when
    no lane is configured (no lane lines)."""
    provider = check_vast(vast, public_key)
    clock = []
    if dates is not None and provider[0].ok:
        clock = [check_clock(*dates[-1]) if dates else NO_DATE]
    scope = [KEY_SCOPE] if provider[0].ok else []
    policy = check_state_policy(store)
    lanes = [] if lane is None else [lane] if isinstance(lane, Finding) else check_lane(lane)
    return [
        check_store(store),
        *([] if policy is None else [policy]),
        *provider,
        *clock,
        *scope,
        check_results(results, results_where),
        *lanes,
        *check_notify(endpoints),
    ]


def run_check(settings: Settings, as_json: bool, *, clock: Clock = SYSTEM) -> int:
    """`gpuops check`: every line printed (or one JSON list), exit by the worst failure.
    ``clock``: this host's wall clock, which the provider's Date header is checked against."""
    import json

    from gpuops.alarms import AppriseEndpoint
    from gpuops.market.results import open_results
    from gpuops.market.session import read_public_key
    from gpuops.providers import vastai_lazy
    from gpuops.providers.vast import VastAdapter, find_api_key

    vastai_lazy.install()
    store = settings.open_state()
    results = open_results(settings.results_url, settings.s3_endpoint)
    endpoints = [AppriseEndpoint(url) for url in settings.notify_urls]
    try:
        public_key: str | Finding = read_public_key(settings.ssh_key)
    except UsageError as exc:
        public_key = Finding("ssh key", False, f"{exc}; set GPUOPS_SSH_KEY", CONFIG)
    dates: list[tuple[str | None, float]] = []

    def seen(response: Any) -> None:  # each answer's Date, and our clock as it arrived
        dates.append((response.headers.get("Date"), clock.wall()))

    try:
        key = find_api_key(settings.environ, settings.vast_api_key)
        vast: object = VastAdapter(api_key=key, base_url=settings.vast_url, observers=[seen])
    except UsageError as exc:
        vast = _NoKey(exc)
    config = check_config(settings.config)
    findings = [config] if config is not None else []
    findings += run_checks(
        store,
        vast,
        public_key,
        results,
        settings.results_url,
        endpoints,
        dates,
        _lane(settings, store),
    )
    if as_json:
        rows = [{"check": f.check, "ok": f.ok, "detail": f.detail} for f in findings]
        print(json.dumps({"checks": rows, "exit_code": exit_code(findings)}, indent=2))
    else:
        for f in findings:
            print(f"{'ok  ' if f.ok else 'FAIL'} {f.check}: {f.detail}")
    return exit_code(findings)


def _lane(settings: Settings, store: Store) -> LaneParts | Finding | None:
    """The lane's parts from the settings; None when no GPUOPS_LANE_* is set."""
    if not settings.lane_values:
        return None
    try:
        lane = settings.lane()
    except UsageError as exc:
        return Finding("lane", False, f"{exc}: set all four, or none (no lane)", CONFIG)
    from gpuops.events import EventLog
    from gpuops.lane.runner import BoardCodec
    from gpuops.providers.gce import GceAdapter
    from gpuops.providers.gcs import GcsAdapter
    from gpuops.store.records import Records

    events = EventLog(settings.events_path, settings.acting_operator())
    gce = GceAdapter(lane.project, lane.zone, events=events, endpoint=settings.gce_endpoint)
    gcs = GcsAdapter(lane.bucket, endpoint=settings.storage_emulator_host)
    boards = Records(store, "lane/", BoardCodec())

    def read_board() -> Board | None:
        found = boards.get(f"{lane.instance}/board")
        return None if found is None else found.board

    where = f"projects/{lane.project}/zones/{lane.zone}/instances/{lane.instance}"
    return LaneParts(gce, gcs, where, lane.instance, lane.bucket, read_board)


class _NoKey:
    """No Vast key to be found: the check says so, as Vast's refusal would."""

    def __init__(self, exc: UsageError) -> None:
        self.exc = exc

    def list_ssh_keys(self) -> list[object]:
        raise AuthFailed("vast", f"no key: {self.exc}")
