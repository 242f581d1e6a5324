"""Input checked at the edge: bad numbers, bad state paths, bad log paths and every --help give
one clear line and the right exit code, never a traceback."""

from __future__ import annotations

import argparse
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops import cli, timing
from gpuops.store.local import LocalStore

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def bare(tmp_path, monkeypatch):
    """A throwaway state dir and no provider environment."""
    for name in list(os.environ):
        if name.startswith(("GPUOPS_", "VAST_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("GPUOPS_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GPUOPS_OPERATOR", "alice")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    return tmp_path


def one_line_exit(capsys, argv: list[str]) -> tuple[int, str]:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return code, err.strip()


@pytest.mark.fault(
    "`rent --hours -1` created boxes; nan, inf and 1e9 hours crashed",
    handled="usage error (exit 2) before anything is opened: finite, above 0, at most a week",
)
@pytest.mark.parametrize("hours", ["nan", "inf", "-inf", "1e9", "-1", "0", "-0", "168.01"])
def test_rent_hours_outside_a_finite_positive_week_is_one_line_and_exit_2(bare, capsys, hours):
    """M5: a ceiling must be a real, positive span no longer than MAX_RENTAL_S."""
    code, err = one_line_exit(capsys, ["rent", "box", "--gpu", "RTX 4090", f"--hours={hours}"])

    assert code == 2 and err.startswith("gpuops: --hours must be")
    assert not (bare / "state").exists()


def test_the_longest_rental_is_a_week_and_guard_hours_are_checked_the_same(bare, capsys):
    """M6: MAX_RENTAL_S bounds `guard --hours` too; exactly a week passes the check."""
    assert timing.MAX_RENTAL_S == 7 * 24 * 3600.0
    code, err = one_line_exit(capsys, ["guard", "box", "--hours", "-1"])

    assert code == 2 and "at most 168" in err
    cli.check_args(argparse.Namespace(hours=168.0))


@pytest.mark.parametrize("race", ["0", "-3", "9", "100000"])
def test_race_outside_one_to_eight_is_one_line_and_exit_2(bare, capsys, race):
    """M1: a race needs at least one offer and never rents a fleet."""
    argv = ["rent", "box", "--gpu", "RTX 4090", "--hours", "1", "--race", race]

    code, err = one_line_exit(capsys, argv)

    assert code == 2 and err == f"gpuops: --race must be between 1 and 8 offers, not {race}"


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("--disk-gb=4", "gpuops: --disk-gb must be at least 8 (Vast's minimum), not 4"),
        ("--disk-gb=7.99", "gpuops: --disk-gb must be at least 8 (Vast's minimum), not 7.99"),
        ("--image=", "gpuops: --image must name a Docker image, not be empty"),
        ("--image=" + "i" * 1025,
         "gpuops: --image must be at most 1024 characters (Vast's limit), not 1025"),
    ],
    ids=["disk 4", "disk under 8", "no image", "image too long"],
)  # fmt: skip
def test_rent_arguments_vast_would_refuse_on_create_are_one_line_and_exit_2_h6(
    bare, capsys, option, said
):
    """H6: a disk under Vast's 8 GB minimum, no image or one over 1024 characters is refused
    before anything is opened, not answered 400 mid-race (create_instance.yaml)."""
    argv = ["rent", "box", "--gpu", "RTX 4090", "--hours", "1", option]

    code, err = one_line_exit(capsys, argv)

    assert code == 2 and err == said
    assert not (bare / "state").exists()


@pytest.mark.parametrize("vram", ["nan", "inf", "-1", "5000"])
def test_offers_vram_floor_outside_its_range_is_one_line_and_exit_2(bare, capsys, vram):
    """A VRAM floor must be a finite number of GB from 0 to 4096."""
    code, err = one_line_exit(capsys, ["offers", f"--vram-gb={vram}"])

    assert code == 2 and err.startswith("gpuops: --vram-gb must be")


@pytest.mark.fault(
    "`--state` at a file, /dev/null or a read-only directory crashed or advised chmod",
    handled="one line naming the path and what is wrong with it, exit 2; nothing is chmod'ed",
)
@pytest.mark.parametrize("where", ["file", "devnull", "under-a-file"])
def test_state_that_is_not_a_directory_is_one_line_and_exit_2(bare, capsys, where):
    """--state must be a directory: a file or /dev/null is refused, with no chmod advice."""
    (bare / "file").write_text("x")
    path = {"file": bare / "file", "devnull": "/dev/null", "under-a-file": bare / "file" / "s"}

    code, err = one_line_exit(capsys, ["--state", str(path[where]), "boxes"])

    assert code == 2 and "chmod" not in err
    assert "not a directory" in err.lower()


def test_a_read_only_state_directory_is_one_line_and_exit_2(bare, capsys, monkeypatch):
    """A state directory we may not write is refused by name (os.access, as root too on a
    read-only mount), not a PermissionError traceback."""
    state = bare / "ro"
    state.mkdir(mode=0o700)
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, m: False if Path(p) == state else real_access(p, m)
    )

    code, err = one_line_exit(capsys, ["--state", str(state), "boxes"])

    assert code == 2 and err.endswith("is not writable (read-only); choose another with --state")


@pytest.mark.parametrize("command", [["stats"], ["policy", "eval", "--policy", "greedy"]])
def test_an_event_log_that_is_a_directory_is_one_line_and_exit_2(bare, capsys, command):
    """`stats --log DIR` names the directory instead of crashing on it."""
    code, err = one_line_exit(capsys, [*command, "--log", str(bare)])

    assert code == 2 and err == (
        f"gpuops: event log {bare} is a directory; give the events.jsonl file in it"
    )


def test_every_directory_gpuops_creates_in_the_state_is_0700_and_files_0600(tmp_path):
    """DESIGN security bar: intermediate directories too, whatever the umask."""
    old = os.umask(0o022)
    try:
        store = LocalStore(tmp_path / "a" / "b" / "state")
        store.create("market/rentals/box", b"{}")
    finally:
        os.umask(old)

    made = [tmp_path / "a", tmp_path / "a" / "b", store.root, store.root / "market"]
    made += [store.root / "market" / "rentals", store.root / ".tmp"]
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in made} == {p.name: 0o700 for p in made}
    files = [p for p in store.root.rglob("*") if p.is_file()]
    assert files and {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def test_two_processes_creating_a_fresh_state_dir_at_once_both_succeed(tmp_path):
    """First use races: eight processes open one new nested state dir at the same moment."""
    state = tmp_path / "x" / "y" / "state"
    code = (
        "import sys; from gpuops.store.local import LocalStore; "
        "LocalStore(sys.argv[1]).create('k/' + sys.argv[2], b'1')"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(state), f"n{i}"], cwd=ROOT,
                         stderr=subprocess.PIPE, text=True)
        for i in range(8)
    ]  # fmt: skip

    errors = [p.communicate(timeout=60)[1] for p in procs]

    assert [p.returncode for p in procs] == [0] * 8, errors
    assert sorted(LocalStore(state).list("k/")) == [f"k/n{i}" for i in range(8)]


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from subcommands(sub, (*prefix, name))


SUBCOMMANDS = sorted(subcommands(cli.build_parser()))


def test_the_parser_has_every_documented_command():
    """The parametrised --help test below covers the commands a user reads about."""
    assert {c[0] for c in SUBCOMMANDS} >= {
        "demo", "rules", "offers", "rent", "boxes", "destroy", "sweep", "guard", "run", "watch",
        "lane", "stats", "policy", "record", "incident", "fakes",
    }  # fmt: skip
    assert ("policy", "eval") in SUBCOMMANDS and ("lane", "start") in SUBCOMMANDS


@pytest.mark.fault(
    "`gpuops policy --help` crashed on an unescaped % in a help string",
    handled="every subcommand's --help is tested: usage on stdout, exit 0",
)
@pytest.mark.parametrize("command", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_help_prints_usage_and_exits_0(command, capsys):
    """`gpuops ... --help` never crashes (argparse formats % in help strings)."""
    with pytest.raises(SystemExit) as done:
        cli.main([*command, "--help"])

    out = capsys.readouterr().out
    assert done.value.code == 0
    assert out.startswith(f"usage: gpuops {' '.join(command)}")


def test_text_output_shows_a_dash_for_unknown_values_never_none():
    """`boxes` and `offers` text never prints None or $None; money has its unit and places."""
    from gpuops.cli.market import _offer_line, _text, _usd

    row = {"id": 1, "gpu_name": "RTX 4090", "num_gpus": 1, "gpu_ram": 24564, "dph_total": 0.3712,
           "reliability": None, "disk_bw": None, "cuda_max_good": None, "geolocation": None,
           "pass_rate": None, "pass_trials": None}  # fmt: skip

    assert (_text(None), _usd(None, 4), _usd(0.3712, 4)) == ("-", "-", "$0.3712")
    assert "None" not in _offer_line(row)


def test_a_deadline_is_shown_in_local_time_and_utc(monkeypatch):
    """`rent` and `boxes` print the deadline twice: the reader's zone and UTC."""
    import time

    from gpuops.cli.market import _BOXES_HEADER, _when

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        shown = _when(1796029925.0)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()

    assert shown == "2026-11-30 18:12:05 JST / 09:12:05 UTC"
    assert _when(None) == "-"
    assert "DEADLINE (local / UTC)" in _BOXES_HEADER and "$/HOUR" in _BOXES_HEADER


@pytest.mark.fault(
    "`guard --hours` moved a deadline past the box's contract end (Vast stops the box there)",
    handled="refused, exit 3 naming the contract end; the deadline stays where it was (M13)",
)
@pytest.mark.parametrize("when", [["--hours", "3"], ["--deadline", "2099-01-01T00:00:00Z"]])
def test_guard_refuses_a_deadline_past_the_boxs_contract_end_less_the_margin_m13(
    bare, capsys, monkeypatch, when
):
    """M13: a rental whose box's contract ends in 3.5 h keeps its deadline when asked to move it
    3 h out (inside the 1 h margin) or past the end: exit 3, one line naming the contract's
    end, before any provider call (the Vast endpoint here answers nothing)."""
    import time

    from gpuops.ledger import utc_iso
    from gpuops.market.rentals import LIVE, Rental, Rentals

    monkeypatch.setenv("VAST_API_KEY", "k-test")
    monkeypatch.setenv("VAST_URL", "http://127.0.0.2:9")
    now = time.time()
    end, deadline = now + 3.5 * 3600.0, now + 1800.0
    rentals = Rentals(LocalStore(bare / "state"), "alice")
    rentals.records.update("job", lambda _: Rental(
        name="job", owner="alice", state=LIVE, race=1, instance_id="77", deadline_at=deadline,
        contract_end_at=end,
    ))  # fmt: skip

    code, err = one_line_exit(capsys, ["guard", "job", *when])

    assert code == 3 and "(M13)" in err and f"contract end {utc_iso(end)}" in err, err
    assert rentals.get("job").deadline_at == deadline  # type: ignore[union-attr]
