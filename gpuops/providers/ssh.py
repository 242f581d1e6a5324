"""The SSH adapter: runs the real OpenSSH client against a rented box (M1, M2, H3).

Transport only. Decide, then act: :func:`ssh_argv` builds the argv (pure), :func:`run_command`
runs it (the only I/O) and returns the step's ``model.StepOutput``. What the output means is
the market's: the probe loop (``gpuops.market.probing``) runs the probe's steps through
``SshClient.run`` and market/probe.py judges them.

Security (DESIGN §4): every box gets its own known_hosts file (:func:`known_hosts_path`), so its
host key is pinned on first contact (``StrictHostKeyChecking=accept-new``) and a changed key is
refused by ssh itself; the probe reports that as SSH_HOST_KEY_CHANGED and never retries it.
Key files are keyed by box, not by ``host:port``: Vast reuses proxy host:port pairs across
instances (provider-formats C), so a shared file would refuse every innocent newcomer. The ssh
child gets an environment without API keys or tokens (H3), and nothing here logs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuops import timing
from gpuops.errors import UsageError
from gpuops.model import StepOutput
from gpuops.private import open_private, private_dirs
from gpuops.secrets import is_secret_env_name

SSH_PROGRAM_ENV = "GPUOPS_SSH"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_BOX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# ssh splits UserKnownHostsFile on whitespace and expands % and ~ in it and in -i: a path with
# any of those would silently name another file, so only plain characters are accepted.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./@+=,-]+")
# Environment names the ssh child never sees (a user's SendEnv could forward them).
_KEEP = frozenset({"SSH_AUTH_SOCK"})


@dataclass(frozen=True)
class SshEndpoint:
    """Where a box answers ssh: Vast's proxy (ssh_host, ssh_port) or its public_ipaddr and port."""

    host: str
    port: int
    user: str = "root"

    def __post_init__(self) -> None:
        # A host or user that starts with "-" would be read by ssh as an option.
        if not _HOST.fullmatch(self.host):
            raise UsageError(f"ssh host {self.host!r} is not a host name or address")
        if isinstance(self.port, bool) or not 0 < self.port < 65536:
            raise UsageError(f"ssh port {self.port!r} is not a TCP port")
        if not _USER.fullmatch(self.user):
            raise UsageError(f"ssh user {self.user!r} is not a user name")


def known_hosts_path(state_dir: Path, box_id: str) -> Path:
    """The box's own known_hosts file under the state dir, created empty (0600) if absent."""
    if not _BOX_ID.fullmatch(box_id):
        raise UsageError(f"box id {box_id!r} must be letters, digits and _.- (an instance id)")
    path = private_dirs(state_dir / "ssh" / "known_hosts") / box_id
    os.close(open_private(path, os.O_WRONLY))
    return path


def _plain(path: Path, what: str) -> str:
    text = str(path)
    if not _PLAIN_PATH.fullmatch(text) or text.startswith("-"):
        raise UsageError(f"the {what} path {text!r} holds characters ssh would reinterpret")
    return text


def box_options(known_hosts: Path, *, person: bool = False) -> list[tuple[str, str]]:
    """The OpenSSH options every connection to a box carries, as (keyword, value) in order:
    the argv's ``-o`` options and the lines of :func:`config_stanza` alike. ``person``: a
    person at a terminal (`gpuops ssh`, the printed config): a key's passphrase may be asked
    for (BatchMode=no), and the agent is never forwarded to a rented box."""
    options = [
        ("BatchMode", "no" if person else "yes"),
        ("ConnectTimeout", str(int(timing.SSH_CONNECT_TIMEOUT_S))),
        ("StrictHostKeyChecking", "accept-new"),
        ("UserKnownHostsFile", _plain(known_hosts, "known_hosts")),
        ("LogLevel", "ERROR"),
        # Only our key: agent keys tried first would use up the server's MaxAuthTries and turn
        # a good key into "Too many authentication failures".
        ("IdentitiesOnly", "yes"),
    ]
    return [*options, ("ForwardAgent", "no")] if person else options


def ssh_argv(
    endpoint: SshEndpoint,
    command: str | None,
    *,
    identity_file: Path,
    known_hosts: Path,
    program: str,
    person: bool = False,
) -> list[str]:
    """The argv that runs ``command`` on the box (None: a login shell): batch mode, pinned
    host key, bounded connect (``person``: see :func:`box_options`).
    ``program``: the ssh client (``SshClient.program``: GPUOPS_SSH, the fake in tests, or ssh)."""
    argv = [program]
    for keyword, value in box_options(known_hosts, person=person):
        argv += ["-o", f"{keyword}={value}"]
    argv += [
        "-p", str(endpoint.port),
        "-i", _plain(identity_file, "identity file"),
        "--",
        f"{endpoint.user}@{endpoint.host}",
    ]  # fmt: skip
    return argv if command is None else [*argv, command]


def config_stanza(
    alias: str, endpoint: SshEndpoint, *, identity_file: Path, known_hosts: Path
) -> str:
    """An OpenSSH config ``Host`` stanza for the box under ``alias``, with the options
    :func:`ssh_argv` gives a person (so `ssh -F FILE ALIAS`, scp and rsync connect as
    `gpuops ssh` does: our key only, the box's own pinned known_hosts). Pure."""
    if not _BOX_ID.fullmatch(alias):
        raise UsageError(f"ssh host alias {alias!r} must be letters, digits and _.-")
    lines = [
        f"Host {alias}",
        f"  HostName {endpoint.host}",
        f"  Port {endpoint.port}",
        f"  User {endpoint.user}",
        f"  IdentityFile {_plain(identity_file, 'identity file')}",
    ]
    lines += [f"  {k} {v}" for k, v in box_options(known_hosts, person=True)]
    return "\n".join(lines) + "\n"


def child_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment for ssh: the caller's, less anything named like a key or token (H3)."""
    return {k: v for k, v in environ.items() if k in _KEEP or not is_secret_env_name(k)}


@dataclass(frozen=True)
class SshClient:
    """Which ssh client runs and the environment it runs in: ``Settings.ssh()``, built once from
    the command's environment (this module reads none). ``run`` is the probe loop's ``Runner``."""

    program: str
    environ: Mapping[str, str]

    def argv(
        self,
        endpoint: SshEndpoint,
        command: str | None,
        *,
        identity_file: Path,
        known_hosts: Path,
        person: bool = False,
    ) -> list[str]:
        return ssh_argv(
            endpoint,
            command,
            identity_file=identity_file,
            known_hosts=known_hosts,
            program=self.program,
            person=person,
        )

    def run(self, argv: Sequence[str], timeout_s: float) -> StepOutput:
        return run_command(argv, timeout_s, self.environ)

    def child_env(self) -> dict[str, str]:
        return child_env(self.environ)


def spawn(
    argv: Sequence[str], environ: Mapping[str, str], started: list[Any] | None = None
) -> subprocess.Popen[bytes]:
    """Start one ssh in a session of its own (so its whole process group can be killed), in a
    scrubbed copy of ``environ``, its output piped; a missing ssh program is a usage error.

    The child is started on a helper thread, and put in ``started`` (the caller's, to kill on
    its way out) before this returns: a signal whose handler raises (a follow's Ctrl-C or
    SIGTERM) arrives on the main thread, never inside ``Popen`` between the fork and its
    return, where the child would be left running with nobody holding it. Interrupted while
    the child starts, this waits for the start, kills the child's group and reaps it, then lets
    the exception go on."""
    kept: list[Any] = [] if started is None else started
    failed: list[BaseException] = []
    done = threading.Event()  # not Thread.join: a join a signal interrupted marks it ended

    def start() -> None:
        try:
            kept.append(
                subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=child_env(environ),
                    start_new_session=True,
                )
            )
        except BaseException as exc:  # handed to the caller's thread below
            failed.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=start, name="ssh-spawn", daemon=True)
    try:
        worker.start()  # it may be interrupted here already: the thread runs at once
        done.wait()
    except BaseException:  # interrupted while it started: the child is never left behind
        if worker.ident is not None:
            done.wait()
        for child in kept:
            end_group(child)
        raise
    if failed:
        if isinstance(failed[0], FileNotFoundError):
            raise UsageError(
                f"the ssh program {argv[0]!r} was not found (set {SSH_PROGRAM_ENV})"
            ) from failed[0]
        raise failed[0]
    started_proc: subprocess.Popen[bytes] = kept[-1]
    return started_proc


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a spawned ssh's whole process group and reap it (never a group whose leader was
    reaped already: its id may have been reused)."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timing.GUARD_STOP_WAIT_S)


def run_command(argv: Sequence[str], timeout_s: float, environ: Mapping[str, str]) -> StepOutput:
    """Run one ssh command in (a scrubbed copy of) ``environ``; a timeout kills its whole
    process group and is reported, not raised."""
    proc = spawn(argv, environ)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return StepOutput(None, _text(out), _text(err), timed_out=True)
    return StepOutput(proc.returncode, _text(out), _text(err))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")
