"""Results synced while the job runs, on the fake box (M5): the guardian in-process on the
fake's clock, the job a real process under tmux in the box's sandbox, every sync real ssh
through the fake ssh program (the pinned host key, our identity) and a real tar.

Time is the fake's: the guardian is stepped until a sync is seen in its events, never slept
for; the job moves on only when the test says so (a file it waits for), and is waited for by
what it writes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_guard import World, wait_until, world  # noqa: F401  (world is a fixture)

from fakes.scenario import Fate
from fakes.ssh import sandbox
from fakes.vast.boxtable import sandbox_seed
from gpuops.market import guardian as g
from gpuops.market import jobs
from gpuops.market import sync_plan as sp
from gpuops.market.guard import FAULTED, Guardian
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import MISSING

WAIT_S = 60.0  # the longest a real process (the job, an ssh) may take to do its part
EVERY_S = 600.0  # a sync every ten minutes of the fake's time; the rental is two hours
# the job: a first checkpoint, then (once told) a second, then it trains on
JOB = (
    "mkdir -p results/ckpt && printf one > results/ckpt/step-1.bin && "
    "while [ ! -e go ]; do sleep 0.05; done; "
    "printf 'two, larger' > results/ckpt/step-2.bin && printf 'x' > results/log.txt && "
    "touch wrote-2 && sleep 3600"
)


def rent(world: World, every_s: float = EVERY_S) -> Market:
    market = world.market()
    market.rent(RentRequest("job", "RTX 4090", hours=2.0, race_k=1, sync_every_s=every_s))
    return market


def start_job(world: World, market: Market) -> Path:
    """Start JOB under tmux on the box; its directory in the box's sandbox."""
    rental = market.rentals.get("job")
    assert rental is not None and rental.instance_id is not None
    instance = market.vast.show(rental.instance_id)
    assert instance is not None
    jobs.Jobs(world.store).put(jobs.start(rental, instance, world.shell(), [JOB], "results"))
    box = world.fake.instances[int(rental.instance_id)]
    assert world.fake.box_table is not None
    folder = sandbox.sandbox_dir(world.fake.box_table, sandbox_seed(box)) / "gpuops" / "job"
    wait_until(
        "the first checkpoint", lambda: (folder / "results/ckpt/step-1.bin").exists(), WAIT_S
    )
    return folder


def step_until_sync(guardian: Guardian, world: World, seen: int) -> dict[str, Any]:
    """Step the guardian (its waits advance the fake's clock) until its next sync ends."""
    while len(world.events.kinds("guard.sync")) == seen:
        assert guardian.step() is None, "the guardian ended before the sync"
    return world.events.kinds("guard.sync")[seen]


def delivery(world: World, market: Market) -> Path:
    rental = market.rentals.get("job")
    assert rental is not None
    return world.tmp / "results" / "job" / str(rental.rental_id)


def verified(folder: Path) -> dict[str, bytes]:
    """Every file the manifest names, checked whole against it; the files themselves."""
    manifest = json.loads((folder / sp.MANIFEST).read_bytes())
    files = {}
    for path, entry in manifest["files"].items():
        data = (folder / path).read_bytes()
        assert len(data) == entry["size"], path
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], path
        files[path] = data
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {sp.MANIFEST}
    assert on_disk == set(files), "a file the manifest does not name, or a partial one"
    assert not (folder / sp.PARTIAL).exists()
    return files


def guardian_to(world: World, results: Any) -> Guardian:
    """The rental's guardian, delivering to ``results``."""
    return Guardian(
        world.market(),
        "job",
        shell=world.shell(),
        results=results,
        me="alice/pi/1/aa",
        clock=world.fake.ticking(),
        say=lambda line: None,
    )


def kill_host(world: World, market: Market) -> int:
    """The box's host dies: its job is gone and its ssh answers no more; the provider still
    lists it, billing (a box killed, not destroyed)."""
    rental = market.rentals.get("job")
    assert rental is not None and rental.instance_id is not None
    box = world.fake.instances[int(rental.instance_id)]
    assert world.fake.box_table is not None
    sandbox.stop(sandbox.sandbox_dir(world.fake.box_table, sandbox_seed(box)))
    box.fate = Fate.parse("unreachable")
    world.fake._changed_box(box)
    world.fake.tick()
    return box.id


def test_checkpoints_are_synced_as_the_job_writes_them_and_survive_the_box_dying_between_syncs(
    world,
):
    """M5: a sync ten minutes in delivers the first checkpoint; the next delivers only what
    changed; the host dies between syncs: what was synced is whole and matches the manifest,
    the failed syncs are one alarm, and the box is destroyed by its deadline all the same."""
    market = rent(world)
    folder = start_job(world, market)
    guardian = world.guardian(world.market(), "alice/pi/1/aa")

    first = step_until_sync(guardian, world, 0)
    assert (first["ok"], first["files"], first["held"], first["final"]) == (True, 1, 1, False)
    assert verified(delivery(world, market)) == {"ckpt/step-1.bin": b"one"}
    rental = market.rentals.get("job")
    assert rental is not None and rental.synced_at is not None and rental.sync_error is None
    assert rental.synced_at <= rental.started_at + EVERY_S + 5.0  # due ten minutes in

    (folder / "go").touch()  # the job writes its next checkpoint
    wait_until("the second checkpoint", lambda: (folder / "wrote-2").exists(), WAIT_S)
    second = step_until_sync(guardian, world, 1)
    assert (second["ok"], second["files"], second["held"]) == (True, 2, 3)  # only what changed
    assert verified(delivery(world, market)) == {
        "ckpt/step-1.bin": b"one",
        "ckpt/step-2.bin": b"two, larger",
        "log.txt": b"x",
    }
    third = step_until_sync(guardian, world, 2)  # nothing changed: nothing copied
    assert (third["ok"], third["files"], third["held"]) == (True, 0, 3)

    box_id = kill_host(world, market)
    failed = step_until_sync(guardian, world, 3)
    assert failed["ok"] is False and "listing the results failed" in failed["detail"]
    code = guardian.run()

    assert code == FAULTED  # gone, but its final copy failed: loud (M17)
    deadline = rental.deadline_at
    assert deadline is not None
    assert world.fake.instances[box_id].destroyed_at is not None
    assert world.fake.instances[box_id].destroyed_at <= deadline  # the fake's own record
    assert world.alive() == []
    assert verified(delivery(world, market)) == {  # what was synced is whole, and verified
        "ckpt/step-1.bin": b"one",
        "ckpt/step-2.bin": b"two, larger",
        "log.txt": b"x",
    }
    syncs = world.events.kinds("guard.sync")
    assert [s["ok"] for s in syncs[:3]] == [True, True, True]
    assert all(s["ok"] is False for s in syncs[3:]) and syncs[-1]["final"] is True
    raised = [e["kind"] for e in world.events.kinds("alarm.raised")]
    assert raised.count("guardian.sync_failed") == 1  # once per run of failures (O1)
    assert "guardian.copy_failed" in raised  # the final copy's own
    after = market.rentals.get("job")
    assert after is not None and after.results == MISSING
    assert "is kept (" in str(after.results_detail)  # what earlier syncs delivered
    assert after.sync_error and after.synced_at is not None and after.synced_at < deadline


def test_the_deadline_destroy_happens_on_time_when_every_sync_fails(world):
    """M5: a box whose host died before its first sync: every sync fails, one alarm is
    heard, and the destroy is at the deadline by the fake's own billing record."""
    market = rent(world, every_s=300.0)
    start_job(world, market)
    box_id = kill_host(world, market)
    rental = market.rentals.get("job")
    assert rental is not None and rental.deadline_at is not None

    code = world.guardian(world.market(), "alice/pi/1/aa").run()

    assert code == FAULTED
    destroyed = world.fake.instances[box_id].destroyed_at
    assert destroyed is not None and destroyed <= rental.deadline_at
    assert world.alive() == []  # nothing still billing
    syncs = world.events.kinds("guard.sync")
    assert len(syncs) >= 10 and not any(s["ok"] for s in syncs)
    raised = [e["kind"] for e in world.events.kinds("alarm.raised")]
    assert raised.count("guardian.sync_failed") == 1
    after = market.rentals.get("job")
    assert after is not None and after.synced_at is None and after.sync_error
    assert not (world.tmp / "results" / "job" / str(rental.rental_id) / sp.MANIFEST).exists()


def test_a_rental_that_syncs_delivers_its_results_at_the_end_through_the_last_sync(world):
    """M5: the copy before the destroy is one more sync: delivered, and said on the rental."""
    market = rent(world, every_s=3600.0)
    folder = start_job(world, market)
    (folder / "go").touch()
    wait_until("the second checkpoint", lambda: (folder / "wrote-2").exists(), WAIT_S)

    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE

    files = verified(delivery(world, market))
    assert set(files) == {"ckpt/step-1.bin", "ckpt/step-2.bin", "log.txt"}
    after = market.rentals.get("job")
    assert after is not None
    assert (after.results, after.results_detail) == ("delivered", str(delivery(world, market)))
    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is True and copied["results"] == "delivered"
    assert world.events.kinds("guard.sync")[-1]["final"] is True
    assert world.alive() == []


@pytest.mark.parametrize("every_s", [0.0, None])
def test_a_rental_that_does_not_sync_copies_once_at_the_end_as_before(world, every_s):
    """M5: `--sync-every 0` (or a rental from before syncs) copies once, before the destroy."""
    market = world.market()
    market.rent(RentRequest("job", "RTX 4090", hours=2.0, race_k=1, sync_every_s=every_s))
    start_job(world, market)

    assert world.guardian(world.market(), "alice/pi/1/aa").run() == g.GONE

    assert world.events.kinds("guard.sync") == []
    (answer,) = (world.tmp / "results" / "job").glob("*/ckpt/step-1.bin")
    assert answer.read_bytes() == b"one"
    assert not (answer.parents[1] / sp.MANIFEST).exists()


def test_syncs_to_s3_put_each_file_whole_and_a_manifest_a_reader_verifies(world, monkeypatch):
    """M5: GPUOPS_RESULTS=s3://bucket/prefix (moto's S3 on loopback): each synced file is one
    object under NAME/<rental id>/, and the manifest object names each with its sha256."""
    import boto3

    from fakes.s3 import CREDENTIALS, REGION, serve_s3
    from gpuops.market.results import S3Results

    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    s3 = serve_s3()
    try:
        market = rent(world, every_s=3600.0)
        folder = start_job(world, market)
        (folder / "go").touch()
        wait_until("the second checkpoint", lambda: (folder / "wrote-2").exists(), WAIT_S)
        results = S3Results(s3.bucket, "runs", s3.url)
        assert guardian_to(world, results).run() == g.GONE
        client = boto3.client("s3", endpoint_url=s3.url)
        rental = market.rentals.get("job")
        assert rental is not None
        base = f"runs/job/{rental.rental_id}"
        listed = client.list_objects_v2(Bucket=s3.bucket, Prefix=base + "/")
        keys = sorted(o["Key"].removeprefix(base + "/") for o in listed["Contents"])
        manifest = json.loads(
            client.get_object(Bucket=s3.bucket, Key=f"{base}/{sp.MANIFEST}")["Body"].read()
        )
        for path, entry in manifest["files"].items():
            data = client.get_object(Bucket=s3.bucket, Key=f"{base}/{path}")["Body"].read()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (
                entry["size"],
                entry["sha256"],
            )
    finally:
        s3.close()

    assert keys == sorted([sp.MANIFEST, "ckpt/step-1.bin", "ckpt/step-2.bin", "log.txt"])
    assert set(manifest["files"]) == {"ckpt/step-1.bin", "ckpt/step-2.bin", "log.txt"}
    assert rental.results == "delivered"
    assert rental.results_detail == f"s3://{s3.bucket}/{base}/"
    assert world.alive() == []


def test_a_results_bucket_that_does_not_exist_fails_every_sync_once_loudly_and_the_box_ends(
    world, monkeypatch
):
    """M5/M17: every sync to a bucket that does not exist fails (NoSuchBucket), one alarm is
    heard for the run of them, and the box is destroyed by its deadline all the same."""
    from fakes.s3 import CREDENTIALS, REGION, serve_s3
    from gpuops.market.results import S3Results

    for name, value in {**CREDENTIALS, "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    s3 = serve_s3()
    try:
        market = rent(world, every_s=1200.0)
        start_job(world, market)
        rental = market.rentals.get("job")
        assert rental is not None and rental.deadline_at is not None
        code = guardian_to(world, S3Results("a-bucket-that-does-not-exist", "x", s3.url)).run()
    finally:
        s3.close()

    assert code == FAULTED
    box = world.fake.instances[int(str(rental.instance_id))]
    assert box.destroyed_at is not None and box.destroyed_at <= rental.deadline_at
    syncs = world.events.kinds("guard.sync")
    assert len(syncs) >= 5 and not any(s["ok"] for s in syncs)
    assert all("NoSuchBucket" in s["detail"] for s in syncs)
    raised = [e["kind"] for e in world.events.kinds("alarm.raised")]
    assert raised.count("guardian.sync_failed") == 1


def test_a_guardian_stopped_mid_sync_ends_its_ssh_and_never_calls_the_results_missing(world):
    """M17/M5: SIGTERM while a periodic sync streams: the sync's ssh is ended (as a copy's is)
    and the sync said cut; the results are not recorded missing, for nothing was lost: what
    earlier syncs delivered stays, and a successor syncs on."""
    import signal
    from dataclasses import dataclass

    from gpuops.market.guard import release

    @dataclass(frozen=True)
    class StoppedMidSync(jobs.BoxShell):
        def stream_to(self, instance, script, target, budget_s, copies=None):  # type: ignore[no-untyped-def]
            release(held[0], signal.SIGTERM, alarm=False)  # the handler runs mid-stream
            raise SystemExit(128 + signal.SIGTERM)  # and the process exits, as `stopped`

    market = rent(world)
    start_job(world, market)
    shell = world.shell()
    guardian = Guardian(
        world.market(),
        "job",
        shell=StoppedMidSync(shell.state_dir, shell.identity_file, shell.client),
        results=world.guardian(world.market(), "x").results,
        me="alice/pi/1/aa",
        clock=world.fake.ticking(),
        say=lambda line: None,
    )
    held = [guardian]

    with pytest.raises(SystemExit):
        while True:
            assert guardian.step() is None
    (cut,) = world.events.kinds("guard.sync")

    assert (cut["ok"], cut["final"]) == (False, False)
    assert cut["detail"] == "the sync was cut: stopped by SIGTERM"
    assert guardian.copies.live() == []  # no ssh left running
    rental = market.rentals.get("job")
    assert rental is not None and rental.results is None  # not "missing": nothing was lost
    assert len(world.events.kinds("guard.sync")) == 1  # said once, by the signal's path
    assert world.events.kinds("guard.copy") == []
