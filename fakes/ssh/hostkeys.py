"""Host-key pinning as OpenSSH does it, for the fake: each fake box has an ED25519 key, the
client's UserKnownHostsFile pins it on first contact (accept-new) and a different key later is
refused with OpenSSH's own block (recordings/ssh/openssh-host-key-changed.yaml).

Keys are fake but well formed: the ``ssh-ed25519`` wire blob around 32 bytes derived from the
box's ``host_key`` seed, and fingerprints are OpenSSH's ``SHA256:`` form. Hashed known_hosts
entries (``|1|salt|hmac``, Debian's default) are read as well as plain ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
from dataclasses import dataclass
from pathlib import Path


def _wire(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def public_key(seed: str) -> str:
    """The base64 ``ssh-ed25519`` public key of a fake box with this seed."""
    point = hashlib.sha256(f"gpuops-fake-host-key:{seed}".encode()).digest()
    return base64.b64encode(_wire(b"ssh-ed25519") + _wire(point)).decode()


def fingerprint(key_b64: str) -> str:
    """OpenSSH's SHA256 fingerprint of a base64 public key."""
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _matches(field: str, pattern: str) -> bool:
    if field.startswith("|1|"):
        try:
            salt, want = (base64.b64decode(part) for part in field[3:].split("|", 1))
        except ValueError:
            return False
        return hmac.compare_digest(hmac.new(salt, pattern.encode(), "sha1").digest(), want)
    return pattern in field.split(",")


@dataclass(frozen=True)
class Pinned:
    line: int
    key_type: str
    key: str


def pinned(path: Path, pattern: str) -> list[Pinned]:
    """The entries for ``pattern`` in a known_hosts file (none if the file is absent)."""
    if str(path) == "/dev/null" or not path.is_file():
        return []
    found = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and _matches(fields[0], pattern):
            found.append(Pinned(number, fields[1], fields[2]))
    return found


def pin(path: Path, pattern: str, key_b64: str) -> None:
    """Append the entry accept-new writes (never to /dev/null)."""
    if str(path) == "/dev/null":
        return
    with path.open("a") as handle:
        handle.write(f"{pattern} ssh-ed25519 {key_b64}\n")
