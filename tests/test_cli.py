"""The CLI as a user runs it: subprocesses, exit codes of DESIGN §3, --json anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops import cli, errors

ROOT = Path(__file__).resolve().parent.parent


def gpuops(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuops", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def test_help_lists_the_commands_and_the_exit_codes():
    """--help names each command and documents every exit code."""
    done = gpuops("--help")

    assert done.returncode == 0
    for word in ("demo", "rules", "3 refused by a safety rule", "5 still running or unknown"):
        assert word in done.stdout


def test_rules_json_lists_every_rule_once(tmp_path):
    """`gpuops rules --json` is machine-readable and complete."""
    done = gpuops("rules", "--json")

    ids = [rule["id"] for rule in json.loads(done.stdout)]
    assert done.returncode == 0
    assert len(ids) == len(set(ids)) == 37


def test_json_is_accepted_before_or_after_the_command():
    """DESIGN §3: the global --json works on either side of the command name."""
    before = gpuops("--json", "rules")
    after = gpuops("rules", "--json")

    assert before.returncode == after.returncode == 0
    assert json.loads(before.stdout) == json.loads(after.stdout)


def test_rules_text_marks_unenforced_rules_plainly():
    """A written rule says it is not enforced; an implemented one names its test."""
    done = gpuops("rules")

    from gpuops.rules import RULES, WRITTEN

    for rule in RULES:
        marked = f"{rule.id:<4} written (not enforced)" in done.stdout
        assert marked == (rule.status == WRITTEN), rule.id
    assert "enforced by tests/test_ledger.py::" in done.stdout


def test_an_unknown_command_is_a_usage_error():
    """Exit 2 for bad usage, with argparse's message."""
    done = gpuops("stop", "lane")

    assert done.returncode == 2
    assert "invalid choice: 'stop'" in done.stderr


def test_a_bad_operator_id_is_a_usage_error_naming_it():
    """An operator id that could not be a record owner is refused with exit 2."""
    done = gpuops("demo", "--operator", "no spaces please")

    assert done.returncode == 2
    assert "'no spaces please'" in done.stderr


def test_an_unsupported_state_url_is_a_usage_error(tmp_path):
    """--state http://... is refused with a message naming the URL."""
    done = gpuops("demo", "--state", "http://example.invalid/x")

    assert done.returncode == 2
    assert "unsupported state URL 'http://example.invalid/x'" in done.stderr


def test_the_demo_never_touches_existing_state(tmp_path):
    """The demo refuses a state directory that holds anything (exit 2) and leaves it alone."""
    state = tmp_path / "s"
    record = state / "ledger" / "boxes" / "demo-box~"
    record.parent.mkdir(parents=True)
    record.write_bytes(b"garbage")

    done = gpuops("demo", "--state", str(state))

    assert done.returncode == 2
    assert "the demo needs a new or empty state directory" in done.stderr
    assert record.read_bytes() == b"garbage"
    assert gpuops("demo", "--state", "s3://bucket/x").returncode == 2


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.GpuopsError("x"), 1),
        (errors.UsageError("x"), 2),
        (errors.NotOwned("b", "alice", "bob"), 3),
        (errors.NameTaken("b", "alice"), 3),
        (errors.IllegalTransition("b", "live", "released"), 3),
        (errors.Refused("L1", "x"), 3),
        (errors.Unavailable("x"), 4),
        (errors.StoreUnavailable("x"), 4),
        (errors.ProviderUnavailable("vast", "503"), 4),
        (errors.CapacityExhausted("gce", "ZONE_RESOURCE_POOL_EXHAUSTED"), 4),
        (errors.OfferTaken("vast", 42), 4),
        (errors.RateLimited("vast", "too frequent"), 4),
        (errors.SearchQuotaExceeded("vast", "quota"), 4),
        (errors.ProviderError("vast", "odd"), 1),
        (errors.AuthFailed("vast", "Invalid user key", 401), 2),
        (errors.StoreMissing("S3 refused 'k': NoSuchBucket"), 2),
        (errors.UnexpectedResponse("vast", "offers is not a list"), 1),
        (errors.StillRunning("x"), 5),
        (errors.JobFailed("x"), 6),
        (errors.VersionConflict("k", "1"), 1),
        (errors.AlreadyExists("k"), 1),
        (errors.CorruptState("k", "bad"), 1),
    ],
)
def test_each_error_maps_to_its_exit_code(monkeypatch, capsys, error, code):
    """DESIGN §3: the exception tree decides the exit code, and the message reaches stderr."""

    def boom(args, settings):
        raise error

    monkeypatch.setattr(cli, "_dispatch", boom)

    assert cli.main(["rules"]) == code
    assert str(error) in capsys.readouterr().err


def test_a_refusal_names_its_rule():
    """Every refusal names the rule id."""
    assert str(errors.Refused("L2", "instance is RUNNING")) == "refused (L2): instance is RUNNING"


def test_an_unexpected_exception_is_loud_with_exit_1(monkeypatch, capsys):
    """A bug is never silent: traceback on stderr, exit 1."""

    def boom(args, settings):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(cli, "_dispatch", boom)

    assert cli.main(["rules"]) == 1
    err = capsys.readouterr().err
    assert "ZeroDivisionError" in err and "unexpected error" in err


def test_rules_and_help_import_no_provider_sdk():
    """Start-up stays fast: no SDK, boto3 or requests is imported for rules or --help."""
    code = (
        "import sys; from gpuops.cli import main; main(['rules']);"
        "heavy = [m for m in ('boto3', 'botocore', 'requests', 'vastai', 'google', 'yaml')"
        " if m in sys.modules]; print('HEAVY', heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert "HEAVY []" in done.stdout


def test_provider_errors_carry_what_the_provider_said():
    """An adapter error keeps the provider, the status and a bounded body excerpt."""
    error = errors.RateLimited("vast", "slow down", body="x" * 2000, retry_after_s=3.0)

    assert (error.provider, error.status, error.retry_after_s) == ("vast", 429, 3.0)
    assert len(error.body) == 500
    assert errors.OfferTaken("vast", 42, 410).offer_id == 42
    assert str(errors.OfferTaken("vast", 42)) == "vast offer 42 is no longer available"


def test_refused_credentials_are_configuration_exit_2_with_the_fix(monkeypatch, capsys):
    """A wrong API key is not a bug (exit 1 promises a traceback): exit 2, and where the key
    comes from is said under the message."""

    def boom(args, settings):
        raise errors.AuthFailed("vast", "credentials refused (HTTP 401): Invalid user key", 401)

    monkeypatch.setattr(cli, "_dispatch", boom)

    assert cli.main(["rules"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines() == [
        "gpuops: vast: credentials refused (HTTP 401): Invalid user key",
        "gpuops: check the Vast.ai API key: VAST_API_KEY, else ~/.config/vastai/vast_api_key "
        "(`gpuops check` tests it)",
    ]
    assert "gcloud auth application-default login" in errors.AuthFailed("gce", "x").fix


@pytest.mark.parametrize("command", [["stats"], ["policy", "eval", "--policy", "greedy"]])
def test_a_state_path_that_is_a_file_is_a_usage_error_for_the_learning_commands(
    tmp_path, monkeypatch, capsys, command
):
    """Bad input: `--state FILE` put the event log under a file (NotADirectoryError, exit 1
    with a traceback); it is exit 2 naming the path."""
    monkeypatch.delenv("GPUOPS_EVENTS", raising=False)
    (tmp_path / "file").write_text("x")

    code = cli.main(["--state", str(tmp_path / "file"), *command])

    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"cannot read the event log {tmp_path / 'file' / 'events.jsonl'}: Not a directory" in err
