"""Settings: every value gpuops takes from the environment, read once in gpuops/settings.py.

Each variable's default, its precedence under the CLI's global options, and a bad value as a
usage error that names the variable; and an ``ast`` scan that no other module of gpuops reads
``os.environ`` (secrets.py, the scrub, reads it only to know which values to redact).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from gpuops import settings as s
from gpuops.clock import SYSTEM, ScaledClock
from gpuops.errors import UsageError
from gpuops.settings import LaneSettings, Settings, TimeScale

ROOT = Path(__file__).resolve().parent.parent
HOME = Path("/home/alice")
LANE = {
    "GPUOPS_LANE_PROJECT": "p",
    "GPUOPS_LANE_ZONE": "z",
    "GPUOPS_LANE_INSTANCE": "i",
    "GPUOPS_LANE_BUCKET": "b",
}
# secrets.py reads os.environ to know which values to redact (H3), never for a setting: it sits
# below errors.py, which settings.py imports, and must see every secret-named variable the
# process holds at the moment it scrubs, whoever set it.
ALLOWED = {"gpuops/settings.py", "gpuops/secrets.py"}


def build(environ: dict[str, str], **options: object) -> Settings:
    return Settings.from_environ(environ, options, home=HOME)


# --- defaults and precedence -------------------------------------------------------------------
def test_with_an_empty_environment_every_value_is_its_documented_default():
    """No variable: per-user state, events beside it, results beside it, ~/.ssh's key, ssh."""
    got = build({})

    user = HOME / ".local" / "state" / "gpuops"
    assert got.user_dir == user and got.state_url == str(user) and got.local_dir == user
    assert got.events_path == user / "events.jsonl"
    assert got.results_url == str(user / "results")
    assert got.ssh_key == HOME / ".ssh" / "id_ed25519.pub"
    assert got.identity_file() == HOME / ".ssh" / "id_ed25519"
    assert got.ssh_program == "ssh" and got.operator is None
    assert (got.vast_url, got.vast_api_key, got.gce_endpoint) == (None, None, None)
    assert (got.storage_emulator_host, got.s3_endpoint, got.time_scale) == (None, None, None)
    assert got.lane_values == () and got.lane_bucket() is None
    assert got.colour is True and got.columns is None
    assert got.clock() is SYSTEM
    assert got.notify_urls == ()


def test_every_variable_is_read_into_its_field():
    """Each documented variable lands in its field, unchanged."""
    environ = {
        "XDG_STATE_HOME": "/xdg",
        "GPUOPS_STATE": "/srv/state",
        "GPUOPS_OPERATOR": "bob@pi",
        "GPUOPS_EVENTS": "/logs/e.jsonl",
        "GPUOPS_RESULTS": "s3://bucket/results",
        "GPUOPS_SSH_KEY": "/keys/k.pub",
        "GPUOPS_SSH": "/fakes/ssh",
        "VAST_URL": "http://127.0.0.1:9",
        "VAST_API_KEY": "k-123",
        "GPUOPS_GCE_ENDPOINT": "http://127.0.0.1:8",
        "STORAGE_EMULATOR_HOST": "http://127.0.0.1:8",
        "GPUOPS_S3_ENDPOINT": "https://s3.example",
        "COLUMNS": "120",
        "GPUOPS_NOTIFY": "json://127.0.0.1:9/alarms",
        **LANE,
    }
    got = build(environ)

    assert got.user_dir == Path("/xdg/gpuops") and got.state_url == "/srv/state"
    assert got.local_dir == Path("/srv/state") and got.operator == "bob@pi"
    assert got.acting_operator() == "bob@pi"
    assert got.events_path == Path("/logs/e.jsonl") and got.results_url == "s3://bucket/results"
    assert got.ssh_key == Path("/keys/k.pub") and got.identity_file() == Path("/keys/k")
    assert got.ssh_program == "/fakes/ssh"
    assert (got.vast_url, got.vast_api_key) == ("http://127.0.0.1:9", "k-123")
    assert got.gce_endpoint == "http://127.0.0.1:8" == got.storage_emulator_host
    assert got.s3_endpoint == "https://s3.example" and got.columns == 120
    assert got.lane() == LaneSettings("p", "z", "i", "b") and got.lane_bucket() == "b"
    assert got.notify_urls == ("json://127.0.0.1:9/alarms",)
    assert got.environ == environ


def test_the_cli_s_global_options_win_over_the_environment():
    """--state and --operator beat GPUOPS_STATE and GPUOPS_OPERATOR; None means not given."""
    environ = {"GPUOPS_STATE": "/env/state", "GPUOPS_OPERATOR": "env-op"}

    given = build(environ, state="/cli/state", operator="cli-op")
    absent = build(environ, state=None, operator=None)

    assert (given.state_url, given.operator) == ("/cli/state", "cli-op")
    assert (absent.state_url, absent.operator) == ("/env/state", "env-op")


def test_an_empty_variable_counts_as_unset():
    """GPUOPS_STATE= (empty) is the default, as it always was."""
    got = build({"GPUOPS_STATE": "", "GPUOPS_OPERATOR": "", "GPUOPS_EVENTS": "", "VAST_URL": ""})

    assert got.state_url == str(HOME / ".local" / "state" / "gpuops")
    assert got.operator is None and got.vast_url is None
    assert got.events_path == HOME / ".local" / "state" / "gpuops" / "events.jsonl"


def test_the_event_log_is_resolved_one_way_for_every_kind_of_state():
    """GPUOPS_EVENTS, else beside a local store (file:// too), else per user for s3:// state."""
    local = build({"GPUOPS_STATE": "file:///srv/st"})
    remote = build({"GPUOPS_STATE": "s3://bucket/prefix", "XDG_STATE_HOME": "/xdg"})
    tilde = build({"GPUOPS_STATE": "~/st"})

    assert local.events_path == Path("/srv/st/events.jsonl") and local.local_dir == Path("/srv/st")
    assert remote.events_path == Path("/xdg/gpuops/events.jsonl")
    assert remote.local_dir == Path("/xdg/gpuops")
    assert remote.results_url == "/xdg/gpuops/results"
    assert tilde.local_dir == Path("~/st").expanduser()


def test_the_default_home_is_the_user_s_own():
    """Without a home given, the per-user directory and key are under Path.home()."""
    got = Settings.from_environ({})

    assert got.user_dir == Path.home() / ".local" / "state" / "gpuops"
    assert got.ssh_key == Path.home() / ".ssh" / "id_ed25519.pub"


def test_without_an_environment_given_the_process_s_is_read(monkeypatch):
    """from_environ() reads this process's environment (a copy) when none is passed."""
    monkeypatch.setenv("GPUOPS_OPERATOR", "from-env")

    got = Settings.from_environ()
    monkeypatch.setenv("GPUOPS_OPERATOR", "later")

    assert got.operator == "from-env" and got.environ["GPUOPS_OPERATOR"] == "from-env"


def test_an_ssh_key_under_home_is_expanded():
    """GPUOPS_SSH_KEY=~/k.pub names a file under the home directory."""
    assert build({"GPUOPS_SSH_KEY": "~/k.pub"}).ssh_key == Path("~/k.pub").expanduser()


def test_without_an_operator_the_acting_one_is_user_at_host():
    """No --operator and no GPUOPS_OPERATOR: user@host, checked like any other."""
    import getpass
    import socket

    got = build({}).acting_operator()

    assert got == f"{getpass.getuser()}@{socket.gethostname()}"


@pytest.mark.parametrize(
    "environ, on",
    [({}, True), ({"TERM": "xterm"}, True), ({"NO_COLOR": ""}, False), ({"TERM": "dumb"}, False)],
)
def test_colour_is_allowed_unless_no_color_is_set_or_the_terminal_is_dumb(environ, on):
    """NO_COLOR (any value, even empty) or TERM=dumb: no colour."""
    assert build(environ).colour is on


@pytest.mark.parametrize("raw, columns", [("80", 80), ("1", 1), ("0", None), ("-3", None),
                                          ("wide", None), ("", None)])  # fmt: skip
def test_columns_is_used_only_when_it_is_a_positive_integer(raw, columns):
    """COLUMNS as shutil reads it: a bad value is ignored (the terminal's width then)."""
    assert s.columns_of({"COLUMNS": raw}) == columns and s.columns_of({}) is None
    assert build({"COLUMNS": raw}).columns == columns


def test_ssh_runs_the_configured_program_in_the_environment_the_command_started_with():
    """settings.ssh(): GPUOPS_SSH (else ssh), and the snapshot as the child's environment, so
    no ssh call reads the process's environment (the one reader is settings.py)."""
    fake = build({"GPUOPS_SSH": "/fakes/ssh", "A": "1"}).ssh()
    plain = build({"A": "1"}).ssh()

    assert (fake.program, dict(fake.environ)) == (
        "/fakes/ssh",
        {"GPUOPS_SSH": "/fakes/ssh", "A": "1"},
    )
    assert (plain.program, dict(plain.environ)) == ("ssh", {"A": "1"})


def test_a_child_gets_the_environment_the_command_started_with_plus_extras():
    """child_environ: the snapshot, with extras on top; the snapshot itself is unchanged."""
    got = build({"A": "1", "B": "2"})

    assert got.child_environ(B="3", C="4") == {"A": "1", "B": "3", "C": "4"}
    assert got.environ == {"A": "1", "B": "2"}


def test_the_api_key_and_the_environment_never_appear_in_a_repr():
    """H3: repr(Settings) holds no key."""
    got = build({"VAST_API_KEY": "k-very-secret-123", "OTHER_TOKEN": "t-also-secret"})

    assert "k-very-secret-123" not in repr(got) and "t-also-secret" not in repr(got)


def test_a_notification_url_s_token_never_appears_in_a_repr_o1():
    """O1/H3: GPUOPS_NOTIFY's URLs carry tokens (slack://T/B/C): repr(Settings) shows none."""
    got = build({"GPUOPS_NOTIFY": "slack://TokenA/TokenB/TokenC"})

    assert got.notify_urls == ("slack://TokenA/TokenB/TokenC",)
    assert "TokenA" not in repr(got)


@pytest.mark.parametrize(
    "raw, urls",
    [
        ("", ()),
        ("json://h:1/a", ("json://h:1/a",)),
        ("  json://h:1/a \n ntfy://topic  ", ("json://h:1/a", "ntfy://topic")),
        ("json://h:1/a,ntfy://t", ("json://h:1/a", "ntfy://t")),
        ("json://h:1/a, ntfy://t", ("json://h:1/a", "ntfy://t")),
        ("json://a,,json://b", ("json://a", "json://b")),
        ("mailto://u:p@h?to=a@x.org,b@x.org", ("mailto://u:p@h?to=a@x.org,b@x.org",)),
        ("mailto://u@h?to=a@x,b@x,c@x json://b", ("mailto://u@h?to=a@x,b@x,c@x", "json://b")),
        ("jsons://h/p?x=1,y", ("jsons://h/p?x=1,y",)),
        ("Slack2://T/B", ("Slack2://T/B",)),
        ("json://h/cb?next=http://x", ("json://h/cb?next=http://x",)),
    ],
)  # fmt: skip
def test_notification_urls_split_on_spaces_and_on_a_comma_that_starts_one_o1(raw, urls):
    """O1: GPUOPS_NOTIFY's URLs, apprise's syntax; a comma inside one (mailto's ?to=) stays."""
    assert build({"GPUOPS_NOTIFY": raw}).notify_urls == urls
    assert s.notify_urls(raw, "GPUOPS_NOTIFY") == urls


@pytest.mark.parametrize(
    "raw, position",
    [
        ("hooks.example/alarm", 1),
        ("json://h json:// x", 2),
        ("://host", 1),
        ("js on://h", 1),
        ("json:/h", 1),
        ("j_s://h", 1),
        ("jsön://h", 1),
        ("json://a ,b", 2),
    ],
)
def test_a_bad_notification_url_is_a_usage_error_naming_its_place_not_its_text_o1(raw, position):
    """O1: a word that is not scheme://... is a UsageError naming GPUOPS_NOTIFY and the URL's
    place; its text, which may hold a token, is never echoed."""
    with pytest.raises(UsageError) as raised:
        build({"GPUOPS_NOTIFY": raw})

    assert str(raised.value).startswith(
        f"GPUOPS_NOTIFY: URL {position} is not a notification URL: give scheme://..., e.g. "
        "json://host:port/path or ntfy://topic (apprise's syntax)"
    )
    assert "hooks.example" not in str(raised.value)


# --- bad values ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "environ, options, named",
    [
        ({"GPUOPS_OPERATOR": "bad op"}, {}, "GPUOPS_OPERATOR: operator id 'bad op'"),
        ({"GPUOPS_OPERATOR": "-x"}, {}, "GPUOPS_OPERATOR: operator id '-x'"),
        ({}, {"operator": "a b"}, "operator id 'a b'"),
        ({"GPUOPS_RESULTS": "s3://"}, {}, "GPUOPS_RESULTS='s3://' names no bucket"),
        ({"GPUOPS_RESULTS": "s3:///p"}, {}, "GPUOPS_RESULTS='s3:///p' names no bucket"),
        ({"GPUOPS_SSH_KEY": "/k/id"}, {}, "GPUOPS_SSH_KEY='/k/id' must name the public half"),
        ({"VAST_URL": "ftp://x"}, {}, "VAST_URL='ftp://x' must be an http"),
        ({"VAST_URL": "127.0.0.1:9"}, {}, "VAST_URL='127.0.0.1:9' must be an http"),
        ({"GPUOPS_GCE_ENDPOINT": "http://"}, {}, "GPUOPS_GCE_ENDPOINT='http://' must be"),
        ({"GPUOPS_GCE_ENDPOINT": "http:///x"}, {}, "GPUOPS_GCE_ENDPOINT='http:///x' must be"),
        ({"GPUOPS_S3_ENDPOINT": "s3.example"}, {}, "GPUOPS_S3_ENDPOINT='s3.example' must be"),
        ({"GPUOPS_TIME_SCALE": "fast"}, {}, "GPUOPS_TIME_SCALE='fast' is not a number"),
        ({"GPUOPS_TIME_SCALE": "0"}, {}, "GPUOPS_TIME_SCALE='0' must be positive"),
        ({"GPUOPS_TIME_SCALE": "-2"}, {}, "GPUOPS_TIME_SCALE='-2' must be positive"),
        ({"GPUOPS_TIME_SCALE": "inf"}, {}, "GPUOPS_TIME_SCALE='inf' must be a finite number"),
        ({"GPUOPS_TIME_SCALE": "nan"}, {}, "GPUOPS_TIME_SCALE='nan' must be a finite number"),
        ({"GPUOPS_TIME_SCALE": "10", "GPUOPS_TIME_ORIGIN": "yesterday"}, {},
         "GPUOPS_TIME_ORIGIN='yesterday' is not a number"),
        ({"GPUOPS_TIME_ORIGIN": "1000"}, {}, "GPUOPS_TIME_ORIGIN is set without GPUOPS_TIME_SCALE"),
        ({"GPUOPS_GUARD_TIME_SCALE": "30"}, {},
         "GPUOPS_GUARD_TIME_SCALE is no longer read: set GPUOPS_TIME_SCALE"),
        ({"GPUOPS_LANE_TIME_SCALE": "30"}, {},
         "GPUOPS_LANE_TIME_SCALE is no longer read: set GPUOPS_TIME_SCALE"),
        ({"GPUOPS_LANE_TIME_ORIGIN": "1"}, {},
         "GPUOPS_LANE_TIME_ORIGIN is no longer read: set GPUOPS_TIME_ORIGIN"),
    ],
)  # fmt: skip
def test_a_bad_value_is_a_usage_error_that_names_the_variable(environ, options, named):
    """Bad input: one UsageError (exit 2), naming the variable and what is wrong with it."""
    with pytest.raises(UsageError) as raised:
        build(environ, **options)

    assert str(raised.value).startswith(named)


def test_good_endpoints_are_kept_as_given():
    """http:// and https:// with a host (and a path, whatever it holds) are endpoints."""
    got = build({"VAST_URL": "https://console.vast.ai/api", "GPUOPS_S3_ENDPOINT": "http://h:1",
                 "GPUOPS_GCE_ENDPOINT": "http://h/x://y"})  # fmt: skip

    assert (got.vast_url, got.s3_endpoint) == ("https://console.vast.ai/api", "http://h:1")
    assert got.gce_endpoint == "http://h/x://y"


def test_results_in_a_bucket_with_or_without_a_prefix_are_accepted():
    """GPUOPS_RESULTS=s3://bucket and s3://bucket/a/b both name a bucket."""
    assert build({"GPUOPS_RESULTS": "s3://bucket"}).results_url == "s3://bucket"
    assert build({"GPUOPS_RESULTS": "s3://bucket/a/b"}).results_url == "s3://bucket/a/b"


def test_a_missing_lane_variable_is_named():
    """The lane needs all four: every missing one is named in one message."""
    with pytest.raises(UsageError) as raised:
        build({"GPUOPS_LANE_ZONE": "us-central1-b", "GPUOPS_LANE_BUCKET": ""}).lane()

    assert str(raised.value) == (
        "the lane needs GPUOPS_LANE_PROJECT, GPUOPS_LANE_INSTANCE, GPUOPS_LANE_BUCKET "
        "in the environment (or lane_project, lane_instance, lane_bucket in the config file)"
    )


def test_check_operator_takes_the_documented_alphabet_and_length():
    """1-128 characters of letters, digits and _.@+-, not starting with .@+-."""
    for good in ("a", "_x", "alice@pi.lan+1-2", "A" * 128, "9"):
        assert s.check_operator(good) == good
    for bad in ("", "A" * 129, ".a", "@a", "+a", "-a", "a b", "a/b", "é"):
        with pytest.raises(UsageError, match="must be 1-128 characters"):
            s.check_operator(bad)


# --- the one time scale --------------------------------------------------------------------------
def test_the_time_scale_makes_one_scaled_clock_from_the_shared_origin():
    """GPUOPS_TIME_SCALE and _ORIGIN: the scaled clock every process computes alike."""
    got = build({"GPUOPS_TIME_SCALE": "10", "GPUOPS_TIME_ORIGIN": "1000.0"})

    assert got.time_scale == TimeScale(10.0, 1000.0)
    clock = got.clock()
    assert isinstance(clock, ScaledClock) and clock.factor == 10.0


def test_a_scale_without_an_origin_is_refused_as_no_two_processes_would_agree():
    """GPUOPS_TIME_SCALE alone would start each process's clock at its own start: a rent's
    deadline would read differently in its guardian. Both are asked for, named."""
    for scale in ("2.5", "0.5"):
        with pytest.raises(UsageError) as refused:
            build({"GPUOPS_TIME_SCALE": scale})
        assert str(refused.value) == (
            "GPUOPS_TIME_SCALE is set without GPUOPS_TIME_ORIGIN: give both, as `gpuops "
            "fakes serve` exports them"
        )
    assert build({"GPUOPS_TIME_SCALE": "0.5", "GPUOPS_TIME_ORIGIN": "7"}).time_scale == (
        TimeScale(0.5, 7.0)
    )


def test_a_scale_s_clock_runs_that_much_faster_from_its_origin():
    """TimeScale.clock(): origin + elapsed real seconds times the factor."""
    clock = TimeScale(10.0, 1000.0).clock()

    assert abs(clock.wall() - (1000.0 + (SYSTEM.wall() - 1000.0) * 10.0)) < 60.0


# --- no other module reads os.environ ------------------------------------------------------------
def environ_reads(source: str) -> list[int]:
    """Lines of ``source`` that touch os.environ/os.getenv (or import them from os)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                found.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "environb", "getenv") for a in node.names):
                found.append(node.lineno)
    return found


def test_the_scan_sees_every_way_of_reading_the_environment():
    """The scan itself: attribute reads, getenv, and from-imports are all caught."""
    assert environ_reads("import os\nx = os.environ.get('A')\n") == [2]
    assert environ_reads("import os\nx = os.getenv('A')\n") == [2]
    assert environ_reads("from os import environ\n") == [1]
    assert environ_reads("def f():\n    import os\n    return dict(os.environ)\n") == [3]
    assert environ_reads("import os\nx = os.path.join('a')\nenviron = {}\n") == []


def test_no_module_of_gpuops_but_settings_reads_os_environ():
    """One reader: every other module takes its values from Settings, handed down."""
    readers = {}
    for path in sorted((ROOT / "gpuops").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        lines = environ_reads(path.read_text(encoding="utf-8"))
        if lines and name not in ALLOWED:
            readers[name] = lines
    assert readers == {}


# --- the process environment, for libraries that read it themselves --------------------------------
def test_exported_sets_values_only_while_the_block_runs(monkeypatch):
    """exported(): set for the block, then restored (a value that was unset is unset again)."""
    monkeypatch.setenv("GPUOPS_TEST_KEEP", "before")
    monkeypatch.delenv("GPUOPS_TEST_NEW", raising=False)

    with s.exported({"GPUOPS_TEST_KEEP": "during", "GPUOPS_TEST_NEW": "x"}):
        inside = (os.environ["GPUOPS_TEST_KEEP"], os.environ["GPUOPS_TEST_NEW"])

    assert inside == ("during", "x")
    assert os.environ["GPUOPS_TEST_KEEP"] == "before" and "GPUOPS_TEST_NEW" not in os.environ


def test_exported_restores_even_when_the_block_fails(monkeypatch):
    """An exception inside the block still restores the environment."""
    monkeypatch.delenv("GPUOPS_TEST_NEW", raising=False)

    with pytest.raises(RuntimeError), s.exported({"GPUOPS_TEST_NEW": "x"}):
        raise RuntimeError("boom")

    assert "GPUOPS_TEST_NEW" not in os.environ


def test_the_snapshot_is_a_copy_of_the_process_environment(monkeypatch):
    """environ_snapshot(): equal to os.environ now, unaffected by later changes."""
    monkeypatch.setenv("GPUOPS_TEST_SNAP", "1")
    snap = s.environ_snapshot()
    monkeypatch.setenv("GPUOPS_TEST_SNAP", "2")

    assert snap["GPUOPS_TEST_SNAP"] == "1" and isinstance(snap, dict)


# --- frozen values ------------------------------------------------------------------------------
def test_settings_are_frozen_and_equal_by_value():
    """A Settings cannot be changed after it is built; two built alike are equal and hash alike."""
    one, two = build({"GPUOPS_STATE": "/s"}), build({"GPUOPS_STATE": "/s"})

    with pytest.raises(AttributeError, match="Settings is frozen: state_url cannot be set"):
        one.state_url = "/elsewhere"  # type: ignore[misc]
    assert one == two and hash(one) == hash(two)
    assert one != build({"GPUOPS_STATE": "/t"}) and one != "/s"
    assert one.__eq__("/s") is NotImplemented


def test_a_value_s_repr_names_every_field_but_the_secret_ones():
    """repr: the class and each field, as a dataclass would write it, less key and environ."""
    assert repr(TimeScale(2.0, 5.0)) == "TimeScale(factor=2.0, origin=5.0)"
    assert repr(LaneSettings("p", "z", "i", "b")) == (
        "LaneSettings(project='p', zone='z', instance='i', bucket='b')"
    )
    shown = repr(build({"VAST_API_KEY": "k-x"}))
    assert shown.startswith("Settings(state_url=") and "vast_url=None, gce_endpoint" in shown
    assert "vast_api_key" not in shown and "environ=" not in shown


def test_a_value_is_built_from_exactly_its_fields():
    """An unknown field is a TypeError naming it; a missing one is a KeyError."""
    with pytest.raises(TypeError, match="TimeScale has no field 'extra'"):
        s._Value.__init__(TimeScale(1.0, 2.0), factor=1.0, origin=2.0, extra=3)
    with pytest.raises(KeyError):
        s._Value.__init__(TimeScale(1.0, 2.0), factor=1.0)


def test_values_of_different_kinds_are_never_equal():
    """Equality is by type and fields: a TimeScale is not a LaneSettings with the same values."""
    assert TimeScale(1.0, 2.0) == TimeScale(1.0, 2.0) != TimeScale(1.0, 3.0)
    assert LaneSettings("a", "b", "c", "d") != TimeScale(1.0, 2.0)
    assert hash(TimeScale(1.0, 2.0)) == hash(TimeScale(1.0, 2.0)) == hash((1.0, 2.0))


def test_gpuops_identity_is_key_or_declared_and_declared_by_default():
    """M3: GPUOPS_IDENTITY=key (each operator holds a Vast key of their own) makes the key's
    user the operator; unset, empty or `declared` keeps the declared id (a key may be shared);
    anything else is a usage error naming the variable, never a silent default."""
    assert build({"GPUOPS_IDENTITY": "key"}).identity_by_key is True
    for value in ("declared", ""):
        assert build({"GPUOPS_IDENTITY": value}).identity_by_key is False
    assert build({}).identity_by_key is False
    with pytest.raises(UsageError, match=r"GPUOPS_IDENTITY=.*must be `key` or `declared`"):
        build({"GPUOPS_IDENTITY": "keys"})
