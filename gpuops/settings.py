"""Everything gpuops takes from the environment and its config file, read once, checked once,
handed down.

The CLI entry builds one ``Settings`` (``Settings.from_environ(environ, cli_options,
config=read_config(environ))``) and passes it, or the values in it, to the constructors that
need them. No other module of gpuops reads ``os.environ`` for a setting (tests/test_settings.py
scans them; secrets.py reads it only to know which values to redact, H3); a child process gets
an environment built from ``Settings.environ`` (a copy taken with the rest). The variables, all
optional:

    GPUOPS_STATE            the state store (--state wins): a directory or s3://bucket/prefix
    GPUOPS_OPERATOR         who is acting (--operator wins); default user@host
    GPUOPS_IDENTITY         `key`: each operator holds a Vast key of their own, so the key's user
                            is the operator (M3, docs/threat-model.md); default `declared`
    GPUOPS_EVENTS           the event log; default beside a local store, else per user
    XDG_STATE_HOME          the per-user directory's parent (default ~/.local/state)
    GPUOPS_RESULTS          where a guardian's results go (default <per-host dir>/results)
    GPUOPS_SSH_KEY          our SSH public key (a .pub file; the private half beside it)
    GPUOPS_SSH              the ssh program (the fake one in tests and demos)
    VAST_URL, VAST_API_KEY  the Vast endpoint and key (else console.vast.ai, vastai's key file)
    GPUOPS_GCE_ENDPOINT     an http:// loopback FakeGCE (anonymous credentials); else real GCE
    STORAGE_EMULATOR_HOST   google-cloud-storage's own variable for a fake bucket
    GPUOPS_S3_ENDPOINT      an S3 endpoint for the store and the results (the stand-in)
    GPUOPS_LANE_PROJECT, _ZONE, _INSTANCE, _BUCKET   the lane (required by `gpuops lane`)
    GPUOPS_NOTIFY           where alarms go (O1): one or more apprise URLs (json://host:port/path,
                            ntfy://topic, mailto://..., slack://...), by spaces or commas
    GPUOPS_TIME_SCALE       loopback fakes only: their seconds per real second (k > 0)
    GPUOPS_TIME_ORIGIN      the epoch at which the scaled clock and the real one agree
    NO_COLOR, TERM          colour only when NO_COLOR is unset and TERM is not dumb
    COLUMNS                 help width (ignored unless a positive integer, as shutil does)
    GPUOPS_CONFIG           the config file to read (below) instead of the default one

The config file (``read_config``): the file GPUOPS_CONFIG names (it must exist), else
$XDG_CONFIG_HOME/gpuops/config.toml (default ~/.config/gpuops/config.toml; none there is fine),
read once per command. Its keys are the variables above in lower case, less ``GPUOPS_``
(gpuops/config.py holds them and parses the file); the terminal's three are not among them.
Precedence: a command-line option, then the environment, then the file, then the default.

A value that cannot be used is a ``UsageError`` naming the variable (or the file and its key)
and what is wrong with it.

Light on purpose: ``gpuops --help`` imports it before parsing (for COLUMNS), so at import it
loads nothing that bare argparse has not (no dataclasses, typing or pathlib: those, and
gpuops/clock.py, are imported when a Settings is built or a clock asked for; tomllib and
gpuops/config.py only when a config file exists; and --help exits before any file is read).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from gpuops.errors import UsageError

TYPE_CHECKING = False  # not typing's: importing typing is a cost `gpuops --help` would pay

if TYPE_CHECKING:
    from pathlib import Path

    from gpuops.clock import Clock, ScaledClock
    from gpuops.providers.ssh import SshClient
    from gpuops.store.base import Store

# checked with str methods, not a regex: `re` and socket stay out of `gpuops rules`' start-up
_OPERATOR_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_OPERATOR_REST = _OPERATOR_FIRST | frozenset(".@+-")
# Under the per-user directory: an s3:// state's listing cache (gpuops/store/s3_cache.py).
S3_CACHE = "s3-cache"
LANE_VARIABLES = (
    "GPUOPS_LANE_PROJECT",
    "GPUOPS_LANE_ZONE",
    "GPUOPS_LANE_INSTANCE",
    "GPUOPS_LANE_BUCKET",
)


def check_operator(operator: str) -> str:
    """An operator id: 1-128 letters, digits and _.@+- (not starting with .@+-)."""
    if not (
        0 < len(operator) <= 128
        and operator[0] in _OPERATOR_FIRST
        and all(c in _OPERATOR_REST for c in operator)
    ):
        raise UsageError(
            f"operator id {operator!r} must be 1-128 characters of letters, digits and _.@+-"
        )
    return operator


def environ_snapshot() -> dict[str, str]:
    """A copy of this process's environment: the one read of ``os.environ`` a command makes."""
    return dict(os.environ)


@contextmanager
def exported(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in this process's environment while the block runs, then restore it: for
    a library that reads its own variable from the process (google-cloud-storage's
    STORAGE_EMULATOR_HOST) during the demo's in-process acts. Nothing of gpuops reads them."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def columns_of(environ: Mapping[str, str]) -> int | None:
    """COLUMNS when it is a positive integer, else None (the terminal's width then)."""
    try:
        columns = int(environ["COLUMNS"])
    except (KeyError, ValueError):
        return None
    return columns if columns > 0 else None


class _Value:
    """A frozen value of named fields, without dataclasses (whose import, with inspect's, would
    double `gpuops --help`'s start-up): equal by fields, a repr without the ``_secret`` ones."""

    __slots__: tuple[str, ...] = ()
    _secret: tuple[str, ...] = ()

    def __init__(self, **values: object) -> None:
        for name in self.__slots__:
            object.__setattr__(self, name, values.pop(name))
        if values:
            raise TypeError(f"{type(self).__name__} has no field {sorted(values)[0]!r}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name} cannot be set")

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__ if name not in self._secret)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = (f"{n}={getattr(self, n)!r}" for n in self.__slots__ if n not in self._secret)
        return f"{type(self).__name__}({', '.join(shown)})"


class TimeScale(_Value):
    """Loopback only: the fakes' seconds per real second, from the epoch ``origin``."""

    __slots__ = ("factor", "origin")
    factor: float
    origin: float

    def __init__(self, factor: float, origin: float) -> None:
        super().__init__(factor=factor, origin=origin)

    def clock(self) -> ScaledClock:
        from gpuops.clock import ScaledClock

        return ScaledClock(self.factor, origin=self.origin)


class ConfigFile(_Value):
    """The config file a command read: its absolute path, whether GPUOPS_CONFIG named it, its
    permission bits (None when it is not a regular file, as /dev/null), the keys it sets, and
    by variable name their values and how a message shows each, ``key = value`` (a secret's
    hidden); those two are left out of repr."""

    __slots__ = ("path", "named", "mode", "keys", "values", "shown")
    _secret = ("values", "shown")
    path: str
    named: bool
    mode: int | None
    keys: tuple[str, ...]
    values: tuple[tuple[str, str], ...]
    shown: tuple[tuple[str, str], ...]

    def secret_keys(self) -> tuple[str, ...]:
        """The keys it sets whose values are secrets (an API key, URLs with tokens)."""
        from gpuops.config import SECRETS

        return tuple(key for key in self.keys if key in SECRETS)


def config_path(
    environ: Mapping[str, str], home: str | os.PathLike[str] | None = None
) -> tuple[str, bool]:
    """The config file's path, and whether GPUOPS_CONFIG named it. A relative XDG_CONFIG_HOME
    is ignored, as the XDG spec asks."""
    named = environ.get("GPUOPS_CONFIG") or None
    if named is not None:
        return os.path.abspath(os.path.expanduser(named)), True
    base = environ.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(base):
        home = (environ.get("HOME") or os.path.expanduser("~")) if home is None else home
        base = os.path.join(os.fspath(home), ".config")
    return os.path.join(base, "gpuops", "config.toml"), False


def read_config(
    environ: Mapping[str, str], home: str | os.PathLike[str] | None = None
) -> ConfigFile | None:
    """The config file, read once and checked; None when there is none at the default path.
    A file GPUOPS_CONFIG names must exist. Its secrets are redacted from then on as the
    environment's are (secrets.remember, H3). ``home``: the default's home (tests)."""
    import stat

    path, named = config_path(environ, home)
    try:
        with open(path, "rb") as file:  # one open: what was checked is what is read
            status = os.fstat(file.fileno())
            data = file.read()
    except FileNotFoundError:
        if named:
            raise UsageError(f"GPUOPS_CONFIG names {path}, which does not exist") from None
        return None
    except IsADirectoryError:
        raise UsageError(f"the config file {path} is a directory") from None
    except OSError as exc:
        raise UsageError(f"cannot read the config file {path}: {exc.strerror}") from None
    parsed: dict[str, tuple[str, str]] = {}
    keys: tuple[str, ...] = ()
    if data.strip():  # an empty file (/dev/null) sets nothing, and costs no TOML parser
        from gpuops.config import KEY_OF, SCRUBBED, parse

        parsed = parse(data, path)
        keys = tuple(KEY_OF[name] for name in parsed)
        if SCRUBBED.intersection(keys):  # only then the scrub's patterns (`boxes` never needs them)
            from gpuops.secrets import remember

            remember({name: value for name, (value, _) in parsed.items()})
    values = {name: value for name, (value, _) in parsed.items()}
    return ConfigFile(
        path=path,
        named=named,
        mode=stat.S_IMODE(status.st_mode) if stat.S_ISREG(status.st_mode) else None,
        keys=keys,
        values=tuple(values.items()),
        shown=tuple((name, shown) for name, (_, shown) in parsed.items()),
    )


class _Layers:
    """The environment over the config file: a variable's value (set but empty counts as
    unset, in either), and how a message names where it came from."""

    __slots__ = ("env", "file", "shown", "path")

    def __init__(self, env: Mapping[str, str], config: ConfigFile | None) -> None:
        self.env = env
        self.file = dict(config.values) if config is not None else {}
        self.shown = dict(config.shown) if config is not None else {}
        self.path = config.path if config is not None else ""

    def get(self, name: str) -> str | None:
        return self.env.get(name) or self.file.get(name) or None

    def from_file(self, name: str) -> bool:
        return not self.env.get(name) and bool(self.file.get(name))

    def where(self, name: str) -> str:
        """``NAME``, or ``FILE: key`` for a value the file gave."""
        if self.from_file(name):
            return f"{self.path}: {self.shown[name].partition(' = ')[0]}"
        return name

    def show(self, name: str) -> str:
        """``NAME='value'``, or ``FILE: key = value`` for a value the file gave."""
        if self.from_file(name):
            return f"{self.path}: {self.shown[name]}"
        return f"{name}={self.env.get(name)!r}"


class LaneSettings(_Value):
    __slots__ = ("project", "zone", "instance", "bucket")
    project: str
    zone: str
    instance: str
    bucket: str

    def __init__(self, project: str, zone: str, instance: str, bucket: str) -> None:
        super().__init__(project=project, zone=zone, instance=instance, bucket=bucket)


class Settings(_Value):
    """Every setting of one command. Built by ``from_environ``; ``environ`` (the snapshot, for
    child processes) and the API key are left out of its repr (H3) and of ==."""

    __slots__ = (
        "state_url",
        "events_path",
        "user_dir",  # the per-user directory: $XDG_STATE_HOME/gpuops or ~/.local/state/gpuops
        "local_dir",  # per-host files (known_hosts): the state dir, or user_dir for remote state
        "results_url",
        "ssh_key",  # the public half; the private half is the same path without .pub
        "ssh_program",
        "operator",  # --operator or GPUOPS_OPERATOR; None: user@host when asked
        "identity_by_key",  # GPUOPS_IDENTITY=key: the Vast key's user is the operator (M3)
        "vast_url",
        "vast_api_key",
        "gce_endpoint",
        "storage_emulator_host",
        "s3_endpoint",
        "lane_values",  # the lane variables that are set, as (name, value) pairs
        "time_scale",
        "notify_urls",  # GPUOPS_NOTIFY, each an apprise URL (tokens in it: never shown)
        "colour",  # NO_COLOR unset and TERM not dumb (a terminal is still needed)
        "columns",
        "config",  # the config file read (ConfigFile), or None
        "environ",
    )
    _secret = ("vast_api_key", "notify_urls", "environ")
    state_url: str
    events_path: Path
    user_dir: Path
    local_dir: Path
    results_url: str
    ssh_key: Path
    ssh_program: str
    operator: str | None
    identity_by_key: bool
    vast_url: str | None
    vast_api_key: str | None
    gce_endpoint: str | None
    storage_emulator_host: str | None
    s3_endpoint: str | None
    lane_values: tuple[tuple[str, str], ...]
    time_scale: TimeScale | None
    notify_urls: tuple[str, ...]
    colour: bool
    columns: int | None
    config: ConfigFile | None
    environ: Mapping[str, str]

    @classmethod
    def from_environ(
        cls,
        environ: Mapping[str, str] | None = None,
        cli_options: Mapping[str, object] | None = None,
        *,
        home: Path | None = None,
        config: ConfigFile | None = None,
    ) -> Settings:
        """Every value, from the CLI's global options (``state``, ``operator``; absent or
        None: not given), then ``environ`` (default: a snapshot of this process's), then
        ``config`` (the file ``read_config`` read; None: none), then the defaults. ``home``
        is for tests."""
        from pathlib import Path

        env = environ_snapshot() if environ is None else dict(environ)
        if config is not None and config.named:
            env["GPUOPS_CONFIG"] = config.path  # absolute: a guardian runs from /
        options = cli_options or {}
        layers = _Layers(env, config)
        value = layers.get

        home_dir = Path.home() if home is None else home
        user_dir = Path(value("XDG_STATE_HOME") or str(home_dir / ".local" / "state")) / "gpuops"
        state_url = _option(options, "state") or value("GPUOPS_STATE") or str(user_dir)
        local_dir = _local_dir(state_url, user_dir)
        operator = _option(options, "operator")
        if operator is not None:
            check_operator(operator)
        elif (given := value("GPUOPS_OPERATOR")) is not None:
            try:
                operator = check_operator(given)
            except UsageError as exc:
                raise UsageError(f"{layers.where('GPUOPS_OPERATOR')}: {exc}") from None
        events = value("GPUOPS_EVENTS")
        results = value("GPUOPS_RESULTS") or str(local_dir / "results")
        if results.startswith("s3://") and not results.removeprefix("s3://").partition("/")[0]:
            raise UsageError(
                f"{layers.show('GPUOPS_RESULTS')} names no bucket (s3://bucket/prefix)"
            )
        ssh_key = value("GPUOPS_SSH_KEY")
        if ssh_key is not None and not ssh_key.endswith(".pub"):
            raise UsageError(
                f"{layers.show('GPUOPS_SSH_KEY')} must name the public half of the key "
                "(a .pub file)"
            )
        term = env.get("TERM")
        return cls(
            state_url=state_url,
            events_path=Path(events) if events else local_dir / "events.jsonl",
            user_dir=user_dir,
            local_dir=local_dir,
            results_url=results,
            ssh_key=Path(ssh_key or str(home_dir / ".ssh" / "id_ed25519.pub")).expanduser(),
            ssh_program=value("GPUOPS_SSH") or "ssh",
            operator=operator,
            identity_by_key=_identity_by_key(layers),
            vast_url=_endpoint(layers, "VAST_URL"),
            vast_api_key=value("VAST_API_KEY"),
            gce_endpoint=_endpoint(layers, "GPUOPS_GCE_ENDPOINT"),
            storage_emulator_host=value("STORAGE_EMULATOR_HOST"),
            s3_endpoint=_endpoint(layers, "GPUOPS_S3_ENDPOINT"),
            lane_values=tuple((n, v) for n in LANE_VARIABLES if (v := value(n)) is not None),
            time_scale=_time_scale(layers),
            notify_urls=notify_urls(value("GPUOPS_NOTIFY") or "", layers.where("GPUOPS_NOTIFY")),
            colour="NO_COLOR" not in env and term != "dumb",
            columns=columns_of(env),
            config=config,
            environ=env,
        )

    # --- what the values mean ------------------------------------------------------------------
    def acting_operator(self) -> str:
        """--operator or GPUOPS_OPERATOR, else user@host."""
        if self.operator is not None:
            return self.operator
        import getpass
        import socket

        return check_operator(f"{getpass.getuser()}@{socket.gethostname()}")

    def lane(self) -> LaneSettings:
        """The lane's four values, or a usage error naming every one that is missing."""
        given = dict(self.lane_values)
        missing = [name for name in LANE_VARIABLES if name not in given]
        if missing:
            keys = ", ".join(name.removeprefix("GPUOPS_").lower() for name in missing)
            raise UsageError(
                f"the lane needs {', '.join(missing)} in the environment "
                f"(or {keys} in the config file)"
            )
        return LaneSettings(*(given[name] for name in LANE_VARIABLES))

    def lane_bucket(self) -> str | None:
        return dict(self.lane_values).get("GPUOPS_LANE_BUCKET")

    def clock(self) -> Clock:
        """The real clock, or under GPUOPS_TIME_SCALE the scaled one the fakes run on."""
        from gpuops.clock import SYSTEM

        return SYSTEM if self.time_scale is None else self.time_scale.clock()

    def open_state(self) -> Store:
        """The state store ``state_url`` names: an s3:// one at GPUOPS_S3_ENDPOINT, keeping its
        listing cache in the per-user directory (gpuops/store/s3_cache.py)."""
        from gpuops.store import open_store

        return open_store(self.state_url, self.s3_endpoint, self.user_dir / S3_CACHE)

    def identity_file(self) -> Path:
        """The private half of GPUOPS_SSH_KEY."""
        return self.ssh_key.with_suffix("")

    def ssh(self) -> SshClient:
        """The ssh client (GPUOPS_SSH, else ssh) and the environment it runs in."""
        from gpuops.providers.ssh import SshClient

        return SshClient(self.ssh_program, self.child_environ())

    def child_environ(self, **extra: str) -> dict[str, str]:
        """An environment for a child process: the one this command started with, plus ``extra``."""
        return {**self.environ, **extra}


def _option(options: Mapping[str, object], name: str) -> str | None:
    given = options.get(name)
    return str(given) if given else None


def _local_dir(state_url: str, user_dir: Path) -> Path:
    """A local store's own directory; the per-user directory for a remote (s3://) store."""
    if "://" in state_url and not state_url.startswith("file://"):
        return user_dir
    return type(user_dir)(state_url.removeprefix("file://")).expanduser()


def _identity_by_key(layers: _Layers) -> bool:
    """GPUOPS_IDENTITY: ``key`` when every operator holds a Vast key of their own (the key's
    user is then the operator, attested, M3); ``declared`` (the default) while a key may be
    shared, as a small team's one account key is: Vast names the same user for everybody."""
    raw = layers.get("GPUOPS_IDENTITY")
    if raw in (None, "declared"):  # an empty variable is unset (``_Layers.get``)
        return False
    if raw == "key":
        return True
    raise UsageError(f"{layers.show('GPUOPS_IDENTITY')} must be `key` or `declared`")


def _endpoint(layers: _Layers, name: str) -> str | None:
    """An http(s)://host[:port][/path] URL, or None when unset."""
    url = layers.get(name)
    if url is None:
        return None
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("http", "https") or not rest.split("/")[0]:
        raise UsageError(f"{layers.show(name)} must be an http:// or https:// URL with a host")
    return url


def notify_urls(raw: str, where: str) -> tuple[str, ...]:
    """GPUOPS_NOTIFY's URLs: words split on spaces, and on a comma that starts another URL (a
    comma inside one, as in mailto's ``?to=a@x,b@x``, stays); each ``scheme://...`` with an
    alphanumeric scheme. Which schemes apprise knows is its own to say, when it sends. A bad one
    is a UsageError naming its position, never its text: a URL may hold a token."""
    urls: list[str] = []
    for word in raw.split():
        starts = True  # the word's first piece must start a URL
        for piece in word.split(","):
            if not piece:  # "a, b" or "a,,b": no URL between the commas
                continue
            scheme, sep, rest = piece.partition("://")
            if sep and rest and scheme.isascii() and scheme.isalnum():
                urls.append(piece)
            elif not starts:
                urls[-1] += "," + piece  # a comma inside the URL before it
            else:
                raise UsageError(
                    f"{where}: URL {len(urls) + 1} is not a notification URL: give "
                    "scheme://..., e.g. json://host:port/path or ntfy://topic (apprise's syntax)"
                )
            starts = False
    return tuple(urls)


def _number(layers: _Layers, name: str) -> float | None:
    raw = layers.get(name)
    if raw is None:
        return None
    try:
        number = float(raw)
    except ValueError:
        raise UsageError(f"{layers.show(name)} is not a number") from None
    if not math.isfinite(number):
        raise UsageError(f"{layers.show(name)} must be a finite number")
    return number


def _time_scale(layers: _Layers) -> TimeScale | None:
    factor = _number(layers, "GPUOPS_TIME_SCALE")
    origin = _number(layers, "GPUOPS_TIME_ORIGIN")
    for old in ("GPUOPS_LANE_TIME_SCALE", "GPUOPS_GUARD_TIME_SCALE", "GPUOPS_LANE_TIME_ORIGIN"):
        if layers.env.get(old):
            new = old.replace("_LANE", "").replace("_GUARD", "")
            raise UsageError(f"{old} is no longer read: set {new} (one scale for everything)")
    if factor is None:
        if origin is not None:
            raise UsageError(
                f"{layers.where('GPUOPS_TIME_ORIGIN')} is set without GPUOPS_TIME_SCALE"
            )
        return None
    if not factor > 0:
        raise UsageError(f"{layers.show('GPUOPS_TIME_SCALE')} must be positive")
    if origin is None:  # each process would count from its own start: no two would agree
        raise UsageError(
            f"{layers.where('GPUOPS_TIME_SCALE')} is set without GPUOPS_TIME_ORIGIN: give "
            "both, as `gpuops fakes serve` exports them"
        )
    return TimeScale(factor, origin)
