"""One results sync: what changed in the job's results directory, copied off the box (M5).

The guardian's, never the box's: the box is only asked, over the guardian's ssh (the pinned
host key, our identity, no account key in the child's environment: providers/ssh.py), to list
its results and to stream a tar of the files that changed. Every decision is
``market/sync_plan.py``'s; here are the calls. Each ssh runs on a worker thread while the
caller's ``keep_alive`` (the guardian's heartbeat) runs every ``poll_s``, as the final copy's
does (``market/results.py``). A delivered file is whole or absent (the destination's
``put_file``), and the manifest is written after the files it names.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpuops.errors import GpuopsError
from gpuops.market import sync_plan as sp
from gpuops.market.jobs import BoxShell, Copies
from gpuops.market.results import Results
from gpuops.market.watchdog import NO_RESULTS
from gpuops.model import Instance, StepOutput

_T = TypeVar("_T")


@dataclass(frozen=True)
class SyncReport:
    """How one sync ended: ``error`` is empty when it worked."""

    error: str
    destination: str
    delivered: int = 0  # files delivered by this sync
    size: int = 0  # their bytes
    held: int = 0  # files the manifest holds after it
    deferred: tuple[str, ...] = ()  # changed while they were read: the next sync takes them
    left_out: tuple[str, ...] = ()  # reserved or climbing names, never synced
    none_made: bool = False  # the job has no results directory (yet)
    detail: str = ""  # what the box said of it, then


def sync_results(
    shell: BoxShell,
    instance: Instance,
    name: str,
    results_dir: str,
    budget_s: float,
    *,
    results: Results,
    key: str,
    rental_id: str | None,
    stamp: Callable[[], str],
    poll_s: float,
    keep_alive: Callable[[], object],
    copies: Copies | None = None,
) -> SyncReport:
    """Sync ``results_dir`` of job ``name`` on ``instance`` to ``results`` under ``key``.

    ``stamp()``: the time to write in the manifest. Never raises for what a box, its ssh or
    the destination does: each is a failed sync, said in ``error``."""
    where = results.where(key)
    try:
        return _sync(
            shell, instance, name, results_dir, budget_s, results, key, rental_id, stamp,
            poll_s, keep_alive, copies,
        )  # fmt: skip
    except (OSError, tarfile.TarError, GpuopsError) as exc:
        return SyncReport(f"the sync failed: {type(exc).__name__}: {exc}", where)


def _sync(
    shell: BoxShell,
    instance: Instance,
    name: str,
    results_dir: str,
    budget_s: float,
    results: Results,
    key: str,
    rental_id: str | None,
    stamp: Callable[[], str],
    poll_s: float,
    keep_alive: Callable[[], object],
    copies: Copies | None,
) -> SyncReport:
    where = results.where(key)
    raw = results.read_manifest(key)
    try:
        manifest = {} if raw is None else sp.decode_manifest(raw)
    except GpuopsError:
        manifest = {}  # unreadable: every file is synced again, the manifest rewritten whole

    def listing() -> StepOutput:
        return _waiting(lambda: shell.run(instance, sp.listing_script(name, results_dir)),
                        poll_s, keep_alive)  # fmt: skip

    out = listing()
    if out.exit_code == NO_RESULTS:
        said = f"the job has no results directory {results_dir}"
        return SyncReport("", where, held=len(manifest), none_made=True, detail=said)
    if out.timed_out or out.exit_code != 0:
        return SyncReport(f"listing the results failed: {_why(out)}", where)
    before, left = sp.parse_listing(out.stdout)
    wanted = sp.to_fetch(manifest, before)
    deliver: list[str] = []
    deferred: list[str] = []
    size = 0
    if wanted:
        folder = Path(tempfile.mkdtemp(prefix="gpuops-sync-"))
        tarball = folder / "sync.tar"
        try:
            script = sp.fetch_script(name, results_dir, wanted)
            error, _ = _waiting(
                lambda: shell.stream_to(instance, script, tarball, budget_s, copies),
                poll_s,
                keep_alive,
            )
            if error:
                return SyncReport(f"copying the changed files failed: {error}", where)
            again = listing()
            if again.timed_out or again.exit_code != 0:
                return SyncReport(f"listing the results again failed: {_why(again)}", where)
            after, _ = sp.parse_listing(again.stdout)
            with tarfile.open(tarball, "r:") as tar:
                members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
                sizes = {path: m.size for path, m in members.items()}
                deliver, deferred = sp.settle(wanted, before, after, sizes)
                for path in deliver:
                    source = tar.extractfile(members[path])
                    assert source is not None  # a regular file's member always has one
                    written, digest = results.put_file(key, path, source)
                    manifest[path] = sp.Synced(written, before[path].mtime, digest)
                    size += written
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    results.put_manifest(key, sp.encode_manifest(rental_id, stamp(), manifest))
    return SyncReport("", where, len(deliver), size, len(manifest), tuple(deferred), tuple(left))


def _waiting(work: Callable[[], _T], poll_s: float, keep_alive: Callable[[], object]) -> _T:
    """``work()`` on a worker thread, ``keep_alive()`` every ``poll_s`` while it runs (each
    ssh is a real process: it is waited for for real, the lease kept meanwhile)."""
    done: list[_T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(work())
        except BaseException as exc:  # handed to the caller's thread, raised there
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(poll_s)
        keep_alive()
    if failed:
        raise failed[0]
    return done[0]


def _why(out: StepOutput) -> str:
    if out.timed_out:
        return "ssh timed out"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return f"exit {out.exit_code}: {lines[-1] if lines else 'no message'}"
