"""`gpuops fakes serve` as a user runs it: a separate process that prints export lines first,
serves FakeVast on loopback, and exits 0 on SIGTERM or SIGINT.

Each test starts ``python -c "import fakes.serve, sys; ..."`` and reads its stdout; waits are
bounded by STARTUP_TIMEOUT_S / STOP_TIMEOUT_S, and the scenarios run at a large time scale so a
box boots in milliseconds of real time.
"""

from __future__ import annotations

import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakes.serve import main
from gpuops.market.probing import probe
from gpuops.model import InstanceStatus, Verdict
from gpuops.providers.ssh import SshEndpoint, known_hosts_path
from gpuops.providers.vast import VastAdapter
from gpuops.settings import Settings
from gpuops.clock import SYSTEM, WithSleep

ROOT = Path(__file__).resolve().parent.parent
SERVE = "import fakes.serve, sys; sys.exit(fakes.serve.main(sys.argv[1:]))"
EXPORTS = (
    "VAST_URL",
    "VAST_API_KEY",
    "GPUOPS_SSH",
    "GPUOPS_FAKE_SSH_BOXES",
    "GPUOPS_FAKE_SSH_PYTHON",
    "GPUOPS_SSH_KEY",
    "GPUOPS_GCE_ENDPOINT",
    "STORAGE_EMULATOR_HOST",
    "GPUOPS_LANE_PROJECT",
    "GPUOPS_LANE_ZONE",
    "GPUOPS_LANE_INSTANCE",
    "GPUOPS_LANE_BUCKET",
    "GPUOPS_TIME_SCALE",
    "GPUOPS_TIME_ORIGIN",
    "AWS_ENDPOINT_URL",  # the S3 stand-in (fakes/s3.py), for the store
    "GPUOPS_S3_ENDPOINT",  # and for the guardian's results
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "GPUOPS_FAKE_S3_BUCKET",
)
STARTUP_TIMEOUT_S = 90.0  # a safety net: the test waits for the line, not for a time
STOP_TIMEOUT_S = 60.0  # a safety net: the test waits for the exit, not for a time
POLL_S = 0.01
HEALTHY = 18432117  # the healthy offer of the default scenario


class Served:
    """A running `fakes.serve` process and the exports it printed."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.first_lines = [self._line() for _ in EXPORTS]
        self.env = dict(_export(line) for line in self.first_lines)

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _line(self) -> str:
        try:
            return self.lines.get(timeout=STARTUP_TIMEOUT_S)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"no export line; stderr: {self.proc.stderr.read()}") from None

    def adapter(self) -> VastAdapter:
        return VastAdapter(
            api_key=self.env["VAST_API_KEY"],
            base_url=self.env["VAST_URL"],
            clock=WithSleep(SYSTEM, lambda s: None),
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=STOP_TIMEOUT_S)

    def close(self) -> None:
        """Stop it as a user would (SIGTERM), so it removes the state and boot folders it made
        under the temp folder; SIGKILL (which leaves them) only if it does not stop in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _export(line: str) -> tuple[str, str]:
    words = shlex.split(line)
    assert len(words) == 2 and words[0] == "export", line
    name, _, value = words[1].partition("=")
    return name, value


@pytest.fixture
def serve() -> Iterator[type[Served]]:
    """Starts serve processes and kills any a test left running."""
    started: list[Served] = []

    class Tracked(Served):
        def __init__(self, *args: str) -> None:
            started.append(self)
            super().__init__(*args)

    yield Tracked
    for served in started:
        served.close()


@pytest.fixture
def fast_scenario(tmp_path: Path) -> Path:
    """The default scenario at x1000: a box boots in 30 ms of real time."""
    doc = yaml.safe_load((ROOT / "fakes" / "scenarios" / "default.yaml").read_text())
    doc["time_scale"] = 1000
    path = tmp_path / "fast.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def shown_until(vast: VastAdapter, instance_id: str, done: Callable[[Any], bool], what: str):
    """What show says of the box once ``done`` holds for it: a wait for the fake's state,
    polled, its deadline only a safety net."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        shown = vast.show(instance_id)
        if done(shown):
            return shown
        time.sleep(POLL_S)
    raise AssertionError(f"{instance_id} {what} within {STARTUP_TIMEOUT_S} s")


def wait_running(vast: VastAdapter, instance_id: str):
    def running(shown: Any) -> bool:
        return shown is not None and shown.actual_status is InstanceStatus.RUNNING

    return shown_until(vast, instance_id, running, "never reached running")


def wait_gone(vast: VastAdapter, instance_id: str) -> None:
    """Until show no longer reports the box: the default scenario's destroy lags (and show lags
    behind it), as Vast's does, so the box is shown a moment after its destroy."""
    shown_until(vast, instance_id, lambda shown: shown is None, "was still shown after its destroy")


def test_serve_prints_the_export_lines_first_and_exits_0_on_sigterm(serve, fast_scenario):
    """The first stdout lines are `export NAME=value`, every name gpuops needs, loopback URL."""
    served = serve("--scenario", str(fast_scenario))

    names = [_export(line)[0] for line in served.first_lines]

    assert names == list(EXPORTS)
    assert served.env["VAST_URL"].startswith("http://127.0.0.1:")
    assert served.env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    assert Path(served.env["GPUOPS_SSH"]) == ROOT / "fakes" / "ssh" / "ssh"
    assert served.env["GPUOPS_FAKE_SSH_PYTHON"] == sys.executable
    assert served.stop() == 0


def test_a_box_rented_over_http_is_probed_through_the_exported_fake_ssh(
    serve, fast_scenario, tmp_path, monkeypatch
):
    """End to end: search, rent, wait for running, probe it with the exported ssh, destroy."""
    served = serve("--scenario", str(fast_scenario))
    for name in ("GPUOPS_SSH", "GPUOPS_FAKE_SSH_BOXES", "GPUOPS_FAKE_SSH_PYTHON"):
        monkeypatch.setenv(name, served.env[name])
    vast = served.adapter()

    offers = {o.id for o in vast.search_offers("RTX 4090")}
    box_id = vast.create(HEALTHY, label="gpuops:e2e", image="img", disk_gb=10.0)
    box = wait_running(vast, box_id)
    result = probe(
        SshEndpoint(box.ssh_host, box.ssh_port),
        client=Settings.from_environ({**os.environ, **served.env}).ssh(),
        identity_file=Path(served.env["GPUOPS_SSH_KEY"]).with_suffix(""),  # the private half
        known_hosts=known_hosts_path(tmp_path / "gpuops", box_id),
        vram_floor_mb=8192,
        disk_floor_mb_per_s=500.0,
    )
    vast.destroy(box_id)

    assert HEALTHY in offers and result.cause is Verdict.PASS
    wait_gone(vast, box_id)  # a destroy lags, as Vast's does: gone once show says so
    assert served.stop() == 0


def test_the_exported_key_is_registered_with_the_fake_account(serve, fast_scenario):
    """M9: GPUOPS_SSH_KEY is a public key the scenario registered at start."""
    served = serve("--scenario", str(fast_scenario))

    public = Path(served.env["GPUOPS_SSH_KEY"]).read_text().strip()
    keys = served.adapter().list_ssh_keys()

    assert public.startswith("ssh-ed25519 ") and any(k.matches(public) for k in keys)
    assert served.stop() == 0


def test_sigint_stops_it_too_and_its_own_temp_state_is_removed(serve, fast_scenario):
    """Ctrl-C is a clean stop (exit 0); a state dir it made itself does not outlive it."""
    served = serve("--scenario", str(fast_scenario))
    state = Path(served.env["GPUOPS_FAKE_SSH_BOXES"]).parent

    assert state.is_dir()
    assert served.stop(signal.SIGINT) == 0
    assert not state.exists()


def test_a_given_state_dir_holds_the_box_table_and_key_and_is_kept(serve, fast_scenario, tmp_path):
    """--state-dir: the box table and throwaway key go there and stay for inspection."""
    state = tmp_path / "fakes-state"
    served = serve("--scenario", str(fast_scenario), "--state-dir", str(state))

    assert served.env["GPUOPS_FAKE_SSH_BOXES"] == str(state / "boxes.yaml")
    assert served.env["GPUOPS_SSH_KEY"] == str(state / "id_ed25519.pub")
    assert served.stop() == 0
    assert (state / "boxes.yaml").is_file() and (state / "id_ed25519.pub").is_file()
    assert oct((state).stat().st_mode & 0o777) == "0o700"


def test_without_arguments_it_serves_the_default_scenario(serve):
    """No --scenario: fakes/scenarios/default.yaml, all fourteen offers searchable."""
    served = serve()

    offers = served.adapter().search_offers()

    assert len(offers) == 14
    assert served.stop() == 0


def test_a_bad_scenario_exits_2_naming_the_field_and_prints_no_exports(tmp_path):
    """A typo'd fate is refused before anything is served or printed on stdout."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("vast:\n  offers:\n    - {id: 1, fate: heathy}\n")

    done = subprocess.run(
        [sys.executable, "-c", SERVE, "--scenario", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=STARTUP_TIMEOUT_S,
        env={**os.environ},
    )

    assert done.returncode == 2 and done.stdout == ""
    assert "vast.offers[0]" in done.stderr


@pytest.mark.parametrize("argv", [["--port", "70000"], ["--no-such-flag"]])
def test_bad_arguments_return_2_without_serving(argv, capsys):
    """Usage errors come back from main as exit code 2, with nothing bound."""
    assert main(argv) == 2
    assert capsys.readouterr().out == ""
