"""`gpuops check` against fakes made to break each check: a store that ignores preconditions
(and one that cannot be reached), an account without our SSH key, a Vast key it refuses, a
results destination that cannot be written, a notification endpoint that is down or unknown.
FakeVast answers in-process through the real adapter; alarms go to a real loopback receiver."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alarm_receiver import Receiver
from market_world import BASE, KEY
from test_guard import scenario

from fakes.scenario import parse_scenario
from fakes.vast import FakeClock, FakeVast
from gpuops import check as c
from gpuops.alarms import AppriseEndpoint
from gpuops.errors import AlreadyExists, AuthFailed, ProviderUnavailable, StoreForbidden, StoreMissing, StoreUnavailable, VersionConflict
from gpuops.market.results import LocalResults
from gpuops.providers.vast import VastAdapter
from gpuops.store.base import Versioned
from gpuops.store.memory import MemoryStore


class BlindStore(MemoryStore):
    """An S3-compatible store that accepts every write whatever its precondition."""

    def create(self, key: str, data: bytes) -> str:
        try:
            return super().create(key, data)
        except AlreadyExists:
            return self._set(key, data)

    def put(self, key: str, data: bytes, version: str) -> str:
        return self._set(key, data)

    def delete(self, key: str, version: str) -> None:
        found = self.get(key)
        if found is not None:
            super().delete(key, found.version)


class StaleDeletes(MemoryStore):
    """A store that honours every precondition but a delete's."""

    def delete(self, key: str, version: str) -> None:
        found = self.get(key)
        if found is not None:
            super().delete(key, found.version)


class StalePuts(MemoryStore):
    """A store that honours create-if-absent and deletes but takes a put at any version."""

    def put(self, key: str, data: bytes, version: str) -> str:
        return self._set(key, data)


class PastVersions(MemoryStore):
    """A store that takes a delete at any version the key has ever had (not only the
    current one): the history is checked, not the present."""

    def __init__(self) -> None:
        super().__init__()
        self.issued: set[str] = set()

    def _set(self, key: str, data: bytes) -> str:
        version = super()._set(key, data)
        self.issued.add(version)
        return version

    def delete(self, key: str, version: str) -> None:
        found = self.get(key)
        if found is not None and version not in self.issued:
            raise VersionConflict(key, version)
        if found is not None:
            super().delete(key, found.version)


class LostPuts(MemoryStore):
    """A store that answers a put at the current version with a new version but keeps the
    old value: a write acknowledged and lost."""

    def put(self, key: str, data: bytes, version: str) -> str:
        found = self.get(key)
        assert found is not None
        return super().put(key, found.data, version)


class Unreachable(MemoryStore):
    def get(self, key: str) -> Versioned | None:
        raise StoreUnavailable("no route to the store")

    def create(self, key: str, data: bytes) -> str:
        raise StoreUnavailable("no route to the store")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


@pytest.fixture
def vast(request: pytest.FixtureRequest) -> Iterator[VastAdapter]:
    doc = copy.deepcopy(getattr(request, "param", scenario()))
    fake = FakeVast(parse_scenario(doc), clock=FakeClock())
    with fake.activate(BASE) as mock:
        mock.add_passthru("http://127.0.0.1")
        yield VastAdapter(api_key="k-test", base_url=BASE, clock=fake.ticking())


def checks(tmp_path: Path, vast: Any, receiver: Receiver, **given: Any) -> list[c.Finding]:
    parts: dict[str, Any] = {
        "store": MemoryStore(),
        "vast": vast,
        "public_key": KEY,
        "results": LocalResults(tmp_path / "results"),
        "results_where": str(tmp_path / "results"),
        "endpoints": [AppriseEndpoint(receiver.url)],
        **given,
    }
    return c.run_checks(**parts)


def failed(findings: list[c.Finding]) -> dict[str, int]:
    return {f.check.split()[0] if f.check.startswith("notify") else f.check: f.code
            for f in findings if not f.ok}  # fmt: skip


def test_a_sound_setup_passes_every_check_and_a_person_gets_the_test_notification_o1(
    tmp_path, vast, receiver
):
    """M9/O1: the store, the Vast key, our SSH key, the results and the endpoint: all ok, 0."""
    findings = checks(tmp_path, vast, receiver)

    assert [f.check for f in findings][:5] == [
        "store", "vast key", "ssh key", "key scope", "results"
    ]  # fmt: skip
    assert all(f.ok for f in findings) and c.exit_code(findings) == 0
    assert receiver.titles() == ["gpuops check: a test notification"]
    assert (tmp_path / "results" / "gpuops-check" / "gpuops-check.txt").exists()


@pytest.mark.fault(
    "an S3-compatible store that silently ignores If-Match / If-None-Match",
    handled="`gpuops check` fails its self-test of conditional writes, exit 3, before any money is spent",
)
@pytest.mark.parametrize(
    "store",
    [BlindStore(), StaleDeletes(), StalePuts(), PastVersions(), LostPuts()],
    ids=["blind", "stale-delete", "stale-put", "past-version-delete", "lost-put"],
)
def test_a_store_that_ignores_preconditions_fails_the_self_test_with_exit_3_m4(
    tmp_path, vast, receiver, store
):
    """M3/M4/L3: a store accepting a second create, a stale put or a stale delete is refused."""
    findings = checks(tmp_path, vast, receiver, store=store)

    assert failed(findings) == {"store": 3} and c.exit_code(findings) == 3
    (line,) = [f for f in findings if f.check == "store"]
    assert "does not honour conditional writes" in line.detail
    assert store.list("check/") == []  # the self-test cleans up after itself


def test_a_store_that_cannot_be_reached_exits_4(tmp_path, vast, receiver):
    """The store unreachable: what is wrong and where to look, exit 4 (unavailable)."""
    findings = checks(tmp_path, vast, receiver, store=Unreachable())

    assert failed(findings) == {"store": 4} and c.exit_code(findings) == 4


@pytest.mark.parametrize(
    "vast", [{"vast": {"api_key": "k-test", "ssh_keys": [], "offers": []}}], indirect=True
)
def test_an_account_without_our_ssh_key_fails_with_exit_3_m9(tmp_path, vast, receiver):
    """M9: our SSH key is not registered: every probe would fail on auth; exit 3."""
    findings = checks(tmp_path, vast, receiver)

    assert failed(findings) == {"ssh key": 3} and c.exit_code(findings) == 3


def test_a_vast_key_the_account_refuses_fails_with_exit_2(tmp_path, vast, receiver):
    """A wrong Vast key: the key is a configuration fault (exit 2), the SSH key unchecked."""
    wrong = VastAdapter(api_key="k-wrong", base_url=BASE)
    findings = checks(tmp_path, wrong, receiver)

    assert failed(findings) == {"vast key": 2, "ssh key": 2} and c.exit_code(findings) == 2


def test_a_results_destination_that_cannot_be_written_fails_with_exit_2(tmp_path, vast, receiver):
    """GPUOPS_RESULTS pointing at a file: the guardian could never deliver there; exit 2."""
    (tmp_path / "a-file").write_text("not a directory")
    results = LocalResults(tmp_path / "a-file")
    findings = checks(tmp_path, vast, receiver, results=results, results_where="a-file")

    assert failed(findings) == {"results": 2} and c.exit_code(findings) == 2


def test_a_notification_endpoint_down_unknown_or_missing_fails_by_its_type_o1(
    tmp_path, vast, receiver
):
    """O1: an endpoint answering 500 is unreachable (4); a scheme apprise does not know is a
    configuration fault (2), and so is no endpoint at all."""
    receiver.answers = [500]
    down = checks(tmp_path, vast, receiver)
    unknown = checks(tmp_path, vast, receiver, endpoints=[AppriseEndpoint("nosuchscheme://x")])
    none = checks(tmp_path, vast, receiver, endpoints=[])

    assert failed(down) == {"notify": 4} and c.exit_code(down) == 4
    assert failed(unknown) == {"notify": 2} and c.exit_code(unknown) == 2
    assert failed(none) == {"notify": 2} and "GPUOPS_NOTIFY is not set" in none[-1].detail


@pytest.mark.parametrize(
    "codes, code",
    [((), 0), ((4,), 4), ((2, 4), 2), ((4, 3, 2), 3), ((2,), 2)],
)
def test_the_exit_code_is_the_worst_failure_s_type_refused_then_config_then_unreachable(
    codes, code
):
    """Exit 3 over 2 over 4; 0 only when every line is ok."""
    findings = [c.Finding("x", True, "fine"), *(c.Finding("y", False, "bad", n) for n in codes)]

    assert c.exit_code(findings) == code


@pytest.mark.parametrize(
    "date, here_s, ok, code",
    [
        ("Tue, 01 Dec 2026 18:00:00 GMT", 1796148000.0, True, 0),
        ("Tue, 01 Dec 2026 18:00:00 GMT", 1796148000.0 + 60.0, True, 0),
        ("Tue, 01 Dec 2026 18:00:00 GMT", 1796148000.0 - 60.0, True, 0),
        ("Tue, 01 Dec 2026 18:00:00 GMT", 1796148000.0 + 61.0, False, 2),
        ("Tue, 01 Dec 2026 18:00:00 GMT", 1796148000.0 - 900.0, False, 2),
        (None, 1796148000.0, False, 4),
        ("yesterday", 1796148000.0, False, 4),
    ],
)
def test_this_host_s_clock_is_judged_against_the_provider_s_date_m17(date, here_s, ok, code):
    """M5/M17: within CHECK_CLOCK_TOLERANCE_S of the provider's Date is ok; further is a
    configuration fault (fix NTP, exit 2); no readable Date cannot be judged (4)."""
    finding = c.check_clock(date, here_s)

    assert (finding.check, finding.ok, finding.code) == ("clock", ok, code)
    if not ok and code == 2:
        assert "NTP" in finding.detail


def test_the_clock_is_checked_on_the_vast_answer_s_date_and_only_when_vast_answered(
    tmp_path, vast, receiver
):
    """M17: the clock line follows the Vast lines when the adapter's answers were seen; a Vast
    that refused our key leaves nothing to compare."""
    seen = [("Tue, 01 Dec 2026 18:00:00 GMT", 1796148003.0)]
    judged = checks(tmp_path, vast, receiver, dates=seen)
    refused = checks(tmp_path, VastAdapter(api_key="k-wrong", base_url=BASE), receiver, dates=[])

    assert [f.check for f in judged][:6] == [
        "store", "vast key", "ssh key", "clock", "key scope", "results"
    ]  # fmt: skip
    assert all(f.ok for f in judged)
    assert "clock" not in [f.check for f in refused]


# --- the command: `gpuops check` in this process, every adapter real -------------------------
GCE = "http://gce.fake.test"
VAST = "https://vast.fake.test"  # not the adapter's default: the configured URL must be used


LANE_VM: list[Any] = []  # the command fixture's FakeGCE, for a test to move its VM


@pytest.fixture
def command(tmp_path: Path, receiver: Receiver) -> Iterator[dict[str, str]]:
    """`run_check`'s environment: FakeVast (its answers dated now) and FakeGCE (the lane's VM
    TERMINATED with its ceiling) in-process, a local store and results, the receiver."""
    import time
    from email.utils import formatdate

    import responses

    from fakes import seam
    from fakes.gce import FakeGCE, LaneScenario
    from fakes.gce.server import site

    def dated(response: Any) -> Any:
        if response.url.startswith(VAST):
            response.headers["Date"] = formatdate(time.time(), usegmt=True)
        return response

    vast = FakeVast(parse_scenario(scenario()), clock=FakeClock())
    gce = FakeGCE(LaneScenario(run_ceiling_s=21600.0), FakeClock())
    LANE_VM[:] = [gce]
    key = tmp_path / "id_ed25519.pub"
    key.write_text(KEY + "\n")
    mock = responses.RequestsMock(assert_all_requests_are_fired=False, response_callback=dated)
    with mock, vast.activate(VAST, mock=mock), seam.activate(site(gce, ticker=False), GCE, mock=mock):
        mock.add_passthru("http://127.0.0.1")
        yield {
            "HOME": str(tmp_path),
            "VAST_URL": VAST,
            "VAST_API_KEY": "k-test",
            "GPUOPS_SSH_KEY": str(key),
            "GPUOPS_STATE": str(tmp_path / "state"),
            "GPUOPS_EVENTS": str(tmp_path / "events.jsonl"),
            "GPUOPS_RESULTS": str(tmp_path / "results"),
            "GPUOPS_OPERATOR": "alice",
            "GPUOPS_NOTIFY": receiver.url,
            "GPUOPS_LANE_PROJECT": "gpuops-lane",
            "GPUOPS_LANE_ZONE": "us-central1-b",
            "GPUOPS_LANE_INSTANCE": "gpu-lane",
            "GPUOPS_LANE_BUCKET": "gpuops-lane-jobs",
            "GPUOPS_GCE_ENDPOINT": GCE,
            "STORAGE_EMULATOR_HOST": GCE,
        }


def run(env: dict[str, str], capsys: pytest.CaptureFixture[str], as_json: bool = False, **given: str) -> tuple[int, str]:
    from gpuops.settings import Settings

    settings = Settings.from_environ({**env, **given})
    code = c.run_check(settings, as_json)
    return code, capsys.readouterr().out


def test_the_command_prints_one_ok_line_per_check_in_order_and_exits_0_o1(command, capsys, receiver):
    """M9/O1/L12: every adapter real (Vast, GCE, GCS, apprise): one `ok   name: detail` line
    per check, the store first and the notification last, and exit 0."""
    code, out = run(command, capsys)

    names = [line.partition(": ")[0] for line in out.splitlines()]
    assert code == 0, out
    assert names[:-1] == [
        "ok   store", "ok   vast key", "ok   ssh key", "ok   clock", "ok   key scope",
        "ok   results", "ok   lane vm", "ok   lane ceiling", "ok   lane bucket",
    ]  # fmt: skip
    assert names[-1].startswith("ok   notify json-")
    assert "ok   clock: this host's clock is " in out
    assert receiver.titles() == ["gpuops check: a test notification"]


def test_the_command_s_json_lists_every_check_with_the_exit_code(command, capsys):
    """--json: one object, every check's name, ok and detail, and the exit code it returns."""
    import json

    code, out = run(command, capsys, as_json=True, GPUOPS_LANE_INSTANCE="no-such-vm")
    doc = json.loads(out)
    assert out == json.dumps(doc, indent=2) + "\n"  # one object, two-space indents
    unread = json.loads(run(command, capsys, as_json=True, GPUOPS_SSH_KEY="/nonexistent.pub")[1])

    assert code == 2 and doc["exit_code"] == 2
    assert unread["checks"][2]["check"] == "ssh key" and unread["checks"][2]["ok"] is False
    assert [row["check"] for row in doc["checks"]][6:9] == ["lane vm", "lane ceiling", "lane bucket"]
    assert [row["ok"] for row in doc["checks"]][6:9] == [False, False, True]
    assert set(doc["checks"][0]) == {"check", "ok", "detail"}
    assert "GPUOPS_LANE_INSTANCE" in doc["checks"][6]["detail"]


def test_without_a_lane_configured_the_command_has_no_lane_line(command, capsys):
    """No GPUOPS_LANE_* at all: the lane is not checked (no line), the rest is."""
    env = {k: v for k, v in command.items() if not k.startswith("GPUOPS_LANE_")}
    code, out = run(env, capsys)

    assert code == 0, out
    assert not [line for line in out.splitlines() if line.split(":")[0].endswith(("lane vm", "lane ceiling", "lane bucket", " lane"))]
    assert len(out.splitlines()) == 7


def test_an_unreadable_ssh_key_file_is_exit_2_whether_or_not_vast_answers_m9(command, capsys, tmp_path):
    """M9: GPUOPS_SSH_KEY naming no file: an `ssh key` FAIL line saying so (2), in the SSH
    key's place after the Vast key's; with no Vast key either, it replaces the `not checked`."""
    missing = str(tmp_path / "nope.pub")
    code, out = run(command, capsys, GPUOPS_SSH_KEY=missing)
    no_vast = {k: v for k, v in command.items() if k != "VAST_API_KEY"}
    code_without, out_without = run(no_vast, capsys, GPUOPS_SSH_KEY=missing)

    lines = out.splitlines()
    assert code == 2 and lines[1].startswith("ok   vast key")
    assert lines[2].startswith("FAIL ssh key: cannot read the SSH public key") and "set GPUOPS_SSH_KEY" in lines[2]
    assert [line for line in out.splitlines() if "ssh key" in line] == [lines[2]]
    rows = out_without.splitlines()
    assert code_without == 2
    assert rows[1].startswith(
        "FAIL vast key: Vast refused our key: vast: no key: no Vast.ai API key found; set "
        "VAST_API_KEY"
    )
    assert rows[2].startswith("FAIL ssh key: cannot read the SSH public key")
    assert "not checked" not in out_without and "clock" not in out_without


@contextmanager
def s3_stand_in(monkeypatch: pytest.MonkeyPatch, **options: Any) -> Iterator[Any]:
    """The S3 stand-in on loopback (``serve_s3(**options)``) with its credentials in the
    environment and no AWS_ENDPOINT_URL: only GPUOPS_S3_ENDPOINT may point at it."""
    from fakes.s3 import CREDENTIALS, REGION, S3Unavailable, serve_s3

    try:
        s3 = serve_s3(**options)
    except S3Unavailable:
        pytest.skip("the S3 stand-in is not installed")
    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    try:
        yield s3
    finally:
        s3.close()


def test_the_command_reaches_an_s3_store_and_s3_results_through_gpuops_s3_endpoint(
    command, capsys, monkeypatch
):
    """GPUOPS_S3_ENDPOINT carries the state store's and the results' S3 (an S3-compatible
    store on loopback): the self-test and a delivery pass there, and nothing reaches AWS."""
    with s3_stand_in(monkeypatch, protect="state") as s3:
        code, out = run(
            command,
            capsys,
            GPUOPS_STATE=f"s3://{s3.bucket}/state",
            GPUOPS_RESULTS=f"s3://{s3.bucket}/results",
            GPUOPS_S3_ENDPOINT=s3.url,
        )

    assert code == 0, out
    assert f"ok   store: s3://{s3.bucket}/state is reachable" in out
    assert (
        f"ok   state policy: {s3.bucket}'s policy refuses unconditional writes to "
        f"arn:aws:s3:::{s3.bucket}/state/*"
    ) in out.splitlines()[1]
    assert f"ok   results: s3://{s3.bucket}/results takes results" in out


class Keys:
    """A Vast stand-in: the account's keys, or the error listing them raises."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def list_ssh_keys(self) -> list[Any]:
        if self.error is not None:
            raise self.error
        return []


class Down:
    id = "json-down"

    def send(self, alarm: Any, /) -> str | None:
        return "not delivered (FAILURE)"


SAFE = (
    "Every compare-and-swap would be a blind overwrite (M3, M4, L3): use a store that enforces "
    "If-Match / If-None-Match (AWS S3, MinIO, a local directory)"
)


@pytest.mark.parametrize(
    "line, expected",
    [
        (lambda: c.check_store(MemoryStore()), "memory:// is reachable and honours conditional writes"),
        (
            lambda: c.check_store(BlindStore()),
            "memory:// does not honour conditional writes: a second create-if-absent was "
            f"accepted. {SAFE}",
        ),
        (
            lambda: c.check_store(StaleDeletes()),
            f"memory:// does not honour conditional writes: a delete at a stale version was accepted. {SAFE}",
        ),
        (
            lambda: c.check_store(StalePuts()),
            f"memory:// does not honour conditional writes: a put at a stale version was accepted. {SAFE}",
        ),
        (
            lambda: c.check_store(LostPuts()),
            "memory:// does not honour conditional writes: a put at the current version that "
            f"reads back another value was accepted. {SAFE}",
        ),
        (
            lambda: c.check_store(Unreachable()),
            "cannot reach memory://: StoreUnavailable: no route to the store; check GPUOPS_STATE, "
            "the network and the credentials",
        ),
        (
            lambda: c.check_vast(Keys(AuthFailed("vast", "HTTP 401", 401)), KEY),
            "Vast refused our key: vast: HTTP 401; set VAST_API_KEY (or `vastai set api-key`) to "
            "a key of this account | not checked: the Vast key does not work",
        ),
        (
            lambda: c.check_vast(Keys(ProviderUnavailable("vast", "HTTP 503", 503)), KEY),
            "the Vast API did not answer: ProviderUnavailable: vast unavailable: HTTP 503; check "
            "VAST_URL and the network; try again | not checked: the Vast API did not answer",
        ),
        (
            lambda: c.check_vast(Keys(), KEY),
            "the Vast API answers our key (0 SSH key(s)) | our SSH public key (GPUOPS_SSH_KEY) is "
            "not registered with the account: every probe would fail on auth (M9); `gpuops rent` "
            "registers it, or add it in the console",
        ),
        (
            lambda: c.check_notify([]),
            "GPUOPS_NOTIFY is not set: alarms would be event-log lines nobody hears (O1); set it "
            "to an apprise URL (json://, ntfy://, mailto://, slack://...)",
        ),
        (
            lambda: c.check_notify([AppriseEndpoint("nosuchscheme://x")]),
            "apprise does not know this URL (its scheme, or its form): fix the URL in GPUOPS_NOTIFY",
        ),
        (
            lambda: c.check_notify([Down()]),
            "not delivered (FAILURE); check the endpoint and its URL",
        ),
        (lambda: c.check_clock(None, 0.0), "the provider's answer had no Date header to compare "
         "this host's clock with; run `gpuops check` again"),  # fmt: skip
        (lambda: c.check_clock("yesterday", 0.0), "the provider's Date 'yesterday' is not an HTTP date"),
        (
            lambda: c.check_clock("Tue, 01 Dec 2026 18:00:00 GMT", 1796148061.0),
            "this host's clock is +61 s from the provider's Date: every deadline is read on it "
            "(M5); more than 60 s off: set it by NTP (timedatectl set-ntp true, or chrony)",
        ),
        (
            lambda: c.check_clock("Tue, 01 Dec 2026 18:00:00 GMT", 1796147997.0),
            "this host's clock is -3 s from the provider's",
        ),
    ],
)
def test_each_line_says_in_full_what_was_seen_or_what_is_wrong_and_how_to_fix_it(line, expected):
    """What a person reads, word for word: the store, the Vast and SSH keys, the
    notifications and the clock (each finding's detail, joined by ' | ')."""
    found = line()
    details = [found] if isinstance(found, c.Finding) else found

    assert " | ".join(f.detail for f in details) == expected
    assert all(f.ok is (f.code == 0) for f in details)  # a failure is False, never falsy


def test_the_results_probe_is_one_small_file_in_its_own_entry_and_a_bad_place_says_why(tmp_path):
    """The delivery is `gpuops-check/gpuops-check.txt` holding one line; a destination that
    is a file says what failed and what to point GPUOPS_RESULTS at."""
    (tmp_path / "a-file").write_text("x")
    good = c.check_results(LocalResults(tmp_path / "r"), "WHERE")
    bad = c.check_results(LocalResults(tmp_path / "a-file"), "WHERE")

    delivered = tmp_path / "r" / "gpuops-check" / "gpuops-check.txt"
    assert delivered.read_text() == "gpuops check\n"
    assert (good.check, good.ok, bad.check, bad.ok, bad.code) == ("results", True, "results", False, 2)
    assert good.detail == f"WHERE takes results ({tmp_path / 'r' / 'gpuops-check'}/gpuops-check.txt)"
    assert bad.detail == (
        "WHERE does not take results: NotADirectoryError: [Errno 20] Not a directory: "
        f"'{tmp_path / 'a-file' / 'gpuops-check'}'; point GPUOPS_RESULTS at a writable directory "
        "or s3://bucket/prefix"
    )


class Refusing(MemoryStore):
    """A store that refuses every write outright (a bucket policy, a read-only mount)."""

    def create(self, key: str, data: bytes) -> str:
        from gpuops.errors import StateError

        raise StateError(f"{key}: writes are refused here")


class Unreached:
    def deliver(self, name: str, tarball: Path) -> str:
        raise StoreUnavailable("no route to the bucket")


def test_a_store_that_refuses_writes_is_exit_3_and_unreachable_results_are_exit_4(tmp_path):
    """A store refusing the self-test's writes outright: 3 (nothing could be recorded); a
    results destination that cannot be reached: 4, where to look."""
    store = c.check_store(Refusing())
    results = c.check_results(Unreached(), "s3://b/r")

    assert (store.check, store.ok, store.code) == ("store", False, 3)
    assert store.detail.startswith("memory:// refused the self-test: ")
    assert store.detail.endswith("writes are refused here")
    assert (results.check, results.ok, results.code) == ("results", False, 4)
    assert results.detail == (
        "cannot reach s3://b/r: StoreUnavailable: no route to the bucket; check GPUOPS_RESULTS"
    )


def test_the_command_accounts_for_a_running_lane_vm_by_the_board_in_its_own_store_l13(
    command, capsys
):
    """L13: the VM RUNNING under the claim the board in GPUOPS_STATE holds (and its label
    carries) is ok; the same VM with that board gone bills with nobody's job: exit 3."""
    from gpuops.lane import board as b
    from gpuops.lane import decide as d
    from gpuops.lane.runner import BoardCodec, BoardFile
    from gpuops.store.local import LocalStore
    from gpuops.store.records import Records

    (gce,) = LANE_VM
    held = b.Board("gpu-lane", "gpu-lane", 1796148000.0, b.RUNNING, "bob", "portraits", 1,
                   claimed=1796148000.0, started=1796148000.0, boot="boot1", revision=2, epoch=4)  # fmt: skip
    boards = Records(LocalStore(Path(command["GPUOPS_STATE"])), "lane/", BoardCodec())
    boards.update("gpu-lane/board", lambda cur: BoardFile(held, ()))
    gce.status = "RUNNING"
    gce.labels = {d.CLAIM_LABEL: d.claim_label(4, d.holder_token("bob", "portraits"))}
    code, out = run(command, capsys)
    boards.remove("gpu-lane/board", lambda cur: True)
    code_gone, out_gone = run(command, capsys)

    assert code == 0, out
    assert "ok   lane vm: gpu-lane is RUNNING for bob's job portraits" in out
    assert code_gone == 3 and "FAIL lane vm: gpu-lane is RUNNING but the lane has no board" in out_gone


class Registered:
    """A Vast stand-in whose account holds our key."""

    def list_ssh_keys(self) -> list[Any]:
        from gpuops.model import SshKey

        return [SshKey(1, KEY)]


class Recording:
    id = "json-rec"

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, alarm: Any, /) -> str | None:
        self.sent.append(alarm)
        return None


UNREAD = c.Finding("ssh key", False, "cannot read the SSH public key k.pub; set GPUOPS_SSH_KEY", 2)


def test_the_vast_and_ssh_key_lines_by_what_vast_answers_and_our_key_file_m9():
    """M9: registered is ok; Vast not answering is 4 on both lines, with our unreadable key
    file's own line standing for the SSH key's whatever Vast says."""
    down = Keys(ProviderUnavailable("vast", "HTTP 503", 503))
    refused = Keys(AuthFailed("vast", "HTTP 401", 401))

    def rows(found: list[c.Finding]) -> list[tuple[str, bool, int]]:
        return [(f.check, f.ok, f.code) for f in found]

    assert [(f.check, f.ok, f.detail) for f in c.check_vast(Registered(), KEY)] == [
        ("vast key", True, "the Vast API answers our key (1 SSH key(s))"),
        ("ssh key", True, "our SSH public key is registered (M9)"),
    ]
    assert rows(c.check_vast(down, KEY)) == [("vast key", False, 4), ("ssh key", False, 4)]
    assert c.check_vast(down, UNREAD)[1] is UNREAD
    assert c.check_vast(refused, UNREAD)[1] is UNREAD
    assert c.check_vast(Registered(), UNREAD)[1] is UNREAD
    assert rows(c.check_vast(Registered(), None)) == [("vast key", True, 0)]


def test_the_test_notification_is_one_alarm_a_person_can_read_o1():
    """O1: each endpoint gets the same test alarm: its subject and body say what it is."""
    from gpuops.alarms import Alarm, AlarmKind

    endpoint = Recording()
    (line,) = c.check_notify([endpoint])

    assert endpoint.sent == [
        Alarm(AlarmKind.GUARDIAN_EXIT, "check.notify", "gpuops check: a test notification",
              "If you read this, gpuops alarms reach you (O1).")
    ]  # fmt: skip
    assert (line.check, line.ok, line.detail) == ("notify json-rec", True, "a test notification was delivered")


def test_the_clock_is_judged_on_the_last_answer_and_only_when_the_vast_key_works(tmp_path):
    """M17: with Vast answering, the clock line follows whatever the SSH key says (here
    unregistered), judged on the last answer seen; no answer seen is the no-Date line; a
    lane given as a finding (incomplete settings) stands in the lane's place."""
    results = LocalResults(tmp_path / "results")
    lane = c.Finding("lane", False, "the lane needs GPUOPS_LANE_ZONE", 2)
    dates = [("Tue, 01 Dec 2026 17:00:00 GMT", 0.0), ("Tue, 01 Dec 2026 18:00:00 GMT", 1796148001.0)]

    seen = c.run_checks(MemoryStore(), Keys(), KEY, results, "r", [Recording()], dates, lane)
    unseen = c.run_checks(MemoryStore(), Keys(), KEY, results, "r", [Recording()], [], None)

    assert [f.check for f in seen] == [
        "store", "vast key", "ssh key", "clock", "key scope", "results", "lane", "notify json-rec"
    ]  # fmt: skip
    assert seen[3].ok and seen[3].detail == "this host's clock is +1 s from the provider's"
    assert seen[4] is c.KEY_SCOPE and seen[6] is lane
    assert unseen[3] is c.NO_DATE


def test_the_vast_key_may_come_from_the_config_file_and_the_file_gets_a_line_first(
    command, capsys, tmp_path
):
    """The config file's vast_api_key is the key checked (none in the environment), and a
    file that was read gets the first line, its permissions judged."""
    from gpuops.settings import Settings, read_config

    path = tmp_path / "config.toml"
    path.write_text('vast_api_key = "k-test"\n')
    path.chmod(0o600)
    env = {k: v for k, v in command.items() if k != "VAST_API_KEY"} | {"GPUOPS_CONFIG": str(path)}
    settings = Settings.from_environ(env, config=read_config(env))

    code = c.run_check(settings, False)
    out = capsys.readouterr().out

    lines = out.splitlines()
    assert code == 0, out
    assert lines[0] == f"ok   config: {path} (mode 0600): vast_api_key"
    assert lines[2].startswith("ok   vast key: ")


# --- the state bucket's policy (s3:// state) ---------------------------------------------------
TARGET = "arn:aws:s3:::b/state/*"
ENFORCING = {
    "Effect": "Deny",
    "Principal": "*",
    "Action": "s3:PutObject",
    "Resource": "arn:aws:s3:::b/state/*",
    "Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"}},
}
NONE_OF_IT = f"has no statement denying an unconditional s3:PutObject on {TARGET} to every principal"


def policy(*statements: object, **doc: object) -> str:
    import json

    return json.dumps({"Version": "2012-10-17", "Statement": list(statements), **doc})


@pytest.mark.parametrize(
    ("text", "gap"),
    [
        (policy(ENFORCING), None),
        (policy(ENFORCING | {"Principal": {"AWS": "*"}}), None),
        (policy(ENFORCING | {"Action": ["s3:GetObject", "s3:put*"]}), None),  # case aside
        (policy(ENFORCING | {"Action": "s3:*", "Resource": "arn:aws:s3:::b/*"}), None),
        (policy(ENFORCING | {"Resource": ["arn:aws:s3:::other/*", "arn:aws:s3:::b/st?te/*"]}), None),
        (policy(ENFORCING | {"Condition": {"Null": {"S3:If-Match": True, "s3:if-none-match": "TRUE"}}}), None),
        ("{not json", "has a bucket policy that is not JSON"),
        ('["a list"]', NONE_OF_IT),
        (policy(), NONE_OF_IT),
        ('{"Statement": {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", '
         '"Resource": "arn:aws:s3:::b/state/*", "Condition": {"Null": {"s3:if-none-match": '
         '"true", "s3:if-match": "true"}}}}', None),  # one statement, not in a list
        (policy("a statement that is text"), NONE_OF_IT),
        (policy(ENFORCING | {"Effect": "Allow"}), NONE_OF_IT),
        (policy(ENFORCING | {"Principal": {"AWS": "arn:aws:iam::1:user/alice"}}), NONE_OF_IT),
        (policy(ENFORCING | {"Action": "s3:GetObject"}), NONE_OF_IT),
        (policy(ENFORCING | {"Action": "s3:putobjectx"}), NONE_OF_IT),
        (policy(ENFORCING | {"Action": 7}), NONE_OF_IT),
        (policy(ENFORCING | {"Resource": "arn:aws:s3:::b/state/ledger/*"}), NONE_OF_IT),
        (policy(ENFORCING | {"Resource": "arn:aws:s3:::B/state/*"}), NONE_OF_IT),  # case counts
        (policy(ENFORCING | {"Resource": "xarn:aws:s3:::b/state/*"}), NONE_OF_IT),
        (policy({k: v for k, v in ENFORCING.items() if k != "Condition"}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "true"},
                                           "Bool": {"aws:SecureTransport": "false"}}}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"StringEquals": {"s3:if-match": "x"}}}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"Null": ["s3:if-match"]}}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"Null": {"s3:if-none-match": "true", "s3:if-match": "false"}}}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"Null": {"s3:if-none-match": "true", "aws:userid": "true"}}}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"Null": {}}}), NONE_OF_IT),
        (policy(ENFORCING | {"Condition": {"Null": {"s3:if-none-match": "true"}}}),
         f"denies every s3:PutObject on {TARGET} without s3:if-none-match, gpuops' own "
         "compare-and-swap among them (a create carries If-None-Match, a change If-Match): "
         "deny only when both are null"),
        (policy(ENFORCING, ENFORCING | {"Condition": {"Null": {"s3:if-match": "true"}}}),
         f"denies every s3:PutObject on {TARGET} without s3:if-match, gpuops' own "
         "compare-and-swap among them (a create carries If-None-Match, a change If-Match): "
         "deny only when both are null"),
        (policy({"Effect": "Allow"}, ENFORCING), None),
    ],
)
def test_a_bucket_policy_requires_conditional_writes_only_as_documented_m3(text, gap):
    """M3/M4: the policy must deny every principal's PutObject on the whole prefix when both
    conditional-write keys are null, and nothing more; a Deny on one key alone refuses gpuops'
    own writes, and is named so."""
    assert c.policy_gap(text, TARGET) == gap


class Bucket:
    """A store with a bucket policy to read (as S3Store has): its text, None, or an error."""

    url = "s3://b/state"
    bucket, prefix = "b", "state"

    def __init__(self, answer: str | Exception | None) -> None:
        self.answer = answer

    def bucket_policy(self) -> str | None:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


FIX = (
    "set the bucket policy of docs/s3-state.md (Deny s3:PutObject on arn:aws:s3:::b/state/* "
    "when s3:if-none-match and s3:if-match are both null)"
)


def test_the_state_policy_line_names_a_bucket_with_no_policy_or_a_policy_that_does_not_enforce():
    """A policy-less bucket and a non-enforcing one are configuration faults (2) naming the
    bucket, what any writer could do and the fix; an enforcing one is ok; no line for a store
    with no bucket policy (a local directory)."""
    missing = c.check_state_policy(Bucket(None))  # type: ignore[arg-type]
    lax = c.check_state_policy(Bucket(policy(ENFORCING | {"Effect": "Allow"})))  # type: ignore[arg-type]
    sound = c.check_state_policy(Bucket(policy(ENFORCING)))  # type: ignore[arg-type]

    assert missing == c.Finding(
        "state policy", False, "b has no bucket policy: any client that may write s3://b/state "
        f"can overwrite a record unconditionally (M3, M4); {FIX}", 2,
    )  # fmt: skip
    assert lax == c.Finding(
        "state policy", False, f"b {NONE_OF_IT}: any client that may write s3://b/state can "
        f"overwrite a record unconditionally (M3, M4); {FIX}", 2,
    )  # fmt: skip
    assert sound == c.Finding(
        "state policy", True, "b's policy refuses unconditional writes to arn:aws:s3:::b/state/*"
    )
    assert c.check_state_policy(MemoryStore()) is None


def test_a_policy_on_a_bucket_with_no_prefix_covers_the_whole_bucket():
    """State at the bucket's root: the policy must cover every key of the bucket."""
    root = Bucket(policy(ENFORCING | {"Resource": "arn:aws:s3:::b/*"}))
    root.prefix = ""
    narrow = Bucket(policy(ENFORCING))
    narrow.prefix = ""

    assert c.check_state_policy(root).ok  # type: ignore[arg-type, union-attr]
    assert "arn:aws:s3:::b/*" in c.check_state_policy(narrow).detail  # type: ignore[arg-type, union-attr]


@pytest.mark.parametrize(
    ("error", "code", "detail"),
    [
        (StoreForbidden("S3 refused to show the bucket policy of 'b': AccessDenied"), 2,
         "S3 refused to show the bucket policy of 'b': AccessDenied; ask the bucket's owner to "
         f"check it, or grant s3:GetBucketPolicy; {FIX}"),
        (StoreMissing("S3 refused 'the bucket policy': NoSuchBucket"), 2,
         "S3 refused 'the bucket policy': NoSuchBucket; ask the bucket's owner to check it, or "
         f"grant s3:GetBucketPolicy; {FIX}"),
        (StoreUnavailable("no route"), 4,
         f"cannot read the policy of b: StoreUnavailable: no route; {FIX}"),
    ],
)
def test_a_policy_that_cannot_be_read_is_named_with_why(error, code, detail):
    """Credentials that may not read the policy (or a bucket that is not there): 2; S3 not
    answering: 4; each with the fix."""
    assert c.check_state_policy(Bucket(error)) == c.Finding("state policy", False, detail, code)  # type: ignore[arg-type]


def test_the_command_names_a_state_bucket_without_the_policy_and_exits_2(command, capsys, monkeypatch):
    """A real S3Store on the stand-in without the policy: the state policy line FAILs naming
    the bucket, and the command exits 2 (everything else ok)."""
    with s3_stand_in(monkeypatch) as s3:
        code, out = run(command, capsys, GPUOPS_STATE=f"s3://{s3.bucket}/state", GPUOPS_S3_ENDPOINT=s3.url)

    failing = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert code == 2, out
    assert failing == [
        f"FAIL state policy: {s3.bucket} has no bucket policy: any client that may write "
        f"s3://{s3.bucket}/state can overwrite a record unconditionally (M3, M4); set the bucket "
        f"policy of docs/s3-state.md (Deny s3:PutObject on arn:aws:s3:::{s3.bucket}/state/* when "
        "s3:if-none-match and s3:if-match are both null)"
    ]


def test_the_key_scope_line_says_vast_does_not_tell_and_only_when_the_key_works(tmp_path, vast, receiver):
    """What a key may do is not readable from Vast: one ok line saying so and where the
    guardian's recipe is, after the Vast lines; none when the key itself failed."""
    works = checks(tmp_path, vast, receiver)
    refused = checks(tmp_path, VastAdapter(api_key="k-wrong", base_url=BASE), receiver)

    assert c.KEY_SCOPE in works
    assert c.KEY_SCOPE.detail == (
        "not known: Vast does not tell a key what it may do (its list of API keys carries no "
        "permissions), so gpuops cannot name a key broader than its use needs. A guardian host "
        "needs only instance_read and instance_write: docs/threat-model.md has the recipe"
    )
    assert (c.KEY_SCOPE.check, c.KEY_SCOPE.ok) == ("key scope", True)
    assert "key scope" not in [f.check for f in refused]
