"""The README is the front door: its two commands exist and CI runs the test one verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_quick_start_is_exactly_two_commands():
    """One command runs the demo, one runs the whole suite."""
    commands = readme_commands()

    assert len(commands) == 2
    assert commands[0].endswith("gpuops demo")
    assert commands[1].endswith("python -m pytest")


def test_ci_runs_the_readme_test_command_verbatim():
    """.ci/run contains the README's test command as a line of its own, then the gate."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()

    assert readme_commands()[1] in ci
    assert ci.index(readme_commands()[1]) < ci.index(".venv/bin/python mutation/gate.py")
