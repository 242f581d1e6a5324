"""The fake boxes: the box table (``$GPUOPS_FAKE_SSH_BOXES``), each box's fate, and the state
kept beside the table (attempt counters, the call log). Format: fakes/ssh/README.md.
"""

from __future__ import annotations

import fcntl
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fakes.ssh.replay import FakeSshError, _loader

TABLE_ENV = "GPUOPS_FAKE_SSH_BOXES"

# A healthy box answers every probe step with these recordings; a fate replaces some of them.
HEALTHY = {"gpu": "nvidia-smi-h100x8", "cuda": "cuda-check-ok", "disk": "dd-1gib-fast"}
FATES = {
    "healthy": {},
    "ssh-auth": {"connect": "openssh-auth-publickey"},
    "unreachable": {"connect": "openssh-connect-timed-out"},
    "host-key-changed": {"connect": "openssh-host-key-changed"},
    "no-gpu": {"gpu": "nvidia-smi-driver-unreachable"},
    "low-vram": {"gpu": "nvidia-smi-rtx4090"},
    "cuda-broken": {"cuda": "cuda-check-no-device"},
    "slow-disk": {"disk": "dd-1gib-overlay-disk"},
}
_TRANSIENT = re.compile(r"ssh-auth-transient:(\d+)")
_REPLAY = re.compile(r"replay:([A-Za-z0-9_.-]+)")


@dataclass(frozen=True)
class Gpu:
    """What the box's nvidia-smi lists, rendered in the recorded CSV format (C.2)."""

    name: str
    vram_mb: int
    driver: str = "550.90.07"
    count: int = 1

    def csv(self) -> str:
        return f"{self.name}, {self.vram_mb}, {self.driver}\n" * self.count


@dataclass(frozen=True)
class Rekey:
    """The box's host key changes to ``host_key``'s once ``after_connections`` connections to
    this endpoint have seen its first key (a rebuilt box, or a man in the middle)."""

    after_connections: int
    host_key: str


@dataclass(frozen=True)
class Box:
    host: str
    port: int
    fate: str
    gpu: Gpu | None = None
    host_key: str = ""
    recordings: dict[str, str] = field(default_factory=dict)
    transient_failures: int = 0
    hang: bool = False
    sandbox: str = ""  # the seed of its sandbox directory (default: the host key seed)
    rekey: Rekey | None = None
    # The public keys the box lets in ("type base64", no comment); None: any key (a table
    # that does not say, as hand-written ones in tests).
    authorized_keys: tuple[str, ...] | None = None

    @property
    def key(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def gone(self) -> bool:
        """Nothing answers at this endpoint: a connection in flight is cut (fake_ssh.py)."""
        return self.fate == "unreachable"


def _fate(fate: str) -> tuple[dict[str, str], int, bool]:
    """(recordings by step, transient auth failures, hang) for a fate name."""
    if fate in FATES:
        return {**HEALTHY, **FATES[fate]}, 0, False
    if m := _TRANSIENT.fullmatch(fate):
        return {**HEALTHY, "connect": FATES["ssh-auth"]["connect"]}, int(m[1]), False
    if fate == "hang":
        return dict(HEALTHY), 0, True
    if m := _REPLAY.fullmatch(fate):
        from fakes.ssh.replay import load

        return {**HEALTHY, load(m[1]).step: m[1]}, 0, False
    known = [*FATES, "ssh-auth-transient:N", "hang", "replay:RECORDING"]
    raise FakeSshError(f"unknown fate {fate!r}; known: {', '.join(known)}")


def _box(key: str, spec: object) -> Box:
    host, _, port = key.rpartition(":")
    if not host or not port.isdigit():
        raise FakeSshError(f"box {key!r}: keys are 'host:port'")
    spec = {"fate": spec} if isinstance(spec, str) else spec
    if not isinstance(spec, dict) or not isinstance(spec.get("fate"), str):
        raise FakeSshError(f"box {key!r}: give a fate, or a mapping with 'fate'")
    unknown = set(spec) - {"fate", "gpu", "host_key", "sandbox", "rekey", "authorized_keys"}
    if unknown:
        raise FakeSshError(f"box {key!r}: unknown fields {sorted(unknown)}")
    gpu = spec.get("gpu")
    try:
        parsed = Gpu(**gpu) if gpu is not None else None
    except TypeError as exc:
        raise FakeSshError(f"box {key!r}: gpu takes name, vram_mb, driver, count: {exc}") from exc
    recordings, transient, hang = _fate(spec["fate"])
    seed = str(spec.get("host_key", key))
    rekey = spec.get("rekey")
    if rekey is not None:
        after = rekey.get("after_connections") if isinstance(rekey, dict) else None
        if set(rekey) != {"after_connections", "host_key"} or not isinstance(after, int):
            raise FakeSshError(f"box {key!r}: rekey takes after_connections (int) and host_key")
        rekey = Rekey(after, str(rekey["host_key"]))
    sandbox = str(spec.get("sandbox", seed))
    keys = spec.get("authorized_keys")
    if keys is not None:
        if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            raise FakeSshError(f"box {key!r}: authorized_keys is a list of public key lines")
        keys = tuple(key_id(k) for k in keys)
    return Box(
        host, int(port), spec["fate"], parsed, seed, recordings, transient, hang, sandbox, rekey,
        keys,
    )  # fmt: skip


def key_id(line: str) -> str:
    """A public key line as sshd compares it: its type and base64, without the comment."""
    return " ".join(line.split()[:2])


def write_identity(private: Path, public_key: str) -> Path:
    """A client identity for the fake ssh: ``private`` (a placeholder: the fake never reads a
    private key) and ``private.pub`` holding ``public_key``; returns the ``.pub`` path."""
    private.parent.mkdir(parents=True, exist_ok=True)
    private.write_text("placeholder for the fake ssh, which reads only the .pub half\n")
    private.chmod(0o600)
    public = private.with_name(private.name + ".pub")
    public.write_text(public_key.strip() + "\n", encoding="utf-8")
    return public


def entries_dir(table: Path) -> Path:
    """The table's per-box entries (``<table>.d/<host:port>.json``), which override its own:
    FakeVast writes one box's entries there when that box changes, never the whole table."""
    return table.with_name(table.name + ".d")


def entry_path(table: Path, key: str) -> Path:
    """Where the entry of the box at ``key`` (``host:port``) is kept beside ``table``."""
    if "/" in key or key.startswith("."):
        raise FakeSshError(f"box {key!r}: keys are 'host:port'")
    return entries_dir(table) / f"{key}.json"


def _read(path: Path) -> object:
    import yaml

    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_loader(yaml))
    except (OSError, yaml.YAMLError) as exc:
        raise FakeSshError(f"cannot read the box table {path}: {exc}") from exc


def _base(path: Path) -> dict[object, object]:
    doc = _read(path)
    boxes = doc.get("boxes") if isinstance(doc, dict) else None
    if not isinstance(boxes, dict):
        raise FakeSshError(f"{path}: the box table needs a top-level 'boxes' mapping")
    return boxes


def _entry(table: Path, key: str) -> object | None:
    """The spec in ``key``'s entry file, or None when it has none."""
    path = entry_path(table, key)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FakeSshError(f"cannot read the box entry {path}: {exc}") from exc
    try:
        spec: object = json.loads(text)
    except ValueError as exc:
        raise FakeSshError(f"the box entry {path} is not JSON: {exc}") from exc
    return spec


def load_table(path: Path) -> dict[str, Box]:
    """The box table: ``{boxes: {"host:port": fate | {fate, gpu, host_key, sandbox, rekey,
    authorized_keys}}}``
    (YAML or JSON), each box overridden by its entry file, if it has one (:func:`entry_path`)."""
    specs = {str(key): spec for key, spec in _base(path).items()}
    folder = entries_dir(path)
    names = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    for name in names:
        if name.endswith(".json"):
            key = name.removesuffix(".json")
            spec = _entry(path, key)
            if spec is not None:
                specs[key] = spec
    return {box.key: box for box in (_box(key, spec) for key, spec in specs.items())}


def load_box(path: Path, key: str) -> Box | None:
    """The one box at ``key`` (None: no such box), reading only its entry and the table's own
    mapping: what one ssh call needs, whatever the number of boxes."""
    spec = _entry(path, key)
    if spec is None:
        spec = _base(path).get(key)
    return None if spec is None else _box(key, spec)


def box_stamp(path: Path, key: str) -> tuple[tuple[int, int, int] | None, ...]:
    """What changes when the box at ``key`` may have: the table's and the entry's file ids."""

    def stamp(file: Path) -> tuple[int, int, int] | None:
        try:
            st = file.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    return (stamp(path), stamp(entry_path(path, key)))


class TableState:
    """Files beside the table: ``<table>.counters.json`` and ``<table>.calls.jsonl``."""

    def __init__(self, table: Path) -> None:
        self.counters = table.with_name(table.name + ".counters.json")
        self.calls = table.with_name(table.name + ".calls.jsonl")
        self._lock = table.with_name(table.name + ".lock")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    def attempt(self, box: str) -> int:
        """Count one more connection to ``box`` that reached authentication; returns its number."""
        with self._locked():
            counts = json.loads(self.counters.read_text()) if self.counters.exists() else {}
            counts[box] = counts.get(box, 0) + 1
            self.counters.write_text(json.dumps(counts, sort_keys=True))
            return int(counts[box])

    def log(self, record: dict[str, object]) -> None:
        with self._locked(), self.calls.open("a") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    def read_calls(self) -> list[dict[str, object]]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text().splitlines()]
