"""`gpuops demo` judged from outside: its verdict, its table, its exit code, and the processes
it leaves (none), under a subreaper (tests/demo_harness.py) so even a detached guardian that
outlived it would be seen.

The whole demo is the README's first command, so the default suite runs it whole (about 30 s,
most of it a real guardian waiting for a real deadline, a few seconds of CPU), and once broken
in each act: the lane with its linter accepting anything, the market with a fake that never
destroys; and interrupted in each act.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuops import demo as demo_module

pytestmark = [pytest.mark.slow, pytest.mark.process]

ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "tests" / "demo_harness.py"
LANE_RULES = ["L3", "L4", "L7", "L3", "L9", "L1", "L6", "L2", "L1", ""]
MARKET_RULES = ["M1", "M4", "M2", "M10", "M13", "M5, M7", "M7", "M13", ""]


def demo(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "demo.json"
    subprocess.run(
        [sys.executable, str(HARNESS), str(out), *args],
        cwd=ROOT, check=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_a_broken_linter_makes_the_demo_fail_loudly_with_exit_1(tmp_path):
    """With the linter accepting anything, the typo'd script is installed: the demo sees it in
    the fake's metadata (not in gpuops' output), marks L4 FAIL, and exits 1."""
    result = demo(tmp_path, "--acts", "lane", "--break", "lint")

    assert result["rc"] == 1
    text = result["stdout"]
    assert "FAILED: You install a startup script whose job name is misspelt" in text
    assert "PASSED" not in text
    assert "the VM's metadata changed" in text
    assert result["left"] == []
    for bad in ("None", "standin-", "+1-", "Refused(", "{'", "Traceback"):  # prose, not reprs
        assert bad not in text, bad


def test_ctrl_c_during_the_lane_act_ends_every_boot_and_exits_130(tmp_path):
    """Ctrl-C while the first job boots: the demo ends the fake VM's boots and everything
    else it started, says it was interrupted (never PASSED), and exits 130."""
    result = demo(tmp_path, "--acts", "lane", "--interrupt-on", "You install the corrected")

    assert result["interrupted"] is True
    assert result["rc"] == 130, result["stderr"][-3000:]
    assert "INTERRUPTED" in result["stdout"] and "PASSED" not in result["stdout"]
    assert result["left"] == []


@pytest.mark.timeout(300)
def test_ctrl_c_during_the_market_act_leaves_no_guardian_and_no_box(tmp_path):
    """Ctrl-C during the second race: rent, its guardian and the first box's guardian are all
    ended with the demo (nothing left), and it exits 130."""
    result = demo(tmp_path, "--acts", "market", "--interrupt-on", "You start a second rental")

    assert result["interrupted"] is True
    assert result["rc"] == 130, result["stderr"][-3000:]
    assert "PASSED" not in result["stdout"]
    assert result["left"] == []


def open_paths(*roots: Path) -> list[str]:
    """Every path under ``roots`` (the roots included) that another user could read or list:
    a directory not 0700, a file not 0600, anything else (a link, a socket) named as such."""
    found = []
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))]:
            mode = path.lstat().st_mode
            want = 0o700 if stat.S_ISDIR(mode) else 0o600 if stat.S_ISREG(mode) else None
            if want is None or stat.S_IMODE(mode) != want:
                found.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return found


@pytest.mark.timeout(300)
def test_the_whole_demo_passes_in_a_minute_and_leaves_nothing_running_or_open(tmp_path):
    """Both acts: PASSED, every row held (lane and market rules in order), exit 0, no process
    left (guardians and fake boots included); and, under umask 002, every directory gpuops
    left (the state with its records, events, leases, known_hosts and guardians' logs; the
    delivered results) is 0700 and every file in them 0600 (DESIGN's security bar)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700)
    result = demo(tmp_path, "--keep", str(scratch), "--json")

    report = json.loads(result["stdout"])
    assert result["rc"] == 0, result["stderr"][-3000:]
    assert report["verdict"] == "PASSED: nothing leaked"
    ids = [r["rule_id"] for r in report["rows"] if "boot processes" not in r["happened"]]
    assert ids == LANE_RULES[:-1] + MARKET_RULES
    assert result["left"] == []
    assert (scratch / "results" / "training-run").is_dir()  # the results were delivered here
    assert (scratch / "state" / "guardians").is_dir()  # and the guardians logged here
    assert open_paths(scratch / "state", scratch / "results") == []


@pytest.mark.timeout(300)
def test_a_fake_that_never_destroys_makes_the_demo_fail_loudly(tmp_path):
    """The kept box's destroy always answers 503: the guardian cannot end it, the fake still
    bills it, and the demo says FAILED (not PASSED) and exits 1, leaving no process. It stops
    waiting on the guardian's own report (a destroy retried after the deadline failed again),
    not on its 45 s step limit."""
    result = demo(tmp_path, "--acts", "market", "--break", "destroy")

    text = " ".join(result["stdout"].split())  # the table wraps its evidence
    assert result["rc"] == 1
    assert "FAILED:" in text and "PASSED" not in text
    assert "STILL BILLS the box after its deadline, and the guardian's destroy, retried" in text
    assert result["left"] == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["/v/bin/python", "-m", "gpuops", "guard", "job"], "a guardian"),
        (["/usr/bin/tmux", "-S", "/tmp/s", "new-session", "-d"], "a fake box's tmux server"),
        (["/bin/bash", "/tmp/vm-1/startup-script"], "a fake VM boot process"),
        (["/bin/bash", "/tmp/boot-notes.sh"], "bash"),  # a name with "boot" in it is not one
        (["/usr/bin/sleep", "600"], "sleep"),
        (["/usr/bin/cat", "/tmp/tmux-1000/default"], "cat"),  # nor one with "tmux" in it
        (["/v/bin/python", "-m", "gpuops", "rent", "guarded-job"], "python"),
        ([], "a process"),
    ],
)
def test_a_left_process_is_named_from_its_argv_s_shape_never_from_its_text(argv, said):
    """What the demo says it ended is read from the process's program and arguments, not by
    searching their text (a path that merely contains "tmux" or "boot" names nothing)."""
    assert demo_module._describe(argv) == said
