"""gpuops under the providers' nastier behaviour, each scripted by a FakeVast scenario field
(tests/test_fake_vast_nasty.py judges the fields themselves):

- an eventually consistent list (``list_lag_s``): an unclear create whose box the list hides
  is reconciled, or kept as an intent until it is found; never released as never created;
- a lagging show (``show_lag_s``): a destroy is confirmed gone only by a show made after the
  lag, and stays on the retry list while show still reports the box;
- a host key that changes during a box's life (``faults.host_key_changes``): the probe refuses
  it (SSH_HOST_KEY_CHANGED), never retries it, never quarantines it, never blames our key;
- a destroy that cuts an ssh command in flight: the guardian's results copy is a failed copy.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import market_world
import pytest
from market_world import fake_vast, request, ssh_boxes

from fakes.ssh.boxes import TableState
from gpuops import timing
from gpuops.errors import StillRunning
from gpuops.ledger import BoxState
from gpuops.market import jobs
from gpuops.market.ending import destroy_rental
from gpuops.market.guard import FAULTED, Guardian
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import LIVE, RELEASED
from gpuops.market.results import LocalResults
from gpuops.market.session import ssh_prober
from gpuops.market.sweep import sweep
from gpuops.market.teardown import Ending, exit_code
from gpuops.settings import Settings


def scenario(offers: int = 1, **vast: Any) -> dict[str, Any]:
    return market_world.scenario(*["healthy"] * offers, **vast)


@dataclass
class World(market_world.World):
    def market(self, operator: str = "alice", **kwargs: Any) -> Market:
        assert self.tmp is not None
        identity = self.tmp / "id_ed25519"  # written by ssh_boxes, with KEY
        probe = ssh_prober(self.tmp / "local", identity, 8192, Settings.from_environ().ssh())
        return super().market(operator, probe=probe, seed=5, **kwargs)  # the real probe, over ssh

    def rent(self, k: int = 1, hours: float = 2.0) -> tuple[Market, Any]:
        market = self.market()
        rental = market.rent(request(k=k, hours=hours))
        return market, rental

    def shows_of(self, instance_id: int) -> list[float]:
        path = f"/api/v0/instances/{instance_id}/"
        return [c.at for c in self.fake.calls if c.route == "show" and c.path.startswith(path)]


@pytest.fixture
def world(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch) -> Iterator[World]:
    doc = getattr(request, "param", scenario())
    with ssh_boxes(tmp_path, monkeypatch) as fake_dir, fake_vast(doc, fake_dir) as fake:
        yield World(fake, tmp=tmp_path)


# --- a lagging show: confirm before release -----------------------------------------------------
@pytest.mark.parametrize("world", [scenario(show_lag_s=45)], indirect=True)
@pytest.mark.fault(
    "show lags: it answers a destroyed box as still there for a while",
    handled="the destroy is confirmed gone only by a show made after the lag (M4)",
)
def test_a_destroy_is_confirmed_gone_only_by_a_show_made_after_the_lag(world):
    """M4: every show inside the lag still answers the box; the release waits for a later one."""
    market, rental = world.rent()
    box_id = int(rental.instance_id)

    outcomes = destroy_rental(market, "job")

    destroyed_at = world.fake.instances[box_id].destroyed_at
    assert destroyed_at is not None
    after = [at for at in world.shows_of(box_id) if at >= destroyed_at]
    assert [o.ending for o in outcomes] == [Ending.GONE]
    assert len(after) >= 2 and after[-1] >= destroyed_at + 45  # asked again until it was gone
    assert market.ledger.get(rental.box).state is BoxState.RELEASED


@pytest.mark.parametrize(
    "world", [scenario(show_lag_s=timing.DESTROY_CONFIRM_TIMEOUT_S + 60)], indirect=True
)
@pytest.mark.fault(
    "show lags longer than gpuops waits for a confirmation",
    handled="the destroy stays pending on the retry list (exit 4); sweep confirms it later (M4)",
)
def test_a_show_lagging_past_the_confirm_timeout_leaves_the_destroy_pending(world):
    """M4/M13: no release from a lagging answer: pending, exit 4, and a later sweep confirms."""
    market, rental = world.rent()

    outcomes = destroy_rental(market, "job")

    assert [o.ending for o in outcomes] == [Ending.PENDING] and exit_code(outcomes) == 4
    assert [r.name for r in market.ledger.retry_list()] == [rental.box]
    assert market.rentals.get("job").state == LIVE
    assert world.alive() == []  # the box is gone, but nothing said so yet: still not released
    world.fake.advance(60.0)

    report = sweep(world.market())

    assert [o.ending for o in report.retried] == [Ending.GONE]
    assert market.rentals.get("job").state == RELEASED


# --- an eventually consistent list: an unclear create is reconciled, not lost -------------------
def _lost_create(lag_s: float) -> dict[str, Any]:
    return scenario(
        list_lag_s=lag_s, faults={"lost_creates": [{"offer": 1000, "answer": 503, "count": 1}]}
    )


@pytest.mark.parametrize("world", [_lost_create(12.0)], indirect=True)
@pytest.mark.fault(
    "the instance list misses the newest box for a while (eventual consistency)",
    handled="an unclear create is looked up by label again, backing off, until the list shows it (M12)",
)
def test_an_unclear_create_the_list_hides_at_first_is_reconciled_later(world):
    """M12: the first look-ups miss the box; a later one finds and adopts it, with one create."""
    _, rental = world.rent()

    assert world.creates() == 1
    assert rental.state == LIVE
    assert world.alive() == [int(rental.instance_id)]
    outcomes = [e["outcome"] for e in world.events.kinds("market.create")]
    assert outcomes[0] == "unclear" and outcomes[-1] == "reconciled"


@pytest.mark.parametrize("world", [_lost_create(3600.0)], indirect=True)
def test_an_unclear_create_the_list_hides_for_long_stays_an_intent_until_found(world):
    """M12/M13: rent gives up unresolved (exit 5) but keeps the intent; once the list shows
    the box, destroy finds it by label, destroys it and confirms it gone."""
    market = world.market()
    with pytest.raises(StillRunning):
        market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=2.0, race_k=1))
    (record,) = [r for r in market.ledger.records() if r.active]
    assert record.state is BoxState.INTENT
    (box_id,) = world.alive()  # billing, and only the intent's label can find it

    early = destroy_rental(market, "job")
    world.fake.advance(3600.0)
    late = destroy_rental(market, "job")

    assert [o.ending for o in early] == [Ending.UNRESOLVED] and exit_code(early) == 5
    assert [o.ending for o in late] == [Ending.GONE]
    assert world.alive() == [] and world.fake.instances[box_id].destroyed_at is not None


# --- a host key that changes during the box's life ----------------------------------------------
@pytest.mark.parametrize(
    "world",
    [scenario(2, faults={"host_key_changes": [{"offer": 1000, "after_connections": 1}]})],
    indirect=True,
)
@pytest.mark.fault(
    "a box's ssh host key changes during its life (rebuilt box, or a man in the middle)",
    handled="the probe refuses it (SSH_HOST_KEY_CHANGED): never retried, never quarantined, never blamed on our key",
)
def test_a_host_key_changing_mid_probe_is_refused_never_retried_nor_quarantined(world):
    """DESIGN §4, M2: the changed key is a refusal; the box loses the race and is destroyed."""
    market, rental = world.rent(k=2)

    verdicts = {e["offer_id"]: e["verdict"] for e in world.events.kinds("market.probe")}
    assert verdicts == {1000: "ssh-host-key-changed", 1001: "pass"}
    assert rental.state == LIVE and rental.offer_id == 1001
    assert world.alive() == [int(rental.instance_id)]
    assert not market.quarantine.machines()
    refused = world.fake.instances[min(world.fake.instances)]
    calls = TableState(world.fake.box_table).read_calls()
    to_refused = [c for c in calls if c["box"] == f"{refused.ssh_host}:{refused.ssh_port}"]
    assert len(to_refused) == 2  # the gpu step pinned the first key; the cuda step was refused


@pytest.mark.parametrize(
    "world",
    [scenario(1, faults={"host_key_changes": [{"offer": 1000, "after_connections": 1}]})],
    indirect=True,
)
def test_a_race_lost_only_to_a_changed_host_key_never_blames_our_key(world):
    """M2/M9: a refused host key is no evidence against our own key."""
    market = world.market()
    with pytest.raises(Exception) as raised:
        market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=2.0, race_k=1))

    assert "our key" not in str(raised.value)
    assert world.alive() == []
    assert not market.quarantine.machines()


# --- a destroy that cuts the guardian's results copy --------------------------------------------
def _slow_tar(bin_dir: Path, started: Path, gate: Path) -> None:
    """A `tar` for the box that says it started, then waits for the test's gate."""
    real = shutil.which("tar")
    assert real is not None
    bin_dir.mkdir()
    os.mkfifo(started)
    os.mkfifo(gate)
    script = bin_dir / "tar"
    script.write_text(
        f'#!/bin/sh\necho started > {started}\ncat {gate} > /dev/null\nexec {real} "$@"\n'
    )
    script.chmod(0o755)


def _read_fifo(path: Path) -> str:
    """What the box writes into ``path``, waiting for it as an event (bounded, never a hang)."""
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.append(path.read_text()), daemon=True)
    reader.start()
    reader.join(timing.SSH_COMMAND_TIMEOUT_S)
    if reader.is_alive():  # nothing ever wrote: unblock the reader, and fail
        with open(path, "w"):
            pass
        reader.join()
    return seen[0] if seen else ""


@pytest.mark.fault(
    "the box is destroyed while the guardian copies its results",
    handled="the cut copy is a failed copy, said so; nothing is delivered; the box is still confirmed gone (M5)",
)
def test_a_results_copy_cut_by_a_destroy_is_a_failed_copy_never_copied(world, monkeypatch):
    """M5: the ssh streaming the results ends as OpenSSH does when the remote goes away; the
    guardian logs ok=False with that line, delivers nothing, still ends the rental, and exits
    1 for the results it could not deliver (M17)."""
    market, rental = world.rent()
    box_id = int(rental.instance_id)
    instance = market.vast.show(rental.instance_id)
    shell = jobs.BoxShell(
        world.tmp / "local", world.tmp / "id_ed25519", Settings.from_environ().ssh()
    )
    job = jobs.start(rental, instance, shell, ["mkdir", "-p", "results/ckpt"], "results")
    jobs.Jobs(world.store).put(job)
    started, gate = world.tmp / "started.fifo", world.tmp / "gate.fifo"
    _slow_tar(world.tmp / "bin", started, gate)
    monkeypatch.setenv("PATH", f"{world.tmp / 'bin'}{os.pathsep}{os.environ['PATH']}")
    # the guardian's ssh runs in the environment it starts with: the one with the slow tar
    shell = jobs.BoxShell(
        world.tmp / "local", world.tmp / "id_ed25519", Settings.from_environ().ssh()
    )
    guardian = Guardian(
        world.market(), "job", shell=shell, results=LocalResults(world.tmp / "results"),
        me="alice/pi/1/aa", clock=world.fake.ticking(), say=lambda _: None,
    )  # fmt: skip
    codes: list[int] = []
    runner = threading.Thread(target=lambda: codes.append(guardian.run()), daemon=True)
    runner.start()

    assert _read_fifo(started) == "started\n"  # the copy is in flight on the box
    with world.fake.lock:
        world.fake.destroy(box_id)  # the box goes away under it
    runner.join(timing.SSH_COMMAND_TIMEOUT_S)
    if runner.is_alive():  # the cut never came: let the copy finish, so the test fails, not hangs
        with open(gate, "w") as opened:
            opened.write("go\n")
        runner.join(timing.SSH_COMMAND_TIMEOUT_S)

    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is False
    assert copied["detail"] == f"exit 255: Connection to {instance.ssh_host} closed by remote host."
    assert not (world.tmp / "results" / "job").exists()
    assert codes == [FAULTED] and world.alive() == []


@pytest.mark.parametrize(
    "world",
    [scenario(1, faults={"host_key_changes": [{"offer": 1000, "after_s": 600}]})],
    indirect=True,
)
@pytest.mark.fault(
    "a box's host key changes after the probe, before the guardian copies its results",
    handled="ssh refuses the new key (the pinned one is kept); the copy is a failed copy; the box is still destroyed (M5)",
)
def test_a_host_key_changed_before_the_copy_fails_the_copy_and_keeps_the_pinned_key(world):
    """DESIGN §4, M5: nothing is copied from a box whose key changed, and the key is not
    re-pinned; the ceiling still holds, and the exit is 1 for the results not delivered
    (M17)."""
    market, rental = world.rent()
    instance = market.vast.show(rental.instance_id)
    shell = jobs.BoxShell(
        world.tmp / "local", world.tmp / "id_ed25519", Settings.from_environ().ssh()
    )
    job = jobs.start(rental, instance, shell, ["mkdir", "-p", "results/ckpt"], "results")
    jobs.Jobs(world.store).put(job)
    known = world.tmp / "local" / "ssh" / "known_hosts" / rental.instance_id
    pinned = known.read_text()
    guardian = Guardian(
        world.market(), "job", shell=shell, results=LocalResults(world.tmp / "results"),
        me="alice/pi/1/aa", clock=world.fake.ticking(), say=lambda _: None,
    )  # fmt: skip

    code = guardian.run()

    (copied,) = world.events.kinds("guard.copy")
    assert copied["ok"] is False
    assert copied["detail"] == "exit 255: Host key verification failed."
    assert not (world.tmp / "results" / "job").exists()
    assert known.read_text() == pinned
    assert code == FAULTED and world.alive() == []


@pytest.mark.parametrize(
    "world",
    [scenario(1, faults={"host_key_changes": [{"offer": 1000, "after_s": 600}]})],
    indirect=True,
)
@pytest.mark.fault(
    "a box's host key changes after pinning, before `gpuops run` starts its job",
    handled="a refusal naming its rule (M2) and what to do (exit 3), never exit 4 'could not start'",
)
def test_run_on_a_box_whose_host_key_changed_is_a_refusal_naming_its_rule(world):
    """DESIGN §4, M2: `run` was refused by ssh but exited 4 ("could not start the job")
    naming no rule; it is Refused (M2), says nothing ran and what to do, and keeps the key."""
    from gpuops.errors import Refused
    from gpuops.settings import Settings

    market, rental = world.rent()
    instance = market.vast.show(rental.instance_id)
    shell = jobs.BoxShell(
        world.tmp / "local", world.tmp / "id_ed25519", Settings.from_environ().ssh()
    )
    jobs.start(rental, instance, shell, ["true"], "results")  # pins the key on first contact
    known = world.tmp / "local" / "ssh" / "known_hosts" / rental.instance_id
    pinned = known.read_text()
    world.fake.advance(700.0)

    with pytest.raises(Refused) as refused:
        jobs.start(rental, instance, shell, ["true"], "results")

    assert refused.value.rule == "M2" and refused.value.exit_code == 3
    assert str(refused.value).startswith("refused (M2): job: the box's ssh host key changed")
    assert "nothing was run" in str(refused.value)
    assert f"Destroy it (`gpuops destroy job`) and rent again; the pinned key is in {known}" in str(
        refused.value
    )
    assert known.read_text() == pinned
