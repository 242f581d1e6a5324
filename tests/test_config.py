"""The config file: where it is, its keys, its one read, and its place under the flags and the
environment (flag > environment > file > default); a typo, a wrong type or bad TOML is a usage
error naming the file, and its secrets are treated as the environment's are (H3)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuops import check, cli, config
from gpuops.errors import UsageError
from gpuops.providers.vast import find_api_key
from gpuops.secrets import REDACTED, scrub_text
from gpuops.settings import Settings, config_path, read_config

ROOT = Path(__file__).resolve().parent.parent
HOME = Path("/home/alice")
# Variables settings.py reads that the file does not hold, and why: the terminal's own three
# (COLUMNS is read before any file, for the help's width), the two that say where the file is,
# and the old time-scale names, which are read only to refuse them.
NOT_KEYS = {
    "NO_COLOR", "TERM", "COLUMNS", "GPUOPS_CONFIG", "XDG_CONFIG_HOME",
    "GPUOPS_LANE_TIME_SCALE", "GPUOPS_GUARD_TIME_SCALE", "GPUOPS_LANE_TIME_ORIGIN",
}  # fmt: skip


def write(tmp_path: Path, text: str, name: str = "config.toml", mode: int = 0o600) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def named(path: Path) -> dict[str, str]:
    return {"GPUOPS_CONFIG": str(path)}


def build(environ: dict[str, str], path: Path | None = None, **options: object) -> Settings:
    """Settings as the CLI builds them: the environment, the file it leads to, the options."""
    env = {**(named(path) if path else {}), **environ}
    return Settings.from_environ(env, options, home=HOME, config=read_config(env, home=HOME))


# --- where the file is -------------------------------------------------------------------------
def test_the_file_is_the_named_one_else_under_xdg_config_home_else_under_home(
    tmp_path, monkeypatch
):
    """GPUOPS_CONFIG (made absolute), else $XDG_CONFIG_HOME/gpuops/config.toml, else
    ~/.config/gpuops/config.toml; a relative XDG_CONFIG_HOME is ignored (the XDG spec)."""
    monkeypatch.chdir(tmp_path)

    assert config_path({"GPUOPS_CONFIG": "my.toml"}, HOME) == (str(tmp_path / "my.toml"), True)
    assert config_path({"XDG_CONFIG_HOME": "/xdg"}, HOME) == ("/xdg/gpuops/config.toml", False)
    assert config_path({}, HOME) == ("/home/alice/.config/gpuops/config.toml", False)
    assert config_path({"XDG_CONFIG_HOME": "rel"}, HOME)[0] == str(
        HOME / ".config/gpuops/config.toml"
    )
    assert config_path({"GPUOPS_CONFIG": "", "XDG_CONFIG_HOME": "/x"}, HOME)[1] is False


def test_no_file_at_the_default_path_is_no_config_and_the_defaults_stand(tmp_path):
    """Nothing at ~/.config/gpuops/config.toml: no config, every value its default."""
    got = read_config({"XDG_CONFIG_HOME": str(tmp_path)})

    assert got is None
    assert build({}) == Settings.from_environ({}, home=HOME)


def test_a_named_file_that_does_not_exist_is_a_usage_error_naming_it(tmp_path):
    """GPUOPS_CONFIG naming nothing is exit 2 naming the path (a typo'd name is not ignored)."""
    missing = tmp_path / "nope.toml"

    with pytest.raises(UsageError, match=f"GPUOPS_CONFIG names {missing}, which does not exist"):
        read_config(named(missing))


def test_a_directory_where_the_file_should_be_is_a_usage_error(tmp_path):
    """A directory at the default path is not "no file": exit 2 naming it."""
    (tmp_path / "gpuops" / "config.toml").mkdir(parents=True)

    with pytest.raises(UsageError, match="config.toml is a directory"):
        read_config({"XDG_CONFIG_HOME": str(tmp_path)})


# --- the keys ----------------------------------------------------------------------------------
def variables_settings_reads() -> set[str]:
    """Every environment variable name settings.py spells out, found with ast."""
    tree = ast.parse((ROOT / "gpuops" / "settings.py").read_text(encoding="utf-8"))
    prefixes = ("GPUOPS_", "VAST_", "XDG_", "STORAGE_", "NO_COLOR", "TERM", "COLUMNS")
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(prefixes)
        and node.value.replace("_", "").isalnum()
        and not node.value.endswith("_")  # "GPUOPS_", a prefix
        and node.value.isupper()
    }


def test_every_variable_settings_reads_is_a_key_of_the_file_unless_listed_as_not_one():
    """The file covers the environment: a new variable in settings.py fails this until it has
    a key (or a reason in NOT_KEYS); each key is its variable's name, lower case, less GPUOPS_."""
    variables = variables_settings_reads()

    assert variables - NOT_KEYS == set(config.KEYS.values())
    assert {"GPUOPS_STATE", "VAST_API_KEY", "NO_COLOR"} <= variables  # the scan sees them
    for key, name in config.KEYS.items():
        assert key == name.removeprefix("GPUOPS_").lower()


EVERY_KEY = """
state = "/srv/state"
operator = "bob@pi"
xdg_state_home = "/xdg"
events = "/logs/e.jsonl"
results = "s3://bucket/results"
ssh_key = "/keys/k.pub"
ssh = "/fakes/ssh"
vast_url = "http://127.0.0.1:9"
vast_api_key = "k-123456789"
gce_endpoint = "http://127.0.0.1:8"
storage_emulator_host = "http://127.0.0.1:8"
s3_endpoint = "https://s3.example"
lane_project = "p"
lane_zone = "z"
lane_instance = "i"
lane_bucket = "b"
notify = ["json://127.0.0.1:9/alarms", "ntfy://topic"]
time_scale = 60
time_origin = 1000.5
identity = "key"
"""
SAME_IN_THE_ENVIRONMENT = {
    "GPUOPS_STATE": "/srv/state",
    "GPUOPS_OPERATOR": "bob@pi",
    "XDG_STATE_HOME": "/xdg",
    "GPUOPS_EVENTS": "/logs/e.jsonl",
    "GPUOPS_RESULTS": "s3://bucket/results",
    "GPUOPS_SSH_KEY": "/keys/k.pub",
    "GPUOPS_SSH": "/fakes/ssh",
    "VAST_URL": "http://127.0.0.1:9",
    "VAST_API_KEY": "k-123456789",
    "GPUOPS_GCE_ENDPOINT": "http://127.0.0.1:8",
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:8",
    "GPUOPS_S3_ENDPOINT": "https://s3.example",
    "GPUOPS_LANE_PROJECT": "p",
    "GPUOPS_LANE_ZONE": "z",
    "GPUOPS_LANE_INSTANCE": "i",
    "GPUOPS_LANE_BUCKET": "b",
    "GPUOPS_NOTIFY": "json://127.0.0.1:9/alarms ntfy://topic",
    "GPUOPS_TIME_SCALE": "60",
    "GPUOPS_TIME_ORIGIN": "1000.5",
    "GPUOPS_IDENTITY": "key",
}
FIELDS = [name for name in Settings.__slots__ if name not in ("config", "environ")] + [
    "vast_api_key",
    "notify_urls",
]


def test_every_key_gives_what_its_variable_gives(tmp_path):
    """A file with every key builds the same Settings as the same values in the environment,
    field by field (the key and the URLs included), and says which keys it set."""
    path = write(tmp_path, EVERY_KEY)
    assert set(SAME_IN_THE_ENVIRONMENT) == set(config.KEYS.values())

    from_file = build({}, path)
    from_env = build(SAME_IN_THE_ENVIRONMENT)

    for field in FIELDS:
        assert getattr(from_file, field) == getattr(from_env, field), field
    assert from_file.vast_api_key == "k-123456789" and len(from_file.notify_urls) == 2
    assert from_file.config is not None and from_file.config.keys == tuple(config.KEYS)
    assert from_file.config.secret_keys() == ("vast_api_key", "notify")
    assert from_file.lane().bucket == "b"


# --- precedence: flag > environment > file > default ------------------------------------------
@pytest.mark.parametrize(
    "flag, env, in_file, expected",
    [
        ("/flag", "/env", "/file", "/flag"),
        (None, "/env", "/file", "/env"),
        (None, None, "/file", "/file"),
        (None, None, None, str(HOME / ".local/state/gpuops")),
        (None, "", "/file", "/file"),  # an empty variable counts as unset, as it always has
    ],
)
def test_the_state_comes_from_the_flag_then_the_environment_then_the_file_then_the_default(
    tmp_path, flag, env, in_file, expected
):
    """--state over GPUOPS_STATE over the file's state over the per-user directory."""
    path = write(tmp_path, f'state = "{in_file}"\n' if in_file else "")
    environ = {} if env is None else {"GPUOPS_STATE": env}

    got = build(environ, path, state=flag)

    assert got.state_url == expected


@pytest.mark.parametrize(
    "flag, env, in_file, expected",
    [
        ("flag-op", "env-op", "file-op", "flag-op"),
        (None, "env-op", "file-op", "env-op"),
        (None, None, "file-op", "file-op"),
        (None, None, None, None),  # user@host, when asked
    ],
)
def test_the_operator_comes_from_the_flag_then_the_environment_then_the_file(
    tmp_path, flag, env, in_file, expected
):
    """--operator over GPUOPS_OPERATOR over the file's operator; none: user@host."""
    path = write(tmp_path, f'operator = "{in_file}"\n' if in_file else "")
    environ = {} if env is None else {"GPUOPS_OPERATOR": env}

    assert build(environ, path, operator=flag).operator == expected


def test_a_value_without_a_flag_comes_from_the_environment_then_the_file_then_the_default(
    tmp_path,
):
    """The results, the notification URLs and the Vast endpoint: the variable wins over the
    file, the file over the default."""
    path = write(
        tmp_path,
        'results = "/file/results"\nnotify = "ntfy://file"\nvast_url = "http://file:1"\n',
    )
    environ = {"GPUOPS_RESULTS": "/env/results", "GPUOPS_NOTIFY": "ntfy://env"}

    both = build(environ, path)
    file_only = build({}, path)
    neither = build({})

    assert (both.results_url, both.notify_urls, both.vast_url) == (
        "/env/results",
        ("ntfy://env",),
        "http://file:1",
    )
    assert (file_only.results_url, file_only.notify_urls) == ("/file/results", ("ntfy://file",))
    assert (neither.results_url, neither.notify_urls, neither.vast_url) == (
        str(HOME / ".local/state/gpuops/results"),
        (),
        None,
    )


def test_the_vast_key_comes_from_the_environment_then_the_file_then_vastai_s_key_file(tmp_path):
    """VAST_API_KEY, else the file's vast_api_key, else vastai's own key file."""
    path = write(tmp_path, 'vast_api_key = "file-key-123"\n')
    key_file = tmp_path / "home" / ".config" / "vastai" / "vast_api_key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text("vastai-key\n")
    home = {"HOME": str(tmp_path / "home")}

    def key(settings: Settings) -> str:
        return find_api_key(settings.environ, settings.vast_api_key)

    assert key(build({**home, "VAST_API_KEY": "env-key-123"}, path)) == "env-key-123"
    assert key(build(home, path)) == "file-key-123"
    assert key(build(home)) == "vastai-key"


def test_the_cli_takes_the_state_from_each_layer_in_turn(tmp_path, monkeypatch, capsys):
    """Through `gpuops stats` as a person runs it: each layer's state is a file, and the
    error names the one used: the flag's, else the variable's, else the file's, else the
    per-user directory under XDG_STATE_HOME."""
    for name in ("GPUOPS_STATE", "GPUOPS_EVENTS"):
        monkeypatch.delenv(name, raising=False)
    for name in ("flag", "env", "file", "xdg/gpuops"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("not a directory")
    path = write(tmp_path, f'state = "{tmp_path / "file"}"\n', name="c.toml")
    monkeypatch.setenv("GPUOPS_CONFIG", str(path))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))

    def state_used(*argv: str) -> str:
        assert cli.main([*argv, "stats"]) == 2
        err = capsys.readouterr().err
        assert "cannot read the event log " in err
        return err.partition("cannot read the event log ")[2].partition("/events.jsonl")[0]

    assert state_used("--state", str(tmp_path / "flag")) == str(tmp_path / "flag")
    monkeypatch.setenv("GPUOPS_STATE", str(tmp_path / "env"))
    assert state_used() == str(tmp_path / "env")
    monkeypatch.delenv("GPUOPS_STATE")
    assert state_used() == str(tmp_path / "file")
    monkeypatch.setenv("GPUOPS_CONFIG", os.devnull)
    assert state_used() == str(tmp_path / "xdg" / "gpuops")


# --- bad files ---------------------------------------------------------------------------------
def test_an_unknown_key_is_a_usage_error_naming_the_key_and_the_file(tmp_path):
    """A typo must not be ignored: the key, the file, and the key it was likely meant to be."""
    path = write(tmp_path, 'state = "/s"\nopertor = "bob"\n')

    with pytest.raises(UsageError) as raised:
        build({}, path)

    assert str(raised.value) == f"{path}: unknown key 'opertor': did you mean 'operator'?"


def test_a_table_is_an_unknown_key_that_says_every_key_sits_at_the_top(tmp_path):
    """`[lane]` with `project = ...` under it: the file has no tables, and the error says so."""
    path = write(tmp_path, '[lane]\nproject = "p"\n')

    with pytest.raises(UsageError, match=r"unknown table \[lane\]: every key sits at the top"):
        build({}, path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("state = 3", "state = 3: expected a string, not an integer"),
        ("operator = true", "operator = true: expected a string, not a boolean"),
        ('ssh = ["ssh"]', "ssh = ['ssh']: expected a string, not an array"),
        ('time_scale = "60"', "time_scale = '60': expected a number, not a string"),
        ("time_origin = false", "time_origin = false: expected a number, not a boolean"),
        ("results = 2026-01-01", "results = datetime.date(2026, 1, 1): expected a string, not a date or time"),
        ("notify = 5", "notify = <hidden>: expected a string or an array of URL strings, not an integer"),
        ('notify = ["ntfy://a", 5]', "notify: item 2 is an integer; expected a URL string"),
        ("vast_api_key = 12345678", "vast_api_key = <hidden>: expected a string, not an integer"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_names_the_key_the_value_and_what_was_expected(
    tmp_path, text, message
):
    """The key, the value (a secret's hidden) and the type it must have, after the file."""
    path = write(tmp_path, text + "\n")

    with pytest.raises(UsageError) as raised:
        build({}, path)

    assert str(raised.value) == f"{path}: {message}"
    assert "12345678" not in str(raised.value)


@pytest.mark.parametrize(
    "text, line",
    [
        ('state = "/s"\noperator = \n', 2),
        ('state = "/s"\n\nnotify = "ntfy://a\n', 3),  # unterminated: at the end of the file
        ('state = "/s"\nstate = "/t"\n', 2),  # a key given twice
        ("[x]\n[x]\n", 2),
    ],
)
def test_a_file_that_is_not_toml_names_the_file_and_the_line(tmp_path, text, line):
    """Malformed TOML: the file, the line, tomllib's reason; no traceback, exit 2."""
    path = write(tmp_path, text)

    with pytest.raises(UsageError) as raised:
        build({}, path)

    assert str(raised.value).startswith(f"{path}: line {line}: not valid TOML: ")


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    """Bytes that are not UTF-8: the file and the line they are on."""
    path = tmp_path / "config.toml"
    path.write_bytes(b'state = "/s"\noperator = "b\xffb"\n')

    with pytest.raises(UsageError, match=f"^{path}: line 2: not UTF-8"):
        build({}, path)


@pytest.mark.parametrize(
    "text, message",
    [
        ('operator = "bad op"', "operator: operator id 'bad op'"),
        ('results = "s3://"', "results = 's3://' names no bucket"),
        ('ssh_key = "/k/id"', "ssh_key = '/k/id' must name the public half"),
        ('vast_url = "ftp://x"', "vast_url = 'ftp://x' must be an http"),
        ('s3_endpoint = "s3.example"', "s3_endpoint = 's3.example' must be an http"),
        ("time_scale = 0", "time_scale = 0 must be positive"),
        ("time_scale = inf", "time_scale = inf must be a finite number"),
        ("time_origin = 5", "time_origin is set without GPUOPS_TIME_SCALE"),
        ('notify = "ntfy://a nope"', "notify: URL 2 is not a notification URL"),
    ],
)
def test_a_bad_value_in_the_file_names_the_file_and_the_key_not_the_variable(
    tmp_path, text, message
):
    """The same checks as the environment's, each naming where the value came from."""
    path = write(tmp_path, text + "\n")

    with pytest.raises(UsageError) as raised:
        build({}, path)

    assert str(raised.value).startswith(f"{path}: {message}")


def test_a_bad_value_in_the_file_is_no_error_when_the_environment_overrides_it(tmp_path):
    """The file's value is never read when the variable is set."""
    path = write(tmp_path, 'operator = "bad op"\nresults = "s3://"\n')

    got = build({"GPUOPS_OPERATOR": "ok", "GPUOPS_RESULTS": "/r"}, path)

    assert (got.operator, got.results_url) == ("ok", "/r")


def test_the_cli_reports_a_bad_file_as_exit_2_naming_it(tmp_path, monkeypatch, capsys):
    """`gpuops boxes` with a typo in the file: one line, exit 2, no traceback."""
    path = write(tmp_path, 'stat = "/x"\n')
    monkeypatch.setenv("GPUOPS_CONFIG", str(path))

    code = cli.main(["boxes"])

    err = capsys.readouterr().err
    assert code == 2 and err == f"gpuops: {path}: unknown key 'stat': did you mean 'state'?\n"


# --- secrets, children and the check ------------------------------------------------------------
def test_the_file_s_secret_is_redacted_as_the_environment_s_would_be_h3(tmp_path):
    """H3: a key read from the file is scrubbed from everything written, like VAST_API_KEY's."""
    path = write(tmp_path, 'vast_api_key = "file-secret-4711x"\n')

    got = build({}, path)

    assert scrub_text("refused key file-secret-4711x") == f"refused key {REDACTED}"
    assert "file-secret-4711x" not in repr(got) and "file-secret" not in repr(got.config)


def test_the_keys_scrubbed_are_those_whose_variable_the_scrub_redacts():
    """config.SCRUBBED is exactly the keys whose variable secrets.env_secrets treats as a
    secret: a new secret-named variable's key cannot be forgotten."""
    from gpuops.secrets import env_secrets

    redacted = {key for key, name in config.KEYS.items() if env_secrets({name: "x" * 20})}

    assert redacted == set(config.SCRUBBED) and config.SCRUBBED <= config.SECRETS


def test_a_relative_named_file_reaches_a_child_as_an_absolute_path(tmp_path, monkeypatch):
    """A guardian runs from /: the child's GPUOPS_CONFIG is the file's absolute path."""
    write(tmp_path, 'operator = "bob"\n')
    monkeypatch.chdir(tmp_path)

    got = build({"GPUOPS_CONFIG": "config.toml"})

    assert got.child_environ()["GPUOPS_CONFIG"] == str(tmp_path / "config.toml")
    assert got.operator == "bob"


_WRITABLE = (
    "{path} is writable by others (mode {mode}): whoever can write it chooses the ssh "
    "program, the state and where results go; chmod 600 {path}"
)


@pytest.mark.parametrize(
    "text, mode, ok, detail",
    [
        ('vast_api_key = "k-12345678"\n', 0o600, True, "{path} (mode 0600): vast_api_key"),
        ('vast_api_key = "k-12345678"\n', 0o640, False,
         "{path} holds vast_api_key and is readable by others (mode 0640); chmod 600 {path}"),
        ('notify = "ntfy://t"\nvast_api_key = "k-12345678"\n', 0o604, False,
         "{path} holds notify, vast_api_key and is readable by others (mode 0604); "
         "chmod 600 {path}"),
        ('state = "/s"\noperator = "a"\n', 0o644, True, "{path} (mode 0644): state, operator"),
        ('state = "/s"\n', 0o620, False, _WRITABLE),  # the ssh program, the state
        ('state = "/s"\n', 0o602, False, _WRITABLE),
        ("", 0o600, True, "{path} (mode 0600): no keys"),
        ('vast_api_key = "k-12345678"\n', 0o601, True, "{path} (mode 0601): vast_api_key"),
    ],
)  # fmt: skip
def test_check_fails_a_file_others_can_write_or_read_when_it_holds_a_secret(
    tmp_path, text, mode, ok, detail
):
    """`gpuops check`'s config line: writable by others is exit 2, and so is readable by others
    with a secret in it; the fix is chmod 600."""
    path = write(tmp_path, text, mode=mode)

    finding = check.check_config(build({}, path).config)

    assert finding is not None and finding.check == "config" and finding.ok is ok
    assert finding.code == (0 if ok else check.CONFIG)
    assert finding.detail == detail.format(path=path, mode=f"{mode:04o}")


def test_check_has_no_config_line_without_a_file_and_an_ok_one_for_dev_null():
    """No file read: no line; /dev/null (the empty config): ok, no keys."""
    finding = check.check_config(build({"GPUOPS_CONFIG": os.devnull}).config)

    assert check.check_config(build({}).config) is None
    assert finding is not None and finding.ok and finding.check == "config"
    assert finding.detail == f"{os.devnull} (not a regular file): no keys"


# --- start-up: the file is read once, and never for --help -----------------------------------
READS = (
    "import sys, io, json, contextlib\n"
    "opened = []\n"
    "target = sys.argv[1]\n"
    "sys.addaudithook(lambda e, a: opened.append(e) if e == 'open' and str(a[0]) == target else None)\n"
    "from gpuops.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try: code = main(sys.argv[2:])\n"
    "    except SystemExit as e: code = e.code\n"
    "print(json.dumps([code, len(opened), 'tomllib' in sys.modules]))"
)


@pytest.mark.process  # a whole-CLI process: an audit hook sees every open
def test_a_command_reads_the_file_once_and_help_never(tmp_path):
    """`boxes` opens the config file exactly once; `--help` never opens it, nor loads tomllib."""
    path = write(tmp_path, f'state = "{tmp_path / "state"}"\noperator = "a"\n')

    def run(*argv: str) -> list[object]:
        out = subprocess.run(
            [sys.executable, "-c", READS, str(path), *argv],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": "/usr/bin:/bin", "GPUOPS_CONFIG": str(path), "PYTHONPATH": str(ROOT)},
        ).stdout
        return json.loads(out.splitlines()[-1])

    assert run("boxes") == [0, 1, True]
    assert run("--help") == [0, 0, False]


# --- pinned: where the default file is, how it is read, what a file's value is called -----------
def test_the_default_file_is_under_the_environment_s_home_else_this_user_s(monkeypatch):
    """With no home given, ~ is the environment's HOME, else the user's own."""
    monkeypatch.setenv("HOME", "/root-of-this-process")

    assert config_path({"HOME": "/h"}) == ("/h/.config/gpuops/config.toml", False)
    assert config_path({}) == ("/root-of-this-process/.config/gpuops/config.toml", False)
    assert config_path({"HOME": ""}, home="/given") == ("/given/.config/gpuops/config.toml", False)


def test_the_default_file_is_read_from_the_home_given(tmp_path):
    """read_config finds the default file under the home it is given (no GPUOPS_CONFIG)."""
    write(tmp_path / ".config" / "gpuops" if _mkdirs(tmp_path) else tmp_path, 'operator = "o"\n')

    found = read_config({}, home=tmp_path)

    assert found is not None and found.keys == ("operator",) and not found.named
    assert found.path == str(tmp_path / ".config" / "gpuops" / "config.toml")


def _mkdirs(home: Path) -> bool:
    (home / ".config" / "gpuops").mkdir(parents=True)
    return True


def test_a_config_path_that_cannot_be_opened_is_a_usage_error_saying_why(tmp_path):
    """A named path under a regular file, and a directory: exit 2, naming the path."""
    under_a_file = str(write(tmp_path, "") / "config.toml")
    with pytest.raises(UsageError) as not_dir:
        read_config(named(Path(under_a_file)))
    with pytest.raises(UsageError) as a_dir:
        read_config(named(tmp_path))

    assert str(not_dir.value) == f"cannot read the config file {under_a_file}: Not a directory"
    assert str(a_dir.value) == f"the config file {tmp_path} is a directory"


def test_a_secret_only_the_file_holds_is_redacted_from_then_on_h3(tmp_path, monkeypatch):
    """H3: a key read from the file (and nowhere in the environment) is scrubbed like the
    environment's; what is not a secret stays."""
    import gpuops.secrets as secrets

    monkeypatch.setattr(secrets, "_REMEMBERED", set())
    key = "k-only-in-the-file-0123456789abcdef"
    path = write(tmp_path, f'vast_api_key = "{key}"\noperator = "alice-op"\n')
    assert scrub_text(f"x {key} y") == f"x {key} y"  # not known before the file is read

    read_config(named(path))

    assert scrub_text(f"x {key} y alice-op") == f"x {REDACTED} y alice-op"


def test_a_value_the_environment_sets_is_named_as_the_variable_even_if_the_file_sets_it(
    tmp_path,
):
    """The environment wins, and an error names where the value came from: the variable
    when the environment gave it, `FILE: key = value` when the file did."""
    path = write(tmp_path, 'ssh_key = "/from/the/file"\n')
    with pytest.raises(UsageError) as from_env:
        build({"GPUOPS_SSH_KEY": "/from/the/env"}, path)
    with pytest.raises(UsageError) as from_file:
        build({}, path)

    assert str(from_env.value) == (
        "GPUOPS_SSH_KEY='/from/the/env' must name the public half of the key (a .pub file)"
    )
    assert str(from_file.value) == (
        f"{path}: ssh_key = '/from/the/file' must name the public half of the key (a .pub file)"
    )


def test_a_file_value_holding_an_equals_sign_is_named_by_its_key_alone(tmp_path):
    """`FILE: key`, cut at the first ` = `: a value may hold one too."""
    path = write(tmp_path, 'operator = "a = b"\n')

    with pytest.raises(UsageError) as raised:
        build({}, path)

    assert str(raised.value).startswith(f"{path}: operator: ")


def test_a_file_secret_that_holds_an_environment_secret_is_redacted_whole_h3(monkeypatch):
    """H3: of the environment's secrets and the file's, the longest is replaced first, so a
    file key that extends an environment key leaves no tail behind."""
    import gpuops.secrets as secrets

    short = "k-shared-prefix-0123456789"
    monkeypatch.setenv("VAST_API_KEY", short)
    monkeypatch.setattr(secrets, "_REMEMBERED", set())
    secrets.remember({"VAST_API_KEY": short + "-and-a-longer-tail"})

    assert scrub_text(f"a {short}-and-a-longer-tail b {short} c") == f"a {REDACTED} b {REDACTED} c"
