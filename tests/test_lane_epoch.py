"""L13: the claim is fenced on the VM itself. Every claim writes its epoch into the instance's
label under GCE's label fingerprint, and install and start act only while the label holds
that claim; the label is evidence every host sees (L12). Judged from FakeGCE's own record:
its labels, metadata and boots."""

from __future__ import annotations

import pytest

from gpuops.clock import WithSleep
from gpuops.errors import Refused
from gpuops.events import EventLog, read_events
from gpuops.lane import board as b
from gpuops.lane import decide as d
from gpuops.lane import script
from gpuops.lane.runner import Lane, LaneConfig
from gpuops.providers.gce import GceAdapter
from gpuops.providers.gcs import GcsAdapter
from tests.lane_world import BASE, World, lane_world

BUCKET = "gpuops-lane-jobs"
JOB_COMMAND = 'python3 "$WORK/job.py"'
KEY = "lane/gpu-lane/board"
JOURNAL_KEY = "lane/gpu-lane/journal"


def _copy(world: World) -> dict[str, bytes]:
    """The lane's board and claim journal as a backup holds them now."""
    found = {key: world.store.get(key) for key in (KEY, JOURNAL_KEY)}
    assert all(v is not None for v in found.values())
    return {key: v.data for key, v in found.items() if v is not None}


def _put_back(world: World, copy: dict[str, bytes]) -> None:
    """The backup restored over both, past gpuops."""
    for key, data in copy.items():
        current = world.store.get(key)
        assert current is not None
        world.store.put(key, data, current.version)


def _on_host(world: World, operator: str, host: str) -> Lane:
    """A Lane for ``operator`` on another host: the same store and provider, its own event
    log (a host's own file)."""
    events = EventLog(
        world.events_path.with_name(f"events-{host}.jsonl"),
        operator,
        clock=world.clock,
    )
    s = world.fake.scenario
    clock = WithSleep(world.clock, world.advance)
    return Lane(
        world.store,
        events,
        operator,
        GceAdapter(s.project, s.zone, events=events, endpoint=BASE, clock=clock),
        GcsAdapter(s.bucket, s.project, endpoint=BASE),
        LaneConfig(s.instance, s.bucket),
        clock=clock,
        new_boot_id=lambda: f"{host}boot",
    )


def test_a_claim_writes_its_epoch_into_the_instance_label_and_release_frees_it_l13(
    tmp_path, monkeypatch
):
    """L13: claim -> label `1-held-<token>` and board epoch 1; release -> `1-free`; the next
    claim takes epoch 2. All read back from FakeGCE's labels."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = world.lane("alice")
        claimed = alice.claim("portraits")
        held = dict(world.fake.labels)
        alice.release("portraits")
        released = dict(world.fake.labels)
        again = world.lane("bob").claim("vids")

        token = d.holder_token("alice", "portraits")
        assert claimed.epoch == 1 and held == {d.CLAIM_LABEL: f"1-held-{token}"}
        assert released == {d.CLAIM_LABEL: "1-free"}
        assert again.epoch == 2
        assert world.fake.labels == {d.CLAIM_LABEL: f"2-held-{d.holder_token('bob', 'vids')}"}


@pytest.mark.fault(
    "a stale board (an old copy restored) names a claim the VM has moved past",
    handled="install and start refuse (L13): the instance's label holds another epoch",
)
def test_a_claim_from_a_stale_board_cannot_install_over_the_current_claim_l13(
    tmp_path, monkeypatch
):
    """L13: bob claims (epoch 1) and releases; alice claims (epoch 2) and installs. An old
    copy of the lane's board and journal naming bob's claim is put back (the journal agrees
    with the board, so only the VM's label knows): bob's install is refused, and alice's
    script stays on the instance."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        bob = world.lane("bob")
        bob.claim("vids")
        stale = _copy(world)
        bob.release("vids")
        alice = world.lane("alice")
        alice.claim("portraits")
        alice.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))
        _put_back(world, stale)  # the stale copy, put back

        with pytest.raises(Refused) as install:
            bob.install("vids", script.render("vids", BUCKET, JOB_COMMAND))

        assert install.value.rule == "L13" and install.value.exit_code == 3
        assert world.fake.metadata[script.JOB_KEY] == "portraits"
        assert "vids" not in world.fake.metadata[script.SCRIPT_KEY]
        assert world.fake.boots == 0


@pytest.mark.fault(
    "the board deleted while another host's operator looks (per-host event logs)",
    handled="the instance's claim label is evidence every host sees: unknown, never free (L12, L13)",
)
def test_another_host_never_sees_a_claimed_lane_as_free_after_its_board_is_deleted_l13(
    tmp_path, monkeypatch
):
    """L12/L13 (the issue's two hosts over one store): alice claims on host A, the board is
    deleted; on host B, whose event log has nothing, bob's claim is refused, and repair finds
    the instance's label and the shared claim journal and rebuilds alice's claim; bob never
    installs."""
    with lane_world(tmp_path, monkeypatch) as world:
        _on_host(world, "alice", "a").claim("portraits")
        got = world.store.get(KEY)
        assert got is not None
        world.store.delete(KEY, got.version)
        bob = _on_host(world, "bob", "b")

        with pytest.raises(Refused) as claim:
            bob.claim("vids")
        board, signs = bob.repair()
        with pytest.raises(Refused) as install:
            bob.install("vids", script.render("vids", BUCKET, JOB_COMMAND))

        assert claim.value.rule == "L12" and "label holds claim epoch 1 held" in str(claim.value)
        assert any("label" in sign for sign in signs)
        assert (board.state, board.owner, board.job, board.epoch) == (
            b.CLAIMED, "alice", "portraits", 1
        )
        assert install.value.exit_code == 3
        assert script.SCRIPT_KEY not in world.fake.metadata


def test_a_board_that_says_free_while_the_label_holds_a_claim_refuses_every_claim_l13(
    tmp_path, monkeypatch
):
    """L13: a free board put over alice's claim (a hand edit, a restore): bob's claim is
    refused naming L13, the label keeps alice's claim; alice's own claim resumes it."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        got = world.store.get(KEY)
        assert got is not None
        free = b.Board("gpu-lane", "gpu-lane", world.clock.wall(), revision=9)
        world.store.put(KEY, b.render(free, []).encode(), got.version)
        held = dict(world.fake.labels)

        with pytest.raises(Refused) as refused:
            world.lane("bob").claim("vids")
        again = alice.claim("portraits")

        assert refused.value.rule == "L13" and "stale, rebuilt or lost" in str(refused.value)
        assert world.fake.labels == held
        assert (again.owner, again.epoch) == ("alice", 1)


def test_two_claims_from_one_reading_of_the_label_cannot_both_take_it_l13(tmp_path, monkeypatch):
    """L13: the label is GCE's compare-and-swap: a setLabels with the fingerprint read before
    another claimant's write is a 412, so the loser re-reads, sees the claim and is refused."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice, bob = world.lane("alice"), world.lane("bob")
        seen = alice.gce.get("gpu-lane")  # both read the same free label
        bob.claim("vids")

        from gpuops.errors import VersionConflict

        with pytest.raises(VersionConflict):
            alice.gce.set_labels(
                "gpu-lane", {d.CLAIM_LABEL: "1-held-00000000"}, seen.label_fingerprint
            )
        with pytest.raises(Refused) as refused:
            alice.claim("portraits")

        assert world.fake.labels == {d.CLAIM_LABEL: f"1-held-{d.holder_token('bob', 'vids')}"}
        assert refused.value.rule == "L3"


def test_a_claim_from_a_stale_board_cannot_start_the_vm_l13(tmp_path, monkeypatch):
    """L13: alice's claim of `portraits` (epoch 1) is released and bob claims and installs the
    same job name (epoch 2); an old copy of the lane's board and journal naming alice's
    claim is put back: alice's start is refused before any start, and nothing boots."""
    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        alice.claim("portraits")
        alice.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))
        stale = _copy(world)
        alice.release("portraits")
        bob = world.lane("bob")
        bob.claim("portraits")
        bob.install("portraits", script.render("portraits", BUCKET, JOB_COMMAND))
        _put_back(world, stale)

        with pytest.raises(Refused) as start:
            alice.start("portraits")

        assert start.value.rule == "L13" and "epoch 1" in str(start.value)
        assert "POST start" not in world.fake.calls and world.fake.boots == 0
        token = d.holder_token("bob", "portraits")
        assert world.fake.labels == {d.CLAIM_LABEL: f"2-held-{token}"}


def test_the_claim_journal_is_evidence_on_another_host_without_the_label_l12(
    tmp_path, monkeypatch
):
    """L12: alice's claim on host A from before the label fence (no label), its board deleted:
    host B's event log has nothing, yet the claim journal in the shared store says alice holds
    the lane, so bob's claim is refused, naming her and her job."""
    with lane_world(tmp_path, monkeypatch) as world:
        _on_host(world, "alice", "a").claim("portraits")
        world.fake.labels.clear()
        got = world.store.get(KEY)
        assert got is not None
        world.store.delete(KEY, got.version)

        with pytest.raises(Refused) as refused:
            _on_host(world, "bob", "b").claim("vids")

        assert refused.value.rule == "L12"
        assert "left it claimed for job portraits by alice" in str(refused.value)
        host_b = read_events(world.events_path.with_name("events-b.jsonl"))
        assert not [e for e in host_b if str(e["kind"]).startswith("lane.")]


def test_an_unreadable_claim_journal_is_a_sign_of_a_claim_and_repair_replaces_it_l12(
    tmp_path, monkeypatch
):
    """L12: garbage where the journal should be, no board, nothing else: unknown, not free;
    repair rebuilds the line and writes a journal that reads again."""
    from gpuops.lane.journal import CODEC

    with lane_world(tmp_path, monkeypatch) as world:
        world.store.create("lane/gpu-lane/journal", b"{not json")
        bob = world.lane("bob")

        with pytest.raises(Refused) as refused:
            bob.claim("vids")
        board, _ = bob.repair()

        assert refused.value.rule == "L12"
        assert board.state == b.CLAIMED and board.owner == d.UNKNOWN_OWNER
        entry = CODEC.decode("j", world.store.get("lane/gpu-lane/journal").data)
        assert (entry.state, entry.writer, entry.repaired) == (b.CLAIMED, "bob", True)


def test_the_journal_never_goes_back_to_an_earlier_board_revision_l12(tmp_path, monkeypatch):
    """L12: two writers finishing out of order: the entry of the later revision stays."""
    from gpuops.lane.journal import CODEC

    with lane_world(tmp_path, monkeypatch) as world:
        alice = world.lane("alice")
        claimed = alice.claim("portraits")
        alice._journal(b.Board("gpu-lane", "gpu-lane", 0.0, revision=0), repaired=False)
        kept = CODEC.decode("j", world.store.get("lane/gpu-lane/journal").data)

        assert (kept.state, kept.owner, kept.revision) == (b.CLAIMED, "alice", claimed.revision)


@pytest.mark.fault(
    "the board is lost while a third operator's own boot runs on the VM, and another host "
    "still holds a copy of the board from when the lane was free",
    handled="repair rebuilds a running claim of owner unknown and takes the instance's label "
    "for it first, so the other host's stale free board cannot claim the VM (L12, L13)",
)
def test_a_repaired_claim_no_label_held_is_fenced_on_the_label_before_its_board_l13(
    tmp_path, monkeypatch
):
    """L12/L13: alice claims and releases (label `1-free`); bob on host B reads the free board;
    the board is lost; a third operator boots the VM outside gpuops. Alice's repair on host A
    writes a running board of owner unknown at epoch 2 and the label `2-held-<its token>`;
    bob's claim from his stale free board is then refused by the label (L13) and moves
    nothing on the instance."""
    with lane_world(tmp_path, monkeypatch, job_runtime_s=60.0) as world:
        alice = _on_host(world, "alice", "a")
        alice.claim("portraits")
        alice.release("portraits")
        bob = _on_host(world, "bob", "b")
        stale_free = bob.read()[0]
        assert stale_free.state == b.FREE
        got = world.store.get(KEY)
        assert got is not None
        world.store.delete(KEY, got.version)
        world.fake.foreign_start("their-batch", runtime_s=600.0)

        board, signs = alice.repair()
        label = dict(world.fake.labels)
        token = d.holder_token(d.UNKNOWN_OWNER, d.UNKNOWN_OWNER)
        with pytest.raises(Refused) as claim:
            bob._claim_label(stale_free, "vids")  # the claim's first write, from the stale board

        assert any("not TERMINATED" in sign for sign in signs)
        assert (board.state, board.owner, board.epoch) == (b.RUNNING, d.UNKNOWN_OWNER, 2)
        assert label == {d.CLAIM_LABEL: f"2-held-{token}"}
        assert d.vm_claim(world.fake.labels) == d.VmClaim(2, True, token)
        assert claim.value.rule == "L13"
        assert world.fake.labels == label  # the VM's own record: nothing moved
        stored = world.store.get(KEY)
        assert stored is not None and b.parse(stored.data.decode())[0].epoch == 2
