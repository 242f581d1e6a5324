"""Guardians as real detached processes against `gpuops fakes serve` (M5, M7, M8).

Every command is the real CLI in its own process; the fakes serve on loopback; every gpuops
process runs on the clock they export (GPUOPS_TIME_SCALE, GPUOPS_TIME_ORIGIN), so lease
durations, deadlines and the fakes' own times pass alike, thirty times faster than real time.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuops import timing

pytestmark = [pytest.mark.slow, pytest.mark.process]

ROOT = Path(__file__).resolve().parent.parent
SCALE = 30.0  # the world's clock: heartbeat 0.5 s, lease TTL 2 s, verification 1 s, a boot 1 s
WAIT_S = 90.0  # the longest any step here may take before the test fails
OFFERS = [
    {"id": 900 + i, "machine_id": 70 + i, "gpu_name": "RTX 4090", "gpu_ram": 24564,
     "dph_total": 0.30 + i / 100, "reliability": 0.995, "disk_bw": 2000.0, "fate": "healthy"}
    for i in range(3)
]  # fmt: skip


def _lane_side(name: str) -> bool:
    return name.startswith("GPUOPS_LANE_") or name in (
        "GPUOPS_GCE_ENDPOINT",
        "STORAGE_EMULATOR_HOST",
    )


class Fakes:
    """`gpuops fakes serve` in its own process, and the environment its exports make."""

    def __init__(self, tmp: Path, *, time_scale: float = SCALE, **vast: Any) -> None:
        """``time_scale``: the one clock of the fakes, their boxes and every gpuops process."""
        scenario = tmp / "scenario.yaml"
        vast = {"ssh_keys": ["generated"], "offers": OFFERS, **vast}
        scenario.write_text(yaml.safe_dump({"time_scale": time_scale, "vast": vast}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuops", "fakes", "serve", "--scenario", str(scenario)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(
            target=lambda: [lines.put(x) for x in self.proc.stdout], daemon=True
        ).start()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GPUOPS_")}
        exported: dict[str, str] = {}
        while "GPUOPS_TIME_ORIGIN" not in exported:  # the clock's lines come last but S3's
            words = shlex.split(lines.get(timeout=WAIT_S))
            name, _, value = words[1].partition("=")
            exported[name] = value
        # the market's world: Vast, its ssh, the key and the clock (not the lane's)
        self.env.update((k, v) for k, v in exported.items() if not _lane_side(k))
        self.state = tmp / "state"
        self.results = tmp / "results"
        self.env.update(
            GPUOPS_STATE=str(self.state),
            GPUOPS_OPERATOR="alice",
            GPUOPS_RESULTS=str(self.results),
        )

    def now(self) -> float:
        """The world's time: the fakes' exported clock, which every gpuops process reads."""
        from gpuops.settings import Settings

        return Settings.from_environ(self.env).clock().wall()

    def gpuops(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "gpuops", *args],
            env=self.env, capture_output=True, text=True, timeout=WAIT_S, cwd=ROOT,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise AssertionError(f"gpuops {args} exited {done.returncode}: {done.stderr}")
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.gpuops("--json", *args).stdout)

    def events(self, kind: str) -> list[dict[str, Any]]:
        path = self.state / "events.jsonl"
        if not path.exists():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [{**r["payload"], "ts": r["ts"]} for r in rows if r["kind"] == kind]

    def wait_for(self, what: str, check: Any, limit_s: float = WAIT_S) -> Any:
        from test_guard import wait_until

        return wait_until(what, check, limit_s)

    def live_instances(self) -> list[dict[str, Any]]:
        from gpuops.providers.vast import VastAdapter

        adapter = VastAdapter(api_key=self.env["VAST_API_KEY"], base_url=self.env["VAST_URL"])
        return [{"id": i.instance_id, "label": i.label} for i in adapter.list_instances()]


@pytest.fixture
def fakes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fakes]:
    served = Fakes(tmp_path, **getattr(request, "param", {}))
    yield served
    for pid in _guardian_pids(served):
        _kill(pid)
    served.proc.send_signal(signal.SIGTERM)
    served.proc.wait(timeout=WAIT_S)


def _guardian_pids(fakes: Fakes) -> set[int]:
    return {int(e["pid"]) for e in fakes.events("guard.start")}


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.fault(
    "the laptop or terminal that rented the box is gone",
    handled="a detached guardian copies results and destroys the box at its deadline (M5)",
)
def test_a_rented_box_is_destroyed_at_its_deadline_after_the_shell_that_rented_it_is_gone(fakes):
    """M5: rent and run in a shell, kill that shell's whole session; the detached guardian
    copies the results off, destroys the box by its deadline, and nothing is left or leaked."""
    script = (
        f"{shlex.quote(sys.executable)} -m gpuops rent demo-box --gpu 'RTX 4090' --hours 3 "
        f"--race 1 && {shlex.quote(sys.executable)} -m gpuops run demo-box -- "
        "'mkdir -p results && echo trained > results/model.txt && sleep 600'; sleep 600"
    )
    shell = subprocess.Popen(
        ["bash", "-c", script], env=fakes.env, cwd=ROOT, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    fakes.wait_for("the job to start", lambda: fakes.events("market.job.started"))
    os.killpg(shell.pid, signal.SIGKILL)  # the terminal closes: shell, rent, run all gone
    shell.wait(timeout=WAIT_S)
    (started,) = fakes.events("guard.start")
    assert _alive(int(started["pid"]))
    # the deadline comes near only now the job runs (an event, not a guess at how long rent
    # takes): 18 s from now, so the copy starts in about 14 s with a budget of about 3 s
    assert fakes.json("guard", "demo-box", "--hours", "0.15")["pid"] is None  # no second one

    (gone,) = fakes.wait_for("the confirmed destroy", lambda: fakes.events("guard.confirmed_gone"))
    fakes.wait_for("the guardian to exit", lambda: not _alive(int(started["pid"])))

    (model,) = (fakes.results / "demo-box").glob("*/model.txt")  # NAME/<rental id>/ (M16)
    assert model.read_text() == "trained\n"
    assert -timing.DEADLINE_MARGIN_S <= gone["delay_s"] <= timing.DESTROY_CONFIRM_TIMEOUT_S
    assert [e["code"] for e in fakes.events("guard.exit")] == [0]
    assert fakes.live_instances() == []
    boxes = fakes.json("boxes")
    assert [r["state"] for r in boxes["rentals"]] == ["released"]
    assert boxes["pending_destroys"] == []
    sweep = fakes.json("sweep")
    assert sweep["unowned"] == [] and sweep["unresolved"] == []


@pytest.mark.fault(
    "ten boxes leaked: guardians thought they were superseded and exited 0",
    handled="one box is rented and destroyed at its deadline; exit 0 only when gone, supersession only when verified (M5, M7, M8)",
)
def test_twenty_september_ten_guardians_and_a_crash_looping_watcher_rent_one_box_and_destroy_it(
    fakes,
):
    """M7/M8: ten guardians started in quick succession while the watcher that starts them is
    killed and restarted: one box is rented, exactly one guardian is responsible at a time,
    none exits 0 before the box is confirmed gone, and the box is destroyed by its deadline."""
    rent = f"{shlex.quote(sys.executable)} -m gpuops rent pi-box --gpu 'RTX 4090' --hours 3"
    watcher_script = f"{rent} --race 2 && sleep 600"
    for _ in range(3):  # the crash-looping watcher: each restart re-runs rent (M8)
        watcher = subprocess.Popen(
            ["bash", "-c", watcher_script], env=fakes.env, cwd=ROOT, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # rent logs this once the rental is live: the log, not a `boxes` process per poll
        fakes.wait_for("a live rental", lambda: fakes.events("market.rent.done"))
        fakes.wait_for("its guardian", lambda: fakes.events("guard.lease.taken"))
        os.killpg(watcher.pid, signal.SIGKILL)
        watcher.wait(timeout=WAIT_S)
    assert fakes.json("guard", "pi-box")["pid"] is None  # already guarded: none is added
    argv = [sys.executable, "-m", "gpuops", "--json", "guard", "pi-box", "--standby"]
    starting = [
        subprocess.Popen(argv, env=fakes.env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(10)
    ]  # ten guardians in quick succession, all at once
    pids = [json.loads(proc.communicate(timeout=WAIT_S)[0])["pid"] for proc in starting]

    assert len(fakes.live_instances()) == 1  # never a second box for one name
    holders = {e["guardian"] for e in fakes.events("guard.lease.taken")}
    assert len(holders) == 1
    (responsible,) = holders
    (row,) = fakes.json("boxes")["rentals"]
    assert row["guardian"] == responsible and row["guard"].startswith("fresh")
    first_pid = int(responsible.split("/")[2])
    _kill(first_pid)  # the responsible guardian dies: one standby takes over, once
    fakes.wait_for("a takeover", lambda: len(fakes.events("guard.lease.taken")) == 2)

    def taken_over() -> str:
        return str(fakes.events("guard.lease.taken")[1]["guardian"])

    moved = fakes.json("guard", "pi-box", "--hours", "0.03")  # the deadline: 3.6 s from now
    assert moved["pid"] is None and moved["guardian"] == taken_over()
    (row,) = fakes.json("boxes")["rentals"]
    deadline = row["deadline_at"]

    (gone,) = fakes.wait_for("the destroy", lambda: fakes.events("guard.confirmed_gone"))
    for pid in _guardian_pids(fakes) - {first_pid}:
        fakes.wait_for(f"guardian {pid} to exit", lambda pid=pid: not _alive(pid))

    assert fakes.live_instances() == []
    assert -timing.DEADLINE_MARGIN_S <= gone["delay_s"] <= timing.DESTROY_CONFIRM_TIMEOUT_S
    assert fakes.now() >= deadline - timing.DEADLINE_MARGIN_S
    exits = fakes.events("guard.exit")
    assert {e["code"] for e in exits} == {0}
    assert all(e["ts"] >= gone["ts"] for e in exits)  # no clean exit before the confirmation
    assert len(exits) == len(_guardian_pids(fakes)) - 1  # everyone but the one killed
    assert len(_guardian_pids(fakes)) == 11 and set(pids) <= _guardian_pids(fakes)
    taken = fakes.events("guard.lease.taken")
    assert len(taken) == 2 and taken[1]["previous"] == responsible


def test_a_fire_drill_on_the_fakes_rents_guards_destroys_and_records_itself(fakes):
    """M5: `gpuops guard NAME --drill` proves the backstop fires end to end, and says where."""
    done = fakes.gpuops("--json", "guard", "drill-box", "--drill", "--hours", "0.09")
    result = json.loads(done.stdout)

    assert result["passed"] is True and result["target"] == "fakes"
    assert result["delay_s"] <= timing.DESTROY_CONFIRM_TIMEOUT_S
    # epoch seconds, as every --json has its times (tests/test_json_times.py)
    assert result["confirmed_at"] - result["deadline_at"] == pytest.approx(
        result["delay_s"], abs=1e-3
    )
    assert fakes.live_instances() == []
    drills = sorted((fakes.state / "drills").iterdir())
    assert len(drills) == 1
    from gpuops.market.drill import drills as drill_records
    from gpuops.store.local import LocalStore

    (kept,) = drill_records(LocalStore(str(fakes.state))).all()  # read back by its strict codec
    assert (kept.name, kept.target, kept.passed, kept.cleanup) == ("drill-box", "fakes", True, ())
    assert (kept.instance_id, kept.delay_s) == (result["instance_id"], result["delay_s"])
    assert [e["passed"] for e in fakes.events("guard.drill")] == [True]


# the box goes 900 of the world's seconds (30 s of wall time) after the first destroy call:
# the second guardian is killed after its own destroy call well inside that (about 2.5 s on a
# quiet machine: a start, and a lease TTL of 2 s), even on one loaded by a mutation run beside
# the suite (15 s was not always enough there)
@pytest.mark.parametrize("fakes", [{"destroy_lag_s": 900}], indirect=True)
def test_guardians_killed_after_the_copy_and_after_the_destroy_call_still_end_the_box(fakes):
    """M4/M5: kill -9 the guardian after it copied, restart; kill -9 the next after its destroy
    call, before confirmation, restart; the box ends destroyed, and its record is released only
    after the provider confirmed it gone."""
    fakes.gpuops("rent", "crash-box", "--gpu", "RTX 4090", "--hours", "3", "--race", "1")
    fakes.gpuops("run", "crash-box", "--", "mkdir -p results && echo ok > results/r.txt")
    fakes.wait_for("the results", lambda: fakes.gpuops("watch", "crash-box", "--once",
                                                        check=False).returncode == 0)  # fmt: skip
    (first,) = fakes.wait_for("the first guardian", lambda: fakes.events("guard.start"))
    assert fakes.json("guard", "crash-box", "--hours", "0.15")["pid"] is None  # 18 s from now
    fakes.wait_for("the copy", lambda: fakes.events("guard.copy"))
    _kill(int(first["pid"]))

    second = fakes.json("guard", "crash-box", "--standby")["pid"]  # restarted
    fakes.wait_for(  # the first may have made the destroy call already: wait for the second's
        "the second guardian's destroy call",
        lambda: [
            e for e in fakes.events("guard.destroy") if e["guardian"].split("/")[2] == str(second)
        ],
    )
    # The guardian logs its destroy call before destroy_rental writes the transition: wait on
    # the state the product writes, not on the event (a loaded machine runs the two apart).
    fakes.wait_for(  # on the retry list, not yet confirmed gone
        "the box's record on the retry list",
        lambda: (
            [
                e["after"]
                for e in fakes.events("ledger.transition")
                if e["name"].startswith("crash-box")
            ][-1:]
            == ["destroying"]
        ),
    )
    _kill(second)
    assert fakes.events("guard.confirmed_gone") == []  # killed before the confirmation

    third = fakes.json("guard", "crash-box", "--standby")["pid"]
    (gone,) = fakes.wait_for("the confirmation", lambda: fakes.events("guard.confirmed_gone"))
    fakes.wait_for("the last guardian to exit", lambda: not _alive(third))

    assert gone["guardian"].split("/")[2] == str(third)
    assert len(fakes.events("guard.copy")) == 1  # the successors skipped the copy
    (copied,) = (fakes.results / "crash-box").glob("*/r.txt")  # NAME/<rental id>/ (M16)
    assert copied.read_text() == "ok\n"
    assert fakes.live_instances() == []
    moves = [
        e["after"] for e in fakes.events("ledger.transition") if e["name"].startswith("crash-box")
    ]
    assert moves[-3:] == ["destroying", "gone-confirmed", "released"]
    assert [e["code"] for e in fakes.events("guard.exit")] == [0]


def _group_alive(pgid: int) -> bool:
    from test_guard import group_alive

    return group_alive(pgid)


@pytest.mark.fault(
    "a guardian is stopped by SIGTERM in the middle of its results copy",
    handled="its ssh's process group is ended and the partial tarball removed; the results are "
    "recorded missing (why) in the event log and `boxes`; a successor copies them and `boxes` "
    "says delivered, and where (M17)",
)
def test_a_guardian_stopped_mid_copy_ends_its_ssh_and_tarball_and_a_successor_delivers(fakes):
    """M17: SIGTERM to a guardian while it streams a large results directory off the box: its
    ssh's process group is gone, no partial tarball is left, the event log and `boxes` say the
    results are missing and why; `gpuops guard NAME` starts a successor that copies them, and
    `boxes` then says delivered, and where."""
    fakes.gpuops("rent", "copy-box", "--gpu", "RTX 4090", "--hours", "3", "--race", "1")
    # a sparse 64 GiB file: the first copy streams for minutes, so the signal lands inside it
    fakes.gpuops("run", "copy-box", "--", "mkdir -p results && echo trained > results/model.txt"
                 " && truncate -s 64G results/big && sleep 600")  # fmt: skip
    sandboxes = Path(fakes.env["GPUOPS_FAKE_SSH_BOXES"]).parent / "sandboxes"
    (big,) = fakes.wait_for(
        "the job's results", lambda: list(sandboxes.glob("*/gpuops/copy-box/results/big"))
    )
    (first,) = fakes.wait_for("the first guardian", lambda: fakes.events("guard.start"))
    # 14.4 s from now: the copy starts about 10 s from now, with a budget of about 3 s
    assert fakes.json("guard", "copy-box", "--hours", "0.12")["pid"] is None
    (copying,) = fakes.wait_for("the copy's ssh", lambda: fakes.events("guard.copy.started"))
    assert _group_alive(int(copying["pid"])) and Path(copying["tarball"]).exists()

    os.kill(int(first["pid"]), signal.SIGTERM)
    fakes.wait_for("the guardian to exit", lambda: not _alive(int(first["pid"])))

    assert not _group_alive(int(copying["pid"]))  # the ssh and all it started in its group
    assert not Path(copying["tarball"]).parent.exists()  # no partial tarball left in /tmp
    why = "the copy was cut: stopped by SIGTERM"
    (cut,) = fakes.events("guard.copy")
    assert (cut["ok"], cut["results"], cut["detail"]) == (False, "missing", why)
    assert [e["code"] for e in fakes.events("guard.exit")] == [128 + signal.SIGTERM]
    (row,) = fakes.json("boxes")["rentals"]
    assert (row["state"], row["results"], row["results_detail"]) == ("live", "missing", why)
    assert f"results MISSING ({why})" in fakes.gpuops("boxes").stdout
    assert not (fakes.results / "copy-box").exists()

    big.unlink()  # the rest of the results copies in a moment
    successor = fakes.json("guard", "copy-box", "--hours", "0.09")["pid"]  # at once: no lease
    assert successor is not None
    fakes.wait_for("the confirmed destroy", lambda: fakes.events("guard.confirmed_gone"))
    fakes.wait_for("the successor to exit", lambda: not _alive(successor))

    (model,) = (fakes.results / "copy-box").glob("*/model.txt")  # NAME/<rental id>/ (M16)
    assert model.read_text() == "trained\n"
    assert [e["results"] for e in fakes.events("guard.copy")] == ["missing", "delivered"]
    assert [e["code"] for e in fakes.events("guard.exit")] == [128 + signal.SIGTERM, 0]
    (row,) = fakes.json("boxes")["rentals"]
    assert (row["state"], row["results"]) == ("released", "delivered")
    assert row["results_detail"] == str(model.parent)
    assert f"results delivered ({model.parent})" in fakes.gpuops("boxes").stdout
    assert fakes.live_instances() == []


def test_a_box_billing_on_the_fakes_is_spent_as_the_fake_bills_it_in_budget_and_boxes_m15(fakes):
    """M15 on loopback: the spend `gpuops budget` and `boxes` count for a live box is its price
    times the time since the fake's own `start_date`, both read on the one clock every process
    shares (it used to be 0: the budget's now was the real clock, behind the fake's)."""
    fakes.gpuops("rent", "spend-box", "--gpu", "RTX 4090", "--hours", "3", "--race", "1")
    from gpuops.providers.vast import VastAdapter

    vast = VastAdapter(api_key=fakes.env["VAST_API_KEY"], base_url=fakes.env["VAST_URL"])
    (box,) = vast.list_instances()  # the fake's own record: its price and when it started
    assert box.dph_total is not None and box.start_date is not None
    # some of the world's time passes: a poll of the world's clock, never a guess at wall time
    fakes.wait_for("a minute of billing", lambda: fakes.now() >= box.start_date + 60.0)

    before = fakes.now()
    team = fakes.json("budget")["team"]
    (row,) = fakes.json("boxes")["rentals"]
    after = fakes.now()

    low, high = (box.dph_total * (t - box.start_date) / 3600.0 for t in (before, after))
    assert round(low, 4) - 1e-4 <= team["spent_today_usd"] <= round(high, 4) + 1e-4
    # a row counts from when the box was kept (after its boot and probe): never more, and
    # never nothing for a box billing a minute
    assert 0.0 < row["spend_usd"] <= round(high, 4) + 1e-4
    assert team["spent_today_usd"] > 0.0
    fakes.gpuops("destroy", "spend-box")
    assert fakes.live_instances() == []
