"""What a secret looks like, defined once, and ``scrub``, which takes every one out (rule H3).

Owns: the names whose values are secrets (``api_key``, ``Authorization``, ``jupyter_token``,
``X-Api-Key``...), the environment variables whose values are secrets (``VAST_API_KEY``...,
and the config file's values for them: ``remember``), the shapes that give a secret away on their own (a PEM private key, ``Bearer <token>``, AWS,
Google and Vast.ai keys), and the placeholders that are not secrets (``api_key=...``).

Everything that writes text a person or a file keeps uses this module: the event log scrubs
every payload before it is written (gpuops/events.py), a recording is scrubbed before it is
saved (gpuops/record.py, record_gce.py), a provider's error quotes only a scrubbed body
(gpuops/errors.py), a stored error is scrubbed (gpuops/ledger.py), the CLI scrubs what reaches
stderr, and the ssh child gets an environment without any secret-named variable
(gpuops/providers/ssh.py, ``is_secret_env_name``).

Scrubbing is deliberately greedy: a redacted non-secret costs a little context, a missed
secret costs the account. Known costs: any 64+ char lowercase hex run (a Vast key's shape,
but also a SHA-256 digest, or a rental name typed as one: its message says what is wrong
with it besides quoting it) and any value under a key named ``key`` are redacted. Never
redacted: the value of a variable that names a file rather than holds a secret
(GPUOPS_SSH_KEY, GOOGLE_APPLICATION_CREDENTIALS, ``*_FILE``, ``*_PATH``, ``*_DIR``): a person
must see which key file could not be read, and the file's content is never logged. What is
kept on purpose: an empty value, a placeholder (``...``, ``…``, ``***``, ``$VAST_API_KEY``,
``<key>``) and one of a few instruction words (``API key: pass api_key=...``), so a hint
telling a person where a key goes stays readable. A real value is never one of those.

This module imports nothing from gpuops: everything may import it (errors.py included).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = [
    "REDACTED",
    "REDACTED_PRIVATE_KEY",
    "env_secrets",
    "is_secret_env_name",
    "is_secret_name",
    "remember",
    "scrub",
    "scrub_text",
]

REDACTED = "[REDACTED]"
REDACTED_PRIVATE_KEY = "[REDACTED PRIVATE KEY]"

# Names (dict keys, header names, query/form/config keys) whose value is a secret. Matched on
# the lower-cased name with '-' read as '_', so X-Api-Key, api-key and API_KEY are one name.
_SECRET_NAME_PARTS = (
    "api_key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "authorization",
    "private_key",
    "credential",
    "signature",
    "cookie",
)
_SECRET_NAMES = frozenset({"key", "sig", "pwd", "auth"})
# Environment variables whose values are secrets; shorter values would redact ordinary words.
# The ssh child gets none of them, whatever their length (gpuops/providers/ssh.py).
_ENV_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_ENV_SECRET_MIN_CHARS = 8
# Variables that name a file rather than hold a secret (the SSH public key's path, Google's
# service-account key file): their values are paths a person must see in "cannot read the SSH
# public key PATH", and the file's content is never logged. Still kept from the ssh child.
_ENV_PATH_NAME = re.compile(
    r"GPUOPS_SSH_KEY|GOOGLE_APPLICATION_CREDENTIALS|\w*_(?:FILE|PATH|DIR)", re.IGNORECASE
)
# Not a value but a stand-in for one: `api_key=...`, `api_key=…`, `password: ***`,
# `--api-key $VAST_API_KEY` (the log holds the reference, never its expansion), with any
# closing punctuation of the sentence around it.
_PLACEHOLDER = re.compile(r"""(?:\.\.\.|…|\*{3,}|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)[.,:;!?)\]}]*""")
# Words of an instruction, which read as a value after `API key:` in a hint such as
# "no API key: pass api_key=..., set VAST_API_KEY". A closed set of lower-case words: a real
# credential is never one of them.
_HINT_WORDS = frozenset(
    {"pass", "set", "export", "use", "see", "run", "write", "missing", "none", "unset", "not"}
)
# A PEM private key, or what is left of one: no END line means everything to the end goes.
_PEM = re.compile(
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY[ A-Z]*-----.*?"
    r"(?:-----END[ A-Z0-9]*PRIVATE KEY[ A-Z]*-----|\Z)",
    re.DOTALL,
)
# `name=value`, `name: value`, `"name": "value"`, `\"name\": \"value\"`; the name is judged
# in code, so a non-secret pair (https://...) never swallows a secret pair after it.
_PAIR = re.compile(r"""(?<![\w.\-])(?P<name>[\w.\-]++)(?:\\?["'])?[ \t]*[:=][ \t]*""")
_VALUE = re.compile(
    r""""(?:\\.|[^"\\])*(?:"|\Z)|'(?:\\.|[^'\\])*(?:'|\Z)|\\"(?:(?!\\").)*(?:\\"|\Z)"""
    r"""|[^\s&"'<>,;]+""",
    re.DOTALL,
)
# A password inside a URL: scheme://user:password@host
# (the lookbehind lets a match start only at a word's start: linear on long runs of letters)
_URL_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.-])(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,31}://[^/\s:@]{1,256}:)[^/\s@]{1,256}(?=@)"
)
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token"})
# A credential never holds a backslash: one is the escape of a JSON-quoted value's closing
# quote, which a redaction must leave in place (the body stays JSON).
_SCHEME_CREDENTIAL = re.compile(r"""(?P<space>\s+)[^\s"'<>,;&\\]+""")
_BEARER = re.compile(r"\b(?P<scheme>(?i:bearer))(?P<space>\s+)(?P<token>[A-Za-z0-9\-._~+/]+=*)")
# Self-identifying tokens. Unanchored on purpose: text glued to a key must not hide it.
_TOKENS = re.compile(
    r"(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
    r"|ya29\.[0-9A-Za-z_\-.]+"  # Google OAuth access token
    r"|[0-9a-f]{64,}"  # Vast.ai API key: 64 lowercase hex
)


def is_secret_name(name: str) -> bool:
    """True when a value stored under ``name`` must be treated as a secret."""
    normal = name.lower().replace("-", "_")
    return normal in _SECRET_NAMES or any(part in normal for part in _SECRET_NAME_PARTS)


def is_secret_env_name(name: str) -> bool:
    """True when an environment variable named ``name`` holds a secret (VAST_API_KEY, ...)."""
    return _ENV_SECRET_NAME.search(name) is not None


def is_placeholder(value: str) -> bool:
    """True when ``value``, read where a secret would stand, is a stand-in or a hint's word."""
    return value in _HINT_WORDS or _PLACEHOLDER.fullmatch(value) is not None


def env_secrets(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Values of secret-named environment variables, longest first (so none is half-replaced)."""
    environ = os.environ if environ is None else environ
    found = {
        value
        for name, value in environ.items()
        if is_secret_env_name(name)
        and len(value) >= _ENV_SECRET_MIN_CHARS
        and not _ENV_PATH_NAME.fullmatch(name)
    }
    return tuple(sorted(found, key=lambda value: (-len(value), value)))


# Secret values this process holds outside its environment: the config file's (settings.py's
# read_config), redacted exactly as they would be had they come from the environment.
_REMEMBERED: set[str] = set()


def remember(values: Mapping[str, str]) -> None:
    """From now on, redact the secrets among ``values`` (variable name -> value, as an
    environment holds them) as if they were in this process's environment."""
    _REMEMBERED.update(env_secrets(values))


def _known_secrets() -> tuple[str, ...]:
    found = env_secrets()
    if not _REMEMBERED:
        return found
    return tuple(sorted({*found, *_REMEMBERED}, key=lambda value: (-len(value), value)))


def scrub(value: object) -> object:
    """A copy of ``value`` with every secret replaced by REDACTED (rule H3).

    Walks mappings (returned as dicts), lists, tuples and strings; other values come back
    unchanged. Reads the environment once per call for secret values (and the config file's,
    ``remember``); otherwise pure.
    """
    return _scrub(value, _known_secrets())


def scrub_text(text: str) -> str:
    """``text`` with every secret replaced by REDACTED (rule H3); see ``scrub``."""
    return _scrub_text(text, _known_secrets())


def _scrub(value: object, secrets: tuple[str, ...]) -> object:
    if isinstance(value, str):
        return _scrub_text(value, secrets)
    if isinstance(value, Mapping):
        return {_scrub(k, secrets): _scrub_entry(k, v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [_scrub_item(value, i, secrets) for i in range(len(value))]
        return tuple(items) if isinstance(value, tuple) else items
    return value


def _scrub_item(
    items: list[object] | tuple[object, ...], i: int, secrets: tuple[str, ...]
) -> object:
    """An item is a value under a name when it follows a secret name in a pair
    (``("X-Api-Key", v)``) or a secret-named flag in an argv (``[..., "--api-key", v]``)."""
    name = items[i - 1] if i else None
    if isinstance(name, str) and (len(items) == 2 or name.startswith("-")):
        return _scrub_entry(name, items[i], secrets)
    return _scrub(items[i], secrets)


def _scrub_entry(name: object, value: object, secrets: tuple[str, ...]) -> object:
    """A value under a secret name goes whole; None and "" stay, there is nothing to hide."""
    nothing = value is None or (isinstance(value, str) and not value)
    if isinstance(name, str) and is_secret_name(name) and not nothing:
        return REDACTED
    return _scrub(value, secrets)


def _scrub_text(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:  # exact values first, before any pattern can split one
        text = text.replace(secret, REDACTED)
    text = _PEM.sub(REDACTED_PRIVATE_KEY, text)
    text = _URL_USERINFO.sub(lambda m: m["head"] + REDACTED, text)
    text = _redact_pairs(text)
    text = _BEARER.sub(_bearer_redaction, text)
    return _TOKENS.sub(REDACTED, text)


def _bearer_redaction(bearer: re.Match[str]) -> str:
    if is_placeholder(bearer["token"]):  # "Authorization: Bearer ..." in a hint
        return bearer.group()
    return bearer["scheme"] + bearer["space"] + REDACTED


def _redact_pairs(text: str) -> str:
    out: list[str] = []
    done = search_at = 0
    while (pair := _PAIR.search(text, search_at)) is not None:
        search_at = pair.end()
        value = _VALUE.match(text, pair.end()) if is_secret_name(pair["name"]) else None
        if value is None or _kept(value.group()):
            continue
        if value.group().lower() in _AUTH_SCHEMES:  # "Authorization: Basic <credential>"
            value = _SCHEME_CREDENTIAL.match(text, value.end())
            if value is None or is_placeholder(value.group().lstrip()):
                continue
            out += [text[done : value.start()], value["space"], REDACTED]
        else:
            out += [text[done : value.start()], _quoted_redaction(value.group())]
        done = search_at = value.end()
    return "".join(out) + text[done:]


def _kept(value: str) -> bool:
    """A value already redacted, or a placeholder (quoted or not), stays as it is."""
    bare = value.strip("\\\"'")
    return bare.startswith("[REDACTED") or is_placeholder(bare)


def _quoted_redaction(value: str) -> str:
    for quote in ('\\"', '"', "'"):
        if value.startswith(quote):
            return quote + REDACTED + quote
    return REDACTED
