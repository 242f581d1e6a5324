"""FakeGCE: the instance's lifecycle, the silent no-op, scripted stockouts and fingerprint
races, boots that run the installed script for real (its failures, its power-off or the lack
of one, SIGTERM, the metadata server); loud on unknown routes."""

from __future__ import annotations

import signal
import time

import pytest

from fakes.gce import FakeGCE, LaneScenario, parse_lane
from fakes.gce.routes import UnknownRoute, dispatch
from fakes.gce.server import serve_http
from fakes.scenario import ScenarioError
from fakes.vast.clock import FakeClock
from fakes.vast.wire import Request
from gpuops.lane import script

SCRIPT = script.render(
    "portraits", "gpuops-lane-jobs", 'python3 "$WORK/job.py"', inputs=("ref.png",)
)


@pytest.fixture
def real(tmp_path):
    """Make a FakeGCE whose boots run for real (a loopback server for the shims); every
    process is killed at teardown."""
    made = []

    def make(**kwargs: object) -> tuple[FakeGCE, FakeClock]:
        clock = FakeClock()
        fake = FakeGCE(LaneScenario(**kwargs), clock)  # type: ignore[arg-type]
        fake.metadata = {"startup-script": SCRIPT, "gpuops-attempt": "b1"}
        made.append(serve_http(fake, ticker=False, boot_root=tmp_path / f"boots{len(made)}"))
        return fake, clock

    yield make
    for server in made:
        server.close()


def _fake(**kwargs: object) -> tuple[FakeGCE, FakeClock]:
    clock = FakeClock()
    fake = FakeGCE(LaneScenario(**kwargs), clock)  # type: ignore[arg-type]
    fake.metadata = {"startup-script": SCRIPT, "gpuops-attempt": "b1"}
    return fake, clock


def _at(fake: FakeGCE, clock: FakeClock, seconds: float) -> str:
    fake.advance(seconds)
    return fake.status


def test_a_boot_walks_provisioning_staging_running_stopping_terminated(real):
    """The lifecycle, on the injected clock; the script's own poweroff ends it (L5)."""
    fake, clock = real(staged=("jobs/portraits/inputs/ref.png",), job_runtime_s=60.0)

    fake.start()
    seen = [fake.status] + [_at(fake, clock, s) for s in (5.0, 10.0, 0.0, 60.0, 5.0)]

    assert seen == ["PROVISIONING", "STAGING", "RUNNING", "RUNNING", "STOPPING", "TERMINATED"]
    assert fake.objects["jobs/portraits/status"] == b"succeeded b1 \n"
    assert fake.objects["jobs/portraits/boot/b1"].startswith(b"b1 ")
    assert len([n for n in fake.objects if "/results/" in n]) == 6
    # the script's scratch files stay in the VM's own /tmp (the sandbox's), never the host's
    scratch = {p.name for p in (fake.processes[1].sandbox / "tmp").iterdir()}
    pid = fake.processes[1].pid
    assert {f"gpuops-{what}-{pid}" for what in ("status", "boot", "manifest")} <= scratch
    assert "/tmp/" not in SCRIPT


def test_start_on_a_running_instance_is_a_silent_noop(real):
    """L2: DONE, no error, nothing changes, no second boot."""
    fake, clock = real(staged=("jobs/portraits/inputs/ref.png",))
    fake.start()
    _at(fake, clock, 20.0)

    op = fake.start()

    assert op.outcome == "ok" and fake.status == "RUNNING" and fake.boots == 1


def test_scripted_start_outcomes_are_consumed_in_order_then_ok():
    """L7: stockouts leave the instance TERMINATED; then starts succeed."""
    fake, _ = _fake(starts=["stockout", "quota"])

    outcomes = [fake.start().outcome, fake.start().outcome]
    last = fake.start()

    assert outcomes == ["stockout", "quota"] and last.outcome == "ok"
    assert fake.status == "PROVISIONING"


def test_a_scripted_fingerprint_race_loses_once_then_a_fresh_read_wins():
    """A metadata writer that read before another's write gets a 412, once."""
    fake, _ = _fake(fingerprint_races=1)
    before = fake.fingerprint

    lost = fake.set_metadata(before, {"k": "v"})
    won = fake.set_metadata(fake.fingerprint, {"k": "v"})

    assert lost is None and won is not None and fake.metadata == {"k": "v"}


def test_a_typo_in_job_uploads_every_report_under_the_wrong_prefix(real):
    """The 13 November failure, run for real: the reports exist, misfiled."""
    fake, clock = real()
    fake.metadata["startup-script"] = SCRIPT.replace('JOB="portraits"', 'JOB="portroaits"')

    fake.start()
    _at(fake, clock, 15.0)

    assert "jobs/portraits/status" not in fake.objects
    assert fake.objects["jobs/portroaits/status"].startswith(b"failed b1 missing staged input")
    assert fake.status == "STOPPING"


@pytest.mark.parametrize(
    "scenario, reason",
    [
        ({"broken_imports": ("torch",)}, b"preflight: import torch failed"),
        ({"installed": ()}, b"preflight: import torch failed"),
        ({"disk_free_gb": 5}, b"preflight: 5 GB free on /work, need 20"),
        ({}, b"missing staged input ref.png"),
    ],
)
def test_a_failure_ends_the_boot_with_its_reason_and_the_script_powers_off_l6(
    real, scenario, reason
):
    """L6/L12: the reason is in the status file, the final log is uploaded, and the
    template's EXIT trap powers the fake VM off (STOPPING, then TERMINATED)."""
    fake, clock = real(**scenario)

    fake.start()
    states = [_at(fake, clock, 15.0), _at(fake, clock, 5.0)]

    assert fake.objects["jobs/portraits/status"] == b"failed b1 " + reason + b"\n"
    assert states == ["STOPPING", "TERMINATED"]
    assert "jobs/portraits/log.txt" in fake.objects


def test_sigterm_mid_job_ends_the_status_uploads_the_log_and_powers_off_l12(real):
    """L12: an ACPI shutdown (SIGTERM to every process) still ends in the EXIT trap."""
    fake, clock = real(staged=("jobs/portraits/inputs/ref.png",), job_runtime_s=600.0)
    fake.start()
    _at(fake, clock, 15.0)
    _at(fake, clock, 30.0)
    assert fake.objects["jobs/portraits/status"].startswith(b"running")

    fake.signal_boot(signal.SIGTERM)
    state = _at(fake, clock, 0.0)

    assert fake.objects["jobs/portraits/status"].startswith(b"failed b1 terminated by a signal")
    assert state == "STOPPING"


def test_a_script_that_never_powers_off_leaves_the_instance_running_and_billing(real):
    """H4: nothing but the script powers the fake VM off; without it the VM runs on."""
    fake, clock = real(staged=("jobs/portraits/inputs/ref.png",), job_runtime_s=30.0)
    fake.metadata["startup-script"] = '#!/bin/bash\necho "no poweroff here"\n'

    fake.start()
    states = [_at(fake, clock, 15.0), _at(fake, clock, 86400.0)]

    assert states == ["RUNNING", "RUNNING"]


@pytest.mark.parametrize("command", ["poweroff", "shutdown -h now", "shutdown -P now"])
def test_poweroff_and_shutdown_in_the_script_stop_the_fake_vm(real, command):
    """Either spelling of a power-off moves the instance to STOPPING, then TERMINATED."""
    fake, clock = real()
    fake.metadata["startup-script"] = f"#!/bin/bash\nsleep 10\n{command}\n"

    fake.start()
    states = [_at(fake, clock, 15.0), _at(fake, clock, 10.0), _at(fake, clock, 5.0)]

    assert states == ["RUNNING", "STOPPING", "TERMINATED"]


def test_the_metadata_server_needs_its_header_and_other_hosts_are_unreachable(real):
    """The boot's curl: Metadata-Flavor is required, and only GCE's hosts answer."""
    fake, clock = real()
    md = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/gpuops-attempt"
    fake.metadata["startup-script"] = (
        "#!/bin/bash\n"
        f"curl -sf '{md}' > $HOME/no-header; echo $? > $HOME/rc1\n"
        f"curl -sf -H 'Metadata-Flavor: Google' '{md}' > $HOME/attempt\n"
        "curl -sf https://example.com/ ; echo $? > $HOME/rc2\n"
    )

    fake.start()
    _at(fake, clock, 15.0)

    home = fake.processes[1].sandbox
    assert (home / "rc1").read_text() == "22\n" and (home / "attempt").read_text() == "b1"
    assert (home / "rc2").read_text() == "6\n"


def test_closing_the_fake_leaves_no_process_behind(real, tmp_path):
    """Teardown: every process of every boot is gone once the server closes."""
    fake, clock = real(staged=("jobs/portraits/inputs/ref.png",), job_runtime_s=600.0)
    server = serve_http(fake, ticker=False, boot_root=tmp_path / "again")
    fake.start()
    _at(fake, clock, 20.0)
    boot = fake.processes[1]
    assert boot.processes()

    server.close()

    assert boot.processes() == {}


def test_an_unknown_route_is_loud_and_there_is_no_stop_route():
    """Loud fakes; L1: stop and delete are not even routes."""
    fake, _ = _fake()
    base = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane"

    for method, path in (("POST", base + "/stop"), ("DELETE", base), ("POST", base + "/suspend")):
        with pytest.raises(UnknownRoute, match="known"):
            dispatch(fake, Request(method, path, {}, {}))


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"starts": ["stockout", "nope"]}, "lane.starts[1]"),
        ({"stockouts": 3}, "lane.stockouts is not a lane field"),
        ({"job_runtime_s": -1}, "lane.job_runtime_s"),
        ({"results": 1.5}, "lane.results"),
        ({"staged": "a"}, "lane.staged"),
        ({"instance": ""}, "lane.instance"),
        ([], "lane must be a mapping"),
    ],
)
def test_a_bad_lane_scenario_names_the_field(doc, words):
    """Bad input: a typo in a scenario is an error naming the field, never a default."""
    with pytest.raises(ScenarioError) as raised:
        parse_lane(doc)

    assert words in str(raised.value)


def test_a_boot_whose_processes_all_ended_is_never_signalled(real, monkeypatch):
    """Its id may already lead somebody else's process group: nothing is sent to it."""
    import fakes.gce.boot as boot_module

    fake, clock = real()
    fake.metadata["startup-script"] = "#!/bin/bash\ntrue\n"
    fake.start()
    _at(fake, clock, 15.0)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(boot_module.os, "killpg", lambda pid, sig: sent.append((pid, sig)))

    fake.signal_boot(signal.SIGTERM)
    fake.close()

    assert fake.status == "RUNNING" and sent == []


def _op(fake: FakeGCE, name: str) -> dict:
    import json

    path = f"/compute/v1/projects/gpuops-lane/zones/us-central1-b/operations/{name}"
    reply = dispatch(fake, Request("GET", path, {}, {}, b""))
    assert reply.status == 200
    return json.loads(reply.body)


def test_an_operation_is_pending_then_running_then_done_on_the_scenario_clock():
    """A zone operation takes the scenario's durations, with clock times and its own id; the
    instance moves on its own schedule meanwhile (PROVISIONING while the start is RUNNING)."""
    fake, clock = _fake(operation_pending_s=2.0, start_operation_s=4.0)
    op = fake.start()
    seen = []
    for step in (0.0, 2.0, 3.9, 0.1):
        clock.advance(step)
        fake.tick()
        body = _op(fake, op.name)
        seen.append((body["status"], body["progress"], "endTime" in body, fake.status))
    other = fake.set_metadata(fake.fingerprint, {})
    assert other is not None

    assert seen == [
        ("PENDING", 0, False, "PROVISIONING"),
        ("RUNNING", 0, False, "PROVISIONING"),
        ("RUNNING", 0, False, "STAGING"),
        ("DONE", 100, True, "STAGING"),
    ]
    done = _op(fake, op.name)
    assert done["id"] != _op(fake, other.name)["id"] and op.name != other.name
    assert done["insertTime"] < done["startTime"] < done["endTime"]
    assert "error" not in done and "httpErrorStatusCode" not in done


@pytest.mark.parametrize("outcome", ["stockout", "stockout-plain", "insufficient-capacity"])
def test_every_stockout_operation_carries_its_http_error_fields(outcome):
    """L7: a DONE stockout has httpErrorStatusCode and httpErrorMessage (from its
    recording), so a client that trusts ExtendedOperation.result() sees the failure."""
    fake, clock = _fake(starts=[outcome])
    op = fake.start()
    clock.advance(60.0)

    body = _op(fake, op.name)

    assert (body["status"], body["httpErrorStatusCode"]) == ("DONE", 503)
    assert body["httpErrorMessage"] == "SERVICE UNAVAILABLE" and fake.status == "TERMINATED"


def test_the_fakes_own_operation_bodies_say_so():
    """A body no recording captured (unavailable; a start while STOPPING) names itself:
    its error code is fake_gce_*, and both HTTP fields are set."""
    fake, clock = _fake(starts=["unavailable"])
    failed = fake.start()
    fake.status = "STOPPING"
    early = fake.start()
    clock.advance(60.0)

    bodies = [_op(fake, failed.name), _op(fake, early.name)]

    assert [b["error"]["errors"][0]["code"] for b in bodies] == [
        "fake_gce_unavailable",
        "fake_gce_not_ready",
    ]
    assert [b["httpErrorStatusCode"] for b in bodies] == [503, 400]


def test_metadata_fingerprints_are_opaque_base64_and_change_on_every_write():
    """GCE's fingerprint is opaque base64 (8 bytes), never a readable counter."""
    import base64

    fake, _ = _fake()
    seen = [fake.fingerprint]
    for _ in range(3):
        assert fake.set_metadata(fake.fingerprint, {"k": "v"}) is not None
        seen.append(fake.fingerprint)

    assert len(set(seen)) == 4
    assert all(len(base64.b64decode(f, validate=True)) == 8 for f in seen)


def test_a_synchronous_start_refusal_makes_no_operation_and_no_boot():
    """quota-403 and unavailable-503 answer the start call itself: no operation exists."""
    import json

    fake, _ = _fake(starts=["quota-403", "unavailable-503"])
    path = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane/start"
    replies = [dispatch(fake, Request("POST", path, {}, {}, b"")) for _ in range(2)]

    assert [r.status for r in replies] == [403, 503]
    assert json.loads(replies[0].body)["error"]["errors"][0]["reason"] == "quotaExceeded"
    assert fake.operations == {} and fake.status == "TERMINATED" and fake.boots == 0


def test_each_write_makes_a_new_generation_on_the_fake_clock():
    """Generations are per object and per write, strictly increasing even within an instant."""
    fake, clock = _fake()
    first = fake.put("a", b"1").generation
    same_instant = fake.put("b", b"2").generation
    clock.advance(1.0)
    later = fake.put("a", b"3").generation

    assert first < same_instant < later and later - first >= 1_000_000
    assert fake.live("a").metageneration == 1


def test_a_scripted_storage_outage_refuses_writes_under_its_prefix_for_its_time_l9():
    """H4/L9: lane.gcs_write_outage_* answers every write under the prefix with GCS's 503
    (backendError) for that many fake seconds from the first such write; other names, and
    the same name afterwards, are written."""
    import json

    fake, clock = _fake(gcs_write_outage_prefix="jobs/j/results/", gcs_write_outage_s=30.0)

    def write(name: str) -> int:
        query = {"uploadType": "media", "name": name}
        reply = dispatch(
            fake, Request("POST", "/upload/storage/v1/b/gpuops-lane-jobs/o", query, {}, b"x")
        )
        if reply.status != 200:
            assert json.loads(reply.body)["error"]["errors"][0]["reason"] == "backendError"
        return reply.status

    first = write("jobs/j/results/a.png")
    clock.advance(29.0)
    during = write("jobs/j/results/b.png")
    elsewhere = write("jobs/j/status")
    clock.advance(1.0)
    after = write("jobs/j/results/a.png")

    assert (first, during, elsewhere, after) == (503, 503, 200, 200)
    assert sorted(fake.objects) == ["jobs/j/results/a.png", "jobs/j/status"]
    assert parse_lane({"gcs_write_outage_prefix": "jobs/"}).gcs_write_outage_prefix == "jobs/"


@pytest.mark.parametrize(
    "duration, status",
    [
        ({"seconds": "0"}, 400),
        ({"seconds": "29"}, 400),
        ({"seconds": "29", "nanos": 999999999}, 400),
        ({"seconds": "30"}, 200),
        ({"seconds": str(120 * 86400)}, 200),
        ({"seconds": str(120 * 86400 + 1)}, 400),
        ({"seconds": "soon"}, 400),
    ],
)
def test_set_scheduling_refuses_a_max_run_duration_outside_thirty_seconds_to_120_days_l12(
    duration, status
):
    """H4/L12: GCE documents maxRunDuration as 30 s to 120 days; outside them setScheduling is
    a 400 and the instance keeps its ceiling (a 0 never silently removes it)."""
    import json

    fake, _ = _fake()
    fake.set_scheduling(3600.0, "STOP")
    path = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane/setScheduling"
    body = json.dumps({"maxRunDuration": duration, "instanceTerminationAction": "STOP"}).encode()

    reply = dispatch(fake, Request("POST", path, {}, {}, body))

    assert reply.status == status
    if status == 400:
        assert fake.max_run_s == 3600.0
        assert json.loads(reply.body)["error"]["code"] == 400
    else:
        assert fake.max_run_s == float(duration["seconds"])


def test_set_labels_is_a_compare_and_swap_on_the_label_fingerprint_l13():
    """H4/L13: setLabels with the current labelFingerprint replaces the labels and moves the
    fingerprint; with a stale one it is GCE's 412 conditionNotMet and nothing changes; labels
    that break GCE's rules are a 400; get shows labels and labelFingerprint."""
    import json

    fake, _ = _fake()
    base = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane"

    def get() -> dict:
        return json.loads(dispatch(fake, Request("GET", base, {}, {})).body)

    def set_labels(labels: object, fp: str) -> tuple[int, dict]:
        body = json.dumps({"labels": labels, "labelFingerprint": fp}).encode()
        reply = dispatch(fake, Request("POST", base + "/setLabels", {}, {}, body))
        return reply.status, json.loads(reply.body)

    first = get()
    ok, _ = set_labels({"gpuops-claim": "1-held-abcdef12"}, first["labelFingerprint"])
    stale, refusal = set_labels({"gpuops-claim": "1-held-00000000"}, first["labelFingerprint"])
    bad = [set_labels(labels, get()["labelFingerprint"])[0] for labels in (
        {"Gpuops": "x"}, {"gpuops-claim": "UPPER"}, {"k": "x" * 64}, {"1k": "x"},
        {f"k{i}": "" for i in range(65)},
    )]  # fmt: skip
    after = get()

    assert "labels" not in first and first["labelFingerprint"] != after["labelFingerprint"]
    assert ok == 200 and stale == 412 and bad == [400] * 5
    assert refusal["error"]["errors"][0]["reason"] == "conditionNotMet"
    assert after["labels"] == {"gpuops-claim": "1-held-abcdef12"} == fake.labels


def test_a_preset_run_ceiling_is_rendered_as_lane_install_leaves_it_l12():
    """L12: lane.run_ceiling_s is the instance's ceiling as an earlier install set it
    (maxRunDuration with STOP, in the recorded scheduling block); 0 is none, as a new VM."""
    import json

    path = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane"

    def scheduling(fake: FakeGCE) -> dict:
        return json.loads(dispatch(fake, Request("GET", path, {}, {})).body)["scheduling"]

    preset = scheduling(_fake(**vars(parse_lane({"run_ceiling_s": 3600})))[0])
    none = scheduling(_fake()[0])

    assert preset["maxRunDuration"] == {"seconds": "3600"}
    assert preset["instanceTerminationAction"] == "STOP"
    assert "maxRunDuration" not in none and "instanceTerminationAction" not in none


def test_max_run_duration_rearms_at_every_start_and_its_termination_timestamp_clears_on_stop_l12():
    """H6/L12: Compute Engine sets resourceStatus.scheduling.terminationTimestamp whenever a VM
    with a time limit enters RUNNING and clears it whenever the VM stops ("Limit the run time of
    a VM"); maxRunDuration is "not a one time intent" (GoogleCloudPlatform/magic-modules#10683):
    each start runs the whole ceiling afresh, counted from its own RUNNING."""
    import json
    from datetime import datetime

    fake, clock = _fake()
    s = fake.scenario
    path = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane"

    def stamp() -> float | None:
        body = json.loads(dispatch(fake, Request("GET", path, {}, {})).body)
        text = body.get("resourceStatus", {}).get("scheduling", {}).get("terminationTimestamp")
        return None if text is None else datetime.fromisoformat(text).timestamp()

    fake.set_scheduling(600.0, "STOP")
    before = stamp()
    fake.start()
    fake.advance(s.provisioning_s + s.staging_s)
    first_running = clock.wall()
    first = stamp()
    fake.advance(600.0)
    stopping, cleared = fake.status, stamp()
    fake.advance(s.stopping_s + 7200.0)  # TERMINATED for two hours
    fake.start()
    fake.advance(s.provisioning_s + s.staging_s)
    second_running = clock.wall()
    second = stamp()
    fake.advance(599.0)
    still = fake.status
    fake.advance(1.0)

    assert before is None and first == pytest.approx(first_running + 600.0, abs=0.001)
    assert (stopping, cleared) == ("STOPPING", None)
    assert second == pytest.approx(second_running + 600.0, abs=0.001)
    assert still == "RUNNING" and fake.status == "STOPPING" and stamp() is None


@pytest.mark.parametrize(
    ("items", "status"),
    [
        ({"startup-script": "x" * 262144}, 200),
        ({"startup-script": "x" * 262145}, 400),
        ({"a": "x" * 262144, "b": "y" * 262141}, 200),  # 524287 bytes in all
        ({"a": "x" * 262144, "b": "y" * 262142}, 400),  # 524288: not less than 512 KB
        ({"k" * 127: "v"}, 200),
        ({"k" * 128: "v"}, 400),
        ({"startup-script": "é" * 131073}, 400),  # 262146 bytes: sizes are UTF-8 bytes
    ],
)
def test_set_metadata_refuses_what_gce_s_metadata_limits_refuse_and_changes_nothing_h6(
    items, status
):
    """H6: compute/v1 Metadata: a value at most 262144 bytes, keys and values together under
    512 KB, a key under 128 bytes; over them setMetadata is a 400 and nothing changes."""
    import json

    fake, _ = _fake()
    before = (dict(fake.metadata), fake.fingerprint)
    path = "/compute/v1/projects/gpuops-lane/zones/us-central1-b/instances/gpu-lane/setMetadata"
    sent = {
        "fingerprint": fake.fingerprint,
        "items": [{"key": k, "value": v} for k, v in items.items()],
    }

    reply = dispatch(fake, Request("POST", path, {}, {}, json.dumps(sent).encode()))

    assert reply.status == status
    if status == 400:
        error = json.loads(reply.body)["error"]
        assert (
            error["code"] == 400 and error["errors"][0]["reason"] == "fake_gce_metadata_too_large"
        )
        assert (dict(fake.metadata), fake.fingerprint) == before
    else:
        assert fake.metadata == items


def test_objects_list_pages_items_and_prefixes_together_by_max_results_h6():
    """H6: maxResults caps items and prefixes together on a page; nextPageToken continues
    after the page's last entry and is absent on the last page; a token or maxResults the
    fake never made is a loud 400."""
    import json

    fake, _ = _fake()
    for name in ("a/1", "a/2", "b", "c/1", "d", "e"):
        fake.put(f"jobs/{name}", b"x")
    path = "/storage/v1/b/gpuops-lane-jobs/o"

    def page(**query: str) -> dict:
        reply = dispatch(fake, Request("GET", path, query, {}))
        assert reply.status == 200, reply.body
        return json.loads(reply.body)

    seen, token, bodies = [], "", []
    while True:
        query = {"prefix": "jobs/", "delimiter": "/", "maxResults": "2"}
        body = page(**query, **({"pageToken": token} if token else {}))
        bodies.append(body)
        seen += body.get("prefixes", []) + [i["name"] for i in body.get("items", [])]
        token = body.get("nextPageToken", "")
        if not token:
            break
    bad = [
        dispatch(fake, Request("GET", path, q, {})).status
        for q in ({"maxResults": "0"}, {"maxResults": "x"}, {"pageToken": "%%%"})
    ]

    assert sorted(seen) == ["jobs/a/", "jobs/b", "jobs/c/", "jobs/d", "jobs/e"]
    assert [len(b.get("prefixes", []) + b.get("items", [])) for b in bodies] == [2, 2, 1]
    assert "nextPageToken" not in bodies[-1] and bad == [400, 400, 400]
    assert len(page(prefix="jobs/")["items"]) == 6  # no maxResults: up to 1,000 a page


def test_a_sleep_seen_ending_before_the_tick_still_makes_the_next_settle_wait(real):
    """A boot's sleep may be seen ending by its server thread (which polls the clock) before
    a test's ``advance`` reaches its tick; the tick then finds no sleep due. The boot runs
    again all the same, so the next settle must wait for it, or the clock moves under a
    running job and its next sleep starts late (a job of 60 fake seconds read 70)."""
    fake, clock = real(staged=("jobs/portraits/inputs/ref.png",), job_runtime_s=20.0, results=2)
    fake.start()
    for step in (5.0, 10.0, 0.0):
        _at(fake, clock, step)
    boot = fake.processes[1]
    started = clock.wall()
    assert fake.status == "RUNNING" and fake.settled()
    assert started + 10.0 in boot.sleepers.values()  # the job's first sleep

    clock.advance(10.0)  # the clock moves; nobody ticks yet
    deadline = time.monotonic() + 120.0
    while started + 10.0 in boot.sleepers.values() and time.monotonic() < deadline:
        time.sleep(0.01)  # until the sleep's own thread has seen it end

    assert started + 10.0 not in boot.sleepers.values() and not fake.settled()
    fake.advance(0.0)
    assert started + 20.0 in boot.sleepers.values()  # the second sleep, on time
