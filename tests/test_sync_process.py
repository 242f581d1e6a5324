"""`rent --sync-every` through the real CLI, its guardian a real detached process (M5, M8).

The fakes serve on loopback (tests/test_guard_process.py's fixture); the guardian runs on the
clock they export (GPUOPS_TIME_SCALE), so the rental's sync interval passes thirty times faster,
as every lease duration does.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_guard_process import Fakes, _alive, fakes  # noqa: F401  (fakes is a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.process]

RENT = ("rent", "sync-box", "--gpu", "RTX 4090", "--hours", "3", "--race", "1")


def _manifest(fakes: Fakes) -> dict[str, Any] | None:
    found = list((fakes.results / "sync-box").glob("*/.gpuops-sync.json"))
    return json.loads(found[0].read_text()) if found else None


def test_rent_sync_every_reaches_the_guardian_and_boxes_and_watch_show_the_last_sync(
    fakes: Fakes,
) -> None:
    """M5: `rent --sync-every 1` is recorded on the rental; the guardian (another process)
    reads it and syncs the job's checkpoint while it runs; `boxes` and `watch` show the last
    sync's age; a rerun asking another interval is refused (M8, exit 3)."""
    fakes.gpuops(*RENT, "--sync-every", "1")  # a minute: two seconds at GPUOPS_TIME_SCALE=30
    (row,) = fakes.json("boxes")["rentals"]
    assert (row["sync_every_s"], row["sync"], row["last_sync_age_s"]) == (60.0, "never", None)
    assert "  sync never" in fakes.gpuops("boxes").stdout

    rerun = fakes.gpuops(*RENT, "--sync-every", "5", check=False)
    assert rerun.returncode == 3, rerun.stderr
    assert "--sync-every 5, not its 1" in rerun.stderr
    assert fakes.gpuops(*RENT, "--sync-every", "1").returncode == 0  # as rented: the box back

    fakes.gpuops("run", "sync-box", "--", "mkdir -p results && printf one > results/ckpt.bin"
                 " && sleep 600")  # fmt: skip
    manifest = fakes.wait_for(
        "the first sync's manifest", lambda: (_manifest(fakes) or {}).get("files")
    )
    (ckpt,) = (fakes.results / "sync-box").glob("*/ckpt.bin")
    assert ckpt.read_bytes() == b"one"  # delivered while the job still runs
    assert manifest["ckpt.bin"] == {
        "size": 3,
        "mtime": manifest["ckpt.bin"]["mtime"],
        "sha256": hashlib.sha256(b"one").hexdigest(),
    }
    assert oct(ckpt.stat().st_mode & 0o777) == "0o600"
    assert oct(Path(ckpt.parent).stat().st_mode & 0o777) == "0o700"

    (row,) = fakes.json("boxes")["rentals"]
    assert row["sync"].endswith(" ago") and row["last_sync_age_s"] >= 0.0
    assert row["sync_error"] is None
    assert "  sync " in fakes.gpuops("boxes").stdout
    watched = fakes.gpuops("watch", "sync-box", "--once", check=False)
    assert "sync-box: results sync " in watched.stdout and " ago" in watched.stdout
    assert watched.returncode == 5  # the job still runs: still open, not a failure
    as_json = fakes.gpuops("--json", "watch", "sync-box", "--once", check=False)
    assert json.loads(as_json.stdout)["sync"].endswith(" ago")
    syncs = fakes.events("guard.sync")
    assert syncs and all(s["ok"] for s in syncs)

    (started,) = fakes.events("guard.start")
    fakes.gpuops("guard", "sync-box", "--hours", "0.15")  # the deadline 18 s from now
    fakes.wait_for("the confirmed destroy", lambda: fakes.events("guard.confirmed_gone"))
    fakes.wait_for("the guardian to exit", lambda: not _alive(int(started["pid"])))
    assert fakes.events("guard.sync")[-1]["final"] is True
    assert [e["code"] for e in fakes.events("guard.exit")] == [0]
    assert fakes.live_instances() == []
    (done,) = fakes.json("boxes", "--all")["rentals"]
    assert (done["state"], done["results"]) == ("released", "delivered")
