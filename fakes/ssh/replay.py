"""The ssh recordings (recordings/ssh/*.yaml) and how the fake re-addresses them to a box.

One recording is one raw output with its own provenance: OpenSSH's own failure (``step:
connect``) or one probe step's output (``gpu``, ``cuda``, ``disk``). The parser tests read the
same files through :func:`load`, so the fake and the parser can never disagree on a format.
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDINGS = Path(__file__).resolve().parents[2] / "recordings" / "ssh"
KINDS = frozenset({"public", "reconstructed", "captured"})
STEPS = ("connect", "gpu", "cuda", "disk")


class FakeSshError(Exception):
    """The fake was set up wrongly (a bad table, an unknown box or recording): fail loudly."""


@dataclass(frozen=True)
class Recording:
    name: str
    kind: str
    step: str
    expect: str
    exit_code: int
    stdout: str
    stderr: str
    host: str | None = None
    port: int | None = None
    user: str | None = None
    known_hosts: str | None = None


def _loader(yaml: Any) -> Any:
    """libyaml's safe loader when built in (the fake runs once per ssh call), else PyYAML's."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def names() -> list[str]:
    """Every ssh recording, by name, sorted."""
    return sorted(path.stem for path in RECORDINGS.glob("*.yaml"))


@functools.cache
def load(name: str) -> Recording:
    """``recordings/ssh/<name>.yaml``; anything malformed or without provenance is an error."""
    import yaml

    path = RECORDINGS / f"{name}.yaml"
    if not path.is_file():
        raise FakeSshError(f"no recording {name!r}; known: {', '.join(names())}")
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader(yaml))
    prov = doc.get("provenance") if isinstance(doc, dict) else None
    if not isinstance(prov, dict) or prov.get("kind") not in KINDS:
        raise FakeSshError(f"{path}: provenance.kind must be one of {sorted(KINDS)}")
    if not isinstance(prov.get("date"), datetime.date) or not prov.get("source"):
        raise FakeSshError(f"{path}: provenance needs a source and a date (YYYY-MM-DD)")
    if doc.get("step") not in STEPS or not isinstance(doc.get("exit_code"), int):
        raise FakeSshError(f"{path}: step must be one of {STEPS} and exit_code an integer")
    if not all(isinstance(doc.get(k), str) for k in ("stdout", "stderr", "expect")):
        raise FakeSshError(f"{path}: stdout, stderr and expect must be text")
    endpoint = doc.get("endpoint") or {}
    return Recording(
        name=name,
        kind=prov["kind"],
        step=doc["step"],
        expect=doc["expect"],
        exit_code=doc["exit_code"],
        stdout=doc["stdout"],
        stderr=doc["stderr"],
        host=endpoint.get("host"),
        port=endpoint.get("port"),
        user=endpoint.get("user"),
        known_hosts=doc.get("known_hosts"),
    )


def host_pattern(host: str, port: int) -> str:
    """How OpenSSH names an endpoint in known_hosts and in its messages."""
    return host if port == 22 else f"[{host}]:{port}"


def readdress(
    text: str, rec: Recording, *, host: str, port: int, user: str, known_hosts: str | None
) -> str:
    """The recorded text as the box at ``host:port`` would print it.

    Only whole recorded forms are replaced (``[H]:P``, ``H port P``, ``U@H:``, ``to H closed``,
    ``hostname H:``, the known_hosts path), never a bare substring of the text.
    """
    if rec.host is None or rec.port is None:
        return text
    pairs = [
        (f"[{rec.host}]:{rec.port}", host_pattern(host, port)),
        (f"{rec.host} port {rec.port}", f"{host} port {port}"),
        (f"{rec.user}@{rec.host}:", f"{user}@{host}:"),
        (f"Connection to {rec.host} closed", f"Connection to {host} closed"),
        (f"hostname {rec.host}:", f"hostname {host}:"),
    ]
    if rec.known_hosts and known_hosts:
        pairs.append((rec.known_hosts, known_hosts))
    for old, new in pairs:
        text = text.replace(old, new)
    return text
