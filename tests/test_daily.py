"""`gpuops logs`, `gpuops ssh` and `gpuops cost` on the command line, in-process, against
FakeVast (through the real adapter) and the fake ssh program, whose boxes run the job for real
in their sandboxes under a real tmux (fakes/ssh/README.md); `cost` also against M15's spend
records on the fake's own clock. The printed ssh config is read by the real OpenSSH (`ssh -G`)
and used by the real scp, with the fake ssh as its transport."""

from __future__ import annotations

import copy
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from market_world import BASE, FAKE_SSH, KEY, build_market
from store_fakes import Events
from test_guard import OFFER, scenario, wait_until

from fakes.scenario import parse_scenario
from fakes.ssh import sandbox
from fakes.ssh.boxes import TableState, write_identity
from fakes.vast import FakeClock, FakeVast
from gpuops import cli, timing
from gpuops.cli.daily import box_logs, cost_report, scrubbed
from gpuops.market import jobs
from gpuops.market import logs as box
from gpuops.market.budgets import Budgets
from gpuops.market.ending import destroy_rental
from gpuops.market.rent import Market, RentRequest
from gpuops.market.rentals import Rental
from gpuops.model import Instance, Verdict
from gpuops.providers.ssh import SshEndpoint, ssh_argv
from gpuops.settings import Settings
from gpuops.store.local import LocalStore

ROOT = Path(__file__).resolve().parent.parent


def offers(*prices: float) -> dict[str, Any]:
    """The scenario of test_guard, with one healthy offer per price (ids OFFER, OFFER + 1...)."""
    doc = scenario()
    first = doc["vast"]["offers"][0]
    doc["vast"]["offers"] = [
        {**first, "id": OFFER + i, "machine_id": 31218 + i, "dph_total": price}
        for i, price in enumerate(prices)
    ]
    return doc


@dataclass
class Daily:
    fake: FakeVast
    tmp: Path
    events: Events

    @property
    def state(self) -> Path:
        return self.tmp / "state"

    @property
    def table(self) -> Path:
        return self.tmp / "fake" / "boxes.yaml"

    def market(self, operator: str = "alice") -> Market:
        store = LocalStore(str(self.state))  # the store the command line opens with --state
        return build_market(
            self.fake, store, self.events, operator, probe=lambda i, box: Verdict.PASS, seed=3
        )

    def rent(self, name: str = "job", operator: str = "alice") -> tuple[Market, Rental]:
        market = self.market(operator)
        market.rent(RentRequest(name=name, gpu_name="RTX 4090", hours=2.0, race_k=1))
        rental = market.rentals.get(name)
        assert rental is not None and rental.instance_id is not None
        return market, rental

    def shell(self) -> jobs.BoxShell:
        """The box shell the command line builds: our key, known_hosts in the state dir."""
        return jobs.BoxShell(self.state, self.tmp / "id_ed25519", Settings.from_environ().ssh())

    def start(self, command: str, name: str = "job", *, wait: bool = True) -> Instance:
        """Rent NAME as alice and start ``command`` under tmux on its box (`gpuops run`);
        with ``wait``, until the job has ended (its exit code recorded)."""
        market, rental = self.rent(name)
        instance = market.vast.show(rental.instance_id or "")
        assert instance is not None
        jobs.Jobs(market.ledger.store).put(jobs.start(rental, instance, self.shell(), [command], "results"))
        if wait:
            wait_until(
                "the job's end",
                lambda: jobs.observe(name, instance, self.shell()).state.value == "dead",
            )
        return instance

    def job_dir(self, name: str = "job") -> Path:
        (found,) = (self.tmp / "fake" / "sandboxes").glob(f"*/gpuops/{name}")
        return found

    def settings(self, operator: str) -> Settings:
        return Settings.from_environ(None, {"state": str(self.state), "operator": operator})

    def calls(self) -> list[dict[str, Any]]:
        return TableState(self.table).read_calls()


def gpuops(capfdbinary: Any, *argv: str, operator: str = "alice", state: Path) -> tuple[int, bytes, str]:
    """One in-process run of the command line: (exit code, stdout bytes, stderr text)."""
    try:
        code = cli.main(["--state", str(state), "--operator", operator, *argv])
    except SystemExit as done:  # argparse's own usage errors
        code = done.code if isinstance(done.code, int) else 2
    out = capfdbinary.readouterr()
    return code, out.out, out.err.decode("utf-8", "replace")


@contextmanager
def world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any], clock: FakeClock
) -> Iterator[Daily]:
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    fake = FakeVast(parse_scenario(copy.deepcopy(doc)), clock=clock, state_dir=tmp_path / "fake")
    monkeypatch.setenv("GPUOPS_SSH", str(FAKE_SSH))
    monkeypatch.setenv("GPUOPS_FAKE_SSH_PYTHON", sys.executable)
    monkeypatch.setenv("GPUOPS_FAKE_SSH_BOXES", str(tmp_path / "fake" / "boxes.yaml"))
    monkeypatch.setenv("GPUOPS_SSH_KEY", str(write_identity(tmp_path / "id_ed25519", KEY)))
    monkeypatch.setenv("VAST_API_KEY", "k-test")
    monkeypatch.setenv("VAST_URL", BASE)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    try:
        with fake.activate(BASE):
            yield Daily(fake, tmp_path, Events())
    finally:
        sandbox.stop_all(tmp_path / "fake" / "boxes.yaml")


@pytest.fixture
def daily(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daily]:
    """The world on the fake's own clock (the recordings' epoch)."""
    with world(tmp_path, monkeypatch, getattr(request, "param", scenario()), FakeClock()) as w:
        yield w


@pytest.fixture
def daily_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daily]:
    """The world with the fake's clock started two hours before the real one, which the
    command line's own clock reads (`cost` bills until its now)."""
    with world(tmp_path, monkeypatch, scenario(), FakeClock(time.time() - 2 * 3600.0)) as w:
        yield w


def run(daily: Daily, capfdbinary: Any, *argv: str, operator: str = "alice") -> tuple[int, bytes, str]:
    return gpuops(capfdbinary, *argv, operator=operator, state=daily.state)


# --- logs NAME --------------------------------------------------------------------------------
def test_logs_prints_the_last_lines_of_the_jobs_log_from_its_box(daily, capfdbinary):
    """M10: the job `run` started writes ~/gpuops/NAME/log on the box; `logs NAME --lines 2`
    prints its last two lines as they are there, and nothing else; exit 0."""
    daily.start("for i in 1 2 3 4 5; do echo line $i; done")

    code, out, err = run(daily, capfdbinary, "logs", "job", "--lines", "2")

    assert (code, out, err) == (0, b"line 4\nline 5\n", "")


def test_logs_prints_a_hundred_lines_unless_told_otherwise(daily, capfdbinary):
    """The default is the last 100 lines of the log."""
    daily.start("i=1; while [ $i -le 150 ]; do echo line $i; i=$((i + 1)); done")

    code, out, _ = run(daily, capfdbinary, "logs", "job")

    assert code == 0
    assert out.splitlines() == [f"line {i}".encode() for i in range(51, 151)]


def test_any_operator_may_read_a_live_rentals_log(daily, capfdbinary):
    """M3 is for acting: bob reads alice's job's log (reading changes nothing), over ssh with
    the pinned host key and an environment without the account's key (H3)."""
    daily.start("echo from alice")

    code, out, _ = run(daily, capfdbinary, "logs", "job", operator="bob")

    assert (code, out) == (0, b"from alice\n")
    (call,) = [c for c in daily.calls() if "tail -n 100" in c["argv"][-1]]
    assert call["secret_env"] == []
    assert any(a.startswith("UserKnownHostsFile=") and a.endswith("/ssh/known_hosts/1234568")
               for a in call["argv"])  # fmt: skip


def test_a_log_keeps_its_bytes_and_loses_its_secrets(daily, capfdbinary, monkeypatch):
    """H3: a token the job printed is scrubbed as everything gpuops prints is; bytes that are
    not UTF-8, and a progress bar's carriage returns, come back as they are on the box."""
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123")
    daily.start(r"printf 'caf\351\nstep 1\rstep 2\rstep 3\n'; echo token hf_abcdefghijklmnopqrstuvwxyz0123")

    code, out, _ = run(daily, capfdbinary, "logs", "job")

    assert code == 0
    assert out.startswith(b"caf\xe9\nstep 1\rstep 2\rstep 3\n")
    assert b"hf_abcdefghijklmnopqrstuvwxyz0123" not in out and b"[REDACTED]" in out


def test_a_box_with_no_job_has_no_log_exit_5(daily, capfdbinary):
    """M10: a live box where no job was started: nothing to show, said, exit 5 (as `watch`)."""
    daily.rent()

    code, out, err = run(daily, capfdbinary, "logs", "job")

    assert (code, out) == (5, b"")
    assert "job: no job log on its box: no job was started there (gpuops run job -- CMD)" in err


def test_logs_of_a_name_nobody_rented_is_a_usage_error_naming_it(daily, capfdbinary):
    """A name gpuops does not know is exit 2, naming it, before any provider call."""
    code, _, err = run(daily, capfdbinary, "logs", "nosuch")

    assert code == 2
    assert "no rental named 'nosuch'" in err


def test_logs_of_a_rental_that_is_not_live_is_a_usage_error_naming_it(daily, capfdbinary):
    """A released rental has no box, and no log on one: exit 2, naming it and its state."""
    market, _ = daily.rent()
    destroy_rental(market, "job")

    code, _, err = run(daily, capfdbinary, "logs", "job")

    assert code == 2
    assert "'job' is released, not live" in err


@pytest.mark.parametrize("lines", ["0", "-3", "10000001"])
def test_a_line_count_outside_1_to_ten_million_is_a_usage_error(daily, capfdbinary, lines):
    """--lines 0, a negative count or an absurd one is refused before anything is opened."""
    code, _, err = run(daily, capfdbinary, "logs", "nosuch", "--lines", lines)

    assert code == 2
    assert f"--lines must be between 1 and 10,000,000, not {lines}" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["logs"], "gpuops logs needs a rental NAME or --lane JOB (one of them)"),
        (["logs", "job", "--lane", "j"], "gpuops logs needs a rental NAME or --lane JOB"),
        (["logs", "job", "--json"], "gpuops logs has no --json form"),
        (["--json", "ssh", "job"], "gpuops ssh has no --json form"),
        (["logs", "bad name"], "rental name 'bad name'"),
        (["logs", "--lane", "bad job!"], "job name 'bad job!'"),
        (["logs", "--lane", "j"], "GPUOPS_LANE"),
        (["ssh", "--print-config", "job", "--", "ls"], "give --print-config or a command"),
        (["ssh", "job", "--print-config", "--", "ls"], "unrecognized arguments: -- ls"),
        (["logs", "job", "--lines", "x"], "invalid int value: 'x'"),
        (["cost", "--by", "fortnight"], "invalid choice: 'fortnight'"),
    ],
)
def test_malformed_arguments_are_usage_errors_that_say_what_is_wrong(daily, capfdbinary, argv, message):
    """Exit 2 naming the fault: NAME or --lane (not both, not neither), --json where output is
    the box's own, a rental or lane job name of the wrong shape, a lane not configured."""
    code, _, err = run(daily, capfdbinary, *argv)

    assert code == 2
    assert message in err


@pytest.mark.parametrize(
    "daily", [scenario(host_key_changes=[{"offer": OFFER, "after_connections": 1}])], indirect=True
)
def test_a_box_whose_host_key_changed_is_refused_m2_and_nothing_is_read(daily, capfdbinary):
    """M2: the key pinned when the job started is not the box's any more: refused, exit 3,
    naming the pinned file; a changed host key is never retried."""
    daily.start("echo secret results", wait=False)  # its start was the one connection let in

    code, out, err = run(daily, capfdbinary, "logs", "job")

    assert (code, out) == (3, b"")
    assert "refused (M2): job: the box's ssh host key changed" in err
    assert "known_hosts/1234568" in err


def test_follow_prints_new_lines_as_the_job_writes_them_and_ends_with_it(daily, capfd):
    """A follow prints the last lines, then each line as the job writes it, and ends when the
    job does, saying how it ended (exit 0 whatever the job's own exit code)."""
    daily.start("echo first; while [ ! -f go ]; do sleep 0.05; done; echo second; exit 3", wait=False)
    got = bytearray()

    def release() -> None:
        try:
            wait_until("the first line", lambda: b"first" in got)
            assert b"second" not in got  # printed before the job wrote it: no follow at all
        finally:
            (daily.job_dir() / "go").touch()

    helper = threading.Thread(target=release)
    helper.start()
    code = box_logs(daily.settings("bob"), "bob", "job", lines=10, follow=True, write=got.extend,
                    poll_s=timing.GUARD_SPAWN_POLL_S)  # fmt: skip
    helper.join()

    assert (code, bytes(got)) == (0, b"first\nsecond\n")
    assert "gpuops logs job: the job failed with exit code 3" in capfd.readouterr().err


def test_follow_of_a_job_that_already_ended_prints_its_end_and_stops(daily, capfdbinary):
    """A follow of an ended job is its last lines and how it ended, at once; exit 0."""
    daily.start("echo done")

    code, out, err = run(daily, capfdbinary, "logs", "job", "--follow")

    assert (code, out) == (0, b"done\n")
    assert "gpuops logs job: the job succeeded with exit code 0" in err


def followers(tmp: Path) -> list[int]:
    """The follow's processes still alive: the fake ssh and the script it runs in the box's
    sandbox (both name the follow's end line; this test's paths are in their environment)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if box.ENDED.encode() in argv and str(tmp).encode() in environ + argv:
            found.append(int(proc.name))
    return found


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_follow_stopped_by_a_signal_ends_its_ssh_and_exits_128_plus_it(daily, capfdbinary, signum, code):
    """Ctrl-C (130) or SIGTERM (143) ends a follow: its ssh's whole process group is killed and
    reaped on the way out, so nothing goes on following the box; the job itself runs on."""
    daily.start("echo first; while [ ! -f go ]; do sleep 0.05; done", wait=False)
    main = threading.get_ident()

    def interrupt() -> None:
        wait_until("the follow's ssh", lambda: followers(daily.tmp))
        signal.pthread_kill(main, signum)

    helper = threading.Thread(target=interrupt)
    helper.start()
    got = run(daily, capfdbinary, "logs", "job", "--follow")
    helper.join()

    assert got[0] == code
    wait_until("the follow's processes gone", lambda: not followers(daily.tmp))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back
    assert not (daily.job_dir() / "exit_code").exists()  # the job was left alone
    (daily.job_dir() / "go").touch()


def test_the_follow_script_reads_a_log_started_afresh_from_its_start():
    """A log that shrinks was begun again by a new job: the follow reads it from its start."""
    script = box.follow_script("job", 5, 1.0)

    assert '[ "$now" -lt "$at" ]; then at=0; fi' in script
    assert script.index("ended=1") < script.index("now=$(size)")  # the job's end read first
    assert "sleep 1\n" in script and "tmux has-session -t =gpuops-job" in script


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        (f"{box.ENDED} exit_code=0\n", "the job succeeded with exit code 0"),
        (f"noise\r\n{box.ENDED} exit_code=137\r\n", "the job failed with exit code 137"),
        (f"{box.ENDED} exit_code=oops\n", "the job ended with exit code oops"),
        (f"{box.ENDED}\n", "the job is no longer running: its tmux session is gone, no exit code recorded"),
        ("Connection closed\n", None),
    ],
)
def test_how_a_follow_ended_is_read_from_its_last_line(stderr, said):
    """The follow script's end line says the job's exit code, or that it left none."""
    assert box.ending(stderr) == said


def test_line_chunks_hand_on_whole_lines_and_a_long_line_in_pieces():
    """A secret is never cut in two by a read: pieces end at a line end (\\n or \\r), except a
    line longer than CHUNK_BYTES, which is passed on as it comes."""
    chunks = box.LineChunks()

    assert chunks.feed(b"a\nb") == b"a\n"
    assert chunks.feed(b"c\rd") == b"bc\r"
    assert chunks.feed(b"x" * box.CHUNK_BYTES) == b"d" + b"x" * box.CHUNK_BYTES
    assert chunks.feed(b"tail") == b""
    assert chunks.flush() == b"tail" and chunks.flush() == b""


def test_the_writer_scrubs_each_piece_and_keeps_bytes_that_are_not_utf8(monkeypatch, tmp_path):
    """H3: the printer scrubs; undecodable bytes survive the round trip unchanged."""
    monkeypatch.setenv("SOME_API_KEY", "sk-live-abcdefgh12345678")
    target = tmp_path / "out"
    with target.open("wb") as out:
        write = scrubbed(out)
        write(b"\xff\xfe key sk-live-abcdefgh12345678\n")
        write(b"")

    assert target.read_bytes() == b"\xff\xfe key [REDACTED]\n"


# --- ssh NAME ---------------------------------------------------------------------------------
def test_ssh_runs_one_command_on_the_box_and_exits_with_its_code(daily, capfdbinary):
    """`gpuops ssh NAME -- CMD` runs CMD in the box (words kept apart, as `run` does) with our
    key, the box's pinned known_hosts and no secret in ssh's environment; ssh's exit code is
    gpuops'."""
    daily.start("echo hi > greeting")

    shown = run(daily, capfdbinary, "ssh", "job", "--", "cat", "gpuops/job/greeting")
    failed = run(daily, capfdbinary, "ssh", "job", "--", "echo 'a b'; exit 7")

    assert shown == (0, b"hi\n", "")
    assert failed[:2] == (7, b"a b\n")
    call = daily.calls()[-1]
    assert call["secret_env"] == []
    assert call["argv"][-2:] == ["root@ssh1.vast.ai", "echo 'a b'; exit 7"]
    assert {"BatchMode=no", "ForwardAgent=no", "IdentitiesOnly=yes",
            "StrictHostKeyChecking=accept-new"} <= set(call["argv"])  # fmt: skip


def test_ssh_without_a_command_asks_for_a_login_shell(daily, capfdbinary):
    """No command: ssh's argv ends at the destination (a login shell); the fake box does not
    model one and says so loudly, and its 255 is gpuops' exit code."""
    daily.rent()

    code, _, err = run(daily, capfdbinary, "ssh", "job")

    assert code == 255
    assert "fake-ssh: interactive sessions are not modelled" in err


def test_the_ssh_argv_for_a_person_has_no_command_and_never_forwards_the_agent(tmp_path):
    """A login shell: the argv ends with user@host; a passphrase may be asked for (no batch
    mode) and the agent is never forwarded to a rented box; a script's argv stays batch."""
    endpoint = SshEndpoint("ssh1.vast.ai", 30000)
    person = ssh_argv(endpoint, None, identity_file=tmp_path / "id", known_hosts=tmp_path / "kh",
                      program="ssh", person=True)  # fmt: skip
    script = ssh_argv(endpoint, "true", identity_file=tmp_path / "id", known_hosts=tmp_path / "kh",
                      program="ssh")  # fmt: skip

    assert person[-2:] == ["--", "root@ssh1.vast.ai"]
    forward = person.index("ForwardAgent=no")
    as_script = [a.replace("BatchMode=no", "BatchMode=yes") for a in person]
    del as_script[forward - 1 : forward + 1]  # every other option is the script's own
    assert script == [*as_script, "true"]


def test_ssh_to_another_operators_box_is_refused_m3(daily, capfdbinary):
    """M3: a shell on a box can end its job: only the rental's owner gets one (exit 3)."""
    daily.rent()

    code, _, err = run(daily, capfdbinary, "ssh", "job", "--", "true", operator="bob")

    assert code == 3
    assert "refused (M3): 'job' is owned by 'alice', not by 'bob'" in err


@pytest.mark.parametrize("argv", [["ssh", "nosuch"], ["ssh", "nosuch", "--print-config"]])
def test_ssh_to_a_name_nobody_rented_is_a_usage_error(daily, capfdbinary, argv):
    """A name gpuops does not know is exit 2 naming it."""
    code, _, err = run(daily, capfdbinary, *argv)

    assert code == 2 and "no rental named 'nosuch'" in err


def test_ssh_to_a_rental_that_is_not_live_is_a_usage_error(daily, capfdbinary):
    """A released rental has no box to reach: exit 2, naming it and its state."""
    market, _ = daily.rent()
    destroy_rental(market, "job")

    code, _, err = run(daily, capfdbinary, "ssh", "job", "--print-config")

    assert code == 2 and "'job' is released, not live" in err


def stanza(daily: Daily, capfdbinary: Any) -> Path:
    code, out, _ = run(daily, capfdbinary, "ssh", "job", "--print-config")
    assert code == 0
    config = daily.tmp / "ssh_config"
    config.write_bytes(out)
    return config


def openssh_reads(config: Path, alias: str) -> dict[str, str]:
    """What the real OpenSSH client resolves for ``alias`` from ``config`` (ssh -G: it only
    prints the configuration, and connects nowhere)."""
    done = subprocess.run(
        ["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True, check=True
    )
    return dict(line.partition(" ")[::2] for line in done.stdout.splitlines())


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_the_printed_config_is_read_by_real_openssh_as_gpuops_connects(daily, capfdbinary):
    """`ssh NAME --print-config` prints a Host stanza that OpenSSH itself resolves to the box's
    address, our key only, the box's own pinned known_hosts, accept-new, no agent forwarding."""
    instance = daily.start("true")

    resolved = openssh_reads(stanza(daily, capfdbinary), "gpuops-job")

    assert resolved["hostname"] == instance.ssh_host == "ssh1.vast.ai"
    assert resolved["port"] == str(instance.ssh_port) and resolved["user"] == "root"
    assert resolved["identityfile"] == str(daily.tmp / "id_ed25519")
    assert resolved["userknownhostsfile"] == str(daily.state / "ssh" / "known_hosts" / "1234568")
    assert (resolved["stricthostkeychecking"], resolved["identitiesonly"]) == ("accept-new", "yes")
    assert (resolved["forwardagent"], resolved["batchmode"]) == ("no", "no")


@pytest.mark.skipif(shutil.which("scp") is None or shutil.which("ssh") is None,
                    reason="needs the OpenSSH client and scp")  # fmt: skip
def test_scp_copies_a_file_off_the_box_through_the_printed_config(daily, capfdbinary):
    """The printed stanza is enough for copying files off: the real scp, given it with -F and
    the fake ssh as its transport (-S; -O: the fake box has no SFTP server), copies the job's
    log off the box, and `ssh -F FILE gpuops-NAME CMD` runs a command there."""
    daily.start("seq 1 3")
    config = stanza(daily, capfdbinary)
    target = daily.tmp / "copied-log"

    copied = subprocess.run(
        ["scp", "-O", "-S", str(FAKE_SSH), "-F", str(config), "gpuops-job:gpuops/job/log",
         str(target)],
        capture_output=True, text=True, timeout=timing.SSH_COMMAND_TIMEOUT_S,
    )  # fmt: skip
    ran = subprocess.run(
        [str(FAKE_SSH), "-F", str(config), "gpuops-job", "tail -n 1 gpuops/job/log"],
        capture_output=True, text=True, timeout=timing.SSH_COMMAND_TIMEOUT_S,
    )  # fmt: skip

    assert copied.returncode == 0, copied.stderr
    assert target.read_text() == "1\n2\n3\n"
    assert (ran.returncode, ran.stdout) == (0, "3\n")


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client")
def test_the_fake_ssh_refuses_a_config_that_names_no_known_hosts_file(daily, tmp_path):
    """The fake never touches your real known_hosts, with -F as without it."""
    daily.start("true")
    config = tmp_path / "bare_config"
    config.write_text("Host bare\n  HostName ssh1.vast.ai\n  Port 30000\n")

    done = subprocess.run([str(FAKE_SSH), "-F", str(config), "bare", "true"], capture_output=True,
                          text=True, timeout=timing.SSH_COMMAND_TIMEOUT_S)  # fmt: skip

    assert done.returncode == 255
    assert "refusing to use your real known_hosts" in done.stderr


# --- cost -------------------------------------------------------------------------------------
H = 3600.0


@pytest.mark.parametrize("daily", [offers(0.4, 0.3)], indirect=True)
def test_cost_is_each_operators_spend_from_the_providers_own_prices_and_times(daily):
    """M15: alice's box and bob's, as the fake itself bills them (its start_date and
    dph_total), one row each; a destroyed box stops at the ledger's confirmed-gone time, and
    a day's split follows UTC midnight."""
    alice, _ = daily.rent("a1", "alice")
    bob, _ = daily.rent("b1", "bob")
    rows_seen = {i.instance_id: i for i in alice.vast.list_instances()}  # the provider's own
    budgets = Budgets(alice.ledger.store, "alice", clock=daily.fake.ticking())
    daily.fake.advance(3 * H)
    cost_report(budgets, alice.vast, "operator")  # a listing records both rows, as rent's does
    destroy_rental(bob, "b1")
    record = bob.ledger.get(bob.rentals.get("b1").box or "")  # type: ignore[union-attr]
    gone = datetime.fromisoformat(record.updated_at).timestamp()  # confirmed gone (M4)
    daily.fake.advance(2 * H)

    view = cost_report(budgets, alice.vast, "operator")
    days = cost_report(budgets, alice.vast, "day")

    a_box, b_box = (rows_seen[r.instance_id or ""] for r in (alice.rentals.get("a1"), bob.rentals.get("b1")))  # type: ignore[union-attr]
    assert {a_box.dph_total, b_box.dph_total} == {0.4, 0.3}  # each its offer's price
    rows = {r["operator"]: r for r in view["rows"]}
    billed_a = a_box.dph_total * (daily.fake.now() - (a_box.start_date or 0.0)) / H
    billed_b = b_box.dph_total * (gone - (b_box.start_date or 0.0)) / H
    assert rows["alice"]["market_usd"] == pytest.approx(billed_a, abs=1e-3)
    assert rows["bob"]["market_usd"] == pytest.approx(billed_b, abs=1e-3)
    assert rows["alice"]["lane_usd"] == 0.0
    assert view["total"]["total_usd"] == pytest.approx(
        rows["alice"]["total_usd"] + rows["bob"]["total_usd"], abs=1e-3)  # fmt: skip
    assert sum(r["total_usd"] for r in days["rows"]) == pytest.approx(view["total"]["total_usd"], abs=1e-3)
    for r in days["rows"]:  # epoch seconds, a UTC day apart, as every --json has its times
        assert r["period_end"] - r["period_start"] == 24 * H
        assert datetime.fromtimestamp(r["period_start"], UTC).strftime("%Y-%m-%d") == r["period"]
    assert view["as_of"] == daily.fake.now() and view["by"] == "operator"


def test_cost_counts_the_lanes_running_job_at_its_configured_rate(daily):
    """M15: a lane board with a started job bills the lane's rate from its start, in the lane
    column of its owner's row."""
    from gpuops.lane import board as lb
    from gpuops.lane.decide import RUNNING_USD_PER_HOUR

    store = LocalStore(str(daily.state))
    started = daily.fake.now() - 2 * H
    board = lb.Board(lane="gpu-lane", instance="gpu-lane", since=started, state=lb.RUNNING,
                     owner="carol", job="train", attempt=1, claimed=started, started=started,
                     boot="b1", revision=3, epoch=1)  # fmt: skip
    store.create("lane/gpu-lane/board", lb.render(board, []).encode())
    budgets = Budgets(store, "carol", clock=daily.fake.ticking())

    view = cost_report(budgets, daily.market().vast, "operator")

    (row,) = view["rows"]
    assert row["operator"] == "carol" and row["market_usd"] == 0.0
    assert row["lane_usd"] == pytest.approx(2 * RUNNING_USD_PER_HOUR, abs=1e-3)


def test_cost_shows_the_stored_spend_when_the_provider_cannot_be_read(daily):
    """M15: a failed instance list is said, and the records already stored are still shown."""
    market, _ = daily.rent()
    budgets = Budgets(market.ledger.store, "alice", clock=daily.fake.ticking())
    cost_report(budgets, market.vast, "operator")  # the box's spend record is written
    daily.fake.advance(H)
    said: list[str] = []

    class Down:
        def list_instances(self) -> list[Instance]:
            from gpuops.errors import ProviderUnavailable

            raise ProviderUnavailable("vast", "503 after retries")

    view = cost_report(budgets, Down(), "operator", say=said.append)

    assert said == ["gpuops: spend not refreshed from the provider: vast unavailable: 503 after retries"]
    assert view["rows"][0]["operator"] == "alice" and view["rows"][0]["market_usd"] > 0


def test_cost_on_the_command_line_prints_a_table_or_json_with_utc_times(daily_now, capfdbinary):
    """`gpuops cost` (exit 0) prints one row per operator and the total; `--json --by week`
    the same figures with every time in epoch seconds (the week from Monday 00:00 UTC)."""
    daily = daily_now
    daily.rent()

    code, out, _ = run(daily, capfdbinary, "cost")
    jcode, jout, _ = run(daily, capfdbinary, "--json", "cost", "--by", "week")

    import json

    text = out.decode()
    assert code == jcode == 0
    assert text.splitlines()[0].split() == ["OPERATOR", "MARKET", "LANE", "TOTAL"]
    assert re.search(r"^alice\s+\$\s*0\.\d\d", text, re.M) and "\ntotal " in text
    view = json.loads(jout)
    assert view["by"] == "week" and isinstance(view["as_of"], float)
    (row,) = view["rows"]
    assert row["operator"] == "alice" and re.fullmatch(r"\d{4}-W\d\d", row["period"])
    start = datetime.fromtimestamp(row["period_start"], UTC)
    assert (start.weekday(), start.hour, start.minute) == (0, 0, 0)
    assert row["period_end"] - row["period_start"] == 7 * 24 * H
    assert row["period_start"] <= view["as_of"] < row["period_end"]
    assert row["market_usd"] == pytest.approx(0.4 * 2, abs=0.05)


# --- help and docs ------------------------------------------------------------------------------
def test_every_option_of_cost_logs_and_ssh_has_help_and_is_in_the_cli_docs():
    """Each option and argument of the three commands says what it is in --help, and each
    option and choice is named in docs/cli.md, which documents every command."""
    import argparse

    docs = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    parser = cli.build_parser(only="logs")
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("cost", "logs", "ssh"):
        assert f"| `gpuops {name}" in docs
        for action in commands.choices[name]._actions:
            assert action.help, (name, action.dest)
            for flag in action.option_strings:
                if flag.startswith("--") and flag not in ("--help", "--json", "--state", "--operator"):
                    assert flag in docs, (name, flag)
            for choice in action.choices or ():
                assert choice in docs, (name, choice)
