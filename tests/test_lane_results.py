"""Results are judged in storage (L9): the lane script uploads every result, checks each
upload and writes a manifest last; `lane watch` calls a job succeeded only when its status
file says so and the bucket holds every result the manifest names. Judged from FakeGCE's own
record: the bucket's objects and the instance's status, after real boots of the template."""

from __future__ import annotations

import pytest

from gpuops.errors import JobFailed
from gpuops.lane import script
from tests.lane_world import World, lane_world

BUCKET = "gpuops-lane-jobs"
JOB = "validation"
JOB_COMMAND = 'python3 "$WORK/job.py"'  # the fake VM image's workload (fakes/gce/boot.py)
RESULTS = f"jobs/{JOB}/results/"


def _run(world: World, command: str = JOB_COMMAND):
    lane = world.lane("alice")
    lane.claim(JOB)
    lane.install(JOB, script.render(JOB, BUCKET, command))
    lane.start(JOB)
    return lane


def _results(world: World) -> list[str]:
    return sorted(n.removeprefix(RESULTS) for n in world.fake.objects if n.startswith(RESULTS))


def _status(world: World) -> str:
    return world.fake.objects[f"jobs/{JOB}/status"].decode().split(" ", 1)[0]


@pytest.mark.fault(
    "storage refuses the job's result uploads (a GCS outage)",
    handled="the script retries, then ends failed with the reason; watch exits 6, never 0 (L9)",
)
def test_a_storage_outage_during_the_results_upload_ends_the_job_failed_not_succeeded_l9(
    tmp_path, monkeypatch
):
    """L9: every write under results/ is a 503 for an hour: the job ends `failed` naming the
    result that did not reach storage, watch raises JobFailed (exit 6), the VM powers off."""
    outage = {"gcs_write_outage_prefix": RESULTS, "gcs_write_outage_s": 3600.0}
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, results=3, **outage) as world:
        lane = _run(world)

        with pytest.raises(JobFailed) as failed:
            lane.watch(JOB)
        world.advance(30.0)

        assert failed.value.exit_code == 6
        assert "results/out-001.png did not reach storage" in str(failed.value)
        assert _status(world) == "failed" and _results(world) == []
        assert f"jobs/{JOB}/{script.MANIFEST}" not in world.fake.objects
        assert world.fake.status == "TERMINATED"


def test_a_brief_storage_outage_is_ridden_out_by_the_uploads_retries_l9(tmp_path, monkeypatch):
    """L9: a 10 s outage under results/ is outlasted by put's retries: every result and the
    manifest reach storage, and the job succeeds."""
    outage = {"gcs_write_outage_prefix": RESULTS, "gcs_write_outage_s": 10.0}
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, results=3, **outage) as world:
        lane = _run(world)

        verdict = lane.watch(JOB)

        assert verdict.value == "succeeded"
        assert _results(world) == ["out-001.png", "out-002.png", "out-003.png"]
        manifest = world.fake.objects[f"jobs/{JOB}/{script.MANIFEST}"].decode().splitlines()
        assert manifest[0].split(" ")[::2] == ["gpuops-manifest", "3"]
        assert [line.rsplit(" ", 1)[-1] for line in manifest[1:]] == _results(world)


def test_results_in_a_subdirectory_are_uploaded_and_named_in_the_manifest_l9(
    tmp_path, monkeypatch
):
    """L9: a result one directory down is uploaded (the old loop skipped it and still said
    succeeded) and named in the manifest under its path."""
    command = f'{JOB_COMMAND} && mkdir -p "$WORK/results/sub" && echo deep > "$WORK/results/sub/d.txt"'
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, results=2) as world:
        lane = _run(world, command)

        verdict = lane.watch(JOB)

        assert verdict.value == "succeeded"
        assert _results(world) == ["out-001.png", "out-002.png", "sub/d.txt"]
        assert world.fake.objects[RESULTS + "sub/d.txt"] == b"deep\n"
        manifest = world.fake.objects[f"jobs/{JOB}/{script.MANIFEST}"].decode()
        assert manifest.splitlines()[-1] == "1b385affd7adb5a6283fef292b5df0f7 5 sub/d.txt"


@pytest.mark.fault(
    "a status file says succeeded but a result is not in storage",
    handled="watch judges the manifest against the bucket: failed, naming the result (L9)",
)
def test_a_status_that_says_succeeded_is_a_failure_while_storage_lacks_a_result_l9(
    tmp_path, monkeypatch
):
    """L9: the job succeeds, then one result vanishes from the bucket: watch and release judge
    by storage, not by the status file alone, and say which result is missing."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, results=3) as world:
        lane = _run(world)
        world.run_for(120.0)
        assert _status(world) == "succeeded"
        del world.fake.objects[RESULTS + "out-002.png"]

        with pytest.raises(JobFailed) as failed:
            lane.watch(JOB)
        lane.release(JOB)

        assert "results/out-002.png is not in storage" in str(failed.value)
        (end,) = world.events("lane.job_end")
        assert end["outcome"] == "failed"


def test_a_result_changed_in_storage_after_its_upload_is_not_success_l9(tmp_path, monkeypatch):
    """L9: a result overwritten in the bucket after the manifest (other bytes) fails the md5
    or size check: the job is not called succeeded."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0, results=2) as world:
        lane = _run(world)
        world.run_for(120.0)
        world.fake.put(RESULTS + "out-001.png", b"gif")

        with pytest.raises(JobFailed) as failed:
            lane.watch(JOB)

        assert "results/out-001.png in storage is not the file uploaded" in str(failed.value)
