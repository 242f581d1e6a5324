#!/usr/bin/env python3
"""The fake ssh client: takes OpenSSH's argv, finds the fake box at host:port in the box table,
and replays recordings/ssh/ for it, in the order a real connection fails: connect, host key,
authentication, then the remote command (fakes/ssh/README.md).

Loud by design: an unknown box, fate or option form prints ``fake-ssh: ...`` and exits 255, which
the probe judges UNKNOWN with that line as its detail. It never reads your real known_hosts.
"""

from __future__ import annotations

import getopt
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fakes.ssh import boxes, hostkeys, replay, sandbox  # noqa: E402
from fakes.ssh.replay import FakeSshError, Recording  # noqa: E402
from gpuops.market.probe import PROBE_STEPS  # noqa: E402

# OpenSSH 9.2's own getopt string (ssh.c): which options take an argument.
OPTSTRING = "1246ab:c:e:fgi:kl:m:no:p:qstvxAB:CD:E:F:GI:J:KL:MNO:P:Q:R:S:TVw:W:XYy"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_CUDA_DEVICES = re.compile(r"devices=\d+")
# How often a command in flight looks whether its box is still there (the stamps of the table
# and of the box's own entry first, so a look costs two stats): a destroyed box cuts the
# connection within this much wall time.
CUT_POLL_S = 0.05
# What OpenSSH prints when the remote end goes away under a running command (captured).
REMOTE_CLOSED = "openssh-remote-closed"


@dataclass
class Invocation:
    host: str
    port: int
    user: str
    command: str
    options: dict[str, str] = field(default_factory=dict)  # -o, keys lower-cased, first wins
    identities: list[str] = field(default_factory=list)
    config: str | None = None  # -F FILE: resolved by OpenSSH itself (``configured``)


def parse(argv: list[str]) -> Invocation:
    try:
        opts, rest = getopt.getopt(argv, OPTSTRING)
    except getopt.GetoptError as exc:
        raise FakeSshError(f"bad ssh arguments: {exc}") from exc
    if not rest:
        raise FakeSshError("no destination given")
    options: dict[str, str] = {}
    identities, port, user, config = [], 22, None, None
    for flag, value in opts:
        if flag == "-F":
            config = value
        elif flag == "-o":
            name, _, setting = value.replace("=", " ", 1).partition(" ")
            options.setdefault(name.lower(), setting.strip())
        elif flag == "-p":
            port = int(value)
        elif flag == "-i":
            identities.append(value)
        elif flag == "-l":
            user = value
    destination = rest[0]
    if destination.startswith("ssh://"):
        raise FakeSshError("ssh:// destinations are not modelled")
    login, _, host = destination.rpartition("@")
    command = " ".join(rest[1:])
    if not command:
        raise FakeSshError("interactive sessions are not modelled; give a command")
    call = Invocation(host, port, login or user or "root", command, options, identities, config)
    return call if config is None else configured(call, argv)


def configured(call: Invocation, argv: list[str]) -> Invocation:
    """The call as OpenSSH itself reads it with ``-F FILE``: the real ``ssh -G`` (which only
    prints the configuration it would use, and connects nowhere) resolves the destination's
    ``Host`` stanza, the command line first, as OpenSSH orders them; the fake then goes where
    that says (HostName, Port, User, IdentityFile, UserKnownHostsFile and every other option).
    Default identities (``~/.ssh/id_*``, listed when the file names none) are not offered, and
    a known_hosts file the stanza does not name is refused as without ``-F``."""
    resolved = _openssh_config(argv)
    defaults = _openssh_config(["-F", "none", "--", "localhost"])
    options = {k: v[0] for k, v in resolved.items()}
    if resolved.get("userknownhostsfile") == defaults.get("userknownhostsfile"):
        options.pop("userknownhostsfile", None)  # not named: the user's own known_hosts
    elif " " in options.get("userknownhostsfile", ""):
        raise FakeSshError("several UserKnownHostsFile files are not modelled; name one")
    identities = [i for i in resolved.get("identityfile", []) if not i.startswith("~")]
    return Invocation(
        options.get("hostname", call.host),
        int(options.get("port", call.port)),
        options.get("user", call.user),
        call.command,
        options,
        identities,
        call.config,
    )


def _openssh_config(argv: list[str]) -> dict[str, list[str]]:
    """``ssh -G ARGV``'s answer: each keyword (lower-case) with its values in order."""
    openssh = shutil.which("ssh")
    if openssh is None:
        raise FakeSshError("-F needs the real OpenSSH client (ssh -G reads the file); none on PATH")
    done = subprocess.run(
        [openssh, "-G", *argv], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise FakeSshError(f"ssh -G refused the configuration: {done.stderr.strip()}")
    found: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        found.setdefault(key.lower(), []).append(value.strip())
    return found


def _emit(stdout: str, stderr: str) -> None:
    sys.stdout.buffer.write(stdout.encode())
    sys.stderr.buffer.write(stderr.encode())
    sys.stdout.flush()
    sys.stderr.flush()


def _replay(rec: Recording, call: Invocation, box: boxes.Box, known_hosts: str) -> int:
    def addressed(text: str) -> str:
        return replay.readdress(
            text, rec, host=call.host, port=call.port, user=call.user, known_hosts=known_hosts
        )

    stdout, stderr = addressed(rec.stdout), addressed(rec.stderr)
    if box.gpu is not None and rec.step == "gpu" and rec.expect in ("pass", "low-vram"):
        stdout = box.gpu.csv()
    if box.gpu is not None and rec.step == "cuda" and rec.expect == "pass":
        stdout = _CUDA_DEVICES.sub(f"devices={box.gpu.count}", stdout)
    _emit(stdout, stderr)
    return rec.exit_code


def _presented_seed(box: boxes.Box, state: boxes.TableState) -> str:
    """The seed of the host key this connection sees: a box with ``rekey`` shows its first key
    to ``after_connections`` connections (counted per endpoint), then the other one."""
    if box.rekey is None:
        return box.host_key
    seen = state.attempt(f"{box.key}#host-key")
    return box.host_key if seen <= box.rekey.after_connections else box.rekey.host_key


def _host_key_refusal(call: Invocation, box: boxes.Box, known_hosts: Path, seed: str) -> int | None:
    """accept-new: pin an unknown key, refuse a changed one with OpenSSH's own block."""
    pattern = replay.host_pattern(call.host, call.port)
    key = hostkeys.public_key(seed)
    entries = hostkeys.pinned(known_hosts, pattern)
    if any(e.key_type == "ssh-ed25519" and e.key == key for e in entries):
        return None
    strict = call.options.get("stricthostkeychecking", "ask").lower()
    if entries:
        rec = replay.load("openssh-host-key-changed")
        old_fp = re.search(r"SHA256:[A-Za-z0-9+/]+", rec.stderr)
        text = replay.readdress(
            rec.stderr, rec, host=call.host, port=call.port, user=call.user,
            known_hosts=str(known_hosts),
        )  # fmt: skip
        text = text.replace(f"{known_hosts}:1", f"{known_hosts}:{entries[0].line}")
        if old_fp:
            text = text.replace(old_fp[0], hostkeys.fingerprint(key))
        _emit("", text)
        return rec.exit_code
    if strict in ("accept-new", "no", "off"):
        hostkeys.pin(known_hosts, pattern, key)
        return None
    rec = replay.load("openssh-host-key-unknown-strict")
    return _replay(rec, call, box, str(known_hosts))


def run(argv: list[str], environ: dict[str, str]) -> int:
    call = parse(argv)
    table_path = environ.get(boxes.TABLE_ENV)
    if not table_path:
        raise FakeSshError(f"{boxes.TABLE_ENV} is not set: it names the box table")
    state = boxes.TableState(Path(table_path))
    box = boxes.load_box(Path(table_path), f"{call.host}:{call.port}")
    state.log(
        {
            "argv": argv,
            "box": f"{call.host}:{call.port}",
            "secret_env": sorted(k for k in environ if _SECRET_NAME.search(k)),
        }
    )
    if box is None:
        listed = ", ".join(boxes.load_table(Path(table_path)))
        raise FakeSshError(f"no box at {call.host}:{call.port}; known: {listed}")
    known = call.options.get("userknownhostsfile")
    if not known:
        raise FakeSshError("refusing to use your real known_hosts: pass -o UserKnownHostsFile=")
    connect = replay.load(box.recordings["connect"]) if "connect" in box.recordings else None
    if connect is not None and connect.expect not in ("ssh-host-key-changed", "ssh-auth"):
        return _replay(connect, call, box, known)  # the connection never got to the host key
    refused = _host_key_refusal(call, box, Path(known), _presented_seed(box, state))
    if refused is not None:
        return refused
    if connect is not None and connect.expect == "ssh-host-key-changed":
        return _replay(connect, call, box, known)
    if box.authorized_keys is not None and not set(_offered(call)) & set(box.authorized_keys):
        # sshd holds none of the keys offered: what OpenSSH prints then (captured).
        return _replay(replay.load(boxes.FATES["ssh-auth"]["connect"]), call, box, known)
    if connect is not None and connect.expect == "ssh-auth":
        attempt = state.attempt(box.key)  # ssh-auth-transient:N refuses attempts 1..N only
        if box.transient_failures == 0 or attempt <= box.transient_failures:
            return _replay(connect, call, box, known)
    watch = _Watch(Path(table_path), box)
    if box.hang:  # a box that accepted the command and never answers, until it goes away
        return watch.wait(None, call, known)
    step = next((name for name, command in PROBE_STEPS if command == call.command), None)
    if step is None:  # anything else runs for real in the box's sandbox (sandbox.py)
        if watch.cut():  # destroyed since the table was read: nothing to run it on
            return _remote_closed(call, box, known)
        proc = sandbox.start(sandbox.sandbox_dir(Path(table_path), box.sandbox), call.command)
        return watch.wait(proc, call, known)
    return _replay(replay.load(box.recordings[step]), call, box, known)


def _offered(call: Invocation) -> list[str]:
    """The public keys this call offers: each ``-i`` identity's ``.pub`` half, where both the
    identity and its ``.pub`` exist (gpuops passes IdentitiesOnly=yes, so nothing else is
    offered). The fake never reads a private key; an identity without a ``.pub`` beside it is
    a loud error, not a key it could derive."""
    keys = []
    for identity in call.identities:
        private, public = Path(identity), Path(identity + ".pub")
        if not private.exists():
            continue  # OpenSSH: "Identity file ... not accessible"; nothing offered
        try:
            line = public.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise FakeSshError(
                f"identity {identity} has no {public.name} beside it: the fake reads only the "
                "public half"
            ) from None
        keys.append(boxes.key_id(line))
    return keys


class _Watch:
    """Whether the box a command runs on is still there: gone from the table, unreachable
    (destroyed, died) or holding another sandbox, and the connection is cut."""

    def __init__(self, table: Path, box: boxes.Box) -> None:
        self.table, self.box = table, box
        self._seen = self._stamp()

    def _stamp(self) -> tuple[object, ...]:
        return boxes.box_stamp(self.table, self.box.key)

    def cut(self) -> bool:
        stamp = self._stamp()
        if stamp == self._seen:
            return False
        self._seen = stamp
        try:
            now = boxes.load_box(self.table, self.box.key)
        except FakeSshError:
            return True  # the table itself went away: so did the box
        return now is None or now.gone or now.sandbox != self.box.sandbox

    def wait(self, proc: subprocess.Popen[bytes] | None, call: Invocation, known: str) -> int:
        """The command's exit code, or OpenSSH's remote-closed ending once the box goes."""
        while True:
            if proc is not None:
                try:
                    return proc.wait(timeout=CUT_POLL_S)
                except subprocess.TimeoutExpired:
                    pass
            else:
                time.sleep(CUT_POLL_S)
            if self.cut():
                if proc is not None:
                    sandbox.kill(proc)
                return _remote_closed(call, self.box, known)


def _remote_closed(call: Invocation, box: boxes.Box, known: str) -> int:
    """The box went away under the command: what OpenSSH prints then, and its exit 255."""
    return _replay(replay.load(REMOTE_CLOSED), call, box, known)


def main() -> int:
    try:
        return run(sys.argv[1:], dict(os.environ))
    except FakeSshError as exc:
        _emit("", f"fake-ssh: {exc}\r\n")
        return 255


if __name__ == "__main__":
    sys.exit(main())
