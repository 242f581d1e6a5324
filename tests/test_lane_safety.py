"""L1: no code path stops, suspends or deletes the lane instance, and the CLI has no such
command. The scan reads every module under gpuops/, so a new call fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuops.cli import build_parser

PACKAGE = Path(__file__).resolve().parent.parent / "gpuops"
# Provider calls whose names mean "stop it" in the GCE client, wherever they appear.
GCE_FORBIDDEN = {"stop", "suspend", "delete", "reset", "simulate_maintenance_event"}
# The market (Vast) destroys boxes it owns by design (M3/M4); those files are not the lane's.
# archive.py deletes state-store records it has copied to the archive, never an instance;
# check.py deletes only its own self-test key in the state store (`gpuops check`).
MARKET = {
    "providers/vast.py",
    "market",
    "store",
    "ledger.py",
    "archive.py",
    "demo/__init__.py",
    "cli/market.py",
    "check.py",
}


def lane_calls(source: str) -> list[str]:
    """Every attribute call named like a GCE stop/suspend/delete, and every REST path to one."""
    found = []
    for node in ast.walk(ast.parse(source)):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        if call and node.func.attr in GCE_FORBIDDEN:  # type: ignore[attr-defined]
            found.append(f"line {node.lineno}: .{node.func.attr}(...)")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if any(text.rstrip("/").endswith(f"/{verb}") for verb in ("stop", "suspend")):
                found.append(f"line {node.lineno}: path {text!r}")
    return found


def _lane_modules() -> list[Path]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if not any(rel == m or rel.startswith(m + "/") for m in MARKET):
            out.append(path)
    return out


@pytest.mark.parametrize(
    "snippet",
    [
        "client.stop(project=p, zone=z, instance=i)",
        "instances.delete(project=p, zone=z, instance=i)",
        "self.gce.suspend(i)",
        "client.reset(instance=i)",
        "url = '/compute/v1/projects/p/zones/z/instances/i/stop'",
    ],
)
def test_the_scan_catches_each_way_to_stop_or_delete_the_lane_l1(snippet):
    """L1: the scan itself is tested, so a clean result means something."""
    assert lane_calls(snippet)


@pytest.mark.fault(
    "an operator stopped another operator's job mid-run",
    handled="no stop or delete exists: no command, no code path, no fake route (L1)",
)
def test_no_lane_code_path_stops_suspends_or_deletes_the_instance_l1():
    """L1 (the stop that stopped the wrong job): no such call anywhere outside the market."""
    modules = _lane_modules()
    found = {str(p.relative_to(PACKAGE)): lane_calls(p.read_text()) for p in modules}

    assert {k: v for k, v in found.items() if v} == {}
    names = {p.relative_to(PACKAGE).as_posix() for p in modules}
    assert {"lane/runner.py", "providers/gce.py", "cli/lane.py", "lane/board.py"} <= names


def test_the_lane_cli_has_no_stop_or_delete_command_l1():
    """L1: `gpuops lane` offers exactly board, claim, script, install, start, watch, release,
    repair."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    lane = commands["lane"]._subparsers._group_actions[0].choices

    assert sorted(lane) == sorted(
        ["board", "claim", "script", "install", "start", "watch", "release", "repair"]
    )
    assert not {"stop", "delete", "suspend", "kill"} & set(lane)
    assert not {"stop", "suspend"} & set(commands)
