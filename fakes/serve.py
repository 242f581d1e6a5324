"""`gpuops fakes serve`: the fakes on loopback, so any other process can run gpuops against them.

It loads a scenario, starts FakeVast on 127.0.0.1, writes the fake ssh box table and a
throwaway SSH key into the state dir, then prints ``export NAME=value`` lines *first* (so
``eval "$(gpuops fakes serve | head -6)"`` or a test can read them), flushes, and serves until
SIGINT or SIGTERM, when it exits 0. Exit 2: a bad scenario or argument; 1: it could not start.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, TypeAlias

from fakes.scenario import DEFAULT_SCENARIO, ScenarioError, load_scenario

FAKE_SSH = Path(__file__).resolve().parent / "ssh" / "ssh"
# ssh-keygen makes an ed25519 pair in milliseconds; anything slower is broken, so fall back.
KEYGEN_TIMEOUT_S = 10.0
# The main thread wakes this often to notice a signal that arrived while it waited.
SIGNAL_POLL_S = 0.5
KEY_NAME = "id_ed25519"
# The fake ssh program's table and the files it keeps beside it (fakes/ssh/README.md).
BOX_TABLE = "boxes.yaml"
BOX_TABLE_COMPANIONS = (".counters.json", ".calls.jsonl", ".lock", ".partial")
SignalHandler: TypeAlias = Callable[[int, FrameType | None], Any] | int | None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuops fakes serve",
        description="Serve fake providers on loopback; prints `export NAME=value` lines first.",
    )
    parser.add_argument(
        "--scenario",
        type=Path,
        default=DEFAULT_SCENARIO,
        help="scenario YAML (docs/fakes.md); default: fakes/scenarios/default.yaml",
    )
    parser.add_argument("--port", type=int, default=0, help="FakeVast port (default: a free one)")
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the box table and the throwaway key go (default: a temp dir, removed at exit)",
    )
    return parser


def main(argv: list[str]) -> int:
    """Run until SIGINT/SIGTERM; 0 on a clean stop."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help is 0, a usage error 2
        return exc.code if isinstance(exc.code, int) else 2
    if not 0 <= args.port <= 65535:
        print(f"gpuops fakes serve: --port {args.port} is not a TCP port", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"gpuops fakes serve: {exc}", file=sys.stderr)
        return 2

    if scenario.start_time is not None:
        print(
            f"gpuops fakes serve: {scenario.source}: start_time is for in-process fakes; the "
            "served fakes run on the exported clock (GPUOPS_TIME_ORIGIN: now), which gpuops "
            "reads too",
            file=sys.stderr,
        )
        return 2

    from fakes.vast import ExportedClock, FakeVast, ScaledClock, serve_http
    from fakes.vast.routes import REAL_CLOCK

    owned = args.state_dir is None
    state_dir = Path(tempfile.mkdtemp(prefix="gpuops-fakes-")) if owned else args.state_dir
    # A signal only flips this flag. Setting a threading.Event from the handler could deadlock:
    # the handler runs on the main thread, which may hold the Event's lock in its own wait.
    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

    previous: dict[signal.Signals, SignalHandler] = {
        sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _fresh_box_table(state_dir)
        public_key = throwaway_key(state_dir)
        # One clock, exported: FakeVast, its boxes' own processes (fakes/vast/onstart.py) and
        # the lane's fake run on the scaled clock from real now, and the export lines give its
        # scale and origin, so gpuops' scaled clock (settings.py) reads the times the fakes
        # render (start_date, end_date, the bucket's) on the same clock.
        clock = ExportedClock(scenario.time_scale)
        model = FakeVast(
            scenario,
            clock=clock,
            state_dir=state_dir,
            generated_key=public_key.read_text(encoding="utf-8").strip(),
            box_clock=clock,
        )
        server = serve_http(model, port=args.port)
        from fakes.gce import FakeGCE, parse_lane
        from fakes.gce.server import serve_http as serve_gce

        lane = parse_lane(scenario.lane, scenario.source)
        gce = serve_gce(FakeGCE(lane, ScaledClock(scenario.time_scale, origin=clock.origin)))
        s3, s3_note = _start_s3()
    except OSError as exc:
        print(f"gpuops fakes serve: cannot start: {exc}", file=sys.stderr)
        _restore(previous)
        _cleanup(state_dir, owned)
        return 1
    try:
        exports = {
            "VAST_URL": server.url,
            "VAST_API_KEY": model.api_key,
            "GPUOPS_SSH": str(FAKE_SSH),
            "GPUOPS_FAKE_SSH_BOXES": str(model.box_table),
            "GPUOPS_FAKE_SSH_PYTHON": sys.executable,
            "GPUOPS_SSH_KEY": str(public_key),
            "GPUOPS_GCE_ENDPOINT": gce.url,
            "STORAGE_EMULATOR_HOST": gce.url,
            "GPUOPS_LANE_PROJECT": lane.project,
            "GPUOPS_LANE_ZONE": lane.zone,
            "GPUOPS_LANE_INSTANCE": lane.instance,
            "GPUOPS_LANE_BUCKET": lane.bucket,
            **clock.exports(),
        }
        if s3 is not None:
            exports.update(s3.exports())
        for name, value in exports.items():
            print(f"export {name}={shlex.quote(value)}")
        if s3_note:
            print(f"# {s3_note}")
        sys.stdout.flush()
        print(
            f"# FakeVast on {server.url}: scenario {scenario.source}, "
            f"{len(model.offers)} offers, time x{scenario.time_scale:g}; state in {state_dir}. "
            "Ctrl-C to stop.",
            file=sys.stderr,
            flush=True,
        )
        print(
            f"# FakeVast's times are on the exported clock (x{scenario.time_scale:g} from "
            f"GPUOPS_TIME_ORIGIN); a client not on it (the vastai CLI, SkyPilot) reads them on "
            f"the real clock at VAST_URL={server.url}{REAL_CLOCK}",
            file=sys.stderr,
            flush=True,
        )
        while not stopping:
            time.sleep(SIGNAL_POLL_S)
    finally:
        server.close()
        gce.close()
        if s3 is not None:
            s3.close()
        _restore(previous)
        _cleanup(state_dir, owned)
    return 0


def _start_s3() -> tuple[Any, str]:
    """The S3 stand-in (fakes/s3.py), its bucket's ``state/`` prefix protected by the policy
    that requires conditional writes (docs/s3-state.md), or None and why, when moto's server
    is not installed."""
    from fakes.s3 import STATE_PREFIX, S3Unavailable, serve_s3

    try:
        return serve_s3(protect=STATE_PREFIX), ""
    except S3Unavailable as exc:
        return None, f"S3 stand-in absent: {exc}"


def throwaway_key(state_dir: Path) -> Path:
    """The public half of a fresh ed25519 pair in ``state_dir`` (ssh-keygen), or, without
    ssh-keygen, the recorded public key of recordings/vast/ssh_keys_list.yaml beside a
    placeholder private half (the fake ssh reads only the public one)."""
    private = state_dir / KEY_NAME
    public = state_dir / f"{KEY_NAME}.pub"
    for path in (private, public):
        path.unlink(missing_ok=True)  # ssh-keygen would ask before overwriting
    keygen = shutil.which("ssh-keygen")
    if keygen is not None:
        try:
            done = subprocess.run(
                [keygen, "-t", "ed25519", "-N", "", "-q", "-C", "gpuops-fakes", "-f", str(private)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=KEYGEN_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0 and public.is_file():
            return public
    from fakes.ssh.boxes import write_identity
    from fakes.vast.wire import recorded

    public = write_identity(private, str(recorded("ssh_keys_list")[0]["key"]))
    public.chmod(0o600)
    return public


def _fresh_box_table(state_dir: Path) -> None:
    """A new world: no table, attempt counters or call log left from an earlier run."""
    table = state_dir / BOX_TABLE
    for path in (table, *(table.with_name(table.name + s) for s in BOX_TABLE_COMPANIONS)):
        path.unlink(missing_ok=True)


def _restore(previous: dict[signal.Signals, SignalHandler]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def _cleanup(state_dir: Path, owned: bool) -> None:
    from fakes.ssh.sandbox import stop_all

    stop_all(state_dir / BOX_TABLE)  # the fake boxes' jobs end with the fake world
    if owned:
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
