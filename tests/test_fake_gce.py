"""FakeGCE: the instance's lifecycle, the silent no-op, scripted stockouts and fingerprint
races, the played startup-script contract and its scripted failures; loud on unknown routes."""

from __future__ import annotations

import pytest

from fakes.gce import FakeGCE, LaneScenario, parse_lane
from fakes.gce.routes import UnknownRoute, dispatch
from fakes.scenario import ScenarioError
from fakes.vast.clock import FakeClock
from fakes.vast.wire import Request
from gpuops.lane import script

SCRIPT = script.render("portraits", "gpuops-lane-jobs", "true", inputs=("ref.png",))


def _fake(**kwargs: object) -> tuple[FakeGCE, FakeClock]:
    clock = FakeClock()
    fake = FakeGCE(LaneScenario(**kwargs), clock)  # type: ignore[arg-type]
    fake.metadata = {"startup-script": SCRIPT, "gpuops-attempt": "b1"}
    return fake, clock


def _at(fake: FakeGCE, clock: FakeClock, seconds: float) -> str:
    clock.advance(seconds)
    fake.tick()
    return fake.status


def test_a_boot_walks_provisioning_staging_running_stopping_terminated():
    """The lifecycle, on the injected clock only."""
    fake, clock = _fake(staged=("jobs/portraits/inputs/ref.png",), job_runtime_s=60.0)

    fake.start()
    seen = [fake.status] + [_at(fake, clock, s) for s in (5.0, 10.0, 69.0, 5.0)]

    assert seen == ["PROVISIONING", "STAGING", "RUNNING", "STOPPING", "TERMINATED"]
    assert fake.objects["jobs/portraits/status"] == b"succeeded b1"
    assert fake.objects["jobs/portraits/boot/b1"] == b"b1\n"
    assert len([n for n in fake.objects if "/results/" in n]) == 6


def test_start_on_a_running_instance_is_a_silent_noop():
    """L2: DONE, no error, nothing changes, no second boot."""
    fake, clock = _fake(staged=("jobs/portraits/inputs/ref.png",))
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


def test_a_typo_in_job_uploads_every_report_under_the_wrong_prefix():
    """The 13 November failure as the fake plays it: the reports exist, misfiled."""
    fake, clock = _fake()
    fake.metadata["startup-script"] = SCRIPT.replace('JOB="portraits"', 'JOB="portroaits"')

    fake.start()
    _at(fake, clock, 30.0)

    assert "jobs/portraits/status" not in fake.objects
    assert fake.objects["jobs/portroaits/status"].startswith(b"failed b1 missing staged input")


@pytest.mark.parametrize(
    "scenario, reason",
    [
        ({"broken_imports": ("torch",)}, b"preflight: import torch failed"),
        ({"disk_free_gb": 5}, b"preflight: 5 GB free on /work, need 20"),
        ({}, b"missing staged input ref.png"),
    ],
)
def test_scripted_failures_end_the_boot_with_the_reason_in_the_status_file(scenario, reason):
    """L6: the failure is written to the status file and the instance powers off."""
    fake, clock = _fake(**scenario)

    fake.start()
    _at(fake, clock, 30.0)

    assert fake.objects["jobs/portraits/status"] == b"failed b1 " + reason
    assert fake.status == "TERMINATED"
    assert b"boot marker b1" in fake.objects["jobs/portraits/log.txt"]


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
