"""`gpuops check`'s lane lines against FakeGCE made to break each one: a VM running with no
claim (or under a claim the board does not hold), a VM with no run ceiling, a VM that does not
exist, GCE refusing or not answering, a bucket that refuses writes, one that does not exist,
one in an outage. The real GCE and GCS adapters talk to the fake in-process (``responses``);
the board is a real record in a MemoryStore."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.gce import FakeGCE, LaneScenario
from fakes.gce.inprocess import activate
from fakes.vast.clock import FakeClock
from gpuops import check as c
from gpuops.errors import AuthFailed, ProviderUnavailable, StoreUnavailable
from gpuops.events import EventLog
from gpuops.lane import board as b
from gpuops.lane import decide as d
from gpuops.lane.runner import BoardCodec, BoardFile
from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter
from gpuops.settings import Settings
from gpuops.store.memory import MemoryStore
from gpuops.store.records import Records

GCE = "http://127.0.0.1:9"
CEILING_S = 21600.0
WHERE = "projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane"


@dataclasses.dataclass
class Lane:
    fake: FakeGCE
    store: MemoryStore
    events: Path

    def parts(self, **given: Any) -> c.LaneParts:
        s = self.fake.scenario
        boards = Records(self.store, "lane/", BoardCodec())

        def read_board() -> b.Board | None:
            found = boards.get(f"{s.instance}/board")
            return None if found is None else found.board

        events = EventLog(self.events, "alice")
        parts = c.LaneParts(
            GceAdapter(s.project, s.zone, events=events, endpoint=GCE),
            GcsAdapter(s.bucket, s.project, endpoint=GCE),
            WHERE,
            s.instance,
            s.bucket,
            read_board,
        )
        return dataclasses.replace(parts, **given)

    def board(self, state: str, owner: str = "bob", job: str = "portraits", epoch: int = 4) -> None:
        at = 1796148000.0
        held = b.Board("gpu-lane", "gpu-lane", at, revision=2, epoch=epoch)
        if state != b.FREE:
            held = dataclasses.replace(
                held, state=state, owner=owner, job=job, attempt=1, claimed=at
            )
        if state == b.STARTING:
            held = dataclasses.replace(held, boot="boot1")
        if state == b.RUNNING:
            held = dataclasses.replace(held, boot="boot1", started=at)
        Records(self.store, "lane/", BoardCodec()).update(
            "gpu-lane/board", lambda cur: BoardFile(held, ())
        )

    def label(self, owner: str = "bob", job: str = "portraits", epoch: int = 4) -> None:
        self.fake.labels = {d.CLAIM_LABEL: d.claim_label(epoch, d.holder_token(owner, job))}


@pytest.fixture
def lane(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lane]:
    given = {"run_ceiling_s": CEILING_S, **getattr(request, "param", {})}
    fake = FakeGCE(LaneScenario(**given), FakeClock())
    with activate(fake, GCE):
        yield Lane(fake, MemoryStore(), tmp_path / "events.jsonl")


def lines(findings: list[c.Finding]) -> dict[str, tuple[bool, int]]:
    return {f.check: (f.ok, f.code) for f in findings}


def detail(findings: list[c.Finding], check: str) -> str:
    (found,) = [f.detail for f in findings if f.check == check]
    return found


def test_a_terminated_lane_vm_with_its_ceiling_and_a_writable_bucket_passes_and_leaves_nothing(
    lane,
):
    """L12: TERMINATED, maxRunDuration with STOP, the bucket written, read back and cleaned up:
    three ok lines, exit 0, no probe object left and the VM never touched."""
    findings = c.check_lane(lane.parts())

    assert [f.check for f in findings] == ["lane vm", "lane ceiling", "lane bucket"]
    assert all(f.ok for f in findings) and c.exit_code(findings) == 0
    assert "21600 s (6 h)" in detail(findings, "lane ceiling")
    assert lane.fake.objects == {}
    assert [call for call in lane.fake.calls if "instances" in call or "get_" in call] == [
        "GET get_instance"
    ]
    assert "DELETE delete_object" in lane.fake.calls


@pytest.mark.fault(
    "the lane's VM running with no claim on the board: billing with nobody's job",
    handled="`gpuops check` fails its lane vm line, exit 3, and says gpuops never stops it (L1)",
)
@pytest.mark.parametrize("state", [None, b.FREE, b.CLAIMED])
def test_a_lane_vm_running_with_no_started_claim_is_billing_with_nobody_s_job_l12(lane, state):
    """L1/L12: the VM RUNNING while the board is absent, free or only claimed: nobody's job
    accounts for it; exit 3, and the line says gpuops will not stop it."""
    lane.fake.status = "RUNNING"
    if state is not None:
        lane.board(state)
    lane.label()

    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane vm"] == (False, 3) and c.exit_code(findings) == 3
    assert "nobody's job" in detail(findings, "lane vm")
    assert "never stops it (L1)" in detail(findings, "lane vm")
    assert lines(findings)["lane ceiling"] == (True, 0)


@pytest.mark.parametrize("state", [b.STARTING, b.RUNNING])
def test_a_lane_vm_running_under_the_board_s_started_claim_and_its_label_is_accounted_for_l13(
    lane, state
):
    """L13: the board's started claim, the same epoch and holder on the VM's label: ok."""
    lane.fake.status = "STAGING"
    lane.board(state)
    lane.label()

    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane vm"] == (True, 0)
    assert detail(findings, "lane vm") == (
        "gpu-lane is STAGING for bob's job portraits (the board's claim, epoch 4, on its label)"
    )


@pytest.mark.parametrize(
    "label", [{"epoch": 3}, {"owner": "carol"}, None], ids=["old-epoch", "other-holder", "none"]
)
def test_a_lane_vm_running_under_a_claim_its_label_does_not_hold_fails_with_3_l13(lane, label):
    """L13: a started board whose claim the VM's label does not carry (another epoch, another
    holder, no label): the board cannot account for the VM; exit 3."""
    lane.fake.status = "RUNNING"
    lane.board(b.RUNNING)
    if label is not None:
        lane.label(**label)

    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane vm"] == (False, 3)
    assert "not under the board's claim" in detail(findings, "lane vm")


def test_a_running_lane_vm_with_a_corrupt_board_fails_with_3_and_points_at_repair_l12(lane):
    """L12: no readable state line is unknown, never free: a running VM it cannot account for
    is exit 3, fixed by `gpuops lane repair`."""
    lane.fake.status = "RUNNING"
    lane.store.create("lane/gpu-lane/board", b"state: free\n")

    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane vm"] == (False, 3)
    assert "`gpuops lane repair`" in detail(findings, "lane vm")


def test_a_running_lane_vm_whose_board_cannot_be_read_is_unreachable_exit_4(lane):
    """A store that does not answer: the VM cannot be judged, exit 4; a TERMINATED VM needs no
    board at all."""

    def unreachable() -> b.Board | None:
        raise StoreUnavailable("no route to the store")

    terminated = c.check_lane(lane.parts(read_board=unreachable))
    lane.fake.status = "RUNNING"
    running = c.check_lane(lane.parts(read_board=unreachable))

    assert lines(terminated)["lane vm"] == (True, 0)
    assert lines(running)["lane vm"] == (False, 4) and c.exit_code(running) == 4
    assert "see the store line" in detail(running, "lane vm")


@pytest.mark.fault(
    "the lane's VM has no provider-native run ceiling (no maxRunDuration, or DELETE)",
    handled="`gpuops check` fails its lane ceiling line, exit 3: run `gpuops lane install` (L12)",
)
@pytest.mark.parametrize(
    "lane, action",
    [({"run_ceiling_s": 0.0}, ""), ({}, "DELETE")],
    indirect=["lane"],
    ids=["no-max-run-duration", "delete-action"],
)
def test_a_lane_vm_without_its_run_ceiling_fails_with_3_and_names_lane_install_l12(lane, action):
    """L12: no maxRunDuration, or one whose action is DELETE (GCE would delete the VM, L1):
    `lane start` would be refused; the line says `lane install` sets it; exit 3."""
    if action:
        lane.fake.termination_action = action

    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane ceiling"] == (False, 3) and c.exit_code(findings) == 3
    assert "`gpuops lane install`" in detail(findings, "lane ceiling")
    assert lines(findings)["lane vm"] == (True, 0)


def test_a_lane_vm_that_does_not_exist_is_a_configuration_fault_exit_2(lane):
    """GPUOPS_LANE_INSTANCE naming no VM: GCE's 404 is a configuration fault naming the three
    variables; the ceiling is not checked; the bucket still is."""
    findings = c.check_lane(lane.parts(instance="no-such-vm"))

    assert lines(findings) == {
        "lane vm": (False, 2),
        "lane ceiling": (False, 2),
        "lane bucket": (True, 0),
    }
    assert "GPUOPS_LANE_INSTANCE" in detail(findings, "lane vm")
    assert detail(findings, "lane ceiling") == f"not checked: {WHERE} could not be read"
    assert c.exit_code(findings) == 2


class RefusingGce:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def get(self, instance: str) -> Any:
        raise self.error


@pytest.mark.parametrize(
    "error, code, words",
    [
        (AuthFailed("gce", "get gpu-lane: HTTP 401", 401), 2, "gcloud auth application-default"),
        (ProviderUnavailable("gce", "get gpu-lane: HTTP 503", 503), 4, "GPUOPS_GCE_ENDPOINT"),
        (c.ProviderError("gce", "get gpu-lane: HTTP 400", 400), 4, "GCE did not answer"),
    ],
    ids=["credentials-refused", "unavailable", "bad-request"],
)
def test_gce_refusing_our_credentials_is_exit_2_and_not_answering_is_exit_4(
    lane, error, code, words
):
    """Credentials GCE refuses are a configuration fault (2, how to log in); GCE not
    answering is 4; both leave the ceiling unchecked with the same code."""
    findings = c.check_lane(lane.parts(gce=RefusingGce(error)))

    assert lines(findings)["lane vm"] == (False, code)
    assert lines(findings)["lane ceiling"] == (False, code)
    assert words in detail(findings, "lane vm")


def test_gce_not_answering_at_all_is_unreachable_exit_4(lane, tmp_path):
    """A GCE endpoint nobody serves (a connection refused, through the real adapter): 4."""
    events = EventLog(tmp_path / "e.jsonl", "alice")
    gone = GceAdapter("gpuops-lane", "us-central1-b", events=events, endpoint="http://127.0.0.2:9")

    findings = c.check_lane(lane.parts(gce=gone))

    assert lines(findings)["lane vm"] == (False, 4)


@pytest.mark.fault(
    "the lane bucket refuses writes (the account may read it, not write it)",
    handled="`gpuops check` fails its lane bucket line, exit 2, naming the role to grant",
)
@pytest.mark.parametrize("lane", [{"gcs_write_forbidden_prefix": "gpuops-check/"}], indirect=True)
def test_a_lane_bucket_that_refuses_writes_fails_with_2_and_names_the_role_to_grant(lane):
    """A 403 on the probe's write: the lane's script could never upload its status or
    results; a configuration fault (2) with the role to grant; nothing was written."""
    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane bucket"] == (False, 2) and c.exit_code(findings) == 2
    assert "refused the write of gpuops-check/" in detail(findings, "lane bucket")
    assert "roles/storage.objectAdmin" in detail(findings, "lane bucket")
    assert lane.fake.objects == {}


def test_a_lane_bucket_that_does_not_exist_fails_with_2_naming_gpuops_lane_bucket(lane):
    """A bucket name GCS does not know (its 404): check GPUOPS_LANE_BUCKET; exit 2."""
    findings = c.check_lane(lane.parts(gcs=GcsAdapter("no-such-bucket", endpoint=GCE)))

    assert lines(findings)["lane bucket"] == (False, 2)
    assert "GPUOPS_LANE_BUCKET" in detail(findings, "lane bucket")


@pytest.mark.parametrize(
    "lane",
    [{"gcs_write_outage_prefix": "gpuops-check/", "gcs_write_outage_s": 60.0}],
    indirect=True,
)
def test_a_lane_bucket_in_an_outage_is_unreachable_exit_4(lane):
    """GCS answering 503 to the probe's write: unreachable, try again; exit 4."""
    findings = c.check_lane(lane.parts())

    assert lines(findings)["lane bucket"] == (False, 4) and c.exit_code(findings) == 4
    assert "the write of gs://gpuops-lane-jobs/gpuops-check/" in detail(findings, "lane bucket")


class Bucket:
    """A bucket stub: what it reads back, and the step it refuses."""

    def __init__(self, back: bytes | None = None, refuse: str = "", error: Exception | None = None):
        self.back, self.refuse, self.error = back, refuse, error
        self.written: dict[str, bytes] = {}
        self.deleted: list[str] = []

    def _step(self, step: str) -> None:
        if step == self.refuse:
            raise self.error or AuthFailed("gcs", f"{step}: HTTP 403", 403)

    def write(self, name: str, data: bytes) -> None:
        self._step("write")
        self.written[name] = data

    def read(self, name: str) -> bytes | None:
        self._step("read")
        return self.written[name] if self.back is None else self.back

    def delete_object(self, name: str) -> None:
        self._step("delete")
        self.deleted.append(name)


def test_the_probe_object_is_new_each_run_and_deleted_after_it_is_read_back(lane):
    """Each check writes its own gpuops-check/<nonce> (two runs never share one) and deletes
    exactly that object after reading back what it wrote."""
    first, second = Bucket(), Bucket()
    c.check_bucket(lane.parts(gcs=first))
    c.check_bucket(lane.parts(gcs=second))

    ((name, data),) = first.written.items()
    assert first.deleted == [name] and name.startswith("gpuops-check/")
    assert data == f"gpuops check {name}\n".encode()
    assert list(second.written) != [name]


def test_a_bucket_that_reads_back_other_bytes_fails_with_3(lane):
    """A bucket that does not give back what was written: no status or result there could be
    trusted (L9); exit 3."""
    finding = c.check_bucket(lane.parts(gcs=Bucket(back=b"something else")))

    assert (finding.ok, finding.code) == (False, 3)
    assert "did not give back what was written" in finding.detail


@pytest.mark.parametrize(
    "refuse, error, code, words",
    [
        ("read", None, 2, "refused the read back of"),
        ("delete", None, 2, "refused the delete of"),
        ("delete", ProviderUnavailable("gcs", "HTTP 503", 503), 4, "the delete of gs://"),
        ("read", c.ProviderError("gcs", "HTTP 400", 400), 4, "the read back of gs://"),
    ],
)
def test_each_step_of_the_bucket_probe_is_named_when_it_fails(lane, refuse, error, code, words):
    """A refusal or failure of the read or the delete names that step (a role that may create
    but not delete cannot overwrite the script's status and log); a 400 is not a missing
    bucket: unreachable (4), try again."""
    finding = c.check_bucket(lane.parts(gcs=Bucket(refuse=refuse, error=error)))

    assert (finding.ok, finding.code) == (False, code)
    assert words in finding.detail


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_environ(
        {"GPUOPS_STATE": str(tmp_path / "state"), "GPUOPS_OPERATOR": "alice", **env},
        home=tmp_path,
    )


LANE_ENV = {
    "GPUOPS_LANE_PROJECT": "gpuops-lane",
    "GPUOPS_LANE_ZONE": "us-central1-b",
    "GPUOPS_LANE_INSTANCE": "gpu-lane",
    "GPUOPS_LANE_BUCKET": "gpuops-lane-jobs",
    "GPUOPS_GCE_ENDPOINT": GCE,
    "STORAGE_EMULATOR_HOST": GCE,
}


def test_the_lane_is_checked_only_when_configured_and_a_partial_one_is_exit_2(lane, tmp_path):
    """No GPUOPS_LANE_* set: no lane lines; some set: one line naming the missing ones (2);
    all four: the lane's parts, reading this store's board and the configured VM."""
    store = MemoryStore()
    none = c._lane(settings(tmp_path), store)
    partial = c._lane(settings(tmp_path, GPUOPS_LANE_PROJECT="gpuops-lane"), store)
    parts = c._lane(settings(tmp_path, **LANE_ENV), lane.store)

    assert none is None
    assert isinstance(partial, c.Finding) and (partial.check, partial.ok, partial.code) == (
        "lane", False, 2
    )  # fmt: skip
    assert "GPUOPS_LANE_ZONE" in partial.detail and "set all four, or none" in partial.detail
    assert isinstance(parts, c.LaneParts)
    assert (parts.where, parts.instance, parts.bucket) == (WHERE, "gpu-lane", "gpuops-lane-jobs")
    assert parts.read_board() is None
    lane.board(b.RUNNING)
    assert parts.read_board() == Records(lane.store, "lane/", BoardCodec()).get("gpu-lane/board").board  # type: ignore[union-attr]
    assert all(f.ok for f in c.check_lane(parts))


NOBODY = (
    "no started claim accounts for it, so it bills with nobody's job. gpuops never stops it "
    "(L1): find whose it is (the console's instance page, its serial output), let it finish or "
    "have its owner power it off, and run `gpuops lane repair` if the board is wrong"
)


@pytest.mark.parametrize(
    "case, line, expected",
    [
        ("no-board", "lane vm", f"gpu-lane is RUNNING but the lane has no board: {NOBODY}"),
        ("free", "lane vm", f"gpu-lane is RUNNING but the board says free: {NOBODY}"),
        (
            "old-epoch",
            "lane vm",
            "gpu-lane is RUNNING, but not under the board's claim: refused (L13): lane gpu-lane: "
            "this claim is epoch 4 ('bob', job 'portraits'), but instance gpu-lane's label says "
            "claim epoch 3 held: a claim from a stale, repaired or lost board cannot take the VM; "
            "it may be billing with nobody's job (L1: gpuops never stops it): find whose it is",
        ),
        (
            "corrupt",
            "lane vm",
            "gpu-lane is RUNNING and the lane board has no readable state line (the first line "
            "is not a board state line: 'state: free'), so nobody's claim accounts for it (L12): "
            "run `gpuops lane repair`, which rebuilds the line from the VM and the claim journal",
        ),
        (
            "missing",
            "lane vm",
            f"{WHERE} does not exist: check GPUOPS_LANE_PROJECT, GPUOPS_LANE_ZONE and "
            "GPUOPS_LANE_INSTANCE (gpuops never creates the lane's VM)",
        ),
        (
            "no-ceiling",
            "lane ceiling",
            "gpu-lane: refused (L12): the instance's run ceiling is not set (maxRunDuration None, "
            "instanceTerminationAction None): nothing would power it off if its script never "
            "did; run `gpuops lane install` again, which sets it",
        ),
        (
            "forbidden",
            "lane bucket",
            "gs://gpuops-lane-jobs refused the write of gpuops-check/N: gcs: write "
            "gs://gpuops-lane-jobs/gpuops-check/N: HTTP 403 lane-runner@gpuops-lane.iam."
            "gserviceaccount.com does not have storage.objects.create access to the Google Cloud "
            "Storage object. Permission 'storage.objects.create' denied on resource (or it may "
            "not exist).; grant the lane's account roles/storage.objectAdmin on the bucket (its "
            "script writes and overwrites its status and log, the runner reads them)",
        ),
        (
            "no-bucket",
            "lane bucket",
            "gs://no-such-bucket does not exist (the write of gpuops-check/N: gcs: write "
            "gs://no-such-bucket/gpuops-check/N: not found (HTTP 404)): check GPUOPS_LANE_BUCKET",
        ),
        ("sound", "lane vm", "gpu-lane is TERMINATED: nothing runs on it"),
        (
            "sound",
            "lane ceiling",
            "gpu-lane has maxRunDuration 21600 s (6 h) with STOP: GCE powers it off if its "
            "script never does",
        ),
        ("sound", "lane bucket", "gs://gpuops-lane-jobs takes a write, reads it back and deletes it"),
    ],
)
def test_each_lane_line_says_in_full_what_is_wrong_and_how_to_fix_it(
    lane, case, line, expected
):
    """What a person reads on each lane line, word for word: the state seen, the rule, and
    the command or setting that fixes it (the probe's nonce shown as N)."""
    import re

    given: dict[str, Any] = {}
    if case in ("no-board", "free", "old-epoch", "corrupt"):
        lane.fake.status = "RUNNING"
    if case == "free":
        lane.board(b.FREE)
    if case == "old-epoch":
        lane.board(b.RUNNING)
        lane.label(epoch=3)
    if case == "corrupt":
        lane.store.create("lane/gpu-lane/board", b"state: free\n")
    if case == "missing":
        given["instance"] = "no-such-vm"
    if case == "no-ceiling":
        lane.fake.max_run_s = None
    if case == "forbidden":
        lane.fake.scenario = dataclasses.replace(
            lane.fake.scenario, gcs_write_forbidden_prefix="gpuops-check/"
        )
    if case == "no-bucket":
        given.update(gcs=GcsAdapter("no-such-bucket", endpoint=GCE), bucket="no-such-bucket")

    findings = c.check_lane(lane.parts(**given))

    assert re.sub(r"gpuops-check/[0-9a-f]{16}", "gpuops-check/N", detail(findings, line)) == expected


ROLE = (
    "grant the lane's account roles/storage.objectAdmin on the bucket (its script writes and "
    "overwrites its status and log, the runner reads them)"
)
RETRY_GCS = "check STORAGE_EMULATOR_HOST (unset for real GCS) and the network; try again"


@pytest.mark.parametrize(
    "parts, line, expected",
    [
        (
            {"gce": RefusingGce(AuthFailed("gce", "get gpu-lane: HTTP 401", 401))},
            "lane vm",
            f"GCE refused our credentials for {WHERE}: gce: get gpu-lane: HTTP 401; run `gcloud "
            "auth application-default login` or point GOOGLE_APPLICATION_CREDENTIALS at a key "
            "that may read it",
        ),
        (
            {"gce": RefusingGce(ProviderUnavailable("gce", "get gpu-lane: HTTP 503", 503))},
            "lane vm",
            f"GCE did not answer for {WHERE}: ProviderUnavailable: gce unavailable: get gpu-lane: "
            "HTTP 503; check GPUOPS_GCE_ENDPOINT (unset for real GCE) and the network; try again",
        ),
        (
            {"gcs": Bucket(back=b"x")},
            "lane bucket",
            "gs://gpuops-lane-jobs did not give back what was written to gpuops-check/N: the "
            "runner could not trust a status or a result there",
        ),
        (
            {"gcs": Bucket(refuse="read")},
            "lane bucket",
            f"gs://gpuops-lane-jobs refused the read back of gpuops-check/N: gcs: read: HTTP 403; {ROLE}",
        ),
        (
            {"gcs": Bucket(refuse="delete")},
            "lane bucket",
            f"gs://gpuops-lane-jobs refused the delete of gpuops-check/N: gcs: delete: HTTP 403; {ROLE}",
        ),
        (
            {"gcs": Bucket(refuse="delete", error=ProviderUnavailable("gcs", "HTTP 503", 503))},
            "lane bucket",
            "the delete of gs://gpuops-lane-jobs/gpuops-check/N failed: ProviderUnavailable: gcs "
            f"unavailable: HTTP 503; {RETRY_GCS}",
        ),
        (
            {"gcs": Bucket(refuse="read", error=c.ProviderError("gcs", "HTTP 400", 400))},
            "lane bucket",
            "the read back of gs://gpuops-lane-jobs/gpuops-check/N failed: ProviderError: gcs: "
            "HTTP 400; try again; check the bucket in the console",
        ),
    ],
)
def test_each_failure_of_gce_or_of_a_bucket_step_is_told_in_full(lane, parts, line, expected):
    """Word for word: GCE refusing or not answering, a bucket giving back other bytes, and
    each step of the probe refused or failing (the probe's nonce shown as N)."""
    import re

    findings = c.check_lane(lane.parts(**parts))

    assert re.sub(r"gpuops-check/[0-9a-f]{16}", "gpuops-check/N", detail(findings, line)) == expected


def test_a_running_vm_whose_board_cannot_be_read_says_why_in_full(lane):
    """The store's own error is carried, and the store line named."""

    def unreachable() -> b.Board | None:
        raise StoreUnavailable("no route to the store")

    lane.fake.status = "RUNNING"
    findings = c.check_lane(lane.parts(read_board=unreachable))

    assert detail(findings, "lane vm") == (
        "gpu-lane is RUNNING, and the lane board could not be read to account for it: "
        "StoreUnavailable: no route to the store; see the store line"
    )
