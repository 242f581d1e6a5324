"""The config file's keys and its parse: TOML bytes in, environment-named values out, checked.

Each key is an environment variable's name in lower case, less ``GPUOPS_`` (``state``,
``operator``, ``notify``, ``vast_api_key``...): the file holds what the environment may, and
gpuops/settings.py reads both the same way, the environment's value over the file's. An unknown
key (a typo must not be ignored), a value of the wrong type and a file that is not TOML are each
a ``UsageError`` naming the file and the key or the line. A secret's value (``vast_api_key``,
``notify``: its URLs hold tokens) is never quoted in a message.

Not keys: ``NO_COLOR``, ``TERM`` and ``COLUMNS`` describe the terminal, not gpuops (and the help's
width is read before any file), ``GPUOPS_CONFIG`` and ``XDG_CONFIG_HOME`` say where the file is.
Imported only when a config file exists (settings.py), so a command without one pays nothing.
"""

from __future__ import annotations

from gpuops.errors import UsageError

# key -> the environment variable it stands for, in the order docs/cli.md lists them
KEYS = {
    "state": "GPUOPS_STATE",
    "operator": "GPUOPS_OPERATOR",
    "xdg_state_home": "XDG_STATE_HOME",
    "events": "GPUOPS_EVENTS",
    "results": "GPUOPS_RESULTS",
    "ssh_key": "GPUOPS_SSH_KEY",
    "ssh": "GPUOPS_SSH",
    "vast_url": "VAST_URL",
    "vast_api_key": "VAST_API_KEY",
    "gce_endpoint": "GPUOPS_GCE_ENDPOINT",
    "storage_emulator_host": "STORAGE_EMULATOR_HOST",
    "s3_endpoint": "GPUOPS_S3_ENDPOINT",
    "lane_project": "GPUOPS_LANE_PROJECT",
    "lane_zone": "GPUOPS_LANE_ZONE",
    "lane_instance": "GPUOPS_LANE_INSTANCE",
    "lane_bucket": "GPUOPS_LANE_BUCKET",
    "notify": "GPUOPS_NOTIFY",
    "time_scale": "GPUOPS_TIME_SCALE",
    "time_origin": "GPUOPS_TIME_ORIGIN",
    "identity": "GPUOPS_IDENTITY",
}
NUMBERS = frozenset({"time_scale", "time_origin"})  # a TOML integer or float
URL_LISTS = frozenset({"notify"})  # a string of URLs, as the variable, or an array of them
SECRETS = frozenset({"vast_api_key", "notify"})  # never quoted: a key, URLs with tokens
# the secrets scrub takes out of every text, as it does VAST_API_KEY's (secrets.env_secrets:
# notify's URLs are kept out by the alarms module instead, as GPUOPS_NOTIFY's are)
SCRUBBED = frozenset({"vast_api_key"})
# the variable each key stands for -> its key (settings.py names a file's value by its key)
KEY_OF = {name: key for key, name in KEYS.items()}


def parse(data: bytes, path: str) -> dict[str, tuple[str, str]]:
    """The file's values by variable name: (the value as the variable would hold it, how a
    message shows it: ``key = value``, a secret's as ``key = <hidden>``)."""
    import tomllib

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise UsageError(f"{path}: line {line}: not UTF-8 (a TOML file is UTF-8 text)") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: {_where(str(exc), text)}") from None
    values: dict[str, tuple[str, str]] = {}
    for key, raw in doc.items():
        if key not in KEYS:
            raise UsageError(_unknown(key, raw, path))
        values[KEYS[key]] = (_checked(key, raw, path), _shown(key, raw))
    return values


def _where(message: str, text: str) -> str:
    """tomllib's message with its place as a line: ``line N: not valid TOML: ...``."""
    what, sep, place = message.rpartition(" (at ")
    if not sep:
        return f"not valid TOML: {message}"
    if place.startswith("line "):
        line = place.removeprefix("line ").partition(",")[0]
    else:  # "end of document)": the error is on the last line
        line = str(len(text.splitlines()) or 1)
    return f"line {line}: not valid TOML: {what}"


def _unknown(key: str, raw: object, path: str) -> str:
    import difflib

    if isinstance(raw, dict):  # `[lane]`: the file has no tables
        return f"{path}: unknown table [{key}]: every key sits at the top (the keys are {', '.join(KEYS)})"
    close = difflib.get_close_matches(key, KEYS, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(KEYS)}"
    return f"{path}: unknown key {key!r}: {hint}"


def _checked(key: str, raw: object, path: str) -> str:
    """The value as its variable would hold it, or a UsageError saying what was expected."""
    if key in NUMBERS:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return repr(raw)
        raise UsageError(f"{path}: {_shown(key, raw)}: expected a number, not {_kind(raw)}")
    if isinstance(raw, str):
        return raw
    if key in URL_LISTS and isinstance(raw, list):
        for position, item in enumerate(raw, start=1):
            if not isinstance(item, str):
                raise UsageError(
                    f"{path}: {key}: item {position} is {_kind(item)}; expected a URL string"
                )
        return " ".join(raw)
    expected = "a string or an array of URL strings" if key in URL_LISTS else "a string"
    raise UsageError(f"{path}: {_shown(key, raw)}: expected {expected}, not {_kind(raw)}")


def _shown(key: str, raw: object) -> str:
    if key in SECRETS:
        return f"{key} = <hidden>"
    if isinstance(raw, bool):
        return f"{key} = {str(raw).lower()}"
    return f"{key} = {raw!r}"


def _kind(raw: object) -> str:
    """A TOML value's type, in TOML's words."""
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int):
        return "an integer"
    if isinstance(raw, float):
        return "a float"
    if isinstance(raw, str):
        return "a string"
    if isinstance(raw, list):
        return "an array"
    if isinstance(raw, dict):
        return "a table"
    return "a date or time"
