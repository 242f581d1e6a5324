"""One shape for exit codes: ``errors.ExitCode`` holds every code gpuops gives, its values are
the table in docs/cli.md, every error's code is a member, and the money cores decide theirs
as members, never as bare numbers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpuops import errors
from gpuops.errors import ExitCode
from gpuops.lane import decide
from gpuops.lane.decide import Verdict
from gpuops.market import guardian, teardown, watchdog

ROOT = Path(__file__).resolve().parent.parent
# the modules whose functions decide an exit code: each says it with ExitCode's members
DECIDERS = (
    "gpuops/market/teardown.py",
    "gpuops/market/guardian.py",
    "gpuops/market/guard.py",
    "gpuops/market/watchdog.py",
    "gpuops/lane/decide.py",
    "gpuops/demo/story.py",
)


def test_the_codes_are_the_documented_table():
    """docs/cli.md's exit-code table lists exactly the codes 0..7, and ExitCode holds them."""
    table = (ROOT / "docs" / "cli.md").read_text().split("## Exit codes", 1)[1]
    documented = {int(n) for n in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert documented == {code.value for code in ExitCode if code < 128} == set(range(8))


def test_every_error_carries_a_member_of_exit_code():
    """Each class of the error tree (its code inherited or its own) is an ExitCode."""
    classes = [c for c in vars(errors).values() if isinstance(c, type)]
    raised = [c for c in classes if issubclass(c, errors.GpuopsError)]
    assert len(raised) > 15
    for cls in raised:
        assert isinstance(cls.exit_code, ExitCode), cls
    assert errors.Interrupted(15).exit_code == ExitCode.signalled(15) == 143


def test_the_cores_exit_codes_are_members():
    assert isinstance(guardian.GONE, ExitCode) and guardian.GONE is ExitCode.OK
    assert guardian.UNKNOWN is ExitCode.UNKNOWN and guardian.SUPERSEDED is ExitCode.SUPERSEDED
    assert isinstance(teardown.exit_code([]), ExitCode)
    assert decide.billing_exit(Verdict.FAILED) is ExitCode.FAILED
    assert decide.billing_exit(Verdict.SUCCEEDED) is ExitCode.UNKNOWN


def _bare(value: ast.expr | None) -> bool:
    """A returned value that is a number, or a choice between numbers."""
    if isinstance(value, ast.Constant):
        return type(value.value) is int
    if isinstance(value, ast.IfExp):
        return _bare(value.body) or _bare(value.orelse)
    return False


@pytest.mark.parametrize("path", DECIDERS)
def test_no_decider_returns_a_bare_number_for_an_exit_code(path):
    """A `return 4` from a function that gives an exit code is a code nobody can find by name:
    every function whose name says it gives one (``*exit*``, ``_leave``, ``run``) returns
    ExitCode's members, or what another such function gave."""
    tree = ast.parse((ROOT / path).read_text())
    bare = [
        f"{func.name}:{node.lineno}"
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        and ("exit" in func.name or func.name in ("_leave", "run", "finish"))
        for node in ast.walk(func)
        if isinstance(node, ast.Return) and _bare(node.value)
    ]
    assert bare == [], f"{path}: a bare number returned as an exit code: {bare}"


def test_the_scan_sees_a_bare_exit_code():
    """The scan above is not blind: a bare `return 5` in an exit function is found."""
    tree = ast.parse("def watch_exit_code(s):\n    return 0 if s else 5\n")
    (ret,) = [n for n in ast.walk(tree) if isinstance(n, ast.Return)]
    assert _bare(ret.value)


def _cli_modules() -> list[str]:
    package = ROOT / "gpuops"
    names = [*package.glob("cli/*.py"), *package.glob("demo/*.py"), package / "check.py"]
    return sorted(path.relative_to(ROOT).as_posix() for path in names)


# functions of the CLI's modules that return a number that is not an exit code
NOT_EXIT_CODES = {"columns"}  # cli/parser.py: the terminal's width for help


@pytest.mark.parametrize("path", _cli_modules())
def test_no_command_returns_a_bare_number(path):
    """The CLI's commands return exit codes: every one is ExitCode's member, or what another
    command or an error gave; no function in the CLI's modules returns a bare number."""
    tree = ast.parse((ROOT / path).read_text())
    bare = [
        f"{func.name}:{node.lineno}"
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        and func.name not in NOT_EXIT_CODES
        for node in ast.walk(func)
        if isinstance(node, ast.Return) and _bare(node.value)
    ]
    assert bare == [], f"{path}: a bare number returned: {bare}"


def test_the_cli_scan_sees_a_bare_return():
    source = "def run():\n    if x:\n        return 3\n    return ExitCode.OK if y else 1\n"
    returns = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Return)]
    assert [_bare(n.value) for n in returns] == [True, True]
    assert _bare(ast.parse("def f():\n    return ExitCode.OK\n").body[0].body[0].value) is False
