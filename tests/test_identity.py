"""Who may act (M3): an operator id the provider attests, when it can (gpuops/identity.py).

FakeVast's scenario has team members with keys of their own (``vast.members``); for such a
key Vast's ``/users/current`` names the member, and gpuops acts as that member: a declared id
that disagrees is refused with exit 3 naming M3. The shared account key's answer names no one,
and the id stays declared. The command line runs in-process against FakeVast through the real
adapter; every verdict on a box is the fake's own list of what still bills.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from market_world import BASE, FAKE_SSH, KEY
from store_fakes import Events
from test_guard import World, scenario

from fakes.scenario import ScenarioError, parse_scenario
from fakes.ssh import sandbox
from fakes.ssh.boxes import write_identity
from fakes.vast import FakeClock, FakeVast
from gpuops import cli
from gpuops.errors import AuthFailed, Refused, UsageError
from gpuops.identity import Identity, acts, attest, decide, key_holder
from gpuops.ledger import Ledger
from gpuops.market import guardian as g
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import Rentals
from gpuops.model import KeyHolder, Verdict
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings, read_config
from gpuops.store.local import LocalStore
from gpuops.store.memory import MemoryStore

SHARED = "k-test"  # the account's key: the fakes' default answer names no user
MEMBERS = [
    {"username": "alice", "api_key": "k-alice", "id": 101},
    {"username": "bob", "api_key": "k-bob", "id": 102},
]


@dataclass
class Team:
    fake: FakeVast
    tmp: Path

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    def rent(self, key: str, operator: str, *, attested: bool = False) -> str:
        """``operator`` rents `job` with ``key`` (the market library, as `rent` runs it);
        ``attested``: as `rent` does when the provider attested the operator."""
        events = Events()
        market = Market(
            VastAdapter(api_key=key, base_url=BASE, clock=self.fake.ticking()),
            Ledger(LocalStore(str(self.state)), events, operator, clock=self.fake.clock),
            events,
            probe=lambda instance, box: Verdict.PASS,
            public_key=KEY,
            clock=self.fake.ticking(),
            rng=random.Random(3),
            attested=attested,
        )
        market.rent(RentRequest(name="job", gpu_name="RTX 4090", hours=2.0, race_k=1))
        rental = market.rentals.get("job")
        assert rental is not None and rental.instance_id is not None
        return rental.instance_id

    def billing(self) -> list[int]:
        """The fake's own record: every box that still bills."""
        return sorted(box.id for box in self.fake.boxes())

    def asked(self) -> int:
        """How many times anyone asked the fake whose key theirs is."""
        return sum(1 for call in self.fake.calls if call.route == "user")

    def events(self) -> list[dict[str, Any]]:
        path = self.state / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    doc = copy.deepcopy(scenario())
    doc["vast"]["members"] = MEMBERS
    fake = FakeVast(parse_scenario(doc), clock=FakeClock())
    monkeypatch.setenv("VAST_URL", BASE)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GPUOPS_IDENTITY", "key")  # this team's operators hold keys of their own
    with fake.activate(BASE):
        yield Team(fake, tmp_path)


def gpuops(
    team: Team, capfd: Any, monkeypatch: pytest.MonkeyPatch, key: str, *argv: str
) -> tuple[int, str]:
    """One in-process run of the command line with ``key`` as VAST_API_KEY: (exit, stderr)."""
    monkeypatch.setenv("VAST_API_KEY", key)
    capfd.readouterr()
    code = cli.main(["--state", str(team.state), *argv])
    return code, capfd.readouterr().err


# --- against the fake: bob's key cannot act as alice ------------------------------------------
@pytest.mark.parametrize(
    ("declared", "environ"),
    [
        (["--operator", "alice"], {}),
        ([], {"GPUOPS_OPERATOR": "alice"}),
        ([], {}),
        (["--operator", "bob"], {}),
    ],
    ids=["--operator alice", "GPUOPS_OPERATOR=alice", "nothing declared", "--operator bob"],
)
def test_bobs_own_key_cannot_destroy_alices_box_whatever_he_declares_m3(
    team, capfd, monkeypatch, declared, environ
):
    """M3: alice rents with her key; bob runs `destroy job` with his own key, declaring alice
    (by flag or variable), nothing, or himself: exit 3 every time, and the fake still bills
    alice's box."""
    box = team.rent("k-alice", "alice")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    code, err = gpuops(team, capfd, monkeypatch, "k-bob", *declared, "destroy", "job")

    assert code == 3, err
    assert "refused (M3)" in err
    assert team.billing() == [int(box)]


def test_a_declared_operator_the_key_disagrees_with_is_refused_before_anything_acts_m3(
    team, capfd, monkeypatch
):
    """M3: bob's key declaring alice is refused naming both, before any other provider call
    (the identity question is the only one asked) and before anything is written."""
    team.rent("k-alice", "alice")
    before = len(team.fake.calls)

    code, err = gpuops(team, capfd, monkeypatch, "k-bob", "--operator", "alice", "destroy", "job")

    assert code == 3
    assert "the Vast key in use is 'bob''s, and the declared operator is 'alice'" in err
    assert [call.route for call in team.fake.calls[before:]] == ["user"]


def test_alices_own_key_destroys_her_box_and_says_the_id_was_attested_m3(team, capfd, monkeypatch):
    """M3: with her own key alice's `destroy job` acts (exit 0, the fake bills nothing), says
    on stderr that the id was attested, and logs it; the key's holder was asked once."""
    team.rent("k-alice", "alice")
    asked = team.asked()

    code, err = gpuops(team, capfd, monkeypatch, "k-alice", "--operator", "alice", "destroy", "job")

    assert code == 0, err
    assert team.billing() == []
    assert team.asked() == asked + 1
    assert "gpuops: acting as alice (attested: the Vast key is user 101's)" in err
    (event,) = [e for e in team.events() if e["kind"] == "operator.identity"]
    assert event["payload"] == {"operator": "alice", "attested": True, "user_id": 101}


def test_with_the_shared_key_the_id_stays_declared_and_acts_as_before_m3(team, capfd, monkeypatch):
    """M3: the account's shared key names no user: `--operator alice` stays declared, her
    box is destroyed (exit 0), nothing is said about attestation, and the log says declared."""
    team.rent(SHARED, "alice")

    code, err = gpuops(team, capfd, monkeypatch, SHARED, "--operator", "alice", "destroy", "job")

    assert code == 0, err
    assert team.billing() == []
    assert "attested" not in err
    (event,) = [e for e in team.events() if e["kind"] == "operator.identity"]
    assert event["payload"] == {"operator": "alice", "attested": False, "user_id": None}


def test_with_the_shared_key_a_declared_bob_is_still_refused_alices_box_m3(
    team, capfd, monkeypatch
):
    """M3: declared ids still keep honest operators apart: bob, declared, on the shared key,
    cannot destroy alice's box (exit 3)."""
    box = team.rent(SHARED, "alice")

    code, _ = gpuops(team, capfd, monkeypatch, SHARED, "--operator", "bob", "destroy", "job")

    assert code == 3
    assert team.billing() == [int(box)]


def test_a_command_that_only_reads_never_asks_whose_key_it_is(team, capfd, monkeypatch):
    """The identity question costs a call only where a command acts: `boxes` asks nothing."""
    team.rent("k-alice", "alice")
    asked = team.asked()

    code, _ = gpuops(team, capfd, monkeypatch, "k-bob", "--operator", "alice", "boxes")

    assert code == 0
    assert team.asked() == asked


def test_a_members_key_reaches_every_instance_of_the_team_at_the_fake():
    """A Vast team shares its instances: bob's own key lists alice's box at the provider (so
    only gpuops' refusal, and the team's roles, stand between them)."""
    doc = copy.deepcopy(scenario())
    doc["vast"]["members"] = MEMBERS
    fake = FakeVast(parse_scenario(doc), clock=FakeClock())
    with fake.activate(BASE):
        alice = VastAdapter(api_key="k-alice", base_url=BASE, clock=fake.ticking())
        bob = VastAdapter(api_key="k-bob", base_url=BASE, clock=fake.ticking())
        box = alice.create(18432117, label="gpuops:x", image="img", disk_gb=20.0)

        assert [i.instance_id for i in bob.list_instances()] == [box]
        assert bob.current_user() == KeyHolder(user_id=102, username="bob")
        assert alice.current_user() == KeyHolder(user_id=101, username="alice")


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        ({"username": "x"}, "api_key: is required"),
        ({"api_key": "k"}, "username: is required"),
        ({"username": "x", "api_key": "k-test"}, "api_key: is another key's too"),
        ({"username": "alice", "api_key": "k-3"}, "username: 'alice' appears twice"),
        ({"username": "a b", "api_key": "k-3"}, "username: must be a non-empty string"),
        ({"username": "x", "api_key": "k-3", "role": "admin"}, "role: unknown field"),
        ({"username": "x", "api_key": "k-3", "permissions": ["root"]}, "permissions: 'root' is"),
        ({"username": "x", "api_key": "k-3", "permissions": "misc"}, "permissions: expected a"),
    ],
)
def test_a_malformed_team_member_is_named_by_the_scenario(member, problem):
    """A member without a key or a name, with another's key or name, or an unknown field, is
    a scenario error naming the field."""
    doc = copy.deepcopy(scenario())
    doc["vast"]["members"] = [MEMBERS[0], member]

    with pytest.raises(ScenarioError, match="members\\[1\\]\\." + problem.split(":")[0]) as err:
        parse_scenario(doc)

    assert problem.split(": ", 1)[1] in str(err.value)


# --- the decision, pure ---------------------------------------------------------------------
def test_an_answer_without_a_username_keeps_the_declared_id():
    """M3: no user named (the shared key): the declared id, declared."""
    assert decide("alice", True, KeyHolder(318840)) == Identity("alice", attested=False)


def test_a_username_becomes_the_operator_id_and_agreeing_with_it_is_fine():
    """M3: the key's username is the id, attested with the user's id; declaring the same
    name is no conflict."""
    assert decide("alice", True, KeyHolder(101, "alice")) == Identity("alice", True, 101)


def test_an_undeclared_default_id_gives_way_to_the_attested_one():
    """M3: user@host, gpuops' own default, is not a declaration: the key's user wins."""
    assert decide("bob@laptop", False, KeyHolder(102, "bob")) == Identity("bob", True, 102)


def test_a_declared_id_the_key_disagrees_with_is_refused_with_exit_3_m3():
    """M3: a declared id that is not the key's user is a refusal (exit 3) naming the rule."""
    with pytest.raises(Refused) as caught:
        decide("alice", True, KeyHolder(102, "bob"))

    assert (caught.value.rule, caught.value.exit_code) == ("M3", 3)
    assert str(caught.value) == (
        "refused (M3): the Vast key in use is 'bob''s, and the declared operator is 'alice'; "
        "nobody acts as another operator: drop --operator and GPUOPS_OPERATOR, or use your "
        "own key"
    )


def test_a_username_that_cannot_be_an_operator_id_is_a_usage_error():
    """A username outside the operator id's characters is named, not mangled, with the fix."""
    with pytest.raises(UsageError) as caught:
        decide("alice", False, KeyHolder(7, "a b"))

    assert str(caught.value) == (
        "the Vast key's user 'a b' cannot be an operator id (letters, digits and _.@+-); use "
        "a key whose username can"
    )


def test_the_key_holder_is_asked_with_the_configured_key_at_the_configured_vast(tmp_path):
    """key_holder asks VAST_URL (a fake elsewhere than Vast's own address) with the key the
    settings carry, the config file's here (no VAST_API_KEY in the environment): alice's key
    names alice."""
    elsewhere = "http://vast.invalid"
    doc = copy.deepcopy(scenario())
    doc["vast"]["members"] = MEMBERS
    fake = FakeVast(parse_scenario(doc), clock=FakeClock())
    config = tmp_path / "config.toml"
    config.write_text('vast_api_key = "k-alice"\n', encoding="utf-8")
    config.chmod(0o600)
    env = {"VAST_URL": elsewhere, "GPUOPS_CONFIG": str(config), "HOME": str(tmp_path)}
    settings = Settings.from_environ(env, config=read_config(env))

    with fake.activate(elsewhere):
        holder = key_holder(settings)

    assert holder == KeyHolder(101, "alice")
    assert [call.route for call in fake.calls] == ["user"]


def test_attest_asks_once_and_knows_whether_the_id_was_declared():
    """attest asks its provider once; --operator makes the id declared (a disagreement is
    refused), while the user@host default gives way."""
    asked: list[Settings] = []

    def ask(settings: Settings) -> KeyHolder:
        asked.append(settings)
        return KeyHolder(102, "bob")

    by_key = {"GPUOPS_IDENTITY": "key"}
    undeclared = Settings.from_environ(by_key)
    assert attest(undeclared, "x@host", ask=ask) == Identity("bob", True, 102)
    with pytest.raises(Refused):
        attest(Settings.from_environ(by_key, {"operator": "alice"}), "alice", ask=ask)
    assert asked[0] is undeclared and len(asked) == 2
    # a key that may be shared (the default): never asked, the id as declared
    shared = Settings.from_environ({}, {"operator": "alice"})
    assert attest(shared, "alice", ask=ask) == Identity("alice", False)
    assert len(asked) == 2


def command(words: str) -> argparse.Namespace:
    return cli.build_parser(only=words.split()[0]).parse_args(words.split())


@pytest.mark.parametrize(
    ("words", "acting"),
    [
        ("rent job --gpu x --hours 1", True),
        ("destroy job", True),
        ("sweep", True),
        ("run job -- true", True),
        ("guard job --hours 2", True),
        ("guard job", True),
        ("guard job --foreground", False),
        ("guard --all", False),
        ("guard job --print-systemd-unit", False),
        ("boxes", False),
        ("watch job", False),
        ("offers --gpu x", False),
    ],
)
def test_only_commands_that_act_on_boxes_ask_whose_key_it_is(words, acting):
    """Identity is asked before rent, destroy, sweep, run and a person's guard; never for a
    read, nor for the guardian a command spawns or the host's guardian service."""
    assert acts(command(words)) is acting


@pytest.mark.parametrize("argv", [["run", "nosuch", "--", "true"], ["guard", "nosuch"]])
def test_run_or_guard_of_a_name_with_no_rental_is_a_usage_error_before_any_call(
    team, capfd, monkeypatch, argv
):
    """A name the state has no rental of is exit 2 naming it, and Vast is not asked whose
    key it is (nothing would be acted on)."""
    code, err = gpuops(team, capfd, monkeypatch, "k-bob", *argv)

    assert code == 2
    assert "no rental named 'nosuch'" in err
    assert team.asked() == 0


@pytest.mark.parametrize(
    "argv", [["run", "job", "--", "true"], ["guard", "job", "--hours", "5"], ["sweep"]]
)
def test_bobs_key_cannot_run_on_extend_or_sweep_alices_rental_declaring_alice_m3(
    team, capfd, monkeypatch, argv
):
    """M3: bob's own key, declaring alice, is refused (exit 3) on `run`, `guard --hours` and
    `sweep` too; alice's box still bills and its deadline is unmoved."""
    box = team.rent("k-alice", "alice")
    before = Rentals(LocalStore(str(team.state)), "alice").get("job")

    code, err = gpuops(team, capfd, monkeypatch, "k-bob", "--operator", "alice", *argv)

    assert code == 3, err
    assert "refused (M3)" in err
    assert team.billing() == [int(box)]
    assert Rentals(LocalStore(str(team.state)), "alice").get("job") == before


# --- least privilege: a guardian's key reads and destroys instances, nothing else ---------------
READ_AND_DESTROY = {
    "username": "guardian",
    "api_key": "k-guardian",
    "permissions": ["instance_read", "instance_write"],
}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """test_guard's world (real jobs in the fake ssh's sandboxes), with a guardian's key."""
    doc = copy.deepcopy(scenario())
    doc["vast"]["members"] = [READ_AND_DESTROY]
    fake_dir = tmp_path / "fake"
    fake = FakeVast(parse_scenario(doc), clock=FakeClock(), state_dir=fake_dir)
    monkeypatch.setenv("GPUOPS_SSH", str(FAKE_SSH))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_PYTHON", sys.executable)
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(fake_dir / "boxes.yaml"))
    write_identity(tmp_path / "id_ed25519", KEY)
    with fake.activate(BASE):
        yield World(fake, MemoryStore(), Events(), tmp_path)
    sandbox.stop_all(fake_dir / "boxes.yaml")


def test_a_guardian_with_a_read_and_destroy_key_does_its_whole_job_m5(world):
    """M5: alice rents with the account key; her guardian runs with a key scoped to
    instance_read and instance_write: it copies the results off, destroys the box at the
    deadline, confirms it gone (exit 0), and no call it made was refused."""
    market = world.rent(hours=2.0)
    world.run_job(market, "mkdir -p results && echo 42 > results/answer.txt")
    scoped = Market(
        VastAdapter(api_key="k-guardian", base_url=BASE, clock=world.fake.ticking()),
        Ledger(world.store, world.events, "alice", clock=world.fake.clock),
        world.events,
        probe=lambda instance, box: Verdict.PASS,
        public_key=KEY,
        clock=world.fake.ticking(),
        rng=random.Random(3),
    )
    before = len(world.fake.calls)

    code = world.guardian(scoped, "alice/svc/1/aa").run()

    assert code == g.GONE
    assert world.alive() == []
    (answer,) = (world.tmp / "results" / "job").glob("*/answer.txt")
    assert answer.read_text() == "42\n"
    guarded = world.fake.calls[before:]
    assert {call.route for call in guarded} >= {"show", "destroy"}
    assert [call for call in guarded if call.status == 401] == []


def test_the_read_and_destroy_key_is_refused_what_it_was_not_given(world):
    """The fake holds a scoped key to its categories: searching offers (misc), reading the
    account's user or its SSH keys (user_read) and registering a key (user_write) are
    refused as a wrong key is (exit 2, AuthFailed); show and list are not."""
    vast = VastAdapter(api_key="k-guardian", base_url=BASE, clock=world.fake.ticking())
    refused = (vast.search_offers, vast.current_user, vast.list_ssh_keys)
    for call in (*refused, lambda: vast.register_ssh_key(KEY)):
        with pytest.raises(AuthFailed):
            call()
    box = vast.create(18432117, label="gpuops:x", image="img", disk_gb=20.0)  # instance_write
    assert vast.show(box) is not None
    assert [i.instance_id for i in vast.list_instances()] == [box]


def test_a_team_that_may_share_a_key_is_never_asked_whose_it_is_and_stays_declared_m3(
    team, capfd, monkeypatch
):
    """M3: without GPUOPS_IDENTITY=key a key may be shared (Vast names the account owner for
    the one key a small team shares, so its user cannot tell alice from bob): no command asks
    whose key it is, and the operator stays as declared."""
    monkeypatch.delenv("GPUOPS_IDENTITY")
    team.rent("k-alice", "alice")

    code, err = gpuops(team, capfd, monkeypatch, "k-alice", "--operator", "alice", "destroy", "job")

    assert code == 0, err
    assert team.asked() == 0 and team.billing() == []
    (said,) = [e for e in team.events() if e["kind"] == "operator.identity"]
    assert said["payload"]["attested"] is False and said["payload"]["operator"] == "alice"


# --- every record and `boxes` say how the owner was established ---------------------------------
@pytest.mark.parametrize(("attested", "said"), [(True, "attested"), (False, "declared")])
def test_boxes_says_whether_each_rentals_owner_was_attested_or_declared_m3(
    team, capfd, monkeypatch, attested, said
):
    """M3: the rental records how its owner was established when its race began; `boxes`
    shows it beside the owner, and `--json` as `attested`."""
    team.rent("k-alice", "alice", attested=attested)

    monkeypatch.setenv("VAST_API_KEY", "k-alice")
    capfd.readouterr()
    code = cli.main(["--state", str(team.state), "--operator", "alice", "boxes"])
    out = capfd.readouterr().out
    cli.main(["--state", str(team.state), "--operator", "alice", "--json", "boxes"])
    doc = json.loads(capfd.readouterr().out)

    assert code == 0, out
    (row,) = [line for line in out.splitlines() if line.startswith("job ")]
    assert f" alice ({said})  guard " in row
    assert [r["attested"] for r in doc["rentals"]] == [attested]
    rental = Rentals(LocalStore(str(team.state)), "alice").get("job")
    assert rental is not None and rental.attested is attested


def test_the_market_records_the_attested_operator_it_was_opened_for_m3(team):
    """open_market carries the command's identity to the rentals it races for."""
    from gpuops.market.session import open_market

    settings = Settings.from_environ(
        {"VAST_URL": BASE, "VAST_API_KEY": "k-alice", "HOME": str(team.tmp)},
        {"state": str(team.state), "operator": "alice"},
    )
    assert open_market(settings, "alice", need_key=False, attested=True).rentals.attested
    assert not open_market(settings, "alice", need_key=False).rentals.attested


def test_the_command_line_hands_the_attested_identity_to_rent_m3(team, capfd, monkeypatch):
    """`rent` with alice's own key opens its market as attested (the identity asked once);
    with the shared key, as declared. The market is stopped at its opening (a bug's exit 1:
    nothing is rented)."""
    from gpuops.market import session

    opened: list[bool] = []

    class Opened(Exception):
        pass

    def opening(settings: Settings, operator: str, **options: Any) -> Market:
        opened.append(options["attested"])
        raise Opened

    monkeypatch.setattr(session, "open_market", opening)
    codes = [
        gpuops(team, capfd, monkeypatch, key, "--operator", "alice", "rent", "job",
               "--gpu", "RTX 4090", "--hours", "1")[0]
        for key in ("k-alice", SHARED)
    ]  # fmt: skip

    assert opened == [True, False] and codes == [1, 1]
    assert team.billing() == []
