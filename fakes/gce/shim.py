"""The fake VM's own programs: curl, gsutil, gcloud, poweroff, shutdown, sleep and df.

A FakeGCE boot runs the installed startup script under real ``bash`` in a sandbox whose
``bin/`` puts these first on PATH (fakes/gce/boot.py); ``python3`` and everything else are
the real ones. Each shim talks to the FakeGCE server on loopback (``GPUOPS_FAKE_GCE``):

- ``curl`` reaches the metadata server (``metadata.google.internal``) and the storage JSON API
  (``storage.googleapis.com``) on the fake; any other host fails as an unreachable one does.
- ``gsutil cp|cat`` and ``gcloud storage cp|cat`` read and write the fake bucket.
- ``poweroff`` and ``shutdown -h|-P now`` power the fake VM off (STOPPING, then TERMINATED).
- ``sleep`` sleeps on the fake's clock (a test's FakeClock, or the loopback scaled clock).
- ``df --output=avail -BG PATH`` reports the scenario's free disk; any other df is the real one.

Run with ``python3 -S`` (stdlib only, fast start). Anything a shim does not model is a loud
non-zero exit naming it, never a silent success.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse
from pathlib import Path

BASE = os.environ.get("GPUOPS_FAKE_GCE", "")
BOOT = os.environ.get("GPUOPS_FAKE_BOOT", "0")
HOSTS = ("metadata.google.internal", "169.254.169.254", "storage.googleapis.com")
# A shim's own HTTP call to the fake: generous, since a loaded test host can be slow.
CALL_TIMEOUT = 60.0


def _say(text: str) -> None:
    sys.stderr.write(text.rstrip("\n") + "\n")


def _http(
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float | None = CALL_TIMEOUT,
) -> tuple[int, bytes]:
    """One HTTP/1.1 exchange with the fake over a plain socket (http.client costs a shim
    a tenth of a second to import; there are many shim calls per boot)."""
    where = urllib.parse.urlsplit(BASE)
    data = body or b""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {where.netloc}",
        f"Content-Length: {len(data)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    with socket.create_connection((where.hostname, where.port), timeout=timeout) as conn:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
        chunks = []
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    raw = b"".join(chunks)
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = None
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return status, rest if length is None else rest[:length]


def curl(args: list[str]) -> int:
    method, headers, data, url, fail, out = "GET", {}, None, None, False, None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-H", "--header"):
            name, _, value = args[i + 1].partition(":")
            headers[name.strip()] = value.strip()
            i += 2
            continue
        if a in ("-X", "--request"):
            method = args[i + 1]
            i += 2
            continue
        if a in ("--data-binary", "-d", "--data"):
            value = args[i + 1]
            data = Path(value[1:]).read_bytes() if value.startswith("@") else value.encode()
            method = "POST" if method == "GET" else method
            i += 2
            continue
        if a in ("-o", "--output"):
            out = args[i + 1]
            i += 2
            continue
        if a.startswith("-") and not a.startswith("--"):
            fail = fail or "f" in a
            i += 1
            continue
        if a in ("--fail", "--silent", "--show-error", "--retry-connrefused"):
            fail = fail or a == "--fail"
            i += 1
            continue
        if a.startswith("-"):
            _say(f"fake curl: option {a} is not modelled")
            return 2
        url = a
        i += 1
    if url is None:
        _say("curl: no URL specified")
        return 2
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in HOSTS:
        _say(f"curl: (6) Could not resolve host: {parts.hostname} (the fake VM reaches only GCE)")
        return 6
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    status, body = _http(method, path, data, headers)
    if fail and status >= 400:
        _say(f"curl: (22) The requested URL returned error: {status}")
        return 22
    if out:
        with open(out, "wb") as f:
            f.write(body)
    else:
        sys.stdout.buffer.write(body)
    return 0


def _gs(url: str) -> tuple[str, str] | None:
    if not url.startswith("gs://"):
        return None
    bucket, _, name = url[5:].partition("/")
    return bucket, name


def _download(bucket: str, name: str) -> bytes | None:
    quoted = urllib.parse.quote(name, safe="")
    status, body = _http("GET", f"/download/storage/v1/b/{bucket}/o/{quoted}?alt=media")
    return body if status == 200 else None


def _copy(tool: str, src: str, dst: str) -> int:
    source, target = _gs(src), _gs(dst)
    if source is None and target is not None:
        try:
            data = Path(src).read_bytes()
        except OSError as exc:
            _say(f"CommandException: {exc}")
            return 1
        bucket, name = target
        if name.endswith("/") or not name:
            name += os.path.basename(src)
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        status, _ = _http("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data)
        if status != 200:
            _say(f"{tool}: upload of {dst} failed with HTTP {status}")
            return 1
        return 0
    if source is not None and target is None:
        got = _download(*source)
        if got is None:
            _say(f"CommandException: No URLs matched: {src}")
            return 1
        if os.path.isdir(dst) or dst.endswith("/"):
            dst = os.path.join(dst, os.path.basename(source[1]))
        with open(dst, "wb") as f:
            f.write(got)
        return 0
    _say(f"fake {tool}: cp {src} {dst} is not modelled (one side must be gs://)")
    return 1


def _storage(tool: str, args: list[str]) -> int:
    words = [a for a in args if a not in ("-q", "-m", "--quiet", "--no-clobber", "-n")]
    if len(words) == 3 and words[0] == "cp":
        return _copy(tool, words[1], words[2])
    if len(words) == 2 and words[0] == "cat" and _gs(words[1]):
        got = _download(*_gs(words[1]))  # type: ignore[misc]
        if got is None:
            _say(f"CommandException: No URLs matched: {words[1]}")
            return 1
        sys.stdout.buffer.write(got)
        return 0
    _say(f"fake {tool}: {' '.join(args)} is not modelled (cp and cat are)")
    return 1


def gsutil(args: list[str]) -> int:
    return _storage("gsutil", args)


def gcloud(args: list[str]) -> int:
    if args[:1] == ["storage"]:
        return _storage("gcloud storage", args[1:])
    _say(f"fake gcloud: {' '.join(args)} is not modelled (gcloud storage cp|cat is)")
    return 1


def poweroff(args: list[str]) -> int:
    status, body = _http("POST", f"/fake_gce/boots/{BOOT}/poweroff")
    if status != 200:
        _say(f"fake poweroff: {body.decode('utf-8', 'replace')}")
        return 1
    return 0


def shutdown(args: list[str]) -> int:
    if any(a in ("-r", "--reboot", "-c") for a in args):
        _say(f"fake shutdown: {' '.join(args)} is not modelled (only a power-off is)")
        return 1
    if [a for a in args if a not in ("-h", "-P", "--poweroff", "--halt", "now")]:
        _say(f"fake shutdown: {' '.join(args)} is not modelled (shutdown -h now is)")
        return 1
    return poweroff(args)


def sleep(args: list[str]) -> int:
    total = 0.0
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    for a in args:
        scale = units.get(a[-1:], 1.0)
        try:
            total += float(a[:-1] if a[-1:] in units else a) * scale
        except ValueError:
            _say(f"sleep: invalid time interval '{a}'")
            return 1
    query = urllib.parse.urlencode({"seconds": repr(total), "pid": os.getpid()})
    status, body = _http("POST", f"/fake_gce/boots/{BOOT}/sleep?{query}", timeout=None)
    return 0 if status == 200 else 1


def df(args: list[str]) -> int:
    if len(args) == 3 and args[0] == "--output=avail" and args[1] == "-BG":
        sys.stdout.write(f" Avail\n {os.environ.get('GPUOPS_FAKE_DISK_GB', '0')}G\n")
        return 0
    os.execv("/bin/df", ["df", *args])
    return 1


PROGRAMS = {
    "curl": curl,
    "gsutil": gsutil,
    "gcloud": gcloud,
    "poweroff": poweroff,
    "shutdown": shutdown,
    "sleep": sleep,
    "df": df,
}

if __name__ == "__main__":
    sys.exit(PROGRAMS[sys.argv[1]](sys.argv[2:]))
